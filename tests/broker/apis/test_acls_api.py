"""Authorization at the protocol level, against an in-process broker with Kafka's
StandardAuthorizer configured: every API refuses a principal without the ACLs Kafka requires,
with Kafka's *_AUTHORIZATION_FAILED code, and serves it once they are granted; CreateAcls,
DescribeAcls and DeleteAcls; ACLs survive a restart.

A PLAINTEXT connection's principal is User:ANONYMOUS: the ACLs name `PRINCIPAL`, so the same
tests can run for an authenticated principal."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import pytest
from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_api_versions_sweep import FACTORIES, TOPIC, _errors
from test_fetch_sessions_api import fetch_request as session_fetch
from test_fetch_sessions_api import partition

from broker.apis.acls import SPECS as ACL_SPECS
from broker.apis.registry import API_SPECS
from broker.config import STANDARD_AUTHORIZER
from broker.records.batch import build_batch
from broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    ResourcePattern,
)
from broker.security.operations import AclOperation, AclPermissionType, PatternType, ResourceType

PRINCIPAL = "User:ANONYMOUS"
Op, R = AclOperation, ResourceType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
AUTHORIZATION_FAILURES = {
    ErrorCode.topic_authorization_failed,
    ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed,
    ErrorCode.transactional_id_authorization_failed,
}
TXN, GROUP = "tx", "g"
EVERYTHING = AclBindingFilter(
    R.ANY, None, PatternType.ANY, None, None, Op.ANY, AclPermissionType.ANY
)


def acl(rtype, name, op, perm=ALLOW, pattern=LITERAL, principal=PRINCIPAL, host="*"):
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm)
    )


def newest(key: int) -> int:
    return API_SPECS[key].max_version


@contextlib.asynccontextmanager
async def secured_broker(log_dir, **overrides):
    async with running_broker(
        log_dir,
        authorizer_class_name=STANDARD_AUTHORIZER,
        group_initial_rebalance_delay_ms="0",
        **overrides,
    ) as running:
        yield running


@pytest.fixture
async def secured(tmp_path):
    async with secured_broker(tmp_path / "kafka-logs") as running:
        yield running


async def reset_acls(broker) -> None:
    await broker.delete_acls([EVERYTHING])


# -- the requests of the table ----------------------------------------------------------------


def sweep(key, v=None):
    return lambda topic_id: FACTORIES[key](newest(key) if v is None else v, topic_id)


def transactional_produce(topic_id):
    v = newest(0)
    batch = build_batch(
        [(None, b"v", [], int(time.time() * 1000))],
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    part = req(0, v, "PartitionProduceData", index=0, records=batch)
    return req(
        0,
        v,
        "ProduceRequest",
        acks=-1,
        timeout=ms(5000),
        transactional_id=TXN,
        topic_data=(
            req(0, v, "TopicProduceData", name=TOPIC, topic_id=topic_id, partition_data=(part,)),
        ),
    )


def auto_created_metadata(topic_id):
    v = newest(3)
    topic = req(3, v, "MetadataRequestTopic", name="auto", topic_id=None)
    return req(
        3,
        v,
        "MetadataRequest",
        topics=(topic,),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )


def init_producer_id(txn):
    def build(topic_id):
        return req(
            22,
            newest(22),
            "InitProducerIdRequest",
            transactional_id=txn,
            transaction_timeout=ms(60000),
        )

    return build


def config_resource(key, resource_type, resource_name, config=None):
    def build(topic_id):
        v = newest(key)
        if key == 32:
            res = req(
                32,
                v,
                "DescribeConfigsResource",
                resource_type=resource_type,
                resource_name=resource_name,
                configuration_keys=None,
            )
            return req(32, v, "DescribeConfigsRequest", resources=(res,), include_synonyms=False)
        name, value = config
        cfg = req(key, v, "AlterableConfig", name=name, config_operation=0, value=value)
        res = req(
            key,
            v,
            "AlterConfigsResource",
            resource_type=resource_type,
            resource_name=resource_name,
            configs=(cfg,),
        )
        request_class = "AlterConfigsRequest" if key == 33 else "IncrementalAlterConfigsRequest"
        return req(key, v, request_class, resources=(res,), validate_only=True)

    return build


def find_coordinator(key_type, key):
    return lambda topic_id: req(
        10, newest(10), "FindCoordinatorRequest", key_type=key_type, coordinator_keys=(key,)
    )


def offset_commit_for(group):
    return lambda topic_id: dataclasses.replace(FACTORIES[8](newest(8), topic_id), group_id=group)


def classic(key, class_name, **fields):
    return lambda topic_id: req(key, newest(key), class_name, group_id=GROUP, **fields)


def join_group(topic_id):
    v = newest(11)
    protocol = req(11, v, "JoinGroupRequestProtocol", name="range", metadata=b"")
    return req(
        11,
        v,
        "JoinGroupRequest",
        group_id=GROUP,
        session_timeout=ms(10000),
        rebalance_timeout=ms(10000),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(protocol,),
        reason=None,
    )


def consumer_heartbeat(topic_id):
    return req(
        68,
        newest(68),
        "ConsumerGroupHeartbeatRequest",
        group_id=GROUP,
        member_id="m-1",
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=ms(30000),
        subscribed_topic_names=(TOPIC,),
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=(),
    )


def add_partitions_to_txn(topic_id):
    v = 3  # the clients' newest: v4+ is the brokers' own form, CLUSTER_ACTION
    return req(
        24,
        v,
        "AddPartitionsToTxnRequest",
        v3_and_below_transactional_id=TXN,
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=(req(24, v, "AddPartitionsToTxnTopic", name=TOPIC, partitions=(0,)),),
    )


def add_offsets_to_txn(topic_id):
    return req(
        25,
        newest(25),
        "AddOffsetsToTxnRequest",
        transactional_id=TXN,
        producer_id=1,
        producer_epoch=0,
        group_id=GROUP,
    )


def end_txn(topic_id):
    return req(
        26,
        newest(26),
        "EndTxnRequest",
        transactional_id=TXN,
        producer_id=1,
        producer_epoch=0,
        committed=True,
    )


def txn_offset_commit(topic_id):
    v = newest(28)
    part = req(
        28,
        v,
        "TxnOffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=0,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    return req(
        28,
        v,
        "TxnOffsetCommitRequest",
        transactional_id=TXN,
        group_id=GROUP,
        producer_id=1,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=(req(28, v, "TxnOffsetCommitRequestTopic", name=TOPIC, partitions=(part,)),),
    )


def write_txn_markers(topic_id):
    v = newest(27)
    marker = req(
        27,
        v,
        "WritableTxnMarker",
        producer_id=1,
        producer_epoch=0,
        transaction_result=False,
        topics=(req(27, v, "WritableTxnMarkerTopic", name=TOPIC, partition_indexes=(0,)),),
        coordinator_epoch=0,
    )
    return req(27, v, "WriteTxnMarkersRequest", markers=(marker,))


def describe_producers(topic_id):
    topic = req(61, 0, "TopicRequest", name=TOPIC, partition_indexes=(0,))
    return req(61, 0, "DescribeProducersRequest", topics=(topic,))


def create_acls(topic_id):
    creation = req(
        30,
        3,
        "AclCreation",
        resource_type=R.TOPIC,
        resource_name="x",
        resource_pattern_type=LITERAL,
        principal="User:x",
        host="*",
        operation=Op.READ,
        permission_type=ALLOW,
    )
    return req(30, 3, "CreateAclsRequest", creations=(creation,))


def acl_filter_fields(**overrides):
    fields = {
        "resource_type_filter": R.ANY,
        "resource_name_filter": None,
        "pattern_type_filter": PatternType.ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": Op.ANY,
        "permission_type": AclPermissionType.ANY,
    }
    return {**fields, **overrides}


def describe_acls(v=3, **overrides):
    return req(29, v, "DescribeAclsRequest", **acl_filter_fields(**overrides))


def delete_acls(*filters, v=3):
    return req(
        31,
        v,
        "DeleteAclsRequest",
        filters=tuple(req(31, v, "DeleteAclsFilter", **acl_filter_fields(**f)) for f in filters),
    )


async def commit_an_offset(broker, conn):
    await broker.create_acls([acl(R.GROUP, GROUP, Op.READ), acl(R.TOPIC, TOPIC, Op.READ)])
    topic_id = broker.image.topic(TOPIC).topic_id  # OffsetCommit v10 names topics by id
    response = await conn.send(offset_commit_for(GROUP)(topic_id))
    assert response.topics[0].partitions[0].error_code == ErrorCode.none
    await reset_acls(broker)


TOPIC_29, GROUP_30, CLUSTER_31, TXN_53 = (
    ErrorCode.topic_authorization_failed,
    ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed,
    ErrorCode.transactional_id_authorization_failed,
)
# (case id, request factory (topic id -> request), [(resource type, name, operation, the code
# answered when that ACL alone is missing)], setup run before the first request)
CASES = [
    # The newest Produce names the topic by id (v13), v12 by name.
    ("Produce", sweep(0), [(R.TOPIC, TOPIC, Op.WRITE, TOPIC_29)], None),
    ("Produce-v12", sweep(0, 12), [(R.TOPIC, TOPIC, Op.WRITE, TOPIC_29)], None),
    ("Produce-v2", sweep(0, 2), [(R.TOPIC, TOPIC, Op.WRITE, TOPIC_29)], None),
    (
        "Produce-transactional",
        transactional_produce,
        [(R.TRANSACTIONAL_ID, TXN, Op.WRITE, TXN_53), (R.TOPIC, TOPIC, Op.WRITE, TOPIC_29)],
        None,
    ),
    ("Fetch", sweep(1), [(R.TOPIC, TOPIC, Op.READ, TOPIC_29)], None),
    ("Fetch-v3", sweep(1, 3), [(R.TOPIC, TOPIC, Op.READ, TOPIC_29)], None),
    ("ListOffsets", sweep(2), [(R.TOPIC, TOPIC, Op.DESCRIBE, TOPIC_29)], None),
    ("ListOffsets-v0", sweep(2, 0), [(R.TOPIC, TOPIC, Op.DESCRIBE, TOPIC_29)], None),
    ("Metadata", sweep(3), [(R.TOPIC, TOPIC, Op.DESCRIBE, TOPIC_29)], None),
    (
        "Metadata-auto-create",
        auto_created_metadata,
        [(R.TOPIC, "auto", Op.DESCRIBE, TOPIC_29), (R.TOPIC, "auto", Op.CREATE, TOPIC_29)],
        None,
    ),
    ("CreateTopics", sweep(19), [(R.TOPIC, "created-v7", Op.CREATE, TOPIC_29)], None),
    ("DeleteTopics", sweep(20), [(R.TOPIC, "no-such-topic", Op.DELETE, TOPIC_29)], None),
    ("DeleteRecords", sweep(21), [(R.TOPIC, TOPIC, Op.DELETE, TOPIC_29)], None),
    (
        "InitProducerId-idempotent",
        init_producer_id(None),
        [(R.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE, CLUSTER_31)],
        None,
    ),
    (
        "InitProducerId-idempotent-by-topic-write",
        init_producer_id(None),
        [(R.TOPIC, "any-topic", Op.WRITE, CLUSTER_31)],
        None,
    ),
    (
        "InitProducerId-transactional",
        init_producer_id(TXN),
        [(R.TRANSACTIONAL_ID, TXN, Op.WRITE, TXN_53)],
        None,
    ),
    ("OffsetForLeaderEpoch", sweep(23), [(R.TOPIC, TOPIC, Op.DESCRIBE, TOPIC_29)], None),
    (
        "DescribeConfigs-topic",
        config_resource(32, 2, TOPIC),
        [(R.TOPIC, TOPIC, Op.DESCRIBE_CONFIGS, TOPIC_29)],
        None,
    ),
    (
        "DescribeConfigs-broker",
        config_resource(32, 4, "1"),
        [(R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE_CONFIGS, CLUSTER_31)],
        None,
    ),
    (
        "DescribeConfigs-group",
        config_resource(32, 32, GROUP),
        [(R.GROUP, GROUP, Op.DESCRIBE_CONFIGS, GROUP_30)],
        None,
    ),
    (
        "AlterConfigs-topic",
        config_resource(33, 2, TOPIC, ("retention.ms", "1000")),
        [(R.TOPIC, TOPIC, Op.ALTER_CONFIGS, TOPIC_29)],
        None,
    ),
    (
        "IncrementalAlterConfigs-broker",
        config_resource(44, 4, "1", ("num.partitions", "2")),
        [(R.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS, CLUSTER_31)],
        None,
    ),
    (
        "IncrementalAlterConfigs-group",
        config_resource(44, 32, GROUP, ("consumer.session.timeout.ms", "45000")),
        [(R.GROUP, GROUP, Op.ALTER_CONFIGS, GROUP_30)],
        None,
    ),
    (
        "DescribeLogDirs",
        sweep(35),
        [(R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE, CLUSTER_31)],
        None,
    ),
    ("CreatePartitions", sweep(37), [(R.TOPIC, TOPIC, Op.ALTER, TOPIC_29)], None),
    ("ElectLeaders", sweep(43), [(R.CLUSTER, CLUSTER_NAME, Op.ALTER, CLUSTER_31)], None),
    ("ElectLeaders-v0", sweep(43, 0), [(R.CLUSTER, CLUSTER_NAME, Op.ALTER, CLUSTER_31)], None),
    (
        "AlterPartitionReassignments",
        sweep(45),
        [(R.CLUSTER, CLUSTER_NAME, Op.ALTER, CLUSTER_31)],
        None,
    ),
    (
        "ListPartitionReassignments",
        sweep(46),
        [(R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE, CLUSTER_31)],
        None,
    ),
    ("UpdateFeatures", sweep(57), [(R.CLUSTER, CLUSTER_NAME, Op.ALTER, CLUSTER_31)], None),
    ("DescribeTopicPartitions", sweep(75), [(R.TOPIC, TOPIC, Op.DESCRIBE, TOPIC_29)], None),
    (
        "FindCoordinator-group",
        find_coordinator(0, GROUP),
        [(R.GROUP, GROUP, Op.DESCRIBE, GROUP_30)],
        None,
    ),
    (
        "FindCoordinator-transaction",
        find_coordinator(1, TXN),
        [(R.TRANSACTIONAL_ID, TXN, Op.DESCRIBE, TXN_53)],
        None,
    ),
    (
        "OffsetCommit",
        offset_commit_for(GROUP),
        [(R.GROUP, GROUP, Op.READ, GROUP_30), (R.TOPIC, TOPIC, Op.READ, TOPIC_29)],
        None,
    ),
    (
        "OffsetFetch",
        sweep(9),
        [(R.GROUP, GROUP, Op.DESCRIBE, GROUP_30), (R.TOPIC, TOPIC, Op.DESCRIBE, TOPIC_29)],
        commit_an_offset,
    ),
    (
        "OffsetFetch-v1",
        sweep(9, 1),
        [(R.GROUP, GROUP, Op.DESCRIBE, GROUP_30), (R.TOPIC, TOPIC, Op.DESCRIBE, TOPIC_29)],
        commit_an_offset,
    ),
    (
        "OffsetDelete",
        lambda topic_id: dataclasses.replace(FACTORIES[47](0, topic_id), group_id=GROUP),
        [(R.GROUP, GROUP, Op.DELETE, GROUP_30), (R.TOPIC, TOPIC, Op.READ, TOPIC_29)],
        commit_an_offset,
    ),
    ("DeleteGroups", sweep(42), [(R.GROUP, "no-such-group", Op.DELETE, GROUP_30)], None),
    ("JoinGroup", join_group, [(R.GROUP, GROUP, Op.READ, GROUP_30)], None),
    (
        "SyncGroup",
        classic(14, "SyncGroupRequest", generation_id=1, member_id="m", assignments=()),
        [(R.GROUP, GROUP, Op.READ, GROUP_30)],
        None,
    ),
    (
        "Heartbeat",
        classic(12, "HeartbeatRequest", generation_id=1, member_id="m", group_instance_id=None),
        [(R.GROUP, GROUP, Op.READ, GROUP_30)],
        None,
    ),
    (
        "LeaveGroup",
        lambda topic_id: req(
            13,
            newest(13),
            "LeaveGroupRequest",
            group_id=GROUP,
            members=(req(13, newest(13), "MemberIdentity", member_id="m", group_instance_id=None),),
        ),
        [(R.GROUP, GROUP, Op.READ, GROUP_30)],
        None,
    ),
    (
        "DescribeGroups",
        lambda topic_id: req(
            15,
            newest(15),
            "DescribeGroupsRequest",
            groups=(GROUP,),
            include_authorized_operations=True,
        ),
        [(R.GROUP, GROUP, Op.DESCRIBE, GROUP_30)],
        None,
    ),
    (
        "ConsumerGroupHeartbeat",
        consumer_heartbeat,
        [(R.GROUP, GROUP, Op.READ, GROUP_30), (R.TOPIC, TOPIC, Op.DESCRIBE, TOPIC_29)],
        None,
    ),
    (
        "ConsumerGroupDescribe",
        lambda topic_id: req(
            69,
            newest(69),
            "ConsumerGroupDescribeRequest",
            group_ids=(GROUP,),
            include_authorized_operations=True,
        ),
        [(R.GROUP, GROUP, Op.DESCRIBE, GROUP_30)],
        None,
    ),
    (
        "AddPartitionsToTxn",
        add_partitions_to_txn,
        [(R.TRANSACTIONAL_ID, TXN, Op.WRITE, TXN_53), (R.TOPIC, TOPIC, Op.WRITE, TOPIC_29)],
        None,
    ),
    (
        "AddOffsetsToTxn",
        add_offsets_to_txn,
        [(R.TRANSACTIONAL_ID, TXN, Op.WRITE, TXN_53), (R.GROUP, GROUP, Op.READ, GROUP_30)],
        None,
    ),
    ("EndTxn", end_txn, [(R.TRANSACTIONAL_ID, TXN, Op.WRITE, TXN_53)], None),
    (
        "TxnOffsetCommit",
        txn_offset_commit,
        [
            (R.TRANSACTIONAL_ID, TXN, Op.WRITE, TXN_53),
            (R.GROUP, GROUP, Op.READ, GROUP_30),
            (R.TOPIC, TOPIC, Op.READ, TOPIC_29),
        ],
        None,
    ),
    (
        "WriteTxnMarkers",
        write_txn_markers,
        [(R.CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION, CLUSTER_31)],
        None,
    ),
    (
        "DescribeTransactions",
        lambda topic_id: req(65, 0, "DescribeTransactionsRequest", transactional_ids=(TXN,)),
        [(R.TRANSACTIONAL_ID, TXN, Op.DESCRIBE, TXN_53)],
        None,
    ),
    ("DescribeProducers", describe_producers, [(R.TOPIC, TOPIC, Op.READ, TOPIC_29)], None),
    (
        "DescribeClientQuotas",
        sweep(48),
        [(R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE_CONFIGS, CLUSTER_31)],
        None,
    ),
    (
        "AlterClientQuotas",
        sweep(49),
        [(R.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS, CLUSTER_31)],
        None,
    ),
    (
        "DescribeUserScramCredentials",
        lambda topic_id: req(50, newest(50), "DescribeUserScramCredentialsRequest", users=None),
        [(R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE, CLUSTER_31)],
        None,
    ),
    (
        "AlterUserScramCredentials",
        lambda topic_id: req(
            51,
            newest(51),
            "AlterUserScramCredentialsRequest",
            deletions=(req(51, newest(51), "ScramCredentialDeletion", name="x", mechanism=1),),
            upsertions=(),
        ),
        [(R.CLUSTER, CLUSTER_NAME, Op.ALTER, CLUSTER_31)],
        None,
    ),
    ("CreateAcls", create_acls, [(R.CLUSTER, CLUSTER_NAME, Op.ALTER, CLUSTER_31)], None),
    (
        "DescribeAcls",
        lambda topic_id: describe_acls(),
        [(R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE, CLUSTER_31)],
        None,
    ),
    (
        "DeleteAcls",
        lambda topic_id: delete_acls(
            {"resource_type_filter": R.TOPIC, "resource_name_filter": "x"}
        ),
        [(R.CLUSTER, CLUSTER_NAME, Op.ALTER, CLUSTER_31)],
        None,
    ),
]


@pytest.mark.parametrize(
    ("build", "needs", "setup"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_each_api_needs_its_acls(secured, build, needs, setup):
    broker, conn = secured
    topic = await broker.create_topic(TOPIC, 1, {})
    if setup is not None:
        await setup(broker, conn)
    granted = [acl(rtype, name, op) for rtype, name, op, _ in needs]
    for missing, (_, _, _, code) in zip(granted, needs, strict=True):
        await reset_acls(broker)
        await broker.create_acls([g for g in granted if g is not missing])
        assert code in _errors(await conn.send(build(topic.topic_id))), missing
    await broker.create_acls(granted)
    errors = set(_errors(await conn.send(build(topic.topic_id))))
    assert not errors & AUTHORIZATION_FAILURES


def test_every_api_is_in_the_table():
    """Apart from those without a resource (ApiVersions and the SASL exchange) and those that
    filter or mask rather than refuse (DescribeCluster, ListGroups, ListTransactions: below)."""
    tabled = {c[0].split("-")[0] for c in CASES}
    untabled = {"ApiVersions", "SaslHandshake", "SaslAuthenticate"}
    untabled |= {"DescribeCluster", "ListGroups", "ListTransactions"}
    assert {s.name for s in API_SPECS.values()} - untabled == tabled


async def test_a_deny_overrides_an_allow(secured):
    broker, conn = secured
    topic = await broker.create_topic(TOPIC, 1, {})
    await broker.create_acls(
        [acl(R.TOPIC, "*", Op.ALL), acl(R.TOPIC, "sw", Op.WRITE, DENY, PREFIXED)]
    )
    produced = await conn.send(sweep(0)(topic.topic_id))
    assert produced.responses[0].partition_responses[0].error_code == TOPIC_29
    fetched = await conn.send(sweep(1)(topic.topic_id))
    assert fetched.responses[0].partitions[0].error_code == ErrorCode.none


async def test_a_fetch_session_loses_a_topic_as_soon_as_its_acl_goes(secured):
    broker, conn = secured
    topic = await broker.create_topic(TOPIC, 1, {})
    read = acl(R.TOPIC, TOPIC, Op.READ)
    await broker.create_acls([read])
    full = await conn.send(session_fetch([(topic, 0, 0)], epoch=0))
    assert partition(full, 0).error_code == ErrorCode.none
    p = read.pattern
    await broker.delete_acls(
        [AclBindingFilter(p.resource_type, p.name, p.pattern_type, None, None, Op.ANY, ALLOW)]
    )
    incremental = await conn.send(session_fetch(session_id=full.session_id, epoch=1))
    assert partition(incremental, 0).error_code == TOPIC_29


async def test_metadata_lists_only_describable_topics(secured):
    broker, conn = secured
    for name in ("seen-1", "seen-2", "hidden"):
        await broker.create_topic(name, 1, {})
    await broker.create_acls([acl(R.TOPIC, "seen-", Op.DESCRIBE, pattern=PREFIXED)])
    listing = await conn.send(
        req(
            3,
            12,
            "MetadataRequest",
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    assert sorted(t.name for t in listing.topics) == ["seen-1", "seen-2"]
    # A named topic the principal may not describe is refused whether or not it exists.
    named = await conn.send(
        req(
            3,
            12,
            "MetadataRequest",
            topics=tuple(
                req(3, 12, "MetadataRequestTopic", name=n, topic_id=None)
                for n in ("hidden", "nope")
            ),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    assert [t.error_code for t in named.topics] == [TOPIC_29, TOPIC_29]


async def test_authorized_operations_reflect_the_acls(secured):
    broker, conn = secured
    await broker.create_topic(TOPIC, 1, {})
    await broker.create_acls(
        [
            acl(R.TOPIC, TOPIC, Op.READ),
            acl(R.TOPIC, TOPIC, Op.ALTER_CONFIGS),
            acl(R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE),
            acl(R.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE),
            acl(R.GROUP, GROUP, Op.DESCRIBE),
        ]
    )

    def ops(*operations):
        return sum(1 << op for op in operations)

    metadata = await conn.send(
        req(
            3,
            12,
            "MetadataRequest",
            topics=(req(3, 12, "MetadataRequestTopic", name=TOPIC, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=True,
        )
    )
    topic_ops = ops(Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)
    assert metadata.topics[0].topic_authorized_operations == topic_ops
    cluster = await conn.send(
        req(
            60,
            1,
            "DescribeClusterRequest",
            include_cluster_authorized_operations=True,
            endpoint_type=1,
        )
    )
    assert cluster.cluster_authorized_operations == ops(Op.DESCRIBE, Op.IDEMPOTENT_WRITE)
    groups = await conn.send(
        req(15, 6, "DescribeGroupsRequest", groups=(GROUP,), include_authorized_operations=True)
    )
    assert groups.groups[0].authorized_operations == ops(Op.DESCRIBE)
    await broker.delete_acls(
        [AclBindingFilter(R.CLUSTER, None, PatternType.ANY, None, None, Op.DESCRIBE, ALLOW)]
    )
    cluster = await conn.send(
        req(
            60,
            1,
            "DescribeClusterRequest",
            include_cluster_authorized_operations=True,
            endpoint_type=1,
        )
    )
    assert cluster.cluster_authorized_operations == 0  # nothing without DESCRIBE on the cluster


async def test_list_groups_and_transactions_show_what_the_principal_may_describe(secured):
    broker, conn = secured
    topic = await broker.create_topic(TOPIC, 1, {})
    await broker.create_acls(
        [
            acl(R.GROUP, "*", Op.READ),
            acl(R.TOPIC, TOPIC, Op.READ),
            acl(R.TRANSACTIONAL_ID, "*", Op.WRITE),
        ]
    )
    for group in ("mine", "theirs"):
        await conn.send(offset_commit_for(group)(topic.topic_id))
    for txn in ("mine-tx", "their-tx"):
        assert (await conn.send(init_producer_id(txn)(None))).error_code == ErrorCode.none
    await reset_acls(broker)
    await broker.create_acls(
        [acl(R.GROUP, "mine", Op.DESCRIBE), acl(R.TRANSACTIONAL_ID, "mine-tx", Op.DESCRIBE)]
    )
    listed = await conn.send(req(16, 5, "ListGroupsRequest", states_filter=(), types_filter=()))
    assert [g.group_id for g in listed.groups] == ["mine"]
    transactions = await conn.send(
        req(
            66,
            1,
            "ListTransactionsRequest",
            state_filters=(),
            producer_id_filters=(),
            duration_filter=-1,
        )
    )
    assert [t.transactional_id for t in transactions.transaction_states] == ["mine-tx"]
    await broker.create_acls([acl(R.CLUSTER, CLUSTER_NAME, Op.DESCRIBE)])
    listed = await conn.send(req(16, 5, "ListGroupsRequest", states_filter=(), types_filter=()))
    assert sorted(g.group_id for g in listed.groups) == ["mine", "theirs"]


async def test_transaction_state_is_readable_with_read_but_never_writable(secured):
    broker, conn = secured
    await broker.create_acls([acl(R.TRANSACTIONAL_ID, TXN, Op.WRITE)])
    assert (await conn.send(init_producer_id(TXN)(None))).error_code == ErrorCode.none
    state = broker.image.topic("__transaction_state")
    fetch = FACTORIES[1](17, state.topic_id)
    assert (await conn.send(fetch)).responses[0].partitions[0].error_code == TOPIC_29
    await broker.create_acls([acl(R.TOPIC, "__transaction_state", Op.ALL)])
    assert (await conn.send(fetch)).responses[0].partitions[0].error_code == ErrorCode.none
    # Up to v12 Produce names the topic, from v13 it gives its id: neither writes there.
    for v, naming in ((12, {"name": "__transaction_state"}), (13, {"topic_id": state.topic_id})):
        produce = FACTORIES[0](v, state.topic_id)
        topic_data = dataclasses.replace(produce.topic_data[0], **naming)
        produce = dataclasses.replace(produce, topic_data=(topic_data,))
        code = (await conn.send(produce)).responses[0].partition_responses[0].error_code
        assert code == ErrorCode.invalid_topic_exception, v


async def test_super_users_and_allow_everyone_if_no_acl_found(tmp_path):
    async with secured_broker(tmp_path / "a", super_users=f"User:admin;{PRINCIPAL}") as (
        broker,
        conn,
    ):
        topic = await broker.create_topic(TOPIC, 1, {})
        await broker.create_acls([acl(R.TOPIC, "*", Op.ALL, DENY)])
        produced = await conn.send(sweep(0)(topic.topic_id))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
    async with secured_broker(tmp_path / "b", allow_everyone_if_no_acl_found="true") as (
        broker,
        conn,
    ):
        topic = await broker.create_topic(TOPIC, 1, {})
        produced = await conn.send(sweep(0)(topic.topic_id))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
        await broker.create_acls([acl(R.TOPIC, TOPIC, Op.READ, principal="User:someone-else")])
        produced = await conn.send(sweep(0)(topic.topic_id))
        assert produced.responses[0].partition_responses[0].error_code == TOPIC_29


# -- CreateAcls, DescribeAcls, DeleteAcls -------------------------------------------------------


def creation(v, rtype, name, op, perm=ALLOW, pattern=LITERAL, principal="User:alice", host="*"):
    return req(
        30,
        v,
        "AclCreation",
        resource_type=rtype,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=op,
        permission_type=perm,
    )


@pytest.mark.parametrize("v", range(ACL_SPECS[0].min_version, ACL_SPECS[0].max_version + 1))
async def test_create_describe_and_delete_acls(secured, v):
    broker, conn = secured
    await broker.create_acls([acl(R.CLUSTER, CLUSTER_NAME, Op.ALTER)])
    created = await conn.send(
        req(
            30,
            v,
            "CreateAclsRequest",
            creations=(
                creation(v, R.TOPIC, "orders", Op.READ),
                creation(v, R.TOPIC, "orders", Op.READ),  # again: no error, no duplicate
                creation(v, R.TOPIC, "ord", Op.WRITE, DENY, PREFIXED, host="10.0.0.1"),
                creation(v, R.TRANSACTIONAL_ID, "app-", Op.WRITE, pattern=PREFIXED),
                creation(v, R.GROUP, "g", Op.READ, principal="alice"),
                creation(v, R.TOPIC, "t", Op.ANY),
                creation(v, R.TOPIC, "t", Op.READ, pattern=PatternType.MATCH),
                creation(v, R.CLUSTER, "c", Op.ALTER),
            ),
        )
    )
    assert [(r.error_code, r.error_message) for r in created.results] == [
        (ErrorCode.none, None),
        (ErrorCode.none, None),
        (ErrorCode.none, None),
        (ErrorCode.none, None),
        (
            ErrorCode.invalid_request,
            "Could not parse principal from `alice` (no colon is present separating the "
            "principal type from the principal name)",
        ),
        (ErrorCode.invalid_request, "Invalid operation ANY"),
        (ErrorCode.invalid_request, "Invalid patternType MATCH"),
        (
            ErrorCode.invalid_request,
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
    ]

    # Describing needs DESCRIBE on the cluster; ALTER implies it.
    described = await conn.send(describe_acls(v, principal_filter="User:alice"))
    assert described.error_code == ErrorCode.none
    assert sorted(
        (
            r.resource_type,
            r.resource_name,
            r.pattern_type,
            a.principal,
            a.host,
            a.operation,
            a.permission_type,
        )
        for r in described.resources
        for a in r.acls
    ) == [
        (R.TOPIC, "ord", PREFIXED, "User:alice", "10.0.0.1", Op.WRITE, DENY),
        (R.TOPIC, "orders", LITERAL, "User:alice", "*", Op.READ, ALLOW),
        (R.TRANSACTIONAL_ID, "app-", PREFIXED, "User:alice", "*", Op.WRITE, ALLOW),
    ]
    matching = await conn.send(
        describe_acls(
            v,
            resource_type_filter=R.TOPIC,
            resource_name_filter="orders",
            pattern_type_filter=PatternType.MATCH,
        )
    )
    assert sorted(r.resource_name for r in matching.resources) == ["ord", "orders"]
    bad = await conn.send(describe_acls(v, pattern_type_filter=PatternType.UNKNOWN))
    assert bad.error_code == ErrorCode.invalid_request

    deleted = await conn.send(
        delete_acls(
            {"resource_type_filter": R.TRANSACTIONAL_ID, "pattern_type_filter": PREFIXED},
            {"resource_type_filter": R.TOPIC, "operation": Op.DELETE},
            {"operation": Op.UNKNOWN},
            v=v,
        )
    )
    first, second, third = deleted.filter_results
    assert [(m.resource_name, m.pattern_type) for m in first.matching_acls] == [("app-", PREFIXED)]
    assert (second.error_code, second.matching_acls) == (ErrorCode.none, ())
    assert third.error_code == ErrorCode.invalid_request
    remaining = await conn.send(describe_acls(v, principal_filter="User:alice"))
    assert sorted(r.resource_name for r in remaining.resources) == ["ord", "orders"]


async def test_acl_apis_without_an_authorizer_answer_security_disabled(broker, broker_client):
    created = await broker_client.send(create_acls(None))
    assert created.results[0].error_code == ErrorCode.security_disabled
    described = await broker_client.send(describe_acls())
    assert (described.error_code, described.error_message) == (
        ErrorCode.security_disabled,
        "No Authorizer is configured.",
    )
    deleted = await broker_client.send(delete_acls({}))
    assert deleted.filter_results[0].error_code == ErrorCode.security_disabled


async def test_acls_survive_a_restart(tmp_path):
    log_dir = tmp_path / "kafka-logs"
    kept = [
        acl(R.TRANSACTIONAL_ID, "app-", Op.WRITE, pattern=PREFIXED),
        acl(R.TOPIC, TOPIC, Op.READ, DENY, host="10.0.0.1"),
        acl(R.CLUSTER, CLUSTER_NAME, Op.ALTER),
    ]
    async with secured_broker(log_dir) as (broker, conn):
        created = await conn.send(
            req(30, 3, "CreateAclsRequest", creations=(creation(3, R.GROUP, "g", Op.READ),))
        )
        assert created.results[0].error_code == CLUSTER_31
        await broker.create_acls([*kept, acl(R.GROUP, "gone", Op.READ)])
        deleted = await conn.send(delete_acls({"resource_type_filter": R.GROUP}))
        assert len(deleted.filter_results[0].matching_acls) == 1
    async with secured_broker(log_dir) as (broker, conn):
        assert sorted(broker.authorizer.acls(EVERYTHING), key=str) == sorted(kept, key=str)
        init = await conn.send(init_producer_id("app-7")(None))
        assert init.error_code == ErrorCode.none
