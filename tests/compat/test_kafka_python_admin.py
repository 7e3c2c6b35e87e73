"""kafka-python KafkaAdminClient against a real broker process: configs, partitions, deletion,
Kafka's errors for invalid requests, DeleteRecords, the cluster description and its log dirs,
leader elections, partition reassignments and paged topic descriptions (DescribeTopicPartitions)."""

from __future__ import annotations

import kafka.errors as Errors
import pytest
from compat_support import topic_name
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    UpdateFeatureType,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def admin(broker_process):
    client = KafkaAdminClient(bootstrap_servers=broker_process.bootstrap)
    yield client
    client.close()


def create(admin, name: str, partitions: int = 1, replication: int = 1, **configs):
    return admin.create_topics(
        {
            name: {
                "num_partitions": partitions,
                "replication_factor": replication,
                "configs": configs,
            }
        }
    )


def topic_configs(admin, name: str) -> dict[str, dict]:
    result = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all"
    )
    return result["topic"][name]


def partition_count(admin, name: str) -> int | None:
    for t in admin.describe_topics():  # all topics: naming one could auto-create it
        if t["name"] == name:
            return len(t["partitions"])
    return None


def produce_ten(broker_process, topic: str) -> None:
    """Ten records to partition 0, acknowledged by the broker."""
    producer = KafkaProducer(
        bootstrap_servers=broker_process.bootstrap, acks="all", enable_idempotence=False
    )
    for i in range(10):
        producer.send(topic, b"v%d" % i, partition=0)
    producer.flush(30)
    producer.close()


def test_describe_configs(admin):
    topic = topic_name("kpa-describe")
    create(admin, topic, **{"retention.ms": "3600000"})
    configs = topic_configs(admin, topic)
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["value"] == "1073741824"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    assert set(modified["topic"][topic]) == {"retention.ms"}


def test_create_topics_response_carries_the_configs(admin):
    topic = topic_name("kpa-createcfg")
    result = create(admin, topic, partitions=2, **{"retention.ms": "3600000"})
    [t] = result["topics"]
    assert t["name"] == topic and t["error_code"] == 0
    assert t["num_partitions"] == 2 and t["replication_factor"] == 1
    assert t["configs"]["retention.ms"]["value"] == "3600000"


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "legacy"])
def test_alter_configs(admin, incremental):
    topic = topic_name("kpa-alter")
    create(admin, topic, **{"retention.ms": "3600000"})
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.bytes": "5000000"})],
        incremental=incremental,
    )
    assert result == {"topic": {topic: "OK"}}
    configs = topic_configs(admin, topic)
    assert configs["retention.bytes"]["value"] == "5000000"
    assert configs["retention.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    # The client keeps the other override either way (the legacy path re-sends it).
    assert configs["retention.ms"]["value"] == "3600000"


def test_incremental_delete_restores_the_default(admin):
    topic = topic_name("kpa-reset")
    create(admin, topic, **{"retention.ms": "3600000"})
    admin.alter_configs(
        [
            ConfigResource(
                ConfigResourceType.TOPIC, topic, {"retention.ms": (AlterConfigOp.DELETE, None)}
            )
        ]
    )
    configs = topic_configs(admin, topic)
    assert configs["retention.ms"]["value"] == "604800000"
    assert configs["retention.ms"]["config_source"] == "DEFAULT_CONFIG"


def test_alter_configs_invalid_value(admin):
    topic = topic_name("kpa-badalter")
    create(admin, topic)
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "-5"})]
    )
    assert result["topic"][topic].startswith("[Error 40] InvalidConfigurationError")


def test_create_partitions(admin):
    topic = topic_name("kpa-grow")
    create(admin, topic, partitions=1)
    admin.create_partitions({topic: 4})
    assert partition_count(admin, topic) == 4
    with pytest.raises(Errors.InvalidPartitionsError):
        admin.create_partitions({topic: 4})


def test_delete_topics(admin):
    topic = topic_name("kpa-delete")
    create(admin, topic, partitions=3)
    assert partition_count(admin, topic) == 3
    admin.delete_topics([topic])
    assert partition_count(admin, topic) is None
    assert topic not in admin.list_topics()
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        admin.delete_topics([topic])


def test_create_existing_topic(admin):
    topic = topic_name("kpa-exists")
    create(admin, topic)
    with pytest.raises(Errors.TopicAlreadyExistsError):
        create(admin, topic)


def test_create_topic_invalid_config(admin):
    topic = topic_name("kpa-badcfg")
    with pytest.raises(Errors.InvalidConfigurationError):
        create(admin, topic, **{"cleanup.policy": "shred"})
    assert partition_count(admin, topic) is None


def test_create_topic_replication_factor_three(admin):
    topic = topic_name("kpa-rf3")
    with pytest.raises(Errors.InvalidReplicationFactorError):
        create(admin, topic, replication=3)
    assert partition_count(admin, topic) is None


def test_create_topic_zero_partitions(admin):
    with pytest.raises(Errors.InvalidPartitionsError):
        create(admin, topic_name("kpa-zero"), partitions=0)


def test_create_topic_with_broker_defaults(admin):
    """num_partitions and replication_factor -1 (KIP-464): the broker's defaults apply."""
    topic = topic_name("kpa-defaults")
    result = admin.create_topics([topic])
    [t] = result["topics"]
    assert t["error_code"] == 0 and t["num_partitions"] == 1 and t["replication_factor"] == 1
    assert partition_count(admin, topic) == 1


def test_delete_records(admin, broker_process):
    topic = topic_name("kpa-delrec")
    create(admin, topic)
    produce_ten(broker_process, topic)
    tp = TopicPartition(topic, 0)
    result = admin.delete_records({tp: 4})
    assert result[tp]["low_watermark"] == 4
    consumer = KafkaConsumer(bootstrap_servers=broker_process.bootstrap, group_id=None)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 4}
        assert consumer.end_offsets([tp]) == {tp: 10}
    finally:
        consumer.close()


def test_describe_cluster(admin, broker_process):
    cluster = admin.describe_cluster()
    assert cluster["cluster_id"]
    [node] = cluster["brokers"]
    assert (node["host"], node["port"]) == ("127.0.0.1", broker_process.port)
    assert cluster["controller_id"] == node["broker_id"]


def test_describe_log_dirs(admin, broker_process):
    topic = topic_name("kpa-logdirs")
    create(admin, topic, partitions=2)
    produce_ten(broker_process, topic)

    [described] = admin.describe_log_dirs({topic: [0, 1]})
    [log_dir] = described["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(broker_process.log_dir.absolute())
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] >= 0
    [t] = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in t["partitions"]}
    on_disk = sum(f.stat().st_size for f in (broker_process.log_dir / f"{topic}-0").glob("*.log"))
    assert t["name"] == topic and sizes == {0: on_disk, 1: 0} and on_disk > 0
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in t["partitions"])

    # Without topics the client names every topic it finds in Metadata.
    [everything] = admin.describe_log_dirs()
    [log_dir] = everything["log_dirs"]
    assert topic in {t["name"] for t in log_dir["topics"]}


def test_broker_configs(admin):
    result = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
    )
    configs = result["broker"]["1"]
    assert configs["num.partitions"]["value"] == "1"
    assert configs["log.retention.ms"]["value"] == "604800000"


@pytest.mark.parametrize("election_type", [0, 1])
def test_elect_leaders_needs_none(admin, election_type):
    topic = topic_name("elect")
    create(admin, topic, 2)
    response = admin.elect_leaders(election_type, {topic: [0, 1]})
    codes = {
        (r.topic, p.partition_id): p.error_code
        for r in response.replica_election_results
        for p in r.partition_result
    }
    election_not_needed = Errors.ElectionNotNeededError.errno
    assert codes == {(topic, 0): election_not_needed, (topic, 1): election_not_needed}
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        admin.elect_leaders(election_type, {topic: [7]})


def test_partition_reassignments(admin):
    topic = topic_name("reassign")
    create(admin, topic)
    tp = TopicPartition(topic, 0)
    assert admin.list_partition_reassignments() == {}
    # The assignment the partition has is taken; a broker that does not exist is not.
    assert admin.alter_partition_reassignments({tp: [1]}) == {tp: None}
    refused = admin.alter_partition_reassignments({tp: [1, 2]})
    assert refused == {tp: Errors.InvalidReplicationAssignmentError}
    assert admin.list_partition_reassignments({topic: [0]}) == {}


def test_describe_topic_partitions_pages(admin):
    topic = topic_name("paged")
    create(admin, topic, 3)
    first = admin.describe_topic_partitions([topic], response_partition_limit=2)
    [described] = first["topics"]
    assert (described["name"], described["error_code"]) == (topic, 0)
    assert [p["partition_index"] for p in described["partitions"]] == [0, 1]
    assert first["next_cursor"] == {"topic_name": topic, "partition_index": 2}
    rest = admin.describe_topic_partitions([topic], cursor=first["next_cursor"])
    assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]
    assert rest["next_cursor"] is None


def test_describe_and_update_features(admin):
    """KIP-584 feature flags as a Kafka 4.3 broker shows them (ApiVersions v3+), and
    UpdateFeatures: a validated downgrade changes nothing, a refused level raises."""
    features = admin.describe_features()
    assert features["metadata.version"]["supported"] == (30, 30)
    assert features["metadata.version"]["finalized"] == (30, 30)
    assert features["group.version"]["supported"] == (0, 1)
    assert features["transaction.version"]["supported"] == (0, 2)
    assert features["transaction.version"]["finalized"] == (2, 2)
    epoch = features["metadata.version"]["finalized_epoch"]
    assert epoch is not None and epoch >= 0
    assert admin.update_features(
        {"group.version": (UpdateFeatureType.SAFE_DOWNGRADE, 0)}, validate_only=True
    ) == {"group.version": "OK"}
    assert admin.describe_features()["group.version"]["finalized"] == (1, 1)
    with pytest.raises(Errors.InvalidUpdateVersionError):
        admin.update_features({"transaction.version": 3})
    try:
        assert admin.update_features(
            {"transaction.version": (UpdateFeatureType.SAFE_DOWNGRADE, 1)}
        ) == {"transaction.version": "OK"}
        after = admin.describe_features()
        assert after["transaction.version"]["finalized"] == (1, 1)
        assert after["metadata.version"]["finalized_epoch"] == epoch + 1
    finally:
        # Back to the default whatever failed: the broker is shared with the other tests.
        restored = admin.update_features({"transaction.version": 2})
    assert restored == {"transaction.version": "OK"}
    assert admin.describe_features()["transaction.version"]["finalized"] == (2, 2)
