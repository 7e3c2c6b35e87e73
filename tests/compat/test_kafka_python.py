"""kafka-python against a real broker process: topic creation through KafkaAdminClient, produce
with every codec, read back with manual assignment, offsets by timestamp and watermarks."""

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
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

pytestmark = pytest.mark.timeout(120)


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS, **configs) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": 1, "configs": configs}}
        )
    finally:
        admin.close()


def consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        check_crcs=True,
    )


def produce(
    bootstrap: str, topic: str, records: list[Rec], codec: str, **config
) -> dict[int, list[int]]:
    """Partition -> acknowledged offsets; `config` adds producer settings (an api_version)."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
        max_request_size=1_000_000,
        **config,
    )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                headers=list(r.headers) or None,  # magic 0/1 (old api_versions) carry none
                timestamp_ms=r.timestamp,
            )
            for r in records
        ]
        producer.flush(30)
        offsets: dict[int, list[int]] = {}
        for f in futures:
            md = f.get(timeout=30)
            offsets.setdefault(md.partition, []).append(md.offset)
        return offsets
    finally:
        producer.close(timeout=10)


def consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60
) -> dict[int, list[tuple[int, Rec]]]:
    c = consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while sum(map(len, got.values())) < expected:
            assert time.monotonic() < deadline, f"only {sum(map(len, got.values()))} records"
            for tp, msgs in c.poll(timeout_ms=500).items():
                for m in msgs:
                    assert m.timestamp_type == 0  # CreateTime
                    headers = tuple((k, v) for k, v in m.headers)
                    got[tp.partition].append(
                        (m.offset, Rec(tp.partition, m.key, m.value, headers, m.timestamp))
                    )
        # Nothing beyond what was produced.
        assert c.poll(timeout_ms=200) == {}
        return got
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(broker_process, codec):
    bootstrap = broker_process.bootstrap
    topic = topic_name(f"kp-{codec}")
    create_topic(bootstrap, topic)
    records = make_records()
    assert_acked_in_order(records, produce(bootstrap, topic, records, codec))
    assert_same_records(records, consume_all(bootstrap, topic, PARTITIONS, len(records)))


def test_offsets_for_times_and_watermarks(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("kp-times")
    create_topic(bootstrap, topic)
    records = make_records()
    produce(bootstrap, topic, records, "gzip")
    c = consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        parts = by_partition(records)
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert c.end_offsets(tps) == {tp: len(parts[tp.partition]) for tp in tps}
        for q in time_queries(records):
            tp = TopicPartition(topic, q.partition)
            found = c.offsets_for_times({tp: q.timestamp})[tp]
            if q.offset is None:
                assert found is None, f"{q.what}: {found}"
            else:
                assert found is not None and found.offset == q.offset, f"{q.what}: {found}"
                assert found.timestamp == parts[q.partition][q.offset].timestamp
    finally:
        c.close()


def test_seek_and_read_from_the_middle(broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("kp-seek")
    create_topic(bootstrap, topic, partitions=1)
    records = numbered_records()
    produce(bootstrap, topic, records, "snappy")
    c = consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 13)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 17:
            assert time.monotonic() < deadline
            for msgs in c.poll(timeout_ms=500).values():
                got += [(m.offset, m.value) for m in msgs]
        assert got == [(i, b"v%d" % i) for i in range(13, 30)]
    finally:
        c.close()
