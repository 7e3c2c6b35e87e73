"""Fjord's asyncio AdminClient and confluent-kafka's AdminClient against one real broker
process: what one creates or changes, the other sees."""

from __future__ import annotations

import pytest
from compat_support import topic_name
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ConfigResource
from confluent_kafka.admin import NewTopic as ConfluentNewTopic
from confluent_kafka.admin import ResourceType as ConfluentResourceType

from broker.client import AdminClient
from broker.client.errors import KafkaAdminError
from broker.client.models import AlterConfigOp, ConfigResourceType, NewTopic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def confluent(broker_process) -> ConfluentAdmin:
    return ConfluentAdmin({"bootstrap.servers": broker_process.bootstrap})


@pytest.fixture
async def fjord(broker_process):
    async with AdminClient(broker_process.bootstrap) as admin:
        yield admin


async def test_topics_created_by_either_client_are_visible_to_the_other(confluent, fjord):
    ours, theirs = topic_name("fjord-admin"), topic_name("confluent-admin")
    await fjord.create_topics([NewTopic(ours, 3, 1, {"retention.ms": "3600000"})])
    listed = confluent.list_topics(timeout=30).topics
    assert len(listed[ours].partitions) == 3
    config = confluent.describe_configs([ConfigResource(ConfluentResourceType.TOPIC, ours)])
    (entries,) = [f.result(timeout=30) for f in config.values()]
    assert entries["retention.ms"].value == "3600000"

    futures = confluent.create_topics(
        [ConfluentNewTopic(theirs, num_partitions=2, replication_factor=1)], operation_timeout=30
    )
    futures[theirs].result(timeout=30)
    assert {ours, theirs} <= {t.name for t in await fjord.list_topics()}
    (described,) = await fjord.describe_topics([theirs])
    assert [p.partition for p in described.partitions] == [0, 1]

    with pytest.raises(KafkaAdminError) as e:
        await fjord.create_topics([NewTopic(theirs, 1)])
    assert e.value.name == "TOPIC_ALREADY_EXISTS"

    confluent.delete_topics([ours], operation_timeout=30)[ours].result(timeout=30)
    await fjord.delete_topics([theirs])
    names = {t.name for t in await fjord.list_topics()}
    assert not {ours, theirs} & names
    assert not {ours, theirs} & set(confluent.list_topics(timeout=30).topics)


async def test_offsets_and_configs_altered_by_fjord_are_read_by_confluent(
    broker_process, confluent, fjord
):
    topic, group = topic_name("fjord-offsets"), topic_name("fjord-group")
    await fjord.create_topics([NewTopic(topic, 1)])
    producer = Producer({"bootstrap.servers": broker_process.bootstrap})
    for i in range(5):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(30) == 0
    (partition,) = (await fjord.describe_topics([topic]))[0].partitions
    assert partition.high_watermark == 5

    await fjord.alter_group_offsets(group, {(topic, 0): 2})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    fetched = confluent.list_consumer_group_offsets([request])[group].result(timeout=30)
    assert [(tp.topic, tp.offset) for tp in fetched.topic_partitions] == [(topic, 2)]
    (lag,) = await fjord.group_lag(group)
    assert (lag.committed_offset, lag.lag) == (2, 3)

    await fjord.incremental_alter_configs(
        ConfigResourceType.TOPIC, topic, [AlterConfigOp("segment.ms", "600000")]
    )
    config = confluent.describe_configs([ConfigResource(ConfluentResourceType.TOPIC, topic)])
    (entries,) = [f.result(timeout=30) for f in config.values()]
    assert entries["segment.ms"].value == "600000"

    confluent.delete_consumer_groups([group])[group].result(timeout=30)
    with pytest.raises(KafkaAdminError) as e:
        await fjord.describe_group(group)
    assert e.value.name == "GROUP_ID_NOT_FOUND"
    with pytest.raises(KafkaException):
        confluent.delete_consumer_groups([group])[group].result(timeout=30)
