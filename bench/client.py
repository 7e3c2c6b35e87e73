"""Client throughput, on Fjord: our asyncio client side by side with aiokafka, kafka-python and
confluent-kafka against the same broker in one run, as ratios.

Each client runs in a process of its own (`python -m bench.client <client> <produce|consume>
...`), one after the other on one freshly started broker, producing RECORDS records of 1 KB
and of 100 B to a topic of PARTITIONS partitions, then consuming them back from the start
without a group, each timed from after its library's import. Every producer has the same
settings, the Java client's defaults where they exist: acks=all, idempotence on, linger 5 ms,
batches of 16 KiB, no compression; every consumer reads with fetch.min.bytes 1 and its own
defaults otherwise. The two asyncio clients both run on uvloop, so the ratio compares the
libraries, not the event loops. Figures are medians of the repetitions; the target is our
client at 1.5x aiokafka or better, producing and consuming.

Then freshness after a crash (seed 002): `bench.freshness`, standard against parallel mode.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, replace

from bench import freshness
from bench.brokers import FJORD, Broker, BrokerError, create_topics, running

REFERENCE_NOTE = "the same Fjord broker for every client: ratios between clients"
CLIENTS = ("fjord", "aiokafka", "kafka-python", "confluent-kafka")
TARGET_OVER_AIOKAFKA = 1.5
LINGER_MS = 5
BATCH_SIZE = 16384


@dataclass(frozen=True)
class ClientPlan:
    partitions: int
    records: dict[int, int]  # record size (bytes) -> how many
    repetitions: int
    timeout_s: float
    freshness: freshness.FreshnessPlan = freshness.FULL


FULL = ClientPlan(partitions=3, records={1024: 100_000, 100: 300_000}, repetitions=3, timeout_s=300)
QUICK = replace(FULL, records={1024: 20_000, 100: 50_000}, repetitions=1, freshness=freshness.QUICK)


# -- the workers, each in its own process ----------------------------------------------------


async def _fjord_produce(bootstrap: str, topic: str, count: int, value: bytes) -> None:
    from broker.client import Producer

    async with Producer(
        bootstrap, acks="all", linger_ms=LINGER_MS, batch_size=BATCH_SIZE
    ) as producer:
        for i in range(count):
            await producer.send(topic, value, partition=i % 3)
        await producer.flush()


async def _fjord_consume(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    from broker.client import Consumer, TopicPartition

    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        seen = 0
        while seen < count:
            batches = await consumer.getmany(timeout_ms=1000)
            seen += sum(len(records) for records in batches.values())


async def _aiokafka_produce(bootstrap: str, topic: str, count: int, value: bytes) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH_SIZE,
    )
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, value, partition=i % 3)
        await producer.flush()
    finally:
        await producer.stop()


async def _aiokafka_consume(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        seen = 0
        while seen < count:
            batches = await consumer.getmany(timeout_ms=1000)
            seen += sum(len(records) for records in batches.values())
    finally:
        await consumer.stop()


def _kafka_python_produce(bootstrap: str, topic: str, count: int, value: bytes) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=LINGER_MS,
        batch_size=BATCH_SIZE,
    )
    for i in range(count):
        producer.send(topic, value, partition=i % 3)
    producer.flush()
    producer.close()


def _kafka_python_consume(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    seen = 0
    while seen < count:
        batches = consumer.poll(timeout_ms=1000)
        seen += sum(len(records) for records in batches.values())
    consumer.close()


def _confluent_produce(bootstrap: str, topic: str, count: int, value: bytes) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
        }
    )
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % 3)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush()


def _confluent_consume(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = 0
    while seen < count:
        for message in consumer.consume(num_messages=10_000, timeout=1):
            if message.error() is None:
                seen += 1
    consumer.close()


# What each worker imports, loaded before its clock starts.
LIBRARIES = {
    "fjord": "broker.client",
    "aiokafka": "aiokafka",
    "kafka-python": "kafka",
    "confluent-kafka": "confluent_kafka",
}

WORKERS = {
    "fjord": (_fjord_produce, _fjord_consume),
    "aiokafka": (_aiokafka_produce, _aiokafka_consume),
    "kafka-python": (_kafka_python_produce, _kafka_python_consume),
    "confluent-kafka": (_confluent_produce, _confluent_consume),
}


def worker(client: str, action: str, bootstrap: str, topic: str, count: int, arg: int) -> float:
    """Run one side and answer its wall time in seconds (connecting included, importing the
    library not: throughput is measured, not interpreter start-up, which here also counts
    compiling the sources of a checkout run without bytecode caches and the test tools a
    development environment installs)."""
    produce, consume = WORKERS[client]
    importlib.import_module(LIBRARIES[client])
    import uvloop

    start = time.perf_counter()
    if action == "produce":
        work = produce(bootstrap, topic, count, b"x" * arg)
    else:
        work = consume(bootstrap, topic, count, arg)
    if asyncio.iscoroutine(work):
        uvloop.run(work)
    return time.perf_counter() - start


# -- the driver ------------------------------------------------------------------------------


def _side(
    broker: Broker, client: str, action: str, topic: str, count: int, arg: int, plan
) -> float:
    result = subprocess.run(
        [sys.executable, "-m", "bench.client", client, action, broker.bootstrap, topic]
        + [str(count), str(arg)],
        capture_output=True,
        text=True,
        timeout=plan.timeout_s,
    )
    broker.check_alive()
    if result.returncode != 0:
        raise BrokerError(f"{client} {action} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["seconds"]


def measure(plan: ClientPlan) -> dict:
    figures: dict = {}
    with running(FJORD) as broker:
        for size, count in plan.records.items():
            runs: dict[str, dict[str, list[float]]] = {
                c: {"produce": [], "consume": []} for c in CLIENTS
            }
            for _ in range(plan.repetitions):
                for client in CLIENTS:
                    topic = f"bench-client-{uuid.uuid4().hex[:8]}"
                    create_topics(broker, plan.partitions, [topic])
                    print(f"  {client}: {count:,} x {size} B", flush=True)
                    seconds = _side(broker, client, "produce", topic, count, size, plan)
                    runs[client]["produce"].append(count / seconds)
                    seconds = _side(broker, client, "consume", topic, count, plan.partitions, plan)
                    runs[client]["consume"].append(count / seconds)
            figures[str(size)] = {
                client: {action: statistics.median(rates) for action, rates in sides.items()}
                for client, sides in runs.items()
            }
    return figures


def run(plan: ClientPlan) -> tuple[dict, bool]:
    fresh, fresh_ok = freshness.run(plan.freshness)
    try:
        figures = measure(plan)
    except (BrokerError, subprocess.TimeoutExpired) as error:
        print(f"\nclient bench failed: {error}", flush=True)
        status = f"failed: {str(error).splitlines()[0]}"
        return {"status": status, "plan": _plan_dict(plan), "freshness": fresh}, False
    section = {"status": "ok", "plan": _plan_dict(plan), "records_per_s": figures}
    return {**section, "freshness": fresh}, fresh_ok


def _plan_dict(plan: ClientPlan) -> dict:
    return {**asdict(plan), "records": {str(k): v for k, v in plan.records.items()}}


def markdown(result: dict) -> str:
    section = result["client"]
    lines = [
        f"# Client throughput: {result['label']}",
        "",
        f"{result['timestamp']} on {result['machine']['cpus']} CPUs "
        f"({result['machine']['cpu_model']}), Fjord at {result['versions']['fjord_commit']}, "
        f"librdkafka {result['versions']['librdkafka']}. Every client against the same Fjord "
        "broker, each in its own process, one after the other, timed once the library is "
        "imported (connecting included); records/s, median of "
        f"{section['plan']['repetitions']} run(s). Producers: acks=all, idempotent, linger "
        f"{LINGER_MS} ms, batch {BATCH_SIZE} B, 3 partitions round robin; consumers read the "
        "same records back without a group. Target: fjord at least "
        f"{TARGET_OVER_AIOKAFKA}x aiokafka.",
        "",
    ]
    if section["status"] != "ok":
        lines += [f"failed: {section['status']}", ""]
        return "\n".join([*lines, *freshness.markdown_lines(section["freshness"])]) + "\n"
    lines += [
        "| record | side | " + " | ".join(CLIENTS) + " | fjord / aiokafka |",
        "|---|---|" + "---:|" * (len(CLIENTS) + 1),
    ]
    for size, by_client in section["records_per_s"].items():
        for action in ("produce", "consume"):
            cells = [f"{by_client[c][action]:,.0f}" for c in CLIENTS]
            ratio = by_client["fjord"][action] / by_client["aiokafka"][action]
            mark = "" if ratio >= TARGET_OVER_AIOKAFKA else " (below target)"
            lines.append(
                f"| {size} B | {action} | " + " | ".join(cells) + f" | {ratio:.2f}x{mark} |"
            )
    lines += ["", *freshness.markdown_lines(section["freshness"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    client, action, bootstrap, topic, count, arg = sys.argv[1:]
    print(json.dumps({"seconds": worker(client, action, bootstrap, topic, int(count), int(arg))}))
