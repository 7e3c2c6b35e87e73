"""confluent-kafka AdminClient against a real broker process: configs, partitions, deletion,
Kafka's error codes for invalid requests, DeleteRecords, DescribeCluster and leader elections."""

from __future__ import annotations

import pytest
from compat_support import topic_name, wait_until
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def admin(broker_process) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker_process.bootstrap})


def create(admin: AdminClient, name: str, partitions: int = 1, replication: int = 1, **configs):
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication, config=configs)],
        operation_timeout=30,
    )
    return futures[name].result(timeout=30)


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    return info.value.args[0]


def describe_topic(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([resource])[resource].result(timeout=30)


def partition_count(admin: AdminClient, name: str) -> int | None:
    # All-topics metadata: asking for the topic by name could auto-create it.
    topic = admin.list_topics(timeout=10).topics.get(name)
    return None if topic is None else len(topic.partitions)


def test_describe_configs_defaults_and_creation_override(admin):
    topic = topic_name("cka-describe")
    create(admin, topic, **{"retention.ms": "3600000"})
    configs = describe_topic(admin, topic)
    retention = configs["retention.ms"]
    assert retention.value == "3600000"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not retention.is_default and not retention.is_read_only
    segment = configs["segment.bytes"]
    assert segment.value == "1073741824"
    assert segment.source == ConfigSource.DEFAULT_CONFIG.value and segment.is_default
    assert configs["cleanup.policy"].value == "delete"
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["message.timestamp.type"].value == "CreateTime"


def test_describe_configs_with_synonyms(admin):
    topic = topic_name("cka-synonyms")
    create(admin, topic, **{"retention.ms": "7200000"})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    synonyms = configs["retention.ms"].synonyms
    assert synonyms["retention.ms"].value == "7200000"
    assert synonyms["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_incremental_alter_configs(admin):
    topic = topic_name("cka-incr")
    create(admin, topic, **{"retention.ms": "3600000"})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    configs = describe_topic(admin, topic)
    assert configs["segment.bytes"].value == "1048576"
    assert configs["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_incremental_alter_configs_invalid_value(admin):
    topic = topic_name("cka-incr-bad")
    create(admin, topic)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    err = error_of(admin.incremental_alter_configs([resource])[resource])
    assert err.code() == KafkaError.INVALID_CONFIG
    assert describe_topic(admin, topic)["retention.ms"].value == "604800000"


def test_legacy_alter_configs_replaces_all_overrides(admin):
    topic = topic_name("cka-alter")
    create(admin, topic, **{"retention.ms": "3600000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "1000000"})
    admin.alter_configs([resource])[resource].result(timeout=30)
    configs = describe_topic(admin, topic)
    assert configs["retention.bytes"].value == "1000000"
    assert configs["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # AlterConfigs (non-incremental) resets every config it does not name.
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_create_partitions_grows_the_topic_and_the_new_partitions_work(admin, broker_process):
    topic = topic_name("cka-grow")
    create(admin, topic, partitions=2)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=30)
    assert partition_count(admin, topic) == 5
    producer = Producer(
        {
            "bootstrap.servers": broker_process.bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    delivered = []
    producer.produce(
        topic,
        b"to-partition-4",
        partition=4,
        on_delivery=lambda err, msg: delivered.append((err, msg.offset())),
    )
    assert producer.flush(30) == 0
    producer.close()
    assert delivered == [(None, 0)]


def test_create_partitions_errors(admin):
    topic = topic_name("cka-grow-bad")
    create(admin, topic, partitions=3)
    err = error_of(admin.create_partitions([NewPartitions(topic, 2)])[topic])
    assert err.code() == KafkaError.INVALID_PARTITIONS
    missing = topic_name("cka-missing")
    err = error_of(admin.create_partitions([NewPartitions(missing, 2)])[missing])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_topics(admin):
    topic = topic_name("cka-delete")
    create(admin, topic, partitions=2)
    assert partition_count(admin, topic) == 2
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
    assert partition_count(admin, topic) is None
    err = error_of(admin.delete_topics([topic], operation_timeout=30)[topic])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_recreate_deleted_topic_is_empty(admin, broker_process):
    topic = topic_name("cka-recreate")
    create(admin, topic)
    producer = Producer(
        {"bootstrap.servers": broker_process.bootstrap, "acks": "all", "enable.idempotence": False}
    )
    producer.produce(topic, b"old", partition=0)
    assert producer.flush(30) == 0
    producer.close()
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
    create(admin, topic)
    c = Consumer(
        {
            "bootstrap.servers": broker_process.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
    finally:
        c.close()


def test_create_existing_topic(admin):
    topic = topic_name("cka-exists")
    create(admin, topic)
    futures = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)
    assert error_of(futures[topic]).code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_create_topic_invalid_config_value(admin):
    topic = topic_name("cka-badcfg")
    futures = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"retention.ms": "forever"})], operation_timeout=30
    )
    assert error_of(futures[topic]).code() == KafkaError.INVALID_CONFIG
    assert partition_count(admin, topic) is None


def test_create_topic_unknown_config(admin):
    topic = topic_name("cka-unknowncfg")
    futures = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"no.such.config": "1"})], operation_timeout=30
    )
    assert error_of(futures[topic]).code() == KafkaError.INVALID_CONFIG
    assert partition_count(admin, topic) is None


def test_create_topic_replication_factor_three(admin):
    topic = topic_name("cka-rf3")
    futures = admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)
    assert error_of(futures[topic]).code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert partition_count(admin, topic) is None


def test_create_topic_invalid_name(admin):
    futures = admin.create_topics([NewTopic("bad/name", 1, 1)], operation_timeout=30)
    assert error_of(futures["bad/name"]).code() == KafkaError.TOPIC_EXCEPTION


def test_create_topic_validate_only(admin):
    topic = topic_name("cka-validate")
    futures = admin.create_topics([NewTopic(topic, 2, 1)], validate_only=True, operation_timeout=30)
    futures[topic].result(timeout=30)
    assert partition_count(admin, topic) is None


def test_delete_records_moves_the_low_watermark(admin, broker_process):
    bootstrap = broker_process.bootstrap
    topic = topic_name("cka-delrec")
    create(admin, topic)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "linger.ms": 5}
    )
    for i in range(20):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    producer.close()

    tp = TopicPartition(topic, 0, 7)
    [(_, future)] = admin.delete_records([tp]).items()
    assert future.result(timeout=30).low_watermark == 7

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (7, 20)
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values = []
        while True:
            msg = c.poll(10)
            assert msg is not None
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                break
            values.append((msg.offset(), msg.value()))
        assert values == [(i, b"v%d" % i) for i in range(7, 20)]
    finally:
        c.close()

    # Beyond the high watermark: OFFSET_OUT_OF_RANGE; to the end (-1): everything.
    [(_, future)] = admin.delete_records([TopicPartition(topic, 0, 21)]).items()
    assert error_of(future).code() == KafkaError.OFFSET_OUT_OF_RANGE
    # Below the current log start offset: no error, the low watermark stays.
    [(_, future)] = admin.delete_records([TopicPartition(topic, 0, 3)]).items()
    assert future.result(timeout=30).low_watermark == 7
    [(_, future)] = admin.delete_records([TopicPartition(topic, 0, -1)]).items()
    assert future.result(timeout=30).low_watermark == 20


def test_describe_cluster(admin, broker_process):
    result = admin.describe_cluster(request_timeout=30).result(timeout=30)
    assert result.cluster_id
    assert len(result.nodes) == 1
    [node] = result.nodes
    assert (node.host, node.port) == ("127.0.0.1", broker_process.port)
    assert result.controller is not None and result.controller.id == node.id
    metadata = admin.list_topics(timeout=10)
    assert metadata.cluster_id == result.cluster_id
    assert list(metadata.brokers) == [node.id]


def test_describe_broker_configs(admin):
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["log.retention.ms"].value == "604800000"
    assert configs["num.partitions"].value == "1"
    assert configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_describe_configs_of_missing_topic(admin):
    resource = ConfigResource(ResourceType.TOPIC, topic_name("cka-nope"))
    err = error_of(admin.describe_configs([resource])[resource])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_metadata_auto_creates_topic_for_producer(broker_process, admin):
    topic = topic_name("cka-auto")
    producer = Producer(
        {"bootstrap.servers": broker_process.bootstrap, "acks": "all", "enable.idempotence": False}
    )
    delivered = []
    producer.produce(topic, b"hello", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    producer.close()
    assert delivered == [None]
    wait_until(lambda: partition_count(admin, topic) == 1, what="auto-created topic")


def test_create_topic_colliding_name(admin):
    """'.' and '_' collide in metric names: Kafka refuses the second spelling."""
    base = topic_name("cka_collide")
    create(admin, base)
    twin = base.replace("_", ".")
    futures = admin.create_topics([NewTopic(twin, 1, 1)], operation_timeout=30)
    assert error_of(futures[twin]).code() == KafkaError.TOPIC_EXCEPTION
    too_long = "x" * 250
    futures = admin.create_topics([NewTopic(too_long, 1, 1)], operation_timeout=30)
    assert error_of(futures[too_long]).code() == KafkaError.TOPIC_EXCEPTION


def test_validate_only_alter_and_create_partitions_change_nothing(admin):
    topic = topic_name("cka-validate-alter")
    create(admin, topic, partitions=1)
    admin.create_partitions([NewPartitions(topic, 3)], validate_only=True)[topic].result(30)
    assert partition_count(admin, topic) == 1
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource], validate_only=True)[resource].result(30)
    assert describe_topic(admin, topic)["retention.ms"].value == "604800000"


def test_dynamic_broker_default_flows_to_topics(make_broker_process):
    """A per-broker dynamic config (IncrementalAlterConfigs on BROKER "1") becomes the value
    of topics that do not override it, and survives a restart; DELETE restores the static
    default. Own broker: this changes broker-wide defaults."""
    broker = make_broker_process().start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = topic_name("cka-dyn")
    create(admin, topic)
    node = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([node])[node].result(timeout=30)
    retention = describe_topic(admin, topic)["retention.ms"]
    assert retention.value == "7200000"
    assert retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    broker_resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([broker_resource])[broker_resource].result(timeout=30)
    assert configs["log.retention.ms"].value == "7200000"
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    assert broker.stop() == 0
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert describe_topic(admin, topic)["retention.ms"].value == "7200000"

    reset = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([reset])[reset].result(timeout=30)
    retention = describe_topic(admin, topic)["retention.ms"]
    assert retention.value == "604800000"
    assert retention.source == ConfigSource.DEFAULT_CONFIG.value
    assert broker.stop() == 0


def test_static_broker_config_cannot_be_altered(admin):
    node = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    err = error_of(admin.incremental_alter_configs([node])[node])
    assert err.code() in (KafkaError.INVALID_CONFIG, KafkaError.INVALID_REQUEST), err


def test_elect_leaders(admin):
    """One broker leads every partition: no election is needed, and an unknown partition is
    refused."""
    topic = topic_name("elect")
    create(admin, topic, 2)
    results = admin.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    ).result(30)
    codes = {tp.partition: error.code() for tp, error in results.items()}
    assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 1: KafkaError.ELECTION_NOT_NEEDED}
    unknown = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 9)]).result(30)
    assert [error.code() for error in unknown.values()] == [KafkaError.UNKNOWN_TOPIC_OR_PART]
