"""The leader's side of its followers' fetches: what a follower's fetch proves about the
follower's log, and what it does not."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
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


@pytest.fixture
def led_by_1(make_formed_cluster):
    """Two brokers, and a new topic of one partition on both, broker 1 its leader."""
    cluster = make_formed_cluster(2, OVERRIDES, network="loopback")
    cluster.wait_for_brokers()
    topic = f"follower-fetch-{uuid.uuid4().hex[:8]}"
    created = cluster.admin().create_topics(
        [NewTopic(topic, 1, replica_assignment=[[1, 2]])], operation_timeout=30
    )
    created[topic].result(timeout=60)
    return cluster, topic


def high_watermark(cluster, topic: str) -> int:
    response = cluster.ask(1, fetch_request(topic=topic, v=12), timeout=30)
    return response.responses[0].partitions[0].high_watermark


def test_a_fetch_past_the_leaders_end_does_not_count_as_the_followers_log(led_by_1):
    cluster, topic = led_by_1
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


def with_leader_epoch(request, epoch: int):
    """`request` (a one-partition Fetch) made with `epoch` as its view of the leader's."""
    [topic] = request.topics
    [part] = topic.partitions
    part = dataclasses.replace(part, current_leader_epoch=epoch)
    return dataclasses.replace(request, topics=(dataclasses.replace(topic, partitions=(part,)),))


def test_a_replica_checks_the_askers_leader_epoch_before_whether_it_leads(led_by_1):
    """Kafka's order (Partition.getLocalLog): a fetch from a newer leader epoch than a replica
    has heard of answers UNKNOWN_LEADER_EPOCH even where it does not lead (yet: a follower
    that learnt of the election first retries in a moment, where NOT_LEADER_OR_FOLLOWER
    would have it back off a second); an older one FENCED_LEADER_EPOCH."""
    cluster, topic = led_by_1
    epoch = cluster.wait_for_leaders(topic, min_isr=2)[0].leader_epoch
    fetch = fetch_request(topic=topic, v=12)

    def answer(node: int, asked_epoch: int) -> ErrorCode:
        response = cluster.ask(node, with_leader_epoch(fetch, asked_epoch), timeout=30)
        return response.responses[0].partitions[0].error_code

    assert answer(2, epoch + 1) == ErrorCode.unknown_leader_epoch
    assert answer(2, epoch) == answer(2, -1) == ErrorCode.not_leader_or_follower
    assert answer(1, epoch + 1) == ErrorCode.unknown_leader_epoch
    assert answer(1, epoch) == answer(1, -1) == ErrorCode.none
    if epoch > 0:
        assert answer(2, epoch - 1) == answer(1, epoch - 1) == ErrorCode.fenced_leader_epoch
