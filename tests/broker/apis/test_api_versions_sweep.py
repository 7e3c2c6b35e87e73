"""Every API at every version Fjord advertises answers a well-formed request with a response
that decodes at that version and carries no error."""

from __future__ import annotations

import pytest
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode

from broker.apis import (
    acls,
    classic_groups,
    consumer_groups,
    sasl,
    scram_credentials,
    transactions,
)
from broker.apis.registry import API_SPECS
from broker.protocol import legacy
from broker.records.batch import build_batch
from broker.records.legacy import build_message_set

TOPIC = "sweep"


def _topic_req(key, v, cls, **kw):
    return req(key, v, cls, name=TOPIC, topic=TOPIC, **kw)


def produce(v, topic_id):
    if v < 3:  # magic 0/1 message sets, up-converted by the broker
        messages = build_message_set([(b"k", b"v", 1_700_000_000_000)], magic=1 if v == 2 else 0)
        part = legacy.ProducePartition(0, messages)
        return legacy.ProduceRequest.at(v)(
            acks=-1, timeout_ms=5000, topic_data=(legacy.ProduceTopic(TOPIC, (part,)),)
        )
    batch = build_batch([(b"k", b"v", [], 1_700_000_000_000)])
    part = req(0, v, "PartitionProduceData", index=0, records=batch)
    return req(
        0,
        v,
        "ProduceRequest",
        acks=-1,
        timeout=ms(5000),
        transactional_id=None,
        topic_data=(  # v13 names the topic by id
            _topic_req(0, v, "TopicProduceData", topic_id=topic_id, partition_data=(part,)),
        ),
    )


def fetch(v, topic_id):
    if v < 4:  # answered with down-converted magic 0/1 message sets
        part = legacy.FetchPartition(0, 0, 1 << 20)
        return legacy.FetchRequest.at(v)(
            replica_id=-1, max_wait_ms=0, min_bytes=0, topics=(legacy.FetchTopic(TOPIC, (part,)),)
        )
    part = req(
        1,
        v,
        "FetchPartition",
        partition=0,
        fetch_offset=0,
        partition_max_bytes=1 << 20,
        current_leader_epoch=-1,
        log_start_offset=-1,
        last_fetched_epoch=-1,
    )
    topic = req(1, v, "FetchTopic", topic=TOPIC, topic_id=topic_id, partitions=(part,))
    return req(
        1,
        v,
        "FetchRequest",
        replica_id=-1,
        max_wait=ms(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets(v, topic_id):
    if v == 0:
        part = legacy.ListOffsetsPartition(0, -2, 1)
        return legacy.ListOffsetsRequest.at(0)(
            replica_id=-1, topics=(legacy.ListOffsetsTopic(TOPIC, (part,)),)
        )
    part = req(
        2, v, "ListOffsetsPartition", partition_index=0, timestamp=-2, current_leader_epoch=-1
    )
    return req(
        2,
        v,
        "ListOffsetsRequest",
        replica_id=-1,
        isolation_level=0,
        topics=(_topic_req(2, v, "ListOffsetsTopic", partitions=(part,)),),
        timeout=ms(5000),
    )


def metadata(v, topic_id):
    return req(
        3,
        v,
        "MetadataRequest",
        topics=(req(3, v, "MetadataRequestTopic", name=TOPIC, topic_id=None),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def api_versions(v, topic_id):
    return req(
        18, v, "ApiVersionsRequest", client_software_name="sweep", client_software_version="1"
    )


def create_topics(v, topic_id):
    topic = req(
        19,
        v,
        "CreatableTopic",
        name=f"created-v{v}",
        num_partitions=2,
        replication_factor=1,
        assignments=(),
        configs=(),
    )
    return req(19, v, "CreateTopicsRequest", topics=(topic,), timeout=ms(5000), validate_only=False)


def delete_topics(v, topic_id):
    if v < 6:
        return req(20, v, "DeleteTopicsRequest", topic_names=("no-such-topic",), timeout=ms(5000))
    return req(
        20,
        v,
        "DeleteTopicsRequest",
        timeout=ms(5000),
        topics=(req(20, v, "DeleteTopicState", name="no-such-topic", topic_id=None),),
    )


def delete_records(v, topic_id):
    part = req(21, v, "DeleteRecordsPartition", partition_index=0, offset=0)
    return req(
        21,
        v,
        "DeleteRecordsRequest",
        timeout=ms(5000),
        topics=(req(21, v, "DeleteRecordsTopic", name=TOPIC, partitions=(part,)),),
    )


def init_producer_id(v, topic_id):
    return req(22, v, "InitProducerIdRequest", transactional_id=None, transaction_timeout=ms(0))


def offset_for_leader_epoch(v, topic_id):
    part = req(
        23, v, "OffsetForLeaderPartition", partition=0, current_leader_epoch=-1, leader_epoch=0
    )
    return req(
        23,
        v,
        "OffsetForLeaderEpochRequest",
        replica_id=-1,
        topics=(req(23, v, "OffsetForLeaderTopic", topic=TOPIC, partitions=(part,)),),
    )


def describe_configs(v, topic_id):
    res = req(
        32,
        v,
        "DescribeConfigsResource",
        resource_type=2,
        resource_name=TOPIC,
        configuration_keys=None,
    )
    return req(
        32,
        v,
        "DescribeConfigsRequest",
        resources=(res,),
        include_synonyms=True,
        include_documentation=True,
    )


def alter_configs(v, topic_id):
    cfg = req(33, v, "AlterableConfig", name="retention.ms", value="86400000")
    res = req(33, v, "AlterConfigsResource", resource_type=2, resource_name=TOPIC, configs=(cfg,))
    return req(33, v, "AlterConfigsRequest", resources=(res,), validate_only=True)


def describe_log_dirs(v, topic_id):
    topic = req(35, v, "DescribableLogDirTopic", topic=TOPIC, partitions=(0,))
    return req(35, v, "DescribeLogDirsRequest", topics=(topic,))


def create_partitions(v, topic_id):
    topic = req(37, v, "CreatePartitionsTopic", name=TOPIC, count=2 + v, assignments=None)
    return req(
        37, v, "CreatePartitionsRequest", topics=(topic,), timeout=ms(5000), validate_only=True
    )


def incremental_alter_configs(v, topic_id):
    cfg = req(44, v, "AlterableConfig", name="retention.ms", config_operation=0, value="1000")
    res = req(44, v, "AlterConfigsResource", resource_type=2, resource_name=TOPIC, configs=(cfg,))
    return req(44, v, "IncrementalAlterConfigsRequest", resources=(res,), validate_only=True)


def elect_leaders(v, topic_id):
    topic = req(43, v, "TopicPartitions", topic=TOPIC, partitions=(0,))
    return req(
        43, v, "ElectLeadersRequest", election_type=0, topic_partitions=(topic,), timeout=ms(5000)
    )


def alter_partition_reassignments(v, topic_id):
    # Cancelling a reassignment: none is in progress on one broker.
    part = req(45, v, "ReassignablePartition", partition_index=0, replicas=None)
    topic = req(45, v, "ReassignableTopic", name=TOPIC, partitions=(part,))
    return req(45, v, "AlterPartitionReassignmentsRequest", topics=(topic,), timeout=ms(5000))


def list_partition_reassignments(v, topic_id):
    topic = req(46, v, "ListPartitionReassignmentsTopics", name=TOPIC, partition_indexes=(0,))
    return req(46, v, "ListPartitionReassignmentsRequest", topics=(topic,), timeout=ms(5000))


def describe_topic_partitions(v, topic_id):
    topic = req(75, v, "TopicRequest", name=TOPIC)
    return req(
        75, v, "DescribeTopicPartitionsRequest", topics=(topic,), response_partition_limit=10
    )


def describe_cluster(v, topic_id):
    return req(
        60,
        v,
        "DescribeClusterRequest",
        include_cluster_authorized_operations=False,
        endpoint_type=1,
        include_fenced_brokers=False,
    )


def find_coordinator(v, topic_id):
    return req(10, v, "FindCoordinatorRequest", key="g", key_type=0, coordinator_keys=("g",))


def offset_commit(v, topic_id):
    part = req(
        8,
        v,
        "OffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=3,
        committed_leader_epoch=-1,
        committed_metadata="m",
    )
    return req(
        8,
        v,
        "OffsetCommitRequest",
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time=ms(-1),
        topics=(
            req(
                8, v, "OffsetCommitRequestTopic", name=TOPIC, topic_id=topic_id, partitions=(part,)
            ),
        ),
    )


def offset_fetch(v, topic_id):
    if v < 8:
        topic = req(9, v, "OffsetFetchRequestTopic", name=TOPIC, partition_indexes=(0,))
        return req(9, v, "OffsetFetchRequest", group_id="g", topics=(topic,), require_stable=False)
    topic = req(
        9, v, "OffsetFetchRequestTopics", name=TOPIC, topic_id=topic_id, partition_indexes=(0,)
    )
    group = req(
        9,
        v,
        "OffsetFetchRequestGroup",
        group_id="g",
        member_id=None,
        member_epoch=-1,
        topics=(topic,),
    )
    return req(9, v, "OffsetFetchRequest", groups=(group,), require_stable=False)


def offset_delete(v, topic_id):
    part = req(47, v, "OffsetDeleteRequestPartition", partition_index=0)
    return req(
        47,
        v,
        "OffsetDeleteRequest",
        group_id="no-such-group",
        topics=(req(47, v, "OffsetDeleteRequestTopic", name=TOPIC, partitions=(part,)),),
    )


def list_groups(v, topic_id):
    return req(16, v, "ListGroupsRequest", states_filter=(), types_filter=())


def delete_groups(v, topic_id):
    return req(42, v, "DeleteGroupsRequest", groups_names=("no-such-group",))


def update_features(v, topic_id):
    """transaction.version to its current level: a no-op update (v0 has no upgrade_type)."""
    update = req(
        57,
        v,
        "FeatureUpdateKey",
        feature="transaction.version",
        max_version_level=2,
        allow_downgrade=False,
        upgrade_type=1,
    )
    return req(57, v, "UpdateFeaturesRequest", timeout=ms(60000), feature_updates=(update,))


def describe_client_quotas(v, topic_id):
    return req(48, v, "DescribeClientQuotasRequest", components=(), strict=False)


def alter_client_quotas(v, topic_id):
    """Removing a quota nobody has: a valid request that changes nothing."""
    entity = req(49, v, "EntityData", entity_type="client-id", entity_name="sweep")
    op = req(49, v, "OpData", key="producer_byte_rate", value=0.0, remove=True)
    entry = req(49, v, "EntryData", entity=(entity,), ops=(op,))
    return req(49, v, "AlterClientQuotasRequest", entries=(entry,), validate_only=False)


FACTORIES = {
    0: produce,
    1: fetch,
    2: list_offsets,
    3: metadata,
    18: api_versions,
    19: create_topics,
    20: delete_topics,
    21: delete_records,
    22: init_producer_id,
    23: offset_for_leader_epoch,
    32: describe_configs,
    33: alter_configs,
    35: describe_log_dirs,
    37: create_partitions,
    43: elect_leaders,
    44: incremental_alter_configs,
    45: alter_partition_reassignments,
    46: list_partition_reassignments,
    75: describe_topic_partitions,
    57: update_features,
    60: describe_cluster,
    10: find_coordinator,
    8: offset_commit,
    9: offset_fetch,
    47: offset_delete,
    16: list_groups,
    42: delete_groups,
    48: describe_client_quotas,
    49: alter_client_quotas,
}
EXPECTED_ERRORS = {
    43: ErrorCode.election_not_needed,
    45: ErrorCode.no_reassignment_in_progress,
    20: ErrorCode.unknown_topic_or_partition,
    47: ErrorCode.group_id_not_found,
    42: ErrorCode.group_id_not_found,
}
# The group protocols' and the transactions' APIs have their own version sweeps beside their
# other API tests (test_transactions_api.py for the latter), and so do the ACL APIs
# (test_acls_api.py: they need an authorizer), and the SASL ones (test_sasl_api.py: they need a
# SASL listener) and SCRAM credential ones (test_scram_credentials_api.py).
SWEPT_ELSEWHERE = {
    s.key
    for s in (
        *classic_groups.SPECS,
        *consumer_groups.SPECS,
        *transactions.SPECS,
        *acls.SPECS,
        *sasl.SPECS,
        *scram_credentials.SPECS,
    )
}

CASES = [
    (key, v)
    for key, spec in sorted(API_SPECS.items())
    if key not in SWEPT_ELSEWHERE
    for v in range(spec.min_version, spec.max_version + 1)
]


def test_every_advertised_api_has_a_sweep_case():
    assert set(FACTORIES) == set(API_SPECS) - SWEPT_ELSEWHERE


def _errors(entity) -> list[ErrorCode]:
    """Every error code anywhere in a response entity."""
    found = []
    if isinstance(entity, ErrorCode):
        return [entity]
    if isinstance(entity, tuple):
        for item in entity:
            found += _errors(item)
    elif hasattr(entity, "__dataclass_fields__"):
        for name in entity.__dataclass_fields__:
            found += _errors(getattr(entity, name))
    return found


@pytest.mark.parametrize(
    ("api_key", "version"), CASES, ids=[f"{API_SPECS[k].name}-v{v}" for k, v in CASES]
)
async def test_advertised_version_round_trips(broker, broker_client, api_key, version):
    topic = await broker.create_topic(TOPIC, 1, {})
    response = await broker_client.send(FACTORIES[api_key](version, topic.topic_id))
    assert type(response).__version__ == version
    errors = [e for e in _errors(response) if e != ErrorCode.none]
    assert errors in ([], [EXPECTED_ERRORS.get(api_key)]), errors
