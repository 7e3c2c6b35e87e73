"""One group, both rebalance protocols (KIP-848's online migration), against a broker process:
classic members (confluent-kafka with group.protocol=classic, kafka-python) and
consumer-protocol members (confluent-kafka with group.protocol=consumer) share a topic.

Every consumer is polled from the test's thread, round robin; waiting is polling until a
condition holds (never a sleep), with generous deadlines and no timing assertions.
"""

from __future__ import annotations

import pytest
from compat_support import topic_name, wait_until
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 6
OVERRIDES = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=1000",
    "group.consumer.session.timeout.ms=6000",
    "group.consumer.min.session.timeout.ms=6000",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.heartbeat.interval.ms=500",
)


@pytest.fixture
def bootstrap(make_broker_process) -> str:
    return make_broker_process(*OVERRIDES).start().bootstrap


def create_topic(bootstrap: str) -> str:
    topic = topic_name("mixed")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(timeout=30)
    return topic


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(topic, str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


class Member:
    """One consumer of the group, of any of the three kinds, with what it received."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str) -> None:
        self.kind = kind
        self.received: list[int] = []
        if kind == "kafka-python":
            self.client = KafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=True,
                auto_commit_interval_ms=200,
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
            )
            return
        self.client = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": kind,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
                **(
                    {
                        "session.timeout.ms": 6000,
                        "heartbeat.interval.ms": 500,
                        "partition.assignment.strategy": "range",  # kafka-python's first
                    }
                    if kind == "classic"
                    else {}
                ),
            }
        )
        self.client.subscribe([topic])

    def poll(self) -> None:
        if self.kind == "kafka-python":
            for records in self.client.poll(timeout_ms=50).values():
                self.received += [int(r.value) for r in records]
            return
        msg = self.client.poll(0.05)
        if msg is not None and not msg.error():
            self.received.append(int(msg.value()))

    def assignment(self) -> set[int]:
        if self.kind == "kafka-python":
            return {tp.partition for tp in self.client.assignment()}
        return {tp.partition for tp in self.client.assignment()}

    def close(self) -> None:
        self.client.close()


class Group:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.group_id = topic_name("mixed-group")
        self.members: dict[str, Member] = {}
        self.departed: list[int] = []  # what members that left had received

    def add(self, name: str, kind: str) -> Member:
        self.members[name] = Member(kind, self.bootstrap, self.group_id, self.topic)
        return self.members[name]

    def remove(self, name: str) -> None:
        member = self.members.pop(name)
        member.close()
        self.departed += member.received

    def wait_until(self, predicate, what: str, timeout: float = 90) -> None:
        def poll_and_check():
            for m in self.members.values():
                m.poll()
            return predicate()

        wait_until(poll_and_check, timeout, what)

    def split_evenly(self) -> bool:
        """Every member holds partitions; together they hold each partition exactly once."""
        owned = [p for m in self.members.values() for p in m.assignment()]
        return all(m.assignment() for m in self.members.values()) and sorted(owned) == list(
            range(PARTITIONS)
        )

    def group_type(self) -> str:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        listed = admin.list_consumer_groups().result(timeout=30)
        types = {g.group_id: g.type for g in listed.valid}
        return types[self.group_id].name.lower()

    def received(self) -> list[int]:
        return self.departed + [v for m in self.members.values() for v in m.received]

    def close(self) -> None:
        for m in self.members.values():
            m.close()


def test_classic_and_consumer_protocol_members_share_a_topic(bootstrap):
    topic = create_topic(bootstrap)
    group = Group(bootstrap, topic)
    try:
        group.add("classic", "classic")
        group.add("kafka-python", "kafka-python")
        # A classic group still forming (members not yet joined, so of no protocol type) is
        # not upgraded: the first consumer-protocol heartbeat would get GROUP_ID_NOT_FOUND,
        # fatal to librdkafka, from Fjord as from Kafka.
        group.wait_until(group.split_evenly, "the classic members split the partitions")
        group.add("consumer", "consumer")
        group.wait_until(group.split_evenly, "complete, disjoint assignments over all members")
        assert group.group_type() == "consumer"
        produce(bootstrap, topic, 0, 300)
        group.wait_until(lambda: len(group.received()) >= 300, "every record consumed")
        assert sorted(group.received()) == list(range(300)), "a record lost or consumed twice"
    finally:
        group.close()


def test_a_classic_group_upgrades_and_downgrades_online_and_keeps_consuming(bootstrap):
    topic = create_topic(bootstrap)
    group = Group(bootstrap, topic)
    try:
        group.add("classic", "classic")
        group.add("kafka-python", "kafka-python")
        group.wait_until(group.split_evenly, "the classic members split the partitions")
        assert group.group_type() == "classic"
        produce(bootstrap, topic, 0, 60)
        group.wait_until(lambda: len(set(group.received())) >= 60, "the classic group consumes")

        # Upgrade: a consumer-protocol member joins; everyone keeps consuming.
        group.add("consumer", "consumer")
        group.wait_until(
            lambda: group.group_type() == "consumer" and group.split_evenly(),
            "the upgraded group shares the partitions with the new member",
        )
        produce(bootstrap, topic, 60, 60)
        group.wait_until(lambda: set(range(120)) <= set(group.received()), "all consumed")

        # Downgrade: the consumer-protocol member leaves; the group becomes classic again.
        group.remove("consumer")
        group.wait_until(
            lambda: group.group_type() == "classic" and group.split_evenly(),
            "the downgraded classic group shares the partitions",
        )
        produce(bootstrap, topic, 120, 60)
        group.wait_until(lambda: set(range(180)) <= set(group.received()), "all consumed")
    finally:
        group.close()
