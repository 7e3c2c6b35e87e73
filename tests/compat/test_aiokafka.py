"""aiokafka against a real broker process: topic creation through AIOKafkaAdminClient, produce
with every codec, read back with manual assignment, offsets by timestamp and watermarks."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from compat_support import (
    CODECS,
    PARTITIONS,
    Rec,
    assert_acked_in_order,
    assert_same_records,
    by_partition,
    make_records,
    time_queries,
    topic_name,
)

pytestmark = pytest.mark.timeout(120)


async def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS, **configs) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, topic_configs=configs)]
        )
        assert [(t[0], t[1]) for t in response.topic_errors] == [(name, 0)], response
    finally:
        await admin.close()


async def produce(
    bootstrap: str, topic: str, records: list[Rec], codec: str
) -> dict[int, list[int]]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
        max_request_size=1_000_000,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                headers=list(r.headers),
                timestamp_ms=r.timestamp,
            )
            for r in records
        ]
        offsets: dict[int, list[int]] = {}
        for md in await asyncio.gather(*futures):
            offsets.setdefault(md.partition, []).append(md.offset)
        return offsets
    finally:
        await producer.stop()


def new_consumer(bootstrap: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        check_crcs=True,
    )


async def consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> dict[int, list[tuple[int, Rec]]]:
    consumer = new_consumer(bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in range(partitions)}

        async def read():
            while sum(map(len, got.values())) < expected:
                for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                    for m in msgs:
                        assert m.timestamp_type == 0  # CreateTime
                        got[tp.partition].append(
                            (
                                m.offset,
                                Rec(tp.partition, m.key, m.value, tuple(m.headers), m.timestamp),
                            )
                        )

        await asyncio.wait_for(read(), 60)
        assert await consumer.getmany(timeout_ms=200) == {}
        return got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("codec", CODECS)
async def test_produce_consume_every_codec(broker_process, codec):
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"aio-{codec}")
    await create_topic(bootstrap, topic)
    records = make_records()
    assert_acked_in_order(records, await produce(bootstrap, topic, records, codec))
    assert_same_records(records, await consume_all(bootstrap, topic, PARTITIONS, len(records)))


async def test_offsets_for_times_and_watermarks(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("aio-times")
    await create_topic(bootstrap, topic)
    records = make_records()
    await produce(bootstrap, topic, records, "zstd")
    consumer = new_consumer(bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        parts = by_partition(records)
        assert await consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert await consumer.end_offsets(tps) == {tp: len(parts[tp.partition]) for tp in tps}
        for q in time_queries(records):
            tp = TopicPartition(topic, q.partition)
            found = (await consumer.offsets_for_times({tp: q.timestamp}))[tp]
            if q.offset is None:
                assert found is None, f"{q.what}: {found}"
            else:
                assert found is not None and found.offset == q.offset, f"{q.what}: {found}"
                assert found.timestamp == parts[q.partition][q.offset].timestamp
    finally:
        await consumer.stop()


async def test_admin_describe_configs_and_partitions(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("aio-admin")
    await create_topic(bootstrap, topic, partitions=1, **{"retention.ms": "3600000"})
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        [(code, _msg, _type, name, entries)] = response.resources
        assert (code, name) == (0, topic)
        values = {e[0]: e[1] for e in entries}
        assert values["retention.ms"] == "3600000"
        assert values["cleanup.policy"] == "delete"

        await admin.create_partitions({topic: NewPartitions(3)})
        [meta] = await admin.describe_topics([topic])
        assert len(meta["partitions"]) == 3

        await admin.delete_topics([topic])
        assert topic not in await admin.list_topics()
    finally:
        await admin.close()
