"""Pipelines, Fjord only: an exactly-once Spark pipeline against the same copy done by a
confluent-kafka transactional consume-transform-produce loop, on one Fjord broker.

For 100 B and 1 KB records, RECORDS records in 3 partitions are copied four ways, each into a
fresh output topic: by the Spark pipeline (the fjord source read_committed, the fjord sink with
exactlyOnce, Trigger.AvailableNow in micro-batches of MAX_OFFSETS records, one SparkSession on
local[2] started and warmed up beforehand) and by the loop (a read_committed consumer in a group, a
transactional producer committing the consumer's offsets with its records every COMMIT_RECORDS
records), each as a pass-through and with a SQL filter and projection (every other offset,
value upper-cased; the loop does the same in Python). Records/s counts input records, from the
query's start (the loop's first poll) until every output record is committed; the ratio is
Spark over the loop, target at least 1. Then latency: LATENCY_RATE records/s for
LATENCY_SECONDS through a running pass-through pipeline (trigger every 100 ms), from each
record's produce to its output being readable by a read_committed consumer: p50 and p99.
Tansu is not run: it has no two-phase commit (KIP-939), which the exactly-once sink needs."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.brokers import FJORD, Broker, BrokerError, create_topics, running
from pipelines.spark.options import exactly_once, read_committed
from pipelines.spark.streams import read_stream, write_stream

REFERENCE_NOTE = (
    "Fjord only: the Spark pipeline against a confluent-kafka transactional copy loop on the "
    "same broker (Tansu has no two-phase commit)"
)
PARTITIONS = 3
MAX_OFFSETS = 50_000
COMMIT_RECORDS = 10_000
TARGET = 1.0
TRANSFORMS = {
    "pass-through": "SELECT key, value FROM source",
    "filter + projection": (
        "SELECT key, upper(cast(value AS string)) AS value FROM source WHERE offset % 2 = 0"
    ),
}


@dataclass(frozen=True)
class PipelinePlan:
    records: dict[int, int]
    repetitions: int
    latency_rate: int
    latency_seconds: float
    timeout_s: float


FULL = PipelinePlan(
    records={100: 200_000, 1024: 100_000},
    repetitions=3,
    latency_rate=500,
    latency_seconds=20,
    timeout_s=600,
)
QUICK = replace(FULL, records={100: 30_000, 1024: 20_000}, repetitions=1, latency_seconds=5)


class PipelineBenchError(RuntimeError):
    pass


def _fill(bootstrap: str, topic: str, count: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    payload = b"x" * (size - 8)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, b"%08d" % i + payload, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120):
        raise PipelineBenchError(f"filling {topic} did not finish")


def _committed_reader(bootstrap: str, topic: str) -> Consumer:
    """A read_committed consumer of every partition of `topic` from its start, in no group."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    return consumer


def _committed_count(bootstrap: str, topic: str, expected: int, timeout: float) -> float:
    """Reads `topic` read_committed until `expected` records came; the time they all had."""
    consumer = _committed_reader(bootstrap, topic)
    seen, deadline = 0, time.monotonic() + timeout
    try:
        while seen < expected:
            if time.monotonic() > deadline:
                raise PipelineBenchError(f"{topic}: {seen} of {expected} records committed")
            seen += sum(1 for m in consumer.consume(10_000, 0.2) if not m.error())
        return time.monotonic()
    finally:
        consumer.close()


def _expected(count: int, transform: str) -> int:
    if transform == "pass-through":
        return count
    # Offsets are per partition: every other one of each.
    per = [len(range(p, count, PARTITIONS)) for p in range(PARTITIONS)]
    return sum((n + 1) // 2 for n in per)


def spark_copy(
    spark, broker: Broker, source: str, count: int, transform: str, timeout: float
) -> float:
    """Records/s of the exactly-once Spark pipeline over `source`."""
    bootstrap = broker.bootstrap
    sink, name = f"bench-out-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    create_topics(broker, PARTITIONS, [sink])
    source_options = read_committed(
        bootstrap, source, startingOffsets="earliest", maxOffsetsPerTrigger=str(MAX_OFFSETS)
    )
    read_stream(spark, source_options).createOrReplaceTempView("source")
    sink_options = exactly_once(bootstrap, sink, f"bench-{name}", f"/tmp/fjord-bench-{name}")
    start = time.monotonic()
    query = (
        write_stream(spark.sql(TRANSFORMS[transform]), sink_options)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout)
    if query.isActive or query.exception() is not None:
        query.stop()
        raise PipelineBenchError(f"spark {transform}: {query.exception() or 'timed out'}")
    done = _committed_count(bootstrap, sink, _expected(count, transform), timeout)
    return count / (done - start)


def loop_copy(broker: Broker, source: str, count: int, transform: str, timeout: float) -> float:
    """Records/s of a confluent-kafka transactional consume-transform-produce loop."""
    bootstrap = broker.bootstrap
    sink = f"bench-out-{uuid.uuid4().hex[:8]}"
    create_topics(broker, PARTITIONS, [sink])
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-loop-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-loop-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    filtered = transform != "pass-through"
    producer.init_transactions(30)
    consumer.subscribe([source])
    read, start, deadline = 0, time.monotonic(), time.monotonic() + timeout
    try:
        producer.begin_transaction()
        pending = 0
        while read < count:
            if time.monotonic() > deadline:
                raise PipelineBenchError(f"loop {transform}: {read} of {count} records read")
            for message in consumer.consume(10_000, 0.1):
                if message.error():
                    continue
                read += 1
                if filtered:
                    if message.offset() % 2:
                        continue
                    value = message.value().upper()
                else:
                    value = message.value()
                while True:
                    try:
                        producer.produce(sink, value, message.key(), partition=message.partition())
                        break
                    except BufferError:
                        producer.poll(0.05)
                pending += 1
            if pending >= COMMIT_RECORDS or (read >= count and pending):
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
                )
                producer.commit_transaction()
                producer.begin_transaction()
                pending = 0
        producer.abort_transaction()  # the empty one begun last
    finally:
        consumer.close()
    done = _committed_count(bootstrap, sink, _expected(count, transform), timeout)
    return count / (done - start)


def latency(spark, broker: Broker, plan: PipelinePlan) -> dict[str, float]:
    """Produce-to-committed-output seconds through a running pass-through pipeline."""
    bootstrap = broker.bootstrap
    source, sink = f"bench-lat-in-{uuid.uuid4().hex[:8]}", f"bench-lat-out-{uuid.uuid4().hex[:8]}"
    create_topics(broker, PARTITIONS, [source, sink])
    name = uuid.uuid4().hex[:8]
    source_options = read_committed(bootstrap, source)
    sink_options = exactly_once(bootstrap, sink, f"bench-{name}", f"/tmp/fjord-bench-{name}")
    query = (
        write_stream(read_stream(spark, source_options).select("key", "value"), sink_options)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    consumer = _committed_reader(bootstrap, sink)
    delays: list[float] = []
    total = int(plan.latency_rate * plan.latency_seconds)
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(total):
            target = started + i / plan.latency_rate
            while (now := time.monotonic()) < target and not stop.is_set():
                time.sleep(min(0.01, target - now))
            producer.produce(source, b"%.9f" % time.time(), partition=i % PARTITIONS)
            producer.poll(0)
        producer.flush(30)

    # The pipeline's first batch starts its Python workers: the timed records come after it.
    while not query.recentProgress and query.isActive:
        time.sleep(0.1)
    started = time.monotonic()
    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    deadline = time.monotonic() + plan.latency_seconds + plan.timeout_s
    try:
        while len(delays) < total and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.2):
                if not message.error():
                    delays.append(time.time() - float(message.value()))
    finally:
        stop.set()
        writer.join()
        consumer.close()
        query.stop()
    if len(delays) < total:
        raise PipelineBenchError(f"latency: {len(delays)} of {total} records came out")
    delays.sort()
    return {
        "p50_s": statistics.median(delays),
        "p99_s": delays[int(len(delays) * 0.99) - 1],
        "records": total,
    }


def measure(plan: PipelinePlan) -> dict:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pipelines.spark.session import spark_session

    with running(FJORD, {"transaction.two.phase.commit.enable": "true"}) as broker:
        spark = spark_session("fjord-bench", "local[2,2]", **{"spark.sql.shuffle.partitions": "2"})
        spark.sparkContext.setLogLevel("ERROR")
        try:
            # Spark's first query starts its Python workers: not part of any timed copy.
            warm = f"bench-warm-{uuid.uuid4().hex[:8]}"
            create_topics(broker, PARTITIONS, [warm])
            _fill(broker.bootstrap, warm, 1000, 100)
            spark_copy(spark, broker, warm, 1000, "pass-through", plan.timeout_s)
            rates: dict[str, dict[str, dict[str, float]]] = {}
            for size, count in plan.records.items():
                source = f"bench-in-{size}-{uuid.uuid4().hex[:8]}"
                create_topics(broker, PARTITIONS, [source])
                _fill(broker.bootstrap, source, count, size)
                by_transform = rates.setdefault(str(size), {})
                for transform in TRANSFORMS:
                    runs: dict[str, list[float]] = {"spark": [], "loop": []}
                    for _ in range(plan.repetitions):
                        print(f"  {size} B, {transform}: spark, loop", flush=True)
                        runs["spark"].append(
                            spark_copy(spark, broker, source, count, transform, plan.timeout_s)
                        )
                        runs["loop"].append(
                            loop_copy(broker, source, count, transform, plan.timeout_s)
                        )
                    by_transform[transform] = {k: statistics.median(v) for k, v in runs.items()}
            print("  latency", flush=True)
            lat = latency(spark, broker, plan)
        finally:
            spark.stop()
    return {"records_per_s": rates, "latency": lat}


def run(plan: PipelinePlan) -> tuple[dict, bool]:
    try:
        figures = measure(plan)
    except (BrokerError, PipelineBenchError) as error:
        print(f"\npipelines bench failed: {error}", flush=True)
        return {"plan": asdict(plan), "status": f"failed: {str(error).splitlines()[0]}"}, False
    ok = all(
        side["spark"] >= TARGET * side["loop"]
        for by_transform in figures["records_per_s"].values()
        for side in by_transform.values()
    )
    return {"plan": asdict(plan), "status": "ok", **figures}, ok


def markdown(result: dict) -> str:
    section = result["pipelines"]
    plan = section["plan"]
    lines = [
        f"# Pipelines: {result['label']}",
        "",
        f"{result['timestamp']} on {result['machine']['cpus']} CPUs "
        f"({result['machine']['cpu_model']}), Fjord at {result['versions']['fjord_commit']}, "
        f"librdkafka {result['versions']['librdkafka']}. Exactly-once copies of "
        + ", ".join(f"{n:,} x {s} B" for s, n in plan["records"].items())
        + f" records in {PARTITIONS} partitions: the Spark pipeline (local[2], micro-batches "
        f"of {MAX_OFFSETS:,}) against a confluent-kafka transactional copy loop (commits every "
        f"{COMMIT_RECORDS:,} records); input records/s until all output is committed, median "
        f"of {plan['repetitions']} run(s). Target: Spark at least {TARGET:g}x the loop.",
        "",
    ]
    if section["status"] != "ok":
        return "\n".join([*lines, f"failed: {section['status']}"]) + "\n"
    lines += [
        "| record | transformation | spark | loop | spark / loop |",
        "|---|---|---:|---:|---:|",
    ]
    for size, by_transform in section["records_per_s"].items():
        for transform, side in by_transform.items():
            ratio = side["spark"] / side["loop"]
            mark = "" if ratio >= TARGET else " (below target)"
            lines.append(
                f"| {size} B | {transform} | {side['spark']:,.0f} | {side['loop']:,.0f} | "
                f"{ratio:.2f}x{mark} |"
            )
    lat = section["latency"]
    lines += [
        "",
        f"Latency through a running pass-through pipeline (trigger every 100 ms), "
        f"{lat['records']:,} records at {plan['latency_rate']}/s, produce to committed output: "
        f"p50 {lat['p50_s']:.3f} s, p99 {lat['p99_s']:.3f} s.",
    ]
    return "\n".join(lines) + "\n"
