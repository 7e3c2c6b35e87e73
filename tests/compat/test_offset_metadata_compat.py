"""Committed offset metadata of every length class, committed by our Consumer (OffsetCommit at
the version it negotiates), by confluent-kafka and by kafka-python, read back byte for byte by
each of them, before and after a broker restart (the offsets then come from the replay of
`__consumer_offsets`).

confluent-kafka's metadata is a C string both ways: it commits the terminating NUL with the
text, and when it reads, librdkafka copies exactly the bytes the broker sent and the Python
binding reads that copy up to a NUL. Metadata without a trailing NUL — what our Consumer,
kafka-python and the Java client commit — therefore comes back from confluent-kafka with
whatever bytes follow the copy in memory (with glibc, when the length is 8 mod 16: 200 is),
or as a UnicodeDecodeError (librdkafka issue 4649 is the same copy). So confluent-kafka reads
our Consumer's commits here in its own convention, the NUL included, and the others read what
confluent-kafka commits with that NUL.
"""

from __future__ import annotations

import asyncio

import pytest
from compat_support import topic_name
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata as KafkaPythonOffsetAndMetadata
from kafka.structs import TopicPartition as KafkaPythonTopicPartition

from broker.client import AdminClient, Consumer
from broker.client.models import NewTopic, OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.timeout(120)

LENGTHS = (0, 1, 126, 127, 128, 200, 16383, 16384)
# 1- to 4-byte UTF-8 characters; 16384 of them still fit the record's int16 length.
NON_ASCII = "zzzzé€𝄞"
METADATA = ["z" * n for n in LENGTHS] + [(NON_ASCII * n)[:n] for n in LENGTHS]
NUL = "\0"


def offset(partition: int) -> int:
    return 1000 + partition


async def ours_commit(bootstrap: str, group: str, topic: str, suffix: str = "") -> None:
    async with Consumer(bootstrap, group_id=group, enable_auto_commit=False) as consumer:
        await consumer.commit(
            {
                TopicPartition(topic, p): OffsetAndMetadata(offset(p), m + suffix)
                for p, m in enumerate(METADATA)
            }
        )


def confluent_commit(bootstrap: str, group: str, topic: str) -> None:
    consumer = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[
                ConfluentTopicPartition(topic, p, offset(p), m) for p, m in enumerate(METADATA)
            ],
            asynchronous=False,
        )
    finally:
        consumer.close()


def kafka_python_commit(bootstrap: str, group: str, topic: str) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit(
            {
                KafkaPythonTopicPartition(topic, p): KafkaPythonOffsetAndMetadata(offset(p), m, -1)
                for p, m in enumerate(METADATA)
            }
        )
    finally:
        consumer.close()


async def ours_read(bootstrap: str, group: str, topic: str) -> list[tuple[int, str]]:
    async with Consumer(bootstrap, group_id=group, enable_auto_commit=False) as consumer:
        found = [await consumer.committed(TopicPartition(topic, p)) for p in range(len(METADATA))]
    return [(c.offset, c.metadata) for c in found]


def confluent_read(bootstrap: str, group: str, topic: str) -> list[tuple[int, str]]:
    consumer = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        wanted = [ConfluentTopicPartition(topic, p) for p in range(len(METADATA))]
        return [(c.offset, c.metadata) for c in consumer.committed(wanted, timeout=30)]
    finally:
        consumer.close()


def kafka_python_read(bootstrap: str, group: str, topic: str) -> list[tuple[int, str]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        found = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return [
        (found[tp].offset, found[tp].metadata)
        for tp in (KafkaPythonTopicPartition(topic, p) for p in range(len(METADATA)))
    ]


def expected(suffix: str = "") -> list[tuple[int, str]]:
    return [(offset(p), m + suffix) for p, m in enumerate(METADATA)]


async def assert_read_back(bootstrap: str, topic: str, groups: dict[str, str]) -> None:
    ours, confluent, kafka_python = groups["ours"], groups["confluent"], groups["kafka-python"]
    ours_nul = groups["ours, NUL-terminated"]
    for group, suffix in ((ours, ""), (kafka_python, ""), (ours_nul, NUL), (confluent, NUL)):
        assert await ours_read(bootstrap, group, topic) == expected(suffix), group
        assert await asyncio.to_thread(kafka_python_read, bootstrap, group, topic) == expected(
            suffix
        ), group
    for group in (ours_nul, confluent):
        assert await asyncio.to_thread(confluent_read, bootstrap, group, topic) == expected(), group


async def test_metadata_of_every_length_is_read_back_exactly(make_broker_process):
    # Kafka's default limit is 4096 UTF-16 code units: raised to the record's own limit.
    broker = make_broker_process("offset.metadata.max.bytes=32767").start()
    bootstrap = broker.bootstrap
    topic = topic_name("offset-metadata")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, len(METADATA), 1)])
    groups = {
        name: topic_name(f"metadata-{name.split(',')[0]}")
        for name in ("ours", "ours, NUL-terminated", "confluent", "kafka-python")
    }
    await ours_commit(bootstrap, groups["ours"], topic)
    await ours_commit(bootstrap, groups["ours, NUL-terminated"], topic, suffix=NUL)
    await asyncio.to_thread(confluent_commit, bootstrap, groups["confluent"], topic)
    await asyncio.to_thread(kafka_python_commit, bootstrap, groups["kafka-python"], topic)

    await assert_read_back(bootstrap, topic, groups)
    assert broker.stop() == 0, "".join(broker.output)
    broker.start()
    await assert_read_back(bootstrap, topic, groups)
