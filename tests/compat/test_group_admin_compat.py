"""Group administration through confluent-kafka's AdminClient: GROUP configs (resource type 32 on
the wire), listing, describing and deleting groups, altering and listing their offsets."""

from __future__ import annotations

import pytest
from compat_support import topic_name, wait_until
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.timeout(120)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def test_group_configs_round_trip_through_the_admin_client(broker_process):
    a = admin(broker_process.bootstrap)
    group = topic_name("cfg-group")
    entry = ConfigEntry(
        "consumer.heartbeat.interval.ms", "6000", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for future in a.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    [described] = a.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    configs = described.result(timeout=30)
    assert configs["consumer.heartbeat.interval.ms"].value == "6000"
    assert configs["consumer.session.timeout.ms"].value == "45000"  # the broker's default

    too_long = ConfigEntry(
        "consumer.session.timeout.ms", "999999", incremental_operation=AlterConfigOpType.SET
    )
    bad = ConfigResource(ResourceType.GROUP, group, incremental_configs=[too_long])
    with pytest.raises(Exception, match="INVALID_CONFIG|max.session.timeout"):
        for future in a.incremental_alter_configs([bad]).values():
            future.result(timeout=30)


def test_list_describe_offsets_and_delete_a_group(broker_process):
    bootstrap = broker_process.bootstrap
    a = admin(bootstrap)
    topic, group = topic_name("adm-topic"), topic_name("adm-group")
    for f in a.create_topics([NewTopic(topic, 2)]).values():
        f.result(timeout=30)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "classic",
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    wait_until(
        lambda: consumer.poll(0.2) is None and consumer.assignment(),
        what="the consumer's assignment",
    )

    listed = a.list_consumer_groups().result(timeout=30)
    assert group in {g.group_id for g in listed.valid}
    [described] = a.describe_consumer_groups([group]).values()
    description = described.result(timeout=30)
    assert str(description.state).endswith("STABLE") and len(description.members) == 1
    assigned = description.members[0].assignment.topic_partitions
    assert sorted(tp.partition for tp in assigned) == [0, 1]

    consumer.close()  # leaves the group: now it can be deleted
    wanted = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 17), TopicPartition(topic, 1, 4)]
    )
    for f in a.alter_consumer_group_offsets([wanted]).values():
        f.result(timeout=30)
    [offsets] = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    got = {tp.partition: tp.offset for tp in offsets.result(timeout=30).topic_partitions}
    assert got == {0: 17, 1: 4}

    for f in a.delete_consumer_groups([group]).values():
        f.result(timeout=30)
    listed = a.list_consumer_groups().result(timeout=30)
    assert group not in {g.group_id for g in listed.valid}
