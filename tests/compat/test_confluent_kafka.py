"""confluent-kafka (librdkafka) against a real broker process: topic creation through the admin
API, produce with every codec, read back with manual assignment, offsets by timestamp and
watermarks."""

from __future__ import annotations

import time

import pytest
from compat_support import (
    CODECS,
    PARTITIONS,
    Rec,
    assert_acked_in_order,
    assert_same_records,
    by_partition,
    make_records,
    numbered_records,
    time_queries,
    topic_name,
    wait_until,
)
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

pytestmark = pytest.mark.timeout(120)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS, **configs) -> None:
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs)],
        operation_timeout=30,
    )
    futures[name].result(timeout=30)


def consumer(bootstrap: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fjord-compat-unused",  # required by the client; no group API is called
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "check.crcs": True,
            **extra,
        }
    )


def as_rec(msg) -> tuple[int, Rec]:
    ts_type, ts = msg.timestamp()
    assert ts_type == TIMESTAMP_CREATE_TIME
    headers = tuple(msg.headers() or ())
    return msg.offset(), Rec(msg.partition(), msg.key(), msg.value(), headers, ts)


def consume_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout: float = 60,
    row=as_rec,
    settings: dict | None = None,
) -> dict[int, list]:
    """Read every partition from offset 0 until each reports EOF and `expected` records
    arrived, each as `row(message)`; any error other than EOF fails. `settings` are extra
    consumer settings (security, isolation.level)."""
    c = consumer(bootstrap, **(settings or {}))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: dict[int, list] = {p: [] for p in range(partitions)}
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_eof) < partitions or sum(map(len, got.values())) < expected:
            assert time.monotonic() < deadline, f"consumed {got} eof {at_eof}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_eof.add(msg.partition())
                continue
            at_eof.discard(msg.partition())
            got[msg.partition()].append(row(msg))
        return got
    finally:
        c.close()


def produce(bootstrap: str, topic: str, records: list[Rec], codec: str) -> dict[int, list[int]]:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "compression.type": codec,
            "linger.ms": 20,
            "message.max.bytes": 1_000_000,
        }
    )
    offsets: dict[int, list[int]] = {}
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.setdefault(msg.partition(), []).append(msg.offset())

    for r in records:
        p.produce(
            topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            headers=list(r.headers) or None,
            timestamp=r.timestamp,
            on_delivery=delivered,
        )
        p.poll(0)
    assert p.flush(30) == 0
    p.close()
    assert errors == []
    return offsets


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker_process, codec):
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"ck-{codec}")
    create_topic(bootstrap, topic)
    records = make_records()
    assert_acked_in_order(records, produce(bootstrap, topic, records, codec))
    assert_same_records(records, consume_all(bootstrap, topic, PARTITIONS, len(records)))


def test_offsets_for_times_and_watermarks(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-times")
    create_topic(bootstrap, topic)
    records = make_records()
    produce(bootstrap, topic, records, "lz4")
    c = consumer(bootstrap)
    try:
        for p, recs in by_partition(records).items():
            assert c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) == (0, len(recs))
        for q in time_queries(records):
            [tp] = c.offsets_for_times(
                [TopicPartition(topic, q.partition, q.timestamp)], timeout=10
            )
            assert tp.error is None, (q, tp.error)
            # librdkafka reports "no record at or after the timestamp" as OFFSET_END (-1).
            want = -1 if q.offset is None else q.offset
            assert tp.offset == want, f"{q.what}: partition {q.partition} ts {q.timestamp}"
    finally:
        c.close()


def test_offsets_for_times_on_empty_partition(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-empty")
    create_topic(bootstrap, topic, partitions=1)
    c = consumer(bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
        [tp] = c.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)
        assert tp.error is None and tp.offset == -1
    finally:
        c.close()


def test_seek_into_the_middle_of_a_compressed_batch(broker_process):
    """A fetch from an offset inside a compressed batch returns the whole batch; the client
    drops the records before the fetch offset."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-mid")
    create_topic(bootstrap, topic, partitions=1)
    records = numbered_records()
    produce(bootstrap, topic, records, "zstd")
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, 17)])
        got = []
        while True:
            msg = c.poll(10)
            assert msg is not None, "no message or EOF within 10s"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                break
            got.append((msg.offset(), msg.value()))
        assert got == [(i, b"v%d" % i) for i in range(17, 30)]
    finally:
        c.close()


def test_list_offsets_admin_specs(broker_process):
    """AdminClient.list_offsets: earliest, latest, by timestamp and MAX_TIMESTAMP (KIP-734)."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-listoffsets")
    create_topic(bootstrap, topic, partitions=1)
    base = 1_700_000_000_000
    # The largest timestamp is in the middle, so max_timestamp is not simply the last offset.
    stamps = [base + 1000 * i for i in range(10)]
    stamps[6] = base + 100_000
    records = [Rec(0, None, b"v%d" % i, (), ts) for i, ts in enumerate(stamps)]
    produce(bootstrap, topic, records, "none")
    client = admin(bootstrap)
    tp = TopicPartition(topic, 0)
    for spec, want in [
        (OffsetSpec.earliest(), 0),
        (OffsetSpec.latest(), 10),
        (OffsetSpec.for_timestamp(base + 2500), 3),
        (OffsetSpec.max_timestamp(), 6),
    ]:
        result = client.list_offsets({tp: spec})[tp].result(timeout=30)
        assert result.offset == want, spec
    result = client.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    assert result.timestamp == base + 100_000


def test_log_append_time_topic(broker_process):
    """message.timestamp.type=LogAppendTime: the broker stamps its own time on every batch,
    compressed or not, and consumers see LogAppendTime."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-logappend")
    create_topic(bootstrap, topic, partitions=2, **{"message.timestamp.type": "LogAppendTime"})
    old = 1_600_000_000_000
    before = int(time.time() * 1000)
    records = [Rec(i % 2, b"k%d" % i, b"v%d" % i, (), old + i) for i in range(20)]
    produce(bootstrap, topic, records[:10], "none")
    produce(bootstrap, topic, records[10:], "zstd")
    after = int(time.time() * 1000)
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 20:
            assert time.monotonic() < deadline
            msg = c.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert msg.error() is None, msg.error()
            ts_type, ts = msg.timestamp()
            assert ts_type == TIMESTAMP_LOG_APPEND_TIME
            assert before <= ts <= after, (before, ts, after)
            seen += 1
        [found] = c.offsets_for_times([TopicPartition(topic, 0, old + 5)], timeout=10)
        assert found.offset == 0  # append times are all later than the producer's old stamps
    finally:
        c.close()


def test_record_larger_than_max_message_bytes(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-toolarge")
    create_topic(bootstrap, topic, partitions=1, **{"max.message.bytes": "2000"})
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "retries": 0}
    )
    results = []
    p.produce(
        topic, value=b"x" * 5000, partition=0, on_delivery=lambda err, msg: results.append(err)
    )
    assert p.flush(30) == 0  # separate batches: Kafka rejects a too-large batch as a whole
    p.produce(topic, value=b"small", partition=0, on_delivery=lambda err, msg: results.append(err))
    assert p.flush(30) == 0
    p.close()
    assert results[0] is not None and results[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert results[1] is None


def test_timestamp_too_far_in_the_future(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-future")
    create_topic(bootstrap, topic, partitions=1)
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "retries": 0}
    )
    results = []
    future = int(time.time() * 1000) + 3 * 3_600_000
    p.produce(
        topic,
        value=b"future",
        partition=0,
        timestamp=future,
        on_delivery=lambda err, msg: results.append(err),
    )
    assert p.flush(30) == 0
    p.close()
    assert results[0] is not None and results[0].code() == KafkaError.INVALID_TIMESTAMP


@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_zero_and_one(broker_process, acks):
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"ck-acks{acks}")
    create_topic(bootstrap, topic, partitions=1)
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": False, "linger.ms": 5}
    )
    errors = []
    for i in range(200):
        p.produce(
            topic,
            value=b"v%d" % i,
            partition=0,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0
    p.close()
    assert errors == []
    c = consumer(bootstrap)
    try:
        # acks=0 gives the producer no offsets; wait for the log to reach 200 records.
        wait_until(
            lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] >= 200,
            what="the log to hold the 200 acks=0 records",
        )
        got = consume_all(bootstrap, topic, 1, 200)[0]
        assert [r.value for _, r in got] == [b"v%d" % i for i in range(200)]
    finally:
        c.close()


def test_oversized_batches_with_tiny_fetch_limits(broker_process):
    """A batch larger than max.partition.fetch.bytes and fetch.max.bytes is still returned whole
    (KIP-74), so the consumer makes progress."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-tinyfetch")
    create_topic(bootstrap, topic, partitions=2)
    records = [Rec(i % 2, None, bytes([i]) * 30_000, (), 1_700_000_000_000 + i) for i in range(12)]
    produce(bootstrap, topic, records, "none")
    c = consumer(
        bootstrap,
        **{"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 1024, "message.max.bytes": 1000},
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 12:
            assert time.monotonic() < deadline, len(got)
            msg = c.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
        assert sorted(got) == sorted((r.partition, i // 2, r.value) for i, r in enumerate(records))
    finally:
        c.close()


def test_consumer_waiting_at_the_end_sees_new_records(broker_process):
    """A consumer parked in a long-poll fetch at the log end gets records produced later."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-longpoll")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, [Rec(0, b"k", b"early", (), 1_700_000_000_000)], "none")
    c = consumer(bootstrap, **{"fetch.wait.max.ms": 5000, "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        msg = c.poll(10)
        assert msg is not None and msg.error() is None and msg.value() == b"early"
        # The next fetch (offset 1) now waits at the log end for up to fetch.wait.max.ms.
        produce(bootstrap, topic, [Rec(0, b"k", b"late", (), 1_700_000_000_001)], "none")
        msg = c.poll(30)
        assert msg is not None and msg.error() is None
        assert (msg.offset(), msg.value()) == (1, b"late")
    finally:
        c.close()


def test_out_of_range_fetch_resets_to_earliest(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-reset")
    create_topic(bootstrap, topic, partitions=1)
    produce(
        bootstrap,
        topic,
        [Rec(0, None, b"v%d" % i, (), 1_700_000_000_000) for i in range(5)],
        "none",
    )
    c = consumer(bootstrap, **{"auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 1000)])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < 5:
            assert time.monotonic() < deadline
            msg = c.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert msg.error() is None, msg.error()
            values.append((msg.offset(), msg.value()))
        assert values == [(i, b"v%d" % i) for i in range(5)]
    finally:
        c.close()


def test_record_close_to_the_default_max_message_bytes(broker_process):
    """A ~1 MB batch: a request frame that arrives in many reads, and a fetch response larger
    than max.partition.fetch.bytes (returned whole, KIP-74)."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-big")
    create_topic(bootstrap, topic, partitions=1)
    value = bytes(range(256)) * 4060  # 1,039,360 bytes, incompressible enough
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "message.max.bytes": 1_048_588,
        }
    )
    results = []
    p.produce(
        topic,
        value=value,
        key=b"big",
        partition=0,
        on_delivery=lambda err, msg: results.append(err),
    )
    assert p.flush(30) == 0
    p.close()
    assert results == [None]
    got = consume_all(bootstrap, topic, 1, 1)[0]
    assert [(o, r.key, r.value == value) for o, r in got] == [(0, b"big", True)]


def test_pipelined_produce_requests(broker_process):
    """Several produce requests in flight per connection: responses must come back in request
    order with dense offsets."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-pipeline")
    create_topic(bootstrap, topic, partitions=3)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 5,
            "batch.num.messages": 50,
            "linger.ms": 1,
            "compression.type": "lz4",
        }
    )
    acked: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    errors = []

    def delivered(err, msg):
        if err:
            errors.append(err)
        else:
            acked[msg.partition()].append((msg.offset(), msg.value()))

    for i in range(15_000):
        while True:
            try:
                p.produce(topic, value=b"%d" % i, partition=i % 3, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    p.close()
    assert errors == []
    for part, rows in acked.items():
        assert [o for o, _ in rows] == list(range(5000)), f"partition {part}"
        assert [int(v) for _, v in rows] == list(range(part, 15_000, 3))
    c = consumer(bootstrap)
    try:
        for part in range(3):
            assert c.get_watermark_offsets(TopicPartition(topic, part), timeout=10) == (0, 5000)
    finally:
        c.close()


@pytest.mark.parametrize("batching", ["one-batch", "batch-per-record"])
def test_offsets_for_times_with_out_of_order_timestamps(broker_process, batching):
    """Kafka answers with the earliest offset whose timestamp is >= the target, even when
    timestamps go backwards."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-unordered")
    create_topic(bootstrap, topic, partitions=1)
    base = 1_700_000_000_000
    stamps = [base + d for d in (1000, 5000, 2000, 3000, 6000, 4000)]
    records = [Rec(0, None, b"v%d" % i, (), ts) for i, ts in enumerate(stamps)]
    if batching == "one-batch":
        produce(bootstrap, topic, records, "gzip")
    else:
        for r in records:
            produce(bootstrap, topic, [r], "none")
    c = consumer(bootstrap)
    try:
        for target, want in [
            (500, 0),
            (1000, 0),
            (1500, 1),
            (2500, 1),
            (5000, 1),
            (5500, 4),
            (6000, 4),
            (6001, -1),
        ]:
            [tp] = c.offsets_for_times([TopicPartition(topic, 0, base + target)], timeout=10)
            assert tp.offset == want, f"target +{target}: got {tp.offset}, want {want}"
    finally:
        c.close()
    client = admin(bootstrap)
    tp = TopicPartition(topic, 0)
    result = client.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    assert (result.offset, result.timestamp) == (4, base + 6000)


def test_max_timestamp_on_log_append_time_topic(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("ck-lat-max")
    create_topic(bootstrap, topic, partitions=1, **{"message.timestamp.type": "LogAppendTime"})
    produce(bootstrap, topic, [Rec(0, None, b"a", (), 1_600_000_000_000)], "none")
    produce(bootstrap, topic, [Rec(0, None, b"b", (), 1_600_000_000_000)], "snappy")
    got = consume_all_any_type(bootstrap, topic)
    client = admin(bootstrap)
    tp = TopicPartition(topic, 0)
    result = client.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    newest = max(ts for _, ts in got)
    assert result.timestamp == newest
    assert result.offset == min(o for o, ts in got if ts == newest)


def consume_all_any_type(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record of partition 0 of `topic`."""
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        while True:
            msg = c.poll(10)
            assert msg is not None
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append((msg.offset(), msg.timestamp()[1]))
    finally:
        c.close()
