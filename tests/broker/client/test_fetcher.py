"""PartitionReader against a real broker process, reading what librdkafka wrote: compressed
batches read from inside, transactions in both isolation levels, timestamp lookups, ranges
for exports, old-format topics, and Kafka's errors for bad offsets and unknown topics."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer as ConfluentProducer
from kio.schema.errors import ErrorCode

from broker.client import (
    AdminClient,
    ConsumerRecord,
    KafkaAdminError,
    PartitionReader,
    Producer,
)
from broker.client.models import NewTopic

pytestmark = pytest.mark.timeout(120)


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def create_topic(bootstrap: str, partitions: int = 1, **configs: str) -> str:
    name = topic_name("reader")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1, configs)])
    return name


def raises(code: ErrorCode):
    return pytest.raises(KafkaAdminError, match=code.name.upper())


def confluent_produce(bootstrap: str, topic: str, records, **config) -> None:
    """(key, value, headers, timestamp_ms) records into partition 0, in one flush: with
    linger they share batches, so a compressed batch holds several records."""
    p = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 100, **config})
    for key, value, headers, ts in records:
        p.produce(topic, value, key, partition=0, headers=headers, timestamp=ts)
    assert p.flush(30) == 0


def values(records: list[ConsumerRecord]) -> list[bytes | None]:
    return [r.value for r in records]


def sample(n: int, base_ts: int) -> list:
    return [
        (b"k%d" % i, b"v%d" % i, [("i", str(i).encode()), ("null", None)], base_ts + 1000 * i)
        for i in range(n)
    ]


async def test_compressed_batch_read_from_any_offset(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    base_ts = int(time.time() * 1000) - 600_000
    records = sample(20, base_ts)
    confluent_produce(bootstrap, topic, records, **{"compression.type": "zstd"})
    async with PartitionReader(bootstrap) as reader:
        got = await reader.read(topic, 0, offset=0, max_records=100)
        assert got == [
            ConsumerRecord(topic, 0, i, ts, 0, key, value, headers)
            for i, (key, value, headers, ts) in enumerate(records)
        ]
        # Inside a batch: the records before the offset are skipped, max_records is kept.
        middle = await reader.read(topic, 0, offset=7, max_records=5)
        assert [r.offset for r in middle] == [7, 8, 9, 10, 11]
        assert await reader.read(topic, 0, offset=20) == []


async def test_read_by_timestamp(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    base_ts = int(time.time() * 1000) - 600_000
    confluent_produce(bootstrap, topic, sample(10, base_ts), **{"compression.type": "lz4"})
    async with PartitionReader(bootstrap) as reader:
        at = await reader.read(topic, 0, timestamp_ms=base_ts + 3000, max_records=2)
        assert [(r.offset, r.timestamp_ms) for r in at] == [
            (3, base_ts + 3000),
            (4, base_ts + 4000),
        ]
        between = await reader.read(topic, 0, timestamp_ms=base_ts + 3500, max_records=1)
        assert [r.offset for r in between] == [4]
        assert [r.offset for r in await reader.read(topic, 0, timestamp_ms=0)] == list(range(10))
        assert await reader.read(topic, 0, timestamp_ms=base_ts + 60_000) == []
        with pytest.raises(ValueError):
            await reader.read(topic, 0)
        with pytest.raises(ValueError):
            await reader.read(topic, 0, offset=0, timestamp_ms=base_ts)


async def test_transactions_in_both_isolation_levels(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    p = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": topic,
            "compression.type": "gzip",
            "linger.ms": 50,
        }
    )
    p.init_transactions(30)

    def transaction(vals: list[bytes], commit: bool) -> None:
        p.begin_transaction()
        for v in vals:
            p.produce(topic, v, partition=0)
        assert p.flush(30) == 0
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    transaction([b"a", b"b"], commit=True)
    transaction([b"x", b"y", b"z"], commit=False)
    transaction([b"c"], commit=True)
    plain = ConfluentProducer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"d", partition=0)
    assert plain.flush(30) == 0
    # a, b, COMMIT, x, y, z, ABORT, c, COMMIT, d
    async with PartitionReader(bootstrap) as reader:
        uncommitted = await reader.read(topic, 0, offset=0)
        assert values(uncommitted) == [b"a", b"b", b"x", b"y", b"z", b"c", b"d"]
        assert [r.offset for r in uncommitted] == [0, 1, 3, 4, 5, 7, 9]
        committed = await reader.read(topic, 0, offset=0, isolation_level="read_committed")
        assert [(r.offset, r.value) for r in committed] == [
            (0, b"a"),
            (1, b"b"),
            (7, b"c"),
            (9, b"d"),
        ]
        # Starting inside the aborted transaction: the reader fetches past it in one call.
        after = await reader.read(topic, 0, offset=4, isolation_level="read_committed")
        assert values(after) == [b"c", b"d"]
        everything = [
            r.value
            async for r in reader.iter_records(topic, 0, 0, isolation_level="read_committed")
        ]
        assert everything == [b"a", b"b", b"c", b"d"]
        with pytest.raises(ValueError):
            await reader.read(topic, 0, offset=0, isolation_level="read_most")


async def test_iter_records_stops_before_the_end_offset(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    async with Producer(bootstrap, compression_type="snappy") as producer:
        for i in range(30):
            await producer.send(topic, b"v%d" % i, partition=0)
    async with PartitionReader(bootstrap) as reader:
        ranged = [r.offset async for r in reader.iter_records(topic, 0, 5, 17, max_bytes=200)]
        assert ranged == list(range(5, 17))
        to_end = [r.offset async for r in reader.iter_records(topic, 0, 25)]
        assert to_end == list(range(25, 30))
        past_end = [r.offset async for r in reader.iter_records(topic, 0, 28, 1000)]
        assert past_end == [28, 29]
        assert [r async for r in reader.iter_records(topic, 0, 30)] == []


async def test_small_max_bytes_still_reads_a_large_batch(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    async with Producer(bootstrap) as producer:
        await producer.send(topic, b"x" * 10_000, partition=0)
    async with PartitionReader(bootstrap) as reader:
        [record] = await reader.read(topic, 0, offset=0, max_bytes=100)
    assert record.value == b"x" * 10_000


@pytest.mark.parametrize(("version", "timestamp_type"), [("0.9.0", -1), ("0.10.2", 0)])
@pytest.mark.parametrize("codec", ["none", "gzip"])
async def test_old_format_topics(broker_process, version, timestamp_type, codec):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, **{"message.format.version": version})
    ts = int(time.time() * 1000) - 60_000
    # Idempotent batches are refused by a pre-0.11 format (UNSUPPORTED_FOR_MESSAGE_FORMAT).
    async with Producer(bootstrap, compression_type=codec, enable_idempotence=False) as producer:
        for i in range(4):
            await producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=0, timestamp_ms=ts)
    async with PartitionReader(bootstrap) as reader:
        got = await reader.read(topic, 0, offset=1)
    assert [(r.offset, r.key, r.value, r.timestamp_type) for r in got] == [
        (i, b"k%d" % i, b"v%d" % i, timestamp_type) for i in range(1, 4)
    ]
    assert {r.timestamp_ms for r in got} == {-1 if timestamp_type < 0 else ts}


async def test_offset_out_of_range(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    async with Producer(bootstrap) as producer:
        for i in range(3):
            await producer.send(topic, b"v%d" % i, partition=0)
    async with PartitionReader(bootstrap) as reader:
        assert await reader.read(topic, 0, offset=3) == []
        with raises(ErrorCode.offset_out_of_range):
            await reader.read(topic, 0, offset=4)
        with raises(ErrorCode.offset_out_of_range):
            await reader.read(topic, 0, offset=-5)
        async with AdminClient(bootstrap) as admin:
            await admin.delete_records({(topic, 0): 2})
        with raises(ErrorCode.offset_out_of_range):
            await reader.read(topic, 0, offset=1)
        assert values(await reader.read(topic, 0, offset=2)) == [b"v2"]


async def test_unknown_topic_and_partition(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    async with PartitionReader(bootstrap) as reader:
        with raises(ErrorCode.unknown_topic_or_partition):
            await reader.read(topic_name("missing"), 0, offset=0)
        with raises(ErrorCode.unknown_topic_or_partition):
            await reader.read(topic, 1, offset=0)
        with raises(ErrorCode.unknown_topic_or_partition):
            await reader.read(topic_name("missing"), 0, timestamp_ms=0)
        assert await reader.read(topic, 0, offset=0) == []
