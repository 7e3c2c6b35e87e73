"""Old clients against a real broker process: kafka-python pinned to the api_versions of
brokers before 0.11, which produce magic 0 (Produce v0-1) or magic 1 (Produce v2) message sets
and fetch with Fetch v0-3, and modern clients reading and writing the same topics.

kafka-python 3.0.12 still speaks these versions when told the broker is that old:
  (0, 10, 1)  Produce v2, Fetch v3, ListOffsets v1, Metadata v2  — magic 1
  (0, 10, 0)  Produce v2, Fetch v2, ListOffsets v0, Metadata v1  — magic 1
  (0, 9)      Produce v1, Fetch v1, ListOffsets v0, Metadata v0  — magic 0
  (0, 8, 2)   Produce v0, Fetch v0, ListOffsets v0, Metadata v0  — magic 0
(0, 8, 0) has no LZ4 in kafka-python and is otherwise the same as (0, 8, 2). Old consumers use
manual assignment: their group protocol versions (JoinGroup v0-1, OffsetCommit v0-1) are gone
from Kafka 4 and from Fjord.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from compat_support import PARTITIONS, Rec, by_partition, make_records, topic_name, wait_until
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    TopicPartition,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import InvalidTimestampError, UnsupportedCompressionTypeError
from test_aiokafka import consume_all as aiokafka_consume
from test_confluent_kafka import consume_all, create_topic
from test_confluent_kafka import produce as modern_produce
from test_kafka_python import consume_all as kafka_python_consume
from test_kafka_python import produce as kafka_python_produce

from broker.records import legacy
from broker.records.batch import iter_batches

pytestmark = pytest.mark.timeout(180)

MODES = {(0, 10, 1): 1, (0, 10, 0): 1, (0, 9): 0, (0, 8, 2): 0}  # api_version -> magic
LEGACY_CODECS = ["none", "gzip", "snappy", "lz4"]


class _XXHash:
    """kafka-python writes and reads magic 0 lz4 through the xxhash package, which this
    environment lacks; the same XXH32 stands in for it (only the frame header checksum)."""

    class xxh32:  # lower case, as in the package
        def __init__(self, data: bytes) -> None:
            self._hash = legacy.xxh32(bytes(data))

        def digest(self) -> bytes:
            return self._hash.to_bytes(4, "big")


@pytest.fixture(autouse=True)
def kafka_python_xxhash(monkeypatch):
    import kafka.codec

    if kafka.codec.xxhash is None:
        monkeypatch.setattr(kafka.codec, "xxhash", _XXHash)


def mode_id(mode) -> str:
    return ".".join(map(str, mode))


def legacy_records(n: int = 30) -> list[Rec]:
    """compat_support's awkward records without headers, which magic 0/1 cannot carry."""
    return [dataclasses.replace(r, headers=()) for r in make_records(n)]


def old_produce(bootstrap: str, topic: str, records: list[Rec], mode, codec: str):
    return kafka_python_produce(bootstrap, topic, records, codec, api_version=mode)


def modern_consume(bootstrap: str, topic: str, expected: int, partitions: int = PARTITIONS):
    """partition -> [(offset, key, value, (timestamp type, timestamp))] read by librdkafka."""
    return consume_all(
        bootstrap,
        topic,
        partitions,
        expected,
        row=lambda msg: (msg.offset(), msg.key(), msg.value(), msg.timestamp()),
    )


def old_consumer(bootstrap: str, mode) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        api_version=mode,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        check_crcs=True,
    )


def old_consume(bootstrap: str, topic: str, mode, expected: int, partitions: int = PARTITIONS):
    """partition -> [ConsumerRecord] read by kafka-python in `mode`, from the beginning
    (ListOffsets v0 or v1 finds it) to `expected` records, and nothing after them."""
    c = old_consumer(bootstrap, mode)
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got: dict[int, list] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < expected:
            assert time.monotonic() < deadline, f"only {sum(map(len, got.values()))} records"
            for tp, msgs in c.poll(timeout_ms=500).items():
                got[tp.partition] += msgs
        assert c.poll(timeout_ms=200) == {}
        return got
    finally:
        c.close()


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("mode", list(MODES), ids=mode_id)
def test_old_producer_modern_consumer(broker_process, mode, codec):
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"old-p-{mode_id(mode)}-{codec}")
    create_topic(bootstrap, topic)
    records = legacy_records()
    acked = old_produce(bootstrap, topic, records, mode, codec)
    want = by_partition(records)
    assert acked == {p: list(range(len(recs))) for p, recs in want.items()}
    got = modern_consume(bootstrap, topic, len(records))
    for p, recs in want.items():
        expected = [
            (
                offset,
                r.key,
                r.value,
                # magic 0 carries no timestamp: stored as -1 under CreateTime
                (TIMESTAMP_CREATE_TIME, r.timestamp if MODES[mode] else -1),
            )
            for offset, r in enumerate(recs)
        ]
        assert got[p] == expected, f"partition {p}"


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("mode", list(MODES), ids=mode_id)
def test_old_consumer_reads_modern_producer(broker_process, mode, codec):
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"old-c-{mode_id(mode)}-{codec}")
    create_topic(bootstrap, topic)
    records = make_records()  # with headers: down-conversion drops them
    modern_produce(bootstrap, topic, records, codec)
    got = old_consume(bootstrap, topic, mode, len(records))
    magic = MODES[mode]
    for p, recs in by_partition(records).items():
        assert [(m.offset, m.key, m.value) for m in got[p]] == [
            (offset, r.key, r.value) for offset, r in enumerate(recs)
        ], f"partition {p}"
        if magic:
            assert [(m.timestamp, m.timestamp_type) for m in got[p]] == [
                (r.timestamp, 0) for r in recs
            ]
        else:
            assert {(m.timestamp, m.timestamp_type) for m in got[p]} == {(None, None)}
        assert all(not m.headers for m in got[p])


@pytest.mark.parametrize("mode", list(MODES), ids=mode_id)
def test_old_producer_old_consumer(broker_process, mode):
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"old-old-{mode_id(mode)}")
    create_topic(bootstrap, topic)
    records = legacy_records()
    old_produce(bootstrap, topic, records, mode, "gzip")
    got = old_consume(bootstrap, topic, mode, len(records))
    for p, recs in by_partition(records).items():
        assert [(m.offset, m.key, m.value) for m in got[p]] == [
            (offset, r.key, r.value) for offset, r in enumerate(recs)
        ]


def test_zstd_data_is_refused_to_old_consumers(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("old-zstd")
    create_topic(bootstrap, topic, partitions=1)
    big = b"compressible " * 500  # librdkafka sends small sets uncompressed
    modern_produce(bootstrap, topic, [Rec(0, b"k", big, (), int(time.time() * 1000))], "zstd")
    c = old_consumer(bootstrap, (0, 10, 0))
    try:
        tp = KTopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)

        def refused():
            try:
                c.poll(timeout_ms=200)
            except UnsupportedCompressionTypeError:
                return True
            return False

        wait_until(refused, what="UNSUPPORTED_COMPRESSION_TYPE")
    finally:
        c.close()


def test_log_append_time_topic_with_old_clients(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("old-lat")
    create_topic(bootstrap, topic, partitions=1, **{"message.timestamp.type": "LogAppendTime"})
    records = [Rec(0, b"k%d" % i, b"v%d" % i, (), 1000 + i) for i in range(5)]
    before = int(time.time() * 1000)
    old_produce(bootstrap, topic, records, (0, 10, 0), "gzip")
    got = modern_consume(bootstrap, topic, 5, partitions=1)[0]
    stamps = {ts for _, _, _, ts in got}
    assert len(stamps) == 1
    [(ts_type, ts)] = stamps
    assert ts_type == TIMESTAMP_LOG_APPEND_TIME and ts >= before
    old = old_consume(bootstrap, topic, (0, 10, 1), 5, partitions=1)[0]
    assert {(m.timestamp, m.timestamp_type) for m in old} == {(ts, 1)}


def test_old_producer_gets_invalid_timestamp(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("old-ts")
    create_topic(bootstrap, topic, partitions=1, **{"message.timestamp.before.max.ms": "60000"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=(0, 10, 0), retries=0)
    try:
        stale = producer.send(topic, value=b"old", timestamp_ms=int(time.time() * 1000) - 600_000)
        with pytest.raises(InvalidTimestampError):
            stale.get(timeout=30)
        fresh = producer.send(topic, value=b"new")
        assert fresh.get(timeout=30).offset == 0
    finally:
        producer.close(timeout=10)


def test_offsets_by_timestamp_and_watermarks_on_old_data(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("old-times")
    create_topic(bootstrap, topic)
    records = legacy_records()
    old_produce(bootstrap, topic, records, (0, 10, 0), "snappy")
    want = by_partition(records)
    # kafka-python in 0.10.1 mode looks timestamps up with ListOffsets v1
    c = old_consumer(bootstrap, (0, 10, 1))
    try:
        for p, recs in want.items():
            tp = KTopicPartition(topic, p)
            for i in (0, len(recs) // 2, len(recs) - 1):
                found = c.offsets_for_times({tp: recs[i].timestamp})[tp]
                assert (found.offset, found.timestamp) == (i, recs[i].timestamp)
            assert c.offsets_for_times({tp: recs[-1].timestamp + 1})[tp] is None
    finally:
        c.close()
    # and in 0.9 mode finds the watermarks with ListOffsets v0
    c = old_consumer(bootstrap, (0, 9))
    try:
        tps = [KTopicPartition(topic, p) for p in want]
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert c.end_offsets(tps) == {tp: len(want[tp.partition]) for tp in tps}
    finally:
        c.close()
    # a modern client finds the same offsets in the up-converted data
    mc = Consumer({"bootstrap.servers": bootstrap, "group.id": "fjord-compat-unused"})
    try:
        for p, recs in want.items():
            middle = len(recs) // 2
            [tp] = mc.offsets_for_times(
                [TopicPartition(topic, p, recs[middle].timestamp - 1)], timeout=10
            )
            assert tp.error is None and tp.offset == middle
    finally:
        mc.close()


def on_disk_magics(log_dir, topic: str) -> set[int]:
    """The magic of every entry the broker wrote for `topic`, read from its segment files."""
    magics = set()
    for path in log_dir.glob(f"{topic}-*/*.log"):
        data = path.read_bytes()
        magics |= {h.magic for _, h in iter_batches(data)}
    return magics


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_topic_kept_in_magic_1_serves_every_client(broker_process, codec):
    """message.format.version=0.10.2 (seed 004): modern and old producers' records stay magic
    1 on disk; librdkafka, kafka-python and aiokafka read them as stored, old kafka-python
    through Fetch v2 as well, with offsets and CreateTime timestamps intact."""
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"fmt1-{codec}")
    create_topic(bootstrap, topic, **{"message.format.version": "0.10.2-IV0"})
    records = legacy_records()
    modern_produce(bootstrap, topic, records[:15], codec)
    old_produce(bootstrap, topic, records[15:], (0, 10, 1), codec)
    assert on_disk_magics(broker_process.log_dir, topic) == {1}
    want = {p: list(enumerate(recs)) for p, recs in by_partition(records).items()}
    assert consume_all(bootstrap, topic, PARTITIONS, len(records)) == want
    assert kafka_python_consume(bootstrap, topic, PARTITIONS, len(records)) == want
    assert asyncio.run(aiokafka_consume(bootstrap, topic, PARTITIONS, len(records))) == want
    old = old_consume(bootstrap, topic, (0, 10, 0), len(records))
    for p, rows in want.items():
        assert [(m.offset, m.key, m.value, m.timestamp) for m in old[p]] == [
            (o, r.key, r.value, r.timestamp) for o, r in rows
        ]


def test_topic_kept_in_magic_0_has_no_timestamps(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("fmt0")
    create_topic(bootstrap, topic, **{"message.format.version": "0.9.0"})
    records = legacy_records()
    modern_produce(bootstrap, topic, records[:15], "snappy")
    old_produce(bootstrap, topic, records[15:], (0, 9), "gzip")
    assert on_disk_magics(broker_process.log_dir, topic) == {0}
    got = modern_consume(bootstrap, topic, len(records))
    for p, recs in by_partition(records).items():
        # librdkafka: type NOT_AVAILABLE, whatever number comes with it
        assert [(o, k, v, ts[0]) for o, k, v, ts in got[p]] == [
            (o, r.key, r.value, TIMESTAMP_NOT_AVAILABLE) for o, r in enumerate(recs)
        ]
    old = old_consume(bootstrap, topic, (0, 8, 2), len(records))
    for p, recs in by_partition(records).items():
        assert [(m.offset, m.key, m.value) for m in old[p]] == [
            (o, r.key, r.value) for o, r in enumerate(recs)
        ]
