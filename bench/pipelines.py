"""Pipelines, Fjord only: an exactly-once Spark pipeline against the same copy done by a
confluent-kafka transactional consume-transform-produce loop, on one Fjord broker.

For 100 B and 1 KB records, RECORDS records in 3 partitions are copied four ways, each into a
fresh output topic: by the Spark pipeline (the fjord source read_committed, the fjord sink with
exactlyOnce, Trigger.AvailableNow in micro-batches of MAX_OFFSETS records, one SparkSession on
local[2]) and by the loop (a read_committed consumer in a group, a transactional producer
committing the consumer's offsets with its records every COMMIT_RECORDS records), each as a
pass-through and with a SQL filter and projection (every other offset, value upper-cased; the
loop does the same in Python). A read_committed consumer then checks, untimed, that every
output record is there.

A pipeline runs for as long as its topics live, so its figure is the rate it copies at once
running: input records over the time from its first micro-batch's start to its last one's
commit (from Spark's query progress); the loop's, from its first record read to its last
commit acknowledged. The ratio of the two is the figure with the target (at least TARGET). What
each takes to start (the query until its first batch; the loop's consumer and producer until
its first record) and the end-to-end rate it gives these short copies are reported beside it:
Spark starts a Python worker process for each part of a query (planning, reads, writes,
commits), each importing pyspark and the client anew, some seconds in all. The session is
warmed up first (a pass-through of the first size's records), as a benchmark of any JVM is.

Then the fixed cost of a micro-batch: FIXED_BATCHES micro-batches of one record a partition
(maxOffsetsPerTrigger of PARTITIONS) through the same exactly-once pass-through, each of which
costs what any micro-batch costs whatever its size (planning, offsets, three tasks, the sink's
commit); the figure is the median of their triggerExecution (the first batch, which starts the
session's Python workers for the query, left out), with Spark's own breakdown of it (its
StreamingQueryProgress durationMs) beside it.

Then latency: LATENCY_RATE records/s for LATENCY_SECONDS through a running pass-through
pipeline (trigger every 100 ms), from each record's produce to its output being readable by a
read_committed consumer: p50 and p99. Tansu is not run: it has no two-phase commit (KIP-939),
which the exactly-once sink needs."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import datetime

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
TARGET = 0.4  # spark / loop once running (issue 30)
FIXED_TARGET_S = 0.3  # seconds a micro-batch costs whatever its size
FIXED_BATCHES = 12
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
    fixed_batches: int = FIXED_BATCHES


# The loop copies 1 KB records at a few hundred thousand a second on a fast 2-core machine: the
# counts keep each copy several seconds long, so that start and end do not decide the rate.
FULL = PipelinePlan(
    records={100: 1_000_000, 1024: 400_000},
    repetitions=3,
    latency_rate=500,
    latency_seconds=20,
    timeout_s=600,
)
QUICK = replace(
    FULL, records={100: 30_000, 1024: 20_000}, repetitions=1, latency_seconds=5, fixed_batches=6
)


class PipelineBenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Copy:
    """One copy's figures: records/s once running, seconds to start, records/s end to end."""

    rate: float
    startup_s: float
    end_to_end: float

    @classmethod
    def of(cls, count: int, started: float, first: float, last: float) -> Copy:
        return cls(count / (last - first), first - started, count / (last - started))


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


def _check_committed(bootstrap: str, topic: str, expected: int, timeout: float) -> None:
    """Reads `topic` read_committed until `expected` records came; raises if they do not."""
    consumer = _committed_reader(bootstrap, topic)
    seen, deadline = 0, time.monotonic() + timeout
    try:
        while seen < expected:
            if time.monotonic() > deadline:
                raise PipelineBenchError(f"{topic}: {seen} of {expected} records committed")
            seen += sum(1 for m in consumer.consume(10_000, 0.2) if not m.error())
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
) -> Copy:
    """The exactly-once Spark pipeline over `source`."""
    bootstrap = broker.bootstrap
    sink, name = f"bench-out-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    create_topics(broker, PARTITIONS, [sink])
    source_options = read_committed(
        bootstrap, source, startingOffsets="earliest", maxOffsetsPerTrigger=str(MAX_OFFSETS)
    )
    read_stream(spark, source_options).createOrReplaceTempView("source")
    sink_options = exactly_once(bootstrap, sink, f"bench-{name}", f"/tmp/fjord-bench-{name}")
    started = time.time()
    query = (
        write_stream(spark.sql(TRANSFORMS[transform]), sink_options)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout)
    if query.isActive or query.exception() is not None:
        query.stop()
        raise PipelineBenchError(f"spark {transform}: {query.exception() or 'timed out'}")
    _check_committed(bootstrap, sink, _expected(count, transform), timeout)
    batches = query.recentProgress
    if sum(b["numInputRows"] for b in batches) != count:
        raise PipelineBenchError(f"spark {transform}: the query's progress misses batches")
    last = batches[-1]
    return Copy.of(
        count,
        started,
        _wall(batches[0]["timestamp"]),
        _wall(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000,
    )


def _wall(timestamp: str) -> float:
    """A query progress' timestamp (ISO 8601, UTC, with a Z) as time.time() gives it."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def loop_copy(broker: Broker, source: str, count: int, transform: str, timeout: float) -> Copy:
    """A confluent-kafka transactional consume-transform-produce loop."""
    bootstrap = broker.bootstrap
    sink = f"bench-out-{uuid.uuid4().hex[:8]}"
    create_topics(broker, PARTITIONS, [sink])
    started = time.time()
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
    read, first, deadline = 0, None, time.monotonic() + timeout
    try:
        producer.begin_transaction()
        pending = 0
        while read < count:
            if time.monotonic() > deadline:
                raise PipelineBenchError(f"loop {transform}: {read} of {count} records read")
            for message in consumer.consume(10_000, 0.1):
                if message.error():
                    continue
                first = first or time.time()
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
        done = time.time()
        producer.abort_transaction()  # the empty one begun last
    finally:
        consumer.close()
    _check_committed(bootstrap, sink, _expected(count, transform), timeout)
    return Copy.of(count, started, first, done)


def fixed_cost(spark, broker: Broker, plan: PipelinePlan) -> dict[str, float]:
    """Seconds a micro-batch of one record a partition takes, end to end (median of its
    triggerExecution), and the median of each part Spark's progress times, first batch left
    out."""
    bootstrap = broker.bootstrap
    source, sink = (
        f"bench-fixed-in-{uuid.uuid4().hex[:8]}",
        f"bench-fixed-out-{uuid.uuid4().hex[:8]}",
    )
    create_topics(broker, PARTITIONS, [source, sink])
    batches = plan.fixed_batches + 1
    _fill(bootstrap, source, batches * PARTITIONS, 100)
    name = uuid.uuid4().hex[:8]
    source_options = read_committed(
        bootstrap, source, startingOffsets="earliest", maxOffsetsPerTrigger=str(PARTITIONS)
    )
    sink_options = exactly_once(bootstrap, sink, f"bench-{name}", f"/tmp/fjord-bench-{name}")
    query = (
        write_stream(read_stream(spark, source_options).select("key", "value"), sink_options)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(plan.timeout_s)
    if query.isActive or query.exception() is not None:
        query.stop()
        raise PipelineBenchError(f"fixed cost: {query.exception() or 'timed out'}")
    _check_committed(bootstrap, sink, batches * PARTITIONS, plan.timeout_s)
    progress = [b for b in query.recentProgress if b["numInputRows"]]
    if len(progress) != batches:
        raise PipelineBenchError(f"fixed cost: {len(progress)} micro-batches, not {batches}")
    timed = [b["durationMs"] for b in progress[1:]]
    parts = sorted({part for d in timed for part in d})
    return {part: statistics.median(d.get(part, 0) for d in timed) / 1000 for part in parts} | {
        "batches": len(timed)
    }


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
            rates: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
            for size, count in plan.records.items():
                source = f"bench-in-{size}-{uuid.uuid4().hex[:8]}"
                create_topics(broker, PARTITIONS, [source])
                _fill(broker.bootstrap, source, count, size)
                if not rates:
                    print("  warming the session up", flush=True)
                    spark_copy(spark, broker, source, count, "pass-through", plan.timeout_s)
                by_transform = rates.setdefault(str(size), {})
                for transform in TRANSFORMS:
                    runs: dict[str, list[Copy]] = {"spark": [], "loop": []}
                    for _ in range(plan.repetitions):
                        print(f"  {size} B, {transform}: spark, loop", flush=True)
                        runs["spark"].append(
                            spark_copy(spark, broker, source, count, transform, plan.timeout_s)
                        )
                        runs["loop"].append(
                            loop_copy(broker, source, count, transform, plan.timeout_s)
                        )
                    by_transform[transform] = {
                        side: {
                            figure: statistics.median(getattr(c, figure) for c in copies)
                            for figure in ("rate", "startup_s", "end_to_end")
                        }
                        for side, copies in runs.items()
                    }
            print("  fixed cost of a micro-batch", flush=True)
            fixed = fixed_cost(spark, broker, plan)
            print("  latency", flush=True)
            lat = latency(spark, broker, plan)
        finally:
            spark.stop()
    return {"records_per_s": rates, "fixed_cost_s": fixed, "latency": lat}


def run(plan: PipelinePlan) -> tuple[dict, bool]:
    try:
        figures = measure(plan)
    except (BrokerError, PipelineBenchError) as error:
        print(f"\npipelines bench failed: {error}", flush=True)
        return {"plan": asdict(plan), "status": f"failed: {str(error).splitlines()[0]}"}, False
    ok = figures["fixed_cost_s"]["triggerExecution"] <= FIXED_TARGET_S and all(
        side["spark"]["rate"] >= TARGET * side["loop"]["rate"]
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
        f"({result['machine']['cpu_model']}; load average "
        f"{result['machine'].get('load_average_1min_at_start', float('nan')):.2f} at start), "
        f"Fjord at {result['versions']['fjord_commit']}, "
        f"librdkafka {result['versions']['librdkafka']}. Exactly-once copies of "
        + ", ".join(f"{n:,} x {s} B" for s, n in plan["records"].items())
        + f" records in {PARTITIONS} partitions: the Spark pipeline (local[2], micro-batches "
        f"of {MAX_OFFSETS:,}) against a confluent-kafka transactional copy loop (commits every "
        f"{COMMIT_RECORDS:,} records), median of {plan['repetitions']} run(s) after a warm-up "
        f"copy. Running: input records/s from the first batch (record) read to the last commit "
        f"acknowledged; the target is Spark at least {TARGET:g}x the loop there. Start: seconds "
        f"until the first batch (record). End to end: records/s of the whole copy, start "
        f"included.",
        "",
    ]
    if section["status"] != "ok":
        return "\n".join([*lines, f"failed: {section['status']}"]) + "\n"
    lines += [
        "| record | transformation | spark running | loop running | spark / loop | "
        "spark start | loop start | spark end to end | loop end to end |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, by_transform in section["records_per_s"].items():
        for transform, side in by_transform.items():
            spark, loop = side["spark"], side["loop"]
            ratio = spark["rate"] / loop["rate"]
            mark = "" if ratio >= TARGET else " (below target)"
            lines.append(
                f"| {size} B | {transform} | {spark['rate']:,.0f} | {loop['rate']:,.0f} | "
                f"{ratio:.2f}x{mark} | {spark['startup_s']:.2f} s | {loop['startup_s']:.2f} s | "
                f"{spark['end_to_end']:,.0f} | {loop['end_to_end']:,.0f} |"
            )
    fixed = section["fixed_cost_s"]
    mark = "" if fixed["triggerExecution"] <= FIXED_TARGET_S else " (above target)"
    breakdown = ", ".join(
        f"{part} {seconds:.3f} s"
        for part, seconds in fixed.items()
        if part not in ("triggerExecution", "batches")
    )
    lat = section["latency"]
    lines += [
        "",
        f"Fixed cost of a micro-batch (one record a partition, exactly-once pass-through, median "
        f"of {fixed['batches']} batches after the first): {fixed['triggerExecution']:.3f} s"
        f"{mark}; the target is at most {FIXED_TARGET_S:g} s. Spark's durationMs of it: "
        f"{breakdown}.",
        "",
        f"Latency through a running pass-through pipeline (trigger every 100 ms), "
        f"{lat['records']:,} records at {plan['latency_rate']}/s, produce to committed output: "
        f"p50 {lat['p50_s']:.3f} s, p99 {lat['p99_s']:.3f} s.",
    ]
    return "\n".join(lines) + "\n"
