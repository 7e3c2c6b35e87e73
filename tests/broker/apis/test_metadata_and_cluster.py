"""Metadata and DescribeCluster: brokers, topic ids, auto-creation, authorized operations."""

from __future__ import annotations

from dataclasses import replace

from kafka_requests import req
from kio.schema.errors import ErrorCode

from broker.security.operations import SUPPORTED_OPERATIONS, ResourceType, operations_bitfield


def metadata(*names, auto_create=False, operations=False, v=12):
    topics = (
        None
        if names == (None,)
        else tuple(req(3, v, "MetadataRequestTopic", name=n, topic_id=None) for n in names)
    )
    return req(
        3,
        v,
        "MetadataRequest",
        topics=topics,
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=operations,
    )


async def test_metadata_lists_brokers_and_topics_with_ids(broker, broker_client):
    topic = await broker.create_topic("m1", 3, {})
    response = await broker_client.send(metadata(None))
    assert [(b.node_id, b.port) for b in response.brokers] == [(1, broker.bound["PLAINTEXT"][1])]
    assert response.controller_id == 1 and response.cluster_id == broker.image.cluster_id
    [t] = response.topics
    assert (t.name, t.topic_id, len(t.partitions)) == ("m1", topic.topic_id, 3)
    assert all(p.leader_id == 1 and p.isr_nodes == (1,) for p in t.partitions)


async def test_metadata_creates_topics_only_when_allowed(broker, broker_client):
    response = await broker_client.send(metadata("fresh"))
    assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    response = await broker_client.send(metadata("fresh", auto_create=True))
    assert response.topics[0].error_code == ErrorCode.none
    assert len(response.topics[0].partitions) == broker.config["num.partitions"]
    response = await broker_client.send(metadata("bad/name", auto_create=True))
    assert response.topics[0].error_code == ErrorCode.invalid_topic_exception


async def test_authorized_operations_without_an_authorizer_are_all_supported_ones(
    broker, broker_client
):
    await broker.create_topic("ops", 1, {})
    plain = await broker_client.send(metadata("ops"))
    assert plain.topics[0].topic_authorized_operations == -(2**31)
    asked = await broker_client.send(metadata("ops", operations=True))
    expected = operations_bitfield(SUPPORTED_OPERATIONS[ResourceType.TOPIC])
    assert asked.topics[0].topic_authorized_operations == expected
    cluster = await broker_client.send(
        req(60, 1, "DescribeClusterRequest", include_cluster_authorized_operations=True)
    )
    assert cluster.cluster_authorized_operations == operations_bitfield(
        SUPPORTED_OPERATIONS[ResourceType.CLUSTER]
    )


async def test_compression_type_accepts_only_what_is_honoured(broker, broker_client):
    def create(name, value):
        cfg = req(19, 7, "CreatableTopicConfig", name="compression.type", value=value)
        topic = req(
            19,
            7,
            "CreatableTopic",
            name=name,
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(cfg,),
        )
        return req(19, 7, "CreateTopicsRequest", topics=(topic,), validate_only=False)

    ok = await broker_client.send(create("c1", "producer"))
    assert ok.topics[0].error_code == ErrorCode.none
    refused = await broker_client.send(create("c2", "gzip"))
    assert refused.topics[0].error_code == ErrorCode.invalid_config
    assert "producer" in refused.topics[0].error_message


async def test_consumer_protocol_apis_are_not_advertised_when_disabled(tmp_path):
    from in_process_broker import running_broker

    async with running_broker(tmp_path, **{"group.coordinator.rebalance.protocols": "classic"}) as (
        _,
        conn,
    ):
        versions = await conn.send(
            req(18, 3, "ApiVersionsRequest", client_software_name="t", client_software_version="1")
        )
        keys = {k.api_key for k in versions.api_keys}
        assert 11 in keys and 68 not in keys and 69 not in keys


async def test_metadata_v13_carries_a_top_level_error_code(broker, broker_client):
    """KIP-1102: Kafka's brokers answer NONE there (REBOOTSTRAP_REQUIRED would send the client
    back to its bootstrap servers) and keep topic errors per topic."""
    await broker.create_topic("m13", 2, {})
    response = await broker_client.send(metadata("m13", "missing", v=13))
    assert response.error_code == ErrorCode.none
    found, missing = response.topics
    assert (found.name, found.error_code, len(found.partitions)) == ("m13", ErrorCode.none, 2)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert not hasattr(await broker_client.send(metadata("m13", v=12)), "error_code")


async def test_describe_cluster_v2_flags_fenced_brokers(broker, broker_client):
    """KIP-1073: fenced brokers are listed only when asked for, each with `is_fenced`. The one
    broker answering is registered and unfenced: listed either way, never fenced."""
    host, port = broker.bound["PLAINTEXT"]
    for include_fenced in (False, True):
        response = await broker_client.send(
            req(
                60,
                2,
                "DescribeClusterRequest",
                include_cluster_authorized_operations=False,
                endpoint_type=1,
                include_fenced_brokers=include_fenced,
            )
        )
        assert response.error_code == ErrorCode.none
        assert [(b.broker_id, b.host, b.port, b.is_fenced) for b in response.brokers] == [
            (broker.node_id, host, port, False)
        ]


async def test_a_partition_whose_leader_is_fenced_has_no_leader_to_offer(broker, broker_client):
    """Between the controller fencing a dead leader and electing its successor, Metadata
    names no leader (LEADER_NOT_AVAILABLE, leader -1, the leader offline), as KRaft's
    metadata cache does for a leader that is not alive: a client then keeps looking the
    partition up, where a dead leader named would have it wait to reconnect. The image here
    is as the change feed leaves it in that moment."""
    await broker.create_topic("orphaned", 1, {})
    me = broker.node_id
    broker.image.brokers = {me: replace(broker.image.brokers[me], fenced=True)}

    response = await broker_client.send(metadata("orphaned"))

    [p] = response.topics[0].partitions
    assert (p.error_code, p.leader_id) == (ErrorCode.leader_not_available, -1)
    assert (p.replica_nodes, p.isr_nodes, p.offline_replicas) == ((me,), (me,), (me,))
