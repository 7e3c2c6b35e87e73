"""The asyncio Producer against a real broker process, judged by librdkafka: what it writes
confluent-kafka reads back (keys, headers, every codec), keyed records land on the partition
librdkafka's murmur2_random partitioner picks for the same key, keyless ones stick to one
partition per batch (KIP-480)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as ConfluentProducer
from kio.schema.errors import ErrorCode

from broker.client import AdminClient, KafkaAdminError, PartitionReader, Producer, RecordMetadata
from broker.client.models import NewTopic
from broker.client.routing import murmur2, partition_for_key

pytestmark = pytest.mark.timeout(120)


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def create_topic(bootstrap: str, partitions: int = 1, **configs: str) -> str:
    name = topic_name("producer")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1, configs)])
    return name


def consume(bootstrap: str, topic: str, partition: int, count: int) -> list:
    """`count` messages of one partition from offset 0, read by librdkafka."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fjord-producer-test",  # required; no group API is called
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "check.crcs": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        messages: list = []
        deadline = time.monotonic() + 60
        while len(messages) < count and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            assert m.error() is None, m.error()
            messages.append(m)
        assert len(messages) == count
        return messages
    finally:
        c.close()


def raises(code: ErrorCode):
    return pytest.raises(KafkaAdminError, match=code.name.upper())


async def test_key_value_headers_round_trip_through_librdkafka(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, 2)
    ts = int(time.time() * 1000) - 60_000
    sent = [
        (b"k1", b"v1", [("h", b"1"), ("h", b"2"), ("empty", b"")]),
        (None, b"no key", []),
        (b"no value", None, [("null", None)]),
        (b"", b"", []),
        (bytes(range(256)), "ünïcødé".encode(), [("ü", b"\x00\xff")]),
    ]
    async with Producer(bootstrap) as producer:
        metas = [
            await producer.send_and_wait(
                topic, value, key, partition=1, headers=headers, timestamp_ms=ts + i
            )
            for i, (key, value, headers) in enumerate(sent)
        ]
    assert metas == [RecordMetadata(topic, 1, i, ts + i) for i in range(len(sent))]
    got = consume(bootstrap, topic, 1, len(sent))
    for i, (m, (key, value, headers)) in enumerate(zip(got, sent, strict=True)):
        assert (m.offset(), m.key(), m.value(), m.timestamp()[1]) == (i, key, value, ts + i)
        assert (m.headers() or []) == headers


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_compressed_records_read_by_librdkafka(broker_process, codec):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    value = b"compressible " * 500
    async with Producer(bootstrap, compression_type=codec) as producer:
        futures = [
            await producer.send(topic, value + bytes([i]), key=b"k%d" % i, partition=0)
            for i in range(3)
        ]
        assert [(await f).offset for f in futures] == [0, 1, 2]
    got = consume(bootstrap, topic, 0, 3)
    assert [(m.key(), m.value()) for m in got] == [
        (b"k%d" % i, value + bytes([i])) for i in range(3)
    ]


async def test_keyed_records_go_where_librdkafka_murmur2_random_puts_them(broker_process):
    bootstrap = broker_process.bootstrap
    partitions = 7
    topic = await create_topic(bootstrap, partitions)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"kafka", *(f"key-{i}".encode() for i in range(40))]
    theirs: dict[bytes, int] = {}

    def delivered(err, msg):
        assert err is None, err
        theirs[msg.key()] = msg.partition()

    p = ConfluentProducer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        p.produce(topic, b"librdkafka", key, on_delivery=delivered)
    assert p.flush(30) == 0
    assert len(theirs) == len(keys)

    async with Producer(bootstrap) as producer:
        futures = {key: await producer.send(topic, b"fjord", key) for key in keys}
        ours = {key: (await future).partition for key, future in futures.items()}
    assert ours == theirs
    assert len(set(ours.values())) > 1
    assert {key: partition_for_key(key, partitions) for key in keys} == theirs


@pytest.mark.parametrize("acks", [0, 1])
async def test_acks_zero_and_one(broker_process, acks):
    """acks=0 answers at once without offsets; either turns the default idempotence off."""
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    async with Producer(bootstrap, acks=acks) as producer:
        futures = [await producer.send(topic, b"v%d" % i, partition=0) for i in range(5)]
        metas = [await f for f in futures]
    assert [m.offset for m in metas] == ([-1] * 5 if acks == 0 else list(range(5)))
    assert [m.value() for m in consume(bootstrap, topic, 0, 5)] == [b"v%d" % i for i in range(5)]


def test_murmur2_matches_kafka():
    # The vectors of librdkafka's rd_murmur2 unit test (Java-compatible murmur2).
    cases = {
        b"kafka": 0xD067CF64,
        b"giberish123456789": 0x8F552B0C,
        b"1234": 0x9FC97B14,
        b"234": 0xE7C009CA,
        b"34": 0x873930DA,
        b"4": 0x5A4B5CA1,
        b"": 0x106E08D9,
    }
    assert {k: murmur2(k) for k in cases} == cases


async def test_null_keys_stick_to_a_partition_per_batch(broker_process):
    """KIP-480: keyless records queued together share one batch on one partition; each new
    batch goes to another partition."""
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, 3)
    async with Producer(bootstrap, linger_ms=60_000) as producer:
        futures = [await producer.send(topic, b"v%d" % i) for i in range(5)]
        await producer.flush()
        together = [await f for f in futures]
        alone = []
        for i in range(6):
            future = await producer.send(topic, b"w%d" % i)
            await producer.flush()
            alone.append(await future)
    assert len({m.partition for m in together}) == 1
    assert [m.offset for m in together] == [0, 1, 2, 3, 4]
    partitions = [m.partition for m in alone]
    assert all(a != b for a, b in zip(partitions, partitions[1:], strict=False))


async def test_log_append_time_topic_reports_the_brokers_timestamp(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, **{"message.timestamp.type": "LogAppendTime"})
    create_time = int(time.time() * 1000) - 3_600_000
    async with Producer(bootstrap) as producer:
        meta = await producer.send_and_wait(topic, b"v", timestamp_ms=create_time)
    assert meta.timestamp_ms != create_time
    async with PartitionReader(bootstrap) as reader:
        [record] = await reader.read(topic, 0, offset=0)
    assert (record.timestamp_ms, record.timestamp_type) == (meta.timestamp_ms, 1)


async def test_unknown_topic_and_partition(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, 2)
    async with Producer(bootstrap) as producer:
        with raises(ErrorCode.unknown_topic_or_partition):
            await producer.send(topic_name("missing"), b"v")
        with raises(ErrorCode.unknown_topic_or_partition):
            await producer.send(topic, b"v", partition=2)
        # The failures leave the producer usable.
        assert (await producer.send_and_wait(topic, b"v", partition=1)).offset == 0


async def test_too_large_record_is_the_brokers_error(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, **{"max.message.bytes": "1000"})
    async with Producer(bootstrap) as producer:
        with raises(ErrorCode.message_too_large):
            await producer.send_and_wait(topic, b"x" * 5000)
        # Past max_request_size the producer refuses it itself, before queueing it.
        with raises(ErrorCode.message_too_large):
            await producer.send(topic, b"x" * 2_000_000)
        # The records after it are written: the idempotent producer moved to a new epoch.
        assert (await producer.send_and_wait(topic, b"small")).offset == 0


async def test_batches_bigger_than_the_topic_allows_are_split(broker_process):
    """MESSAGE_TOO_LARGE for a batch of several records: halves are sent, in order."""
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, **{"max.message.bytes": "3000"})
    async with Producer(bootstrap, linger_ms=60_000, batch_size=100_000) as producer:
        futures = [await producer.send(topic, b"%04d" % i + b"x" * 500) for i in range(16)]
        await producer.flush()
        assert [(await f).offset for f in futures] == list(range(16))
    got = consume(bootstrap, topic, 0, 16)
    assert [m.value()[:4] for m in got] == [b"%04d" % i for i in range(16)]


async def test_records_a_serializer_would_refuse_fail_at_send(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap)
    async with Producer(bootstrap) as producer:
        with pytest.raises(TypeError, match="value must be bytes"):
            await producer.send(topic, "text")
        with pytest.raises(TypeError, match="key must be bytes"):
            await producer.send(topic, b"v", key=7)
        with pytest.raises(TypeError, match="header"):
            await producer.send(topic, b"v", headers=[("h", "text")])
        with pytest.raises(ValueError, match="timestamp_ms"):
            await producer.send(topic, b"v", timestamp_ms=-5)
        # A buffer the caller reuses is copied when queued.
        buffer = bytearray(b"first")
        future = await producer.send(topic, buffer, partition=0, headers=None)
        buffer[:] = b"later"
        assert (await future).offset == 0
    assert [m.value() for m in consume(bootstrap, topic, 0, 1)] == [b"first"]


def test_bad_compression_type_is_refused():
    with pytest.raises(ValueError, match="compression.type"):
        Producer("127.0.0.1:9092", compression_type="brotli")


async def test_requests_reach_the_broker_in_the_order_drained_while_connecting(broker_process):
    """Requests drained while the connection to the leader is being opened are written in
    the order drained: a new idempotent producer's later sequences must not reach the broker
    first (it would write them, a first write may start at any sequence, and refuse the
    earlier ones until they expire)."""
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, 3)
    for round_ in range(30):
        # Batches of one record, so that requests are drained while the connection opens.
        async with Producer(
            bootstrap, batch_size=1, request_timeout_ms=5_000, delivery_timeout_ms=10_000
        ) as producer:
            futures = [
                await producer.send(topic, b"%d-%d" % (round_, i), partition=i % 3)
                for i in range(30)
            ]
            metas = [await f for f in futures]  # none refused as out of order, none expired
        for partition in range(3):
            offsets = [m.offset for m in metas[partition::3]]
            assert offsets == sorted(offsets)
