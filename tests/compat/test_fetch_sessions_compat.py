"""Incremental fetch sessions (KIP-227) with a real client: kafka-python (sessions on, its
default; Fetch v12) reads a 200-partition topic end to end, while the broker's metrics show
one session caching every partition and idle fetches that no longer list them."""

from __future__ import annotations

import re
import urllib.request

import pytest
from broker_process import free_port
from compat_support import topic_name, wait_until
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 200


def metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    return {
        m["name"]: float(m["value"])
        for m in re.finditer(r"^(?P<name>[a-z_]+(?:\{[^}]*\})?) (?P<value>\S+)$", body, re.M)
    }


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, value=value, partition=p) for p, value in records]
        producer.flush(30)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)


def test_kafka_python_consumes_200_partitions_through_an_incremental_session(
    make_broker_process,
):
    metrics_url = f"http://127.0.0.1:{free_port()}/metrics"
    broker = make_broker_process(f"metrics.listener={metrics_url}").start()
    bootstrap = broker.bootstrap
    topic = topic_name("kp-sessions")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    first = [(p, b"%d-%d" % (p, i)) for i in range(3) for p in range(PARTITIONS)]
    produce(bootstrap, topic, first)

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        # Small responses: the data arrives over many fetches of one session.
        fetch_max_bytes=8 * 1024,
        max_partition_fetch_bytes=1024,
    )
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}

    def drain(expected: int) -> bool:
        for tp, messages in consumer.poll(timeout_ms=200).items():
            got[tp.partition] += [(m.offset, m.value) for m in messages]
        return sum(map(len, got.values())) >= expected

    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        wait_until(lambda: drain(len(first)), timeout=90, what="the first 600 records")

        # New records on a few partitions reach the consumer through the running session.
        second = [(p, b"%d-late" % p) for p in range(0, PARTITIONS, 10)]
        produce(bootstrap, topic, second)
        wait_until(lambda: drain(len(first) + len(second)), timeout=60, what="the late records")
        for p in range(PARTITIONS):
            want = [b"%d-%d" % (p, i) for i in range(3)] + ([b"%d-late" % p] if p % 10 == 0 else [])
            assert got[p] == list(enumerate(want)), f"partition {p}"

        # Idle: one session holds all 200 partitions (a fetcher only removes partitions while
        # it holds undelivered records for them) and its fetches stop listing them.
        def settled() -> dict[str, float] | None:
            assert consumer.poll(timeout_ms=100) == {}
            m = metrics(metrics_url)
            cached = m.get("fjord_fetch_session_partitions_cached")
            return (
                m
                if m.get("fjord_fetch_sessions_incremental") == 1 and cached == PARTITIONS
                else None
            )

        before = wait_until(settled, timeout=30, what="one session with every partition")
        for _ in range(5):
            assert consumer.poll(timeout_ms=300) == {}
        after = metrics(metrics_url)
        fetches = (
            after['fjord_requests_total{api="Fetch"}'] - before['fjord_requests_total{api="Fetch"}']
        )
        request_bytes = (
            after['fjord_request_bytes_total{api="Fetch"}']
            - before['fjord_request_bytes_total{api="Fetch"}']
        )
        response_bytes = (
            after['fjord_response_bytes_total{api="Fetch"}']
            - before['fjord_response_bytes_total{api="Fetch"}']
        )
        assert fetches >= 1
        # A full fetch of 200 partitions is kilobytes each way; incremental ones a few dozen.
        assert request_bytes / fetches < 200 and response_bytes / fetches < 100
        assert after["fjord_fetch_session_evictions_total"] == 0
    finally:
        consumer.close()
    assert broker.stop() == 0, "".join(broker.output)
