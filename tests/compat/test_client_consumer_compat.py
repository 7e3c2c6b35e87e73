"""Our Consumer with other clients: what confluent-kafka, kafka-python and aiokafka produce
(every codec, headers, awkward keys and values) is read back exactly; and our consumer shares a
group with confluent-kafka members of the same protocol (classic with range or
cooperative-sticky, and KIP-848's consumer protocol): once stable, every partition is owned by
exactly one member, ours included, and the records are all read.

Waiting is polling until a condition holds; nothing is timed."""

from __future__ import annotations

import asyncio
import time

import pytest
from broker_process import BrokerProcess
from compat_support import (
    CODECS,
    PARTITIONS,
    Rec,
    assert_same_records,
    make_records,
    topic_name,
)
from confluent_kafka import Consumer as ConfluentConsumer
from test_aiokafka import produce as aiokafka_produce
from test_confluent_kafka import produce as confluent_produce
from test_kafka_python import produce as kafka_python_produce

from broker.client import AdminClient, Consumer
from broker.client.models import NewTopic, TopicPartition

pytestmark = pytest.mark.timeout(180)

OVERRIDES = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=1000",
    "group.consumer.heartbeat.interval.ms=200",
    "group.consumer.min.heartbeat.interval.ms=200",
)


async def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = topic_name("ours-consumer")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    return name


async def read_back(bootstrap: str, topic: str, count: int) -> dict[int, list[tuple[int, Rec]]]:
    got: dict[int, list[tuple[int, Rec]]] = {}
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < count:
            assert time.monotonic() < deadline, f"read {sum(map(len, got.values()))} of {count}"
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                got.setdefault(tp.partition, []).extend(
                    (r.offset, Rec(r.partition, r.key, r.value, tuple(r.headers), r.timestamp_ms))
                    for r in records
                )
    return got


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
async def test_what_other_clients_produce_is_read_exactly(broker_process, client, codec):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    records = make_records()
    if client == "aiokafka":
        await aiokafka_produce(bootstrap, topic, records, codec)
    else:
        produce = confluent_produce if client == "confluent-kafka" else kafka_python_produce
        await asyncio.to_thread(produce, bootstrap, topic, records, codec)
    assert_same_records(records, await read_back(bootstrap, topic, len(records)))


# -- one group with confluent-kafka ----------------------------------------------------------

GROUPS = {
    "classic-range": (
        {"group.protocol": "classic", "partition.assignment.strategy": "range"},
        {"group_protocol": "classic", "partition_assignment_strategy": "range"},
    ),
    "classic-cooperative-sticky": (
        {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
        {"group_protocol": "classic", "partition_assignment_strategy": "cooperative-sticky"},
    ),
    "consumer": ({"group.protocol": "consumer"}, {"group_protocol": "consumer"}),
}


@pytest.fixture(scope="module")
def group_bootstrap(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("mixed-group"), *OVERRIDES).start()
    yield proc.bootstrap
    assert proc.stop() == 0, "".join(proc.output)


@pytest.mark.parametrize("ours_first", [True, False], ids=["ours-first", "theirs-first"])
@pytest.mark.parametrize("kind", sorted(GROUPS))
async def test_one_group_with_confluent_members(group_bootstrap, kind, ours_first):
    bootstrap = group_bootstrap
    partitions = 6
    topic = await create_topic(bootstrap, partitions)
    group = topic_name("mixed")
    theirs_config, ours_config = GROUPS[kind]
    everything = {(topic, p) for p in range(partitions)}
    now = int(time.time() * 1000)
    produced = [Rec(i % partitions, None, b"%d" % i, (), now) for i in range(60)]
    await asyncio.to_thread(confluent_produce, bootstrap, topic, produced, "none")
    seen: set[tuple[int, int]] = set()
    theirs = [
        ConfluentConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **(
                    {"session.timeout.ms": 6000, "heartbeat.interval.ms": 200}
                    if kind != "consumer"
                    else {}
                ),
                **theirs_config,
            }
        )
        for _ in range(2)
    ]
    ours = Consumer(
        bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **(
            {"session_timeout_ms": 6000, "heartbeat_interval_ms": 200} if kind != "consumer" else {}
        ),
        **ours_config,
    )
    await ours.start()

    async def poll_theirs(c: ConfluentConsumer, timeout: float = 0.05) -> None:
        msg = await asyncio.to_thread(c.poll, timeout)
        if msg is not None and not msg.error():
            seen.add((msg.partition(), msg.offset()))

    async def poll_ours() -> None:
        for tp, records in (await ours.getmany(timeout_ms=50)).items():
            seen.update((tp.partition, r.offset) for r in records)

    try:
        if ours_first:
            ours.subscribe([topic])
            await poll_ours()
        for c in theirs:
            c.subscribe([topic])
        if not ours_first:
            await poll_theirs(theirs[0], 0.5)
            ours.subscribe([topic])

        def owners() -> list[set]:
            return [{(tp.topic, tp.partition) for tp in c.assignment()} for c in theirs] + [
                {tuple(tp) for tp in ours.assignment()}
            ]

        def stable() -> bool:
            sets = owners()
            total = sum(map(len, sets))
            return all(sets) and total == partitions and set().union(*sets) == everything

        deadline = time.monotonic() + 60
        while not (stable() and len(seen) == len(produced)):
            assert time.monotonic() < deadline, f"not stable: {owners()}, read {len(seen)}"
            for c in theirs:
                await poll_theirs(c)
            await poll_ours()
        assert len(seen) == len(produced)
    finally:
        await ours.close()
        for c in theirs:
            await asyncio.to_thread(c.close)
