"""The group and transaction coordinators of a three-broker cluster (issue 16) move with the
leadership of their internal topics' partitions: confluent-kafka's consumer group and
transactional producer carry on after the broker coordinating them is killed with SIGKILL,
and what they had committed survives."""

from __future__ import annotations

import concurrent.futures
import uuid

import pytest
from broker_process import FAST_GROUP_OVERRIDES, BrokerProcess
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from polling import wait_for
from postgres_database import skip_without_postgres, throwaway_database

from broker.coordinator.placement import partition_for

INTERNAL_PARTITIONS = 5
CLUSTER_OVERRIDES = (
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=3000",
    f"offsets.topic.num.partitions={INTERNAL_PARTITIONS}",
    f"transaction.state.log.num.partitions={INTERNAL_PARTITIONS}",
    *FAST_GROUP_OVERRIDES,
)
DEADLINE_S = 60


@pytest.fixture
def cluster(tmp_path):
    """Three brokers sharing a throwaway PostgreSQL database, by node id."""
    skip_without_postgres()
    with throwaway_database("fjord_coordinators") as url:
        brokers = {
            node: BrokerProcess(
                tmp_path / f"broker-{node}",
                f"node.id={node}",
                f"metadata.store.url={url}",
                *CLUSTER_OVERRIDES,
            )
            for node in range(3)
        }
        try:
            for b in brokers.values():
                b.spawn()
            for b in brokers.values():
                b.wait_started()
            for b in brokers.values():
                wait_for(
                    lambda b=b: knows_the_cluster(b), DEADLINE_S, "every broker to know the cluster"
                )
            yield brokers
        finally:
            for node, b in brokers.items():
                if b.proc is not None and b.proc.poll() is None:
                    b.proc.kill()
                    b.proc.wait()
                print(f"--- broker {node}\n" + "".join(b.output[-80:]))


def knows_the_cluster(broker: BrokerProcess) -> bool:
    """Whether the broker's Metadata names all three brokers and the controller: an admin
    client told of no controller waits for one until its next metadata refresh."""
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    return len(metadata.brokers) == 3 and metadata.controller_id >= 0


def bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers.values() if b.proc.poll() is None)


def create_topic(brokers, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic(name, 3, 3)])[name].result(DEADLINE_S)
    wait_for(
        lambda: all(
            len(p.isrs) == 3 for p in admin.list_topics(name).topics[name].partitions.values()
        ),
        DEADLINE_S,
        f"{name}'s replicas in sync",
    )


def coordinator_of(brokers, internal_topic: str, key: str) -> int:
    """The leader of the key's partition of the internal topic: its coordinator."""
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    partitions = admin.list_topics(internal_topic, timeout=10).topics[internal_topic].partitions
    return partitions[partition_for(key, INTERNAL_PARTITIONS)].leader


def test_a_group_and_its_offsets_survive_their_coordinator(cluster):
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", "billing"
    create_topic(cluster, topic)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    for i in range(30):
        producer.produce(topic, f"{i}".encode(), partition=i % 3)
    assert producer.flush(DEADLINE_S) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    consumer.subscribe([topic])
    seen: set[bytes] = set()

    def consume_until(count: int):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.add(message.value())
        return len(seen) >= count

    try:
        wait_for(lambda: consume_until(15), DEADLINE_S, "half of the records")
        before = {tp.partition: tp.offset for tp in consumer.commit(asynchronous=False)}

        coordinator = coordinator_of(cluster, "__consumer_offsets", group)
        cluster[coordinator].kill()

        def committed_offsets():
            wanted = ConsumerGroupTopicPartitions(
                group, [TopicPartition(topic, p) for p in range(3)]
            )
            # A new client each time: librdkafka caches the coordinator it found, and one
            # that found the dead broker would keep asking it.
            admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
            try:
                (listed,) = admin.list_consumer_group_offsets([wanted]).values()
                return {tp.partition: tp.offset for tp in listed.result(10).topic_partitions}
            except (KafkaException, concurrent.futures.TimeoutError):
                # The coordinator is moving: the client may still be asking the dead one.
                return None

        after = wait_for(
            committed_offsets, DEADLINE_S, "the committed offsets from the new coordinator"
        )
        assert {p: after[p] for p in before} == before

        # The group carries on with its new coordinator: the rest is read and committed.
        wait_for(lambda: consume_until(30), DEADLINE_S, "the other half of the records")

        def commit_everything():
            ends = [TopicPartition(topic, p, 10) for p in range(3)]
            try:
                return consumer.commit(offsets=ends, asynchronous=False)
            except KafkaException:
                return None  # until the new coordinator has the group

        wait_for(commit_everything, DEADLINE_S, "a commit to the new coordinator")
        assert committed_offsets() == dict.fromkeys(range(3), 10)
        assert coordinator_of(cluster, "__consumer_offsets", group) != coordinator
    finally:
        consumer.close()


def test_a_transactional_id_recovers_on_a_new_coordinator(cluster):
    topic, transactional_id = f"ledger-{uuid.uuid4().hex[:8]}", "ledger-writer"
    create_topic(cluster, topic)

    def transactional_producer() -> Producer:
        producer = Producer(
            {"bootstrap.servers": bootstrap(cluster), "transactional.id": transactional_id}
        )
        producer.init_transactions(DEADLINE_S)
        return producer

    first = transactional_producer()
    for n in range(2):
        first.begin_transaction()
        for i in range(10):
            first.produce(topic, f"committed-{n}-{i}".encode(), partition=i % 3)
        first.commit_transaction(DEADLINE_S)
    first.begin_transaction()
    for i in range(10):
        first.produce(topic, f"aborted-{i}".encode(), partition=i % 3)
    assert first.flush(DEADLINE_S) == 0

    coordinator = coordinator_of(cluster, "__transaction_state", transactional_id)
    cluster[coordinator].kill()

    # The new coordinator loads the open transaction; a new instance fences the old one and
    # its transaction is aborted.
    second = transactional_producer()
    second.begin_transaction()
    for i in range(10):
        second.produce(topic, f"after-{i}".encode(), partition=i % 3)
    second.commit_transaction(DEADLINE_S)
    with pytest.raises(KafkaException):  # fenced
        first.commit_transaction(10)

    reader = Consumer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    reader.assign([TopicPartition(topic, p, 0) for p in range(3)])
    expected = {f"committed-{n}-{i}" for n in range(2) for i in range(10)}
    expected |= {f"after-{i}" for i in range(10)}
    values: list[str] = []

    def read_everything_committed():
        message = reader.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
        return expected <= set(values)

    try:
        # The aborted records came before the last transaction's in every partition: a
        # read_committed consumer would have been given them by now.
        wait_for(read_everything_committed, DEADLINE_S, "the committed records")
    finally:
        reader.close()
    assert sorted(values) == sorted(expected)
