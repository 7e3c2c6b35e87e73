"""The leader's side of its followers' fetches: what a follower's fetch proves about the
follower's log, and what it does not."""

from __future__ import annotations

import dataclasses
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from harness import wait_for
from kafka_requests import fetch_request
from kio.schema.errors import ErrorCode

# Broker 2 is paused during the test, for far less than these: neither the controller nor the
# leader may take it out of the ISR meanwhile, or the HW would move for that reason.
OVERRIDES = (
    "broker.session.timeout.ms=120000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=120000",
)


def high_watermark(cluster, topic: str) -> int:
    response = cluster.ask(1, fetch_request(topic=topic, v=12), timeout=30)
    return response.responses[0].partitions[0].high_watermark


def test_a_fetch_past_the_leaders_end_does_not_count_as_the_followers_log(make_formed_cluster):
    cluster = make_formed_cluster(2, OVERRIDES, network="loopback")
    cluster.wait_for_brokers()
    topic = f"past-{uuid.uuid4().hex[:8]}"
    created = cluster.admin().create_topics(
        [NewTopic(topic, 1, replica_assignment=[[1, 2]])], operation_timeout=30
    )
    created[topic].result(timeout=60)
    cluster.wait_for_leaders(topic, min_isr=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
    producer.produce(topic, b"both have it")
    assert producer.flush(30) == 0
    wait_for(lambda: high_watermark(cluster, topic) == 1, 30, "the follower to have record 0")

    # The follower stops fetching; the leader takes a record only it has.
    cluster.pause(2)
    producer.produce(topic, b"only the leader has it")
    assert producer.flush(30) == 0
    assert high_watermark(cluster, topic) == 1

    # A fetch as broker 2 from beyond the leader's log end is refused, and proves nothing:
    # counting its offset as broker 2's log end would commit record 1 that broker 2 lacks.
    claim = fetch_request(topic=topic, offset=5, v=12)
    claim = dataclasses.replace(claim, replica_id=2)
    answer = cluster.ask(1, claim, timeout=30).responses[0].partitions[0]
    assert answer.error_code == ErrorCode.offset_out_of_range
    assert answer.high_watermark == 1
    assert high_watermark(cluster, topic) == 1
    cluster.resume(2)
    wait_for(lambda: high_watermark(cluster, topic) == 2, 30, "the follower to catch up")
