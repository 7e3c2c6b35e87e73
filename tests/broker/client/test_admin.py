"""The asyncio AdminClient against a real in-process broker: every operation's happy path and
Kafka errors surfacing as KafkaAdminError with Kafka's code and name."""

from __future__ import annotations

import struct
import time

import pytest
from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode

from broker.client import AdminClient
from broker.client.admin_topics import EARLIEST, LATEST
from broker.client.connection import BrokerConnection
from broker.client.errors import KafkaAdminError
from broker.client.models import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResourceType,
    NewTopic,
    PatternType,
    ResourceType,
)
from broker.records.batch import build_batch


@pytest.fixture
async def cluster(tmp_path):
    """A broker (no initial rebalance delay, so a classic group settles at once), a raw
    connection to set things up with, and an AdminClient."""
    async with running_broker(tmp_path / "kafka-logs", group_initial_rebalance_delay_ms="0") as (
        broker,
        conn,
    ):
        host, port = broker.bound["PLAINTEXT"]
        async with AdminClient(f"{host}:{port}") as admin:
            yield broker, conn, admin


def raises(code: ErrorCode):
    """pytest.raises for a KafkaAdminError with that code; checks the name matches too."""

    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(KafkaAdminError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.ctx.__exit__(*exc)
            assert (self.info.value.code, self.info.value.name) == (code, code.name.upper())
            return suppressed

    return Check()


async def produce(
    conn: BrokerConnection,
    topic: str,
    count: int,
    partition: int = 0,
    transactional_id: str | None = None,
    **batch,
):
    now = int(time.time() * 1000)
    records = build_batch([(None, b"v%d" % i, [], now) for i in range(count)], **batch)
    part = req(0, 11, "PartitionProduceData", index=partition, records=records)
    response = await conn.send(
        req(
            0,
            11,
            "ProduceRequest",
            acks=-1,
            timeout=ms(5000),
            transactional_id=transactional_id,
            topic_data=(req(0, 11, "TopicProduceData", name=topic, partition_data=(part,)),),
        )
    )
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


# -- cluster, topics, partitions, records --------------------------------------------------


async def test_describe_cluster(cluster):
    broker, _, admin = cluster
    described = await admin.describe_cluster()
    assert described.cluster_id == broker.image.cluster_id
    assert [b.node_id for b in described.brokers] == [described.controller_id]
    assert (described.brokers[0].host, described.brokers[0].port) == broker.bound["PLAINTEXT"]


async def test_describe_log_dirs(cluster):
    broker, conn, admin = cluster
    await admin.create_topics([NewTopic("sized", 2)])
    await produce(conn, "sized", 10, partition=1)
    described = await admin.describe_log_dirs()
    [[log_dir]] = described.values()
    assert log_dir.path == str(broker.log_manager.log_dirs[0].absolute())
    sizes = {tp: info.size for tp, info in log_dir.replicas.items() if tp[0] == "sized"}
    assert sizes[("sized", 0)] == 0 < sizes[("sized", 1)]
    assert sizes[("sized", 1)] == broker.log_manager.get("sized", 1).size_in_bytes
    assert 0 < log_dir.usable_bytes <= log_dir.total_bytes
    # The same dirs and replicas when asked by broker id (free space moves on meanwhile).
    [[again]] = (await admin.describe_log_dirs([broker.node_id])).values()
    assert (again.path, again.replicas, again.total_bytes) == (
        log_dir.path,
        log_dir.replicas,
        log_dir.total_bytes,
    )


async def test_topic_lifecycle(cluster):
    _, conn, admin = cluster
    (validated,) = await admin.create_topics([NewTopic("orders", 3)], validate_only=True)
    assert validated.num_partitions == 3
    assert await admin.list_topics() == []

    (created,) = await admin.create_topics([NewTopic("orders", 3, 1, {"retention.ms": "60000"})])
    assert (created.name, created.num_partitions, created.replication_factor) == ("orders", 3, 1)
    (listed,) = await admin.list_topics()
    assert (listed.name, listed.topic_id, listed.partition_count) == ("orders", created.topic_id, 3)

    await produce(conn, "orders", 4, partition=1)
    (described,) = await admin.describe_topics(["orders"])
    assert described.topic_id == created.topic_id
    offsets = [
        (p.partition, p.log_start_offset, p.high_watermark, p.last_stable_offset)
        for p in described.partitions
    ]
    assert offsets == [(0, 0, 0, 0), (1, 0, 4, 4), (2, 0, 0, 0)]
    assert {(p.leader, tuple(p.replicas)) for p in described.partitions} == {(1, (1,))}

    with raises(ErrorCode.topic_already_exists) as e:
        await admin.create_topics([NewTopic("orders", 1)])
    assert e.value.resource == "orders" and "already exists" in e.value.message
    with raises(ErrorCode.invalid_partitions):
        await admin.create_topics([NewTopic("bad", 0)])

    await admin.create_partitions({"orders": 5}, validate_only=True)
    assert (await admin.list_topics())[0].partition_count == 3
    await admin.create_partitions({"orders": 5})
    assert len((await admin.describe_topics(["orders"]))[0].partitions) == 5
    with raises(ErrorCode.invalid_partitions):
        await admin.create_partitions({"orders": 2})

    await admin.delete_topics(["orders"])
    assert await admin.list_topics() == []
    with raises(ErrorCode.unknown_topic_or_partition):
        await admin.delete_topics(["orders"])
    with raises(ErrorCode.unknown_topic_or_partition):
        await admin.describe_topics(["orders"])


async def test_internal_topics_are_listed_on_request(cluster):
    _, _, admin = cluster
    await admin.list_group_offsets("creates-the-offsets-topic")
    assert await admin.list_topics() == []
    internal = await admin.list_topics(include_internal=True)
    assert [(t.name, t.is_internal) for t in internal] == [("__consumer_offsets", True)]


async def test_list_offsets_and_delete_records(cluster):
    _, conn, admin = cluster
    await admin.create_topics([NewTopic("events", 1)])
    await produce(conn, "events", 5)
    tp = ("events", 0)
    assert await admin.list_offsets([tp], EARLIEST) == {tp: 0}
    assert await admin.list_offsets([tp], LATEST) == {tp: 5}
    assert await admin.delete_records({tp: 3}) == {tp: 3}
    (described,) = await admin.describe_topics(["events"])
    assert (described.partitions[0].log_start_offset, described.partitions[0].high_watermark) == (
        3,
        5,
    )
    with raises(ErrorCode.offset_out_of_range):
        await admin.delete_records({tp: 9})
    with raises(ErrorCode.unknown_topic_or_partition) as e:
        await admin.list_offsets([("events", 4)])
    assert e.value.resource == "events-4"


# -- configs ---------------------------------------------------------------------------------


async def test_topic_broker_and_group_configs(cluster):
    broker, _, admin = cluster
    await admin.create_topics([NewTopic("logs", 1)])
    topic = ConfigResourceType.TOPIC

    await admin.incremental_alter_configs(topic, "logs", [AlterConfigOp("retention.ms", "1234")])
    (entry,) = await admin.describe_configs(topic, "logs", ["retention.ms"])
    assert (entry.value, entry.source, entry.read_only) == ("1234", 1, False)
    await admin.incremental_alter_configs(
        topic, "logs", [AlterConfigOp("retention.ms", op=AlterConfigOpType.DELETE)]
    )
    (entry,) = await admin.describe_configs(topic, "logs", ["retention.ms"])
    assert entry.value == "604800000" and entry.source != 1
    # APPEND to a list the topic does not set starts from its default, as in Kafka.
    await admin.incremental_alter_configs(topic, "logs", [AlterConfigOp("segment.ms", "60000")])
    await admin.incremental_alter_configs(
        topic, "logs", [AlterConfigOp("cleanup.policy", "compact", AlterConfigOpType.APPEND)]
    )
    (entry,) = await admin.describe_configs(topic, "logs", ["cleanup.policy"])
    assert entry.value == "delete,compact"
    await admin.incremental_alter_configs(
        topic, "logs", [AlterConfigOp("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)]
    )
    (entry,) = await admin.describe_configs(topic, "logs", ["cleanup.policy"])
    assert entry.value == "compact"
    with raises(ErrorCode.invalid_config):
        await admin.incremental_alter_configs(
            topic, "logs", [AlterConfigOp("retention.ms", "soon")]
        )
    with raises(ErrorCode.unknown_topic_or_partition):
        await admin.describe_configs(topic, "nope")

    broker_configs = {
        c.name: c for c in await admin.describe_configs(ConfigResourceType.BROKER, "1")
    }
    assert broker_configs["num.partitions"].value == "1"
    await admin.incremental_alter_configs(
        ConfigResourceType.BROKER, "1", [AlterConfigOp("max.connections", "1000")]
    )
    (entry,) = await admin.describe_configs(ConfigResourceType.BROKER, "1", ["max.connections"])
    assert entry.value == "1000"
    with raises(ErrorCode.invalid_config):
        await admin.incremental_alter_configs(
            ConfigResourceType.BROKER, "1", [AlterConfigOp("log.dirs", "/elsewhere")]
        )

    group = ConfigResourceType.GROUP
    await admin.incremental_alter_configs(
        group, "g1", [AlterConfigOp("consumer.session.timeout.ms", "50000")]
    )
    configs = {c.name: c.value for c in await admin.describe_configs(group, "g1")}
    assert configs["consumer.session.timeout.ms"] == "50000"


# -- ACLs -----------------------------------------------------------------------------------


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


async def test_acls_without_an_authorizer_are_security_disabled(cluster):
    _, _, admin = cluster
    with raises(ErrorCode.security_disabled):
        await admin.describe_acls()


@pytest.fixture
async def secured(tmp_path):
    """A broker with Kafka's StandardAuthorizer, where this test's anonymous client is a
    super user."""
    async with running_broker(
        tmp_path / "kafka-logs",
        authorizer_class_name=STANDARD_AUTHORIZER,
        super_users="User:ANONYMOUS",
    ) as (broker, _):
        host, port = broker.bound["PLAINTEXT"]
        async with AdminClient(f"{host}:{port}") as admin:
            yield admin


async def test_acls_of_every_resource_type_with_filters(secured):
    admin = secured

    def allow(resource_type, name, operation, pattern=PatternType.LITERAL, principal="User:app"):
        return AclBinding(
            resource_type, name, pattern, principal, "*", operation, AclPermissionType.ALLOW
        )

    bindings = [
        allow(ResourceType.TRANSACTIONAL_ID, "pay-", AclOperation.WRITE, PatternType.PREFIXED),
        allow(ResourceType.TOPIC, "orders", AclOperation.READ),
        allow(ResourceType.GROUP, "billing", AclOperation.READ),
        allow(ResourceType.CLUSTER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
        allow(ResourceType.TOPIC, "*", AclOperation.DESCRIBE, principal="User:ops"),
    ]
    await admin.create_acls(bindings)
    assert sorted(await admin.describe_acls(), key=repr) == sorted(bindings, key=repr)

    by_type = await admin.describe_acls(AclBindingFilter(ResourceType.TRANSACTIONAL_ID))
    assert by_type == [bindings[0]]
    # MATCH finds every pattern that applies to the named resource: prefixed and literal.
    matching = await admin.describe_acls(
        AclBindingFilter(ResourceType.TRANSACTIONAL_ID, "pay-1", PatternType.MATCH)
    )
    assert matching == [bindings[0]]
    assert sorted(
        await admin.describe_acls(AclBindingFilter(principal="User:app")), key=repr
    ) == sorted(bindings[:4], key=repr)

    deleted = await admin.delete_acls([AclBindingFilter(ResourceType.TOPIC)])
    assert sorted(deleted, key=repr) == sorted([bindings[1], bindings[4]], key=repr)
    assert len(await admin.describe_acls()) == 3

    with raises(ErrorCode.invalid_request):
        await admin.create_acls([allow(ResourceType.ANY, "x", AclOperation.READ)])
    with raises(ErrorCode.invalid_request):
        await admin.describe_acls(AclBindingFilter(pattern_type=PatternType.UNKNOWN))


# -- SCRAM users ----------------------------------------------------------------------------


async def test_scram_users(cluster):
    _, _, admin = cluster
    await admin.upsert_user_scram_credential("alice", "secret", "SCRAM-SHA-256", 8192)
    await admin.upsert_user_scram_credential("alice", "secret")
    described = await admin.describe_user_scram_credentials()
    assert sorted((c.mechanism, c.iterations) for c in described["alice"]) == [
        ("SCRAM-SHA-256", 8192),
        ("SCRAM-SHA-512", 4096),
    ]
    await admin.delete_user_scram_credential("alice", "SCRAM-SHA-256")
    described = await admin.describe_user_scram_credentials(["alice"])
    assert [c.mechanism for c in described["alice"]] == ["SCRAM-SHA-512"]

    with raises(ErrorCode.resource_not_found):
        await admin.delete_user_scram_credential("alice", "SCRAM-SHA-256")
    with raises(ErrorCode.resource_not_found) as e:
        await admin.describe_user_scram_credentials(["bob"])
    assert e.value.resource == "bob"
    with raises(ErrorCode.unacceptable_credential):
        await admin.upsert_user_scram_credential("bob", "pw", iterations=100)
    with raises(ErrorCode.unsupported_sasl_mechanism):
        await admin.upsert_user_scram_credential("bob", "pw", "PLAIN")


# -- consumer groups ------------------------------------------------------------------------


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v1: topics, no user data, nothing owned."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">ii", -1, 0)


def assignment(topic: str, *partitions: int) -> bytes:
    """ConsumerProtocolAssignment v0 of one topic, no user data."""
    out = struct.pack(">hih", 0, 1, len(topic)) + topic.encode()
    out += struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    return out + struct.pack(">i", -1)


async def classic_member(conn: BrokerConnection, group: str, topic: str) -> str:
    """Join and sync a one-member classic consumer group that owns the topic's partitions 0-1."""

    def join(member_id: str):
        protocol = req(
            11, 9, "JoinGroupRequestProtocol", name="range", metadata=subscription(topic)
        )
        return req(
            11,
            9,
            "JoinGroupRequest",
            group_id=group,
            session_timeout=ms(30000),
            rebalance_timeout=ms(30000),
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(protocol,),
            reason=None,
        )

    joined = await conn.send(join(""))
    if joined.error_code == ErrorCode.member_id_required:
        joined = await conn.send(join(joined.member_id))
    assert joined.error_code == ErrorCode.none
    synced = await conn.send(
        req(
            14,
            5,
            "SyncGroupRequest",
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(
                req(
                    14,
                    5,
                    "SyncGroupRequestAssignment",
                    member_id=joined.member_id,
                    assignment=assignment(topic, 0, 1),
                ),
            ),
        )
    )
    assert synced.error_code == ErrorCode.none
    return joined.member_id


async def leave(conn: BrokerConnection, group: str, member_id: str) -> None:
    member = req(13, 5, "MemberIdentity", member_id=member_id, group_instance_id=None, reason=None)
    response = await conn.send(req(13, 5, "LeaveGroupRequest", group_id=group, members=(member,)))
    assert response.error_code == ErrorCode.none


async def test_classic_group_offsets_lag_reset_and_delete(cluster):
    _, conn, admin = cluster
    await admin.create_topics([NewTopic("clicks", 2)])
    await produce(conn, "clicks", 10, partition=0)
    await produce(conn, "clicks", 4, partition=1)
    member_id = await classic_member(conn, "readers", "clicks")

    (listed,) = await admin.list_groups()
    assert (listed.group_id, listed.protocol_type, listed.state, listed.group_type) == (
        "readers",
        "consumer",
        "Stable",
        "classic",
    )
    assert await admin.list_groups(states=["Empty"]) == []
    described = await admin.describe_group("readers")
    assert (described.group_type, described.state, described.protocol) == (
        "classic",
        "Stable",
        "range",
    )
    (member,) = described.members
    assert member.member_id == member_id
    assert member.assignment == [("clicks", 0), ("clicks", 1)]
    assert member.subscribed_topics == ["clicks"]

    # An admin may not move a live group's offsets (Kafka: UNKNOWN_MEMBER_ID).
    with raises(ErrorCode.unknown_member_id):
        await admin.alter_group_offsets("readers", {("clicks", 0): 3})
    with raises(ErrorCode.non_empty_group):
        await admin.delete_groups(["readers"])

    await leave(conn, "readers", member_id)
    await admin.alter_group_offsets("readers", {("clicks", 0): 3, ("clicks", 1): 4})
    assert await admin.list_group_offsets("readers") == {("clicks", 0): 3, ("clicks", 1): 4}
    lag = [
        (p.partition, p.committed_offset, p.high_watermark, p.lag)
        for p in await admin.group_lag("readers")
    ]
    assert lag == [(0, 3, 10, 7), (1, 4, 4, 0)]

    reset = await admin.reset_group_offsets("readers", [("clicks", 0), ("clicks", 1)], EARLIEST)
    assert reset == {("clicks", 0): 0, ("clicks", 1): 0}
    future = int(time.time() * 1000) + 3_600_000
    reset = await admin.reset_group_offsets("readers", [("clicks", 0)], future)
    assert reset == {("clicks", 0): 10}
    assert (await admin.list_group_offsets("readers"))[("clicks", 0)] == 10

    await admin.delete_groups(["readers"])
    assert await admin.list_groups() == []
    with raises(ErrorCode.group_id_not_found):
        await admin.delete_groups(["readers"])
    with raises(ErrorCode.group_id_not_found) as e:
        await admin.describe_group("readers")
    assert e.value.resource == "readers"


async def test_consumer_protocol_group(cluster):
    _, conn, admin = cluster
    await admin.create_topics([NewTopic("orders", 2)])
    joined = await conn.send(
        req(
            68,
            1,
            "ConsumerGroupHeartbeatRequest",
            group_id="kip848",
            member_id="m-1",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=ms(30000),
            subscribed_topic_names=("orders",),
            subscribed_topic_regex=None,
            server_assignor=None,
            topic_partitions=(),
        )
    )
    assert joined.error_code == ErrorCode.none

    (listed,) = await admin.list_groups(types=["consumer"])
    assert (listed.group_id, listed.group_type) == ("kip848", "consumer")
    described = await admin.describe_group("kip848")
    assert (described.group_type, described.protocol, described.group_epoch) == (
        "consumer",
        "uniform",
        joined.member_epoch,
    )
    (member,) = described.members
    assert (member.member_id, member.member_epoch) == ("m-1", joined.member_epoch)
    assert member.assignment == [("orders", 0), ("orders", 1)]
    assert member.subscribed_topics == ["orders"]
    with raises(ErrorCode.unknown_member_id):
        await admin.alter_group_offsets("kip848", {("orders", 0): 1})


# -- transactions and producers -------------------------------------------------------------


async def begin_transaction(conn: BrokerConnection, transactional_id: str, topic: str):
    init = await conn.send(
        req(
            22,
            5,
            "InitProducerIdRequest",
            transactional_id=transactional_id,
            transaction_timeout=ms(60_000),
            producer_id=-1,
            producer_epoch=-1,
        )
    )
    assert init.error_code == ErrorCode.none
    added = await conn.send(
        req(
            24,
            3,
            "AddPartitionsToTxnRequest",
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=init.producer_id,
            v3_and_below_producer_epoch=init.producer_epoch,
            v3_and_below_topics=(
                req(24, 3, "AddPartitionsToTxnTopic", name=topic, partitions=(0,)),
            ),
        )
    )
    codes = {
        p.partition_error_code
        for t in added.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert codes == {ErrorCode.none}
    return init.producer_id, init.producer_epoch


async def test_transactions_producers_and_abort(cluster):
    broker, conn, admin = cluster
    await admin.create_topics([NewTopic("payments", 1)])
    await produce(conn, "payments", 2)
    pid, epoch = await begin_transaction(conn, "payer", "payments")
    await produce(
        conn,
        "payments",
        3,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
        transactional_id="payer",
    )

    (listed,) = await admin.list_transactions()
    assert (listed.transactional_id, listed.producer_id, listed.state) == ("payer", pid, "Ongoing")
    assert await admin.list_transactions(states=["CompleteCommit"]) == []
    assert await admin.list_transactions(producer_ids=[pid]) == [listed]

    described = await admin.describe_transaction("payer")
    assert (described.state, described.producer_id, described.producer_epoch) == (
        "Ongoing",
        pid,
        epoch,
    )
    assert described.partitions == [("payments", 0)]
    assert described.transaction_timeout_ms == 60_000
    assert described.transaction_start_time_ms > 0
    assert described.coordinator_id == 1

    (producer,) = await admin.describe_producers("payments", 0)
    assert (producer.producer_id, producer.last_sequence) == (pid, 2)
    assert producer.current_transaction_start_offset == 2
    (partition,) = (await admin.describe_topics(["payments"]))[0].partitions
    assert (partition.last_stable_offset, partition.high_watermark) == (2, 5)

    await admin.abort_transaction("payments", 0, pid)
    (partition,) = (await admin.describe_topics(["payments"]))[0].partitions
    assert partition.last_stable_offset == partition.high_watermark == 6

    with raises(ErrorCode.invalid_txn_state):
        await admin.abort_transaction("payments", 0, pid)
    with raises(ErrorCode.transactional_id_not_found):
        await admin.describe_transaction("nobody")
    with raises(ErrorCode.unknown_topic_or_partition):
        await admin.describe_producers("payments", 3)
