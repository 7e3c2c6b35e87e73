"""Metadata: brokers, the cluster id and topics (creating them on demand when allowed). Only
topics the principal may DESCRIBE are listed; creating one needs CREATE on the cluster or the
topic."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import (
    UNREQUESTED_OPERATIONS,
    authorized_operations,
    cluster_authorized_operations,
    creatable_topics,
)
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.apis.produce import CLOSE_CONNECTION
from broker.metadata.cluster import NO_LEADER, PartitionRegistration
from broker.metadata.image import topic_name_problem
from broker.security.operations import AclOperation, ResourceType


async def handle_metadata(broker, ctx: RequestContext, request) -> object:
    if broker.cluster is not None:
        await broker.cluster.settled()  # a leader lost this moment is not named
    image = broker.image
    all_topics = request.topics is None or (ctx.api_version == 0 and not request.topics)
    if (
        ctx.api_version < 12
        and not all_topics
        and any(t.name is None or getattr(t, "topic_id", None) is not None for t in request.topics)
    ):
        # Kafka refuses these (InvalidRequestException: ids and null names are v12's); a
        # v10-11 response cannot carry a topic without a name, so the connection closes.
        return CLOSE_CONNECTION
    if all_topics:
        topics = [(t.name, None) for t in image.topics()]
    else:
        topics = []
        for requested in request.topics:
            name = requested.name
            if name is None and getattr(requested, "topic_id", None) is not None:
                found = image.topic_by_id(requested.topic_id)
                topics.append((found.name if found else None, requested.topic_id))
            else:
                topics.append((name, None))
    if broker.cluster is not None:
        # A client whose leader just dropped is told the successor, not "no leader".
        await broker.cluster.successors([name for name, _ in topics if name is not None])

    # v4+ lets the client say whether Metadata may create topics; older versions always may.
    may_create = (
        getattr(request, "allow_auto_topic_creation", True)
        and broker.config["auto.create.topics.enable"]
    )
    results = []
    for name, topic_id in topics:
        if name is None:
            results.append(_topic_error(ctx, None, topic_id, ErrorCode.unknown_topic_id))
            continue
        if not broker.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            # Whether it exists stays secret; a listing of all topics just leaves it out.
            if not all_topics:
                shown = None if topic_id is not None else name
                code = ErrorCode.topic_authorization_failed
                results.append(_topic_error(ctx, shown, topic_id, code))
            continue
        topic = image.topic(name)
        if topic is None and may_create and topic_name_problem(name) is None:
            if not creatable_topics(broker, ctx, (name,)):
                code = ErrorCode.topic_authorization_failed
                results.append(_topic_error(ctx, name, None, code))
                continue
            topic = await broker.auto_create_topic(name)
            if topic is None:  # no broker to place it on yet: clients retry, as in Kafka
                results.append(_topic_error(ctx, name, None, ErrorCode.leader_not_available))
                continue
        if topic is None:
            code = (
                ErrorCode.invalid_topic_exception
                if topic_name_problem(name)
                else ErrorCode.unknown_topic_or_partition
            )
            results.append(_topic_error(ctx, name, topic_id, code))
            continue
        partitions = tuple(
            ctx.response("MetadataResponsePartition", **partition_state(broker, topic.name, p))
            for p in range(topic.partitions)
        )
        results.append(
            ctx.response(
                "MetadataResponseTopic",
                error_code=ErrorCode.none,
                name=topic.name,
                topic_id=topic.topic_id,
                is_internal=topic.internal,
                partitions=partitions,
                topic_authorized_operations=authorized_operations(
                    broker,
                    ctx,
                    getattr(request, "include_topic_authorized_operations", False),
                    ResourceType.TOPIC,
                    topic.name,
                ),
            )
        )
    return ctx.response(
        "MetadataResponse",
        throttle_time=NO_THROTTLE,
        # v13's top-level error (KIP-1102): Kafka's brokers answer NONE and keep errors per
        # topic; REBOOTSTRAP_REQUIRED there would send the client back to its bootstrap servers.
        error_code=ErrorCode.none,
        brokers=tuple(broker_nodes(broker, ctx, "MetadataResponseBroker")),
        cluster_id=image.cluster_id,
        controller_id=controller_id(broker),
        topics=tuple(results),
        cluster_authorized_operations=cluster_authorized_operations(
            broker, ctx, getattr(request, "include_cluster_authorized_operations", False)
        ),
    )


def controller_id(broker) -> int:
    """The controller, for admin clients to send it the controller's requests. Between
    controllers (or before the first), this broker: a client that asks it gets NOT_CONTROLLER
    and looks again, where -1 would leave librdkafka waiting for a controller to appear."""
    controller = broker.image.controller_id
    return controller if controller in broker.image.brokers else broker.node_id


def partition_state(broker, topic: str, partition: int) -> dict:
    """A partition's leader and replicas, as Metadata and DescribeTopicPartitions give them.
    Replicas on brokers that are fenced or gone (or that this broker just lost and does not
    know to live, ClusterRuntime.connection_lost) are offline; a partition without a leader,
    or whose leader is offline (its successor not elected yet), answers LEADER_NOT_AVAILABLE
    and no leader, as Kafka's metadata cache does for a leader not alive: clients then keep
    looking the partition up, where a dead leader named would have them wait on it."""
    image = broker.image
    reg = image.partition(topic, partition)
    if reg is None:  # a topic's partitions being added, not yet registered
        reg = PartitionRegistration((), (), NO_LEADER, -1)
    cluster = broker.cluster
    newer = broker.replica_manager.superseding((topic, partition))
    if newer is not None:  # as the other brokers name it, the store out of this one's reach
        reg = PartitionRegistration(newer.replicas, newer.isr, newer.leader, newer.leader_epoch)
    offline = tuple(
        r
        for r in reg.replicas
        if r not in image.brokers
        or image.brokers[r].fenced
        or (cluster is not None and cluster.lost(r))
    )
    leader = NO_LEADER if reg.leader in offline else reg.leader
    return {
        "error_code": ErrorCode.leader_not_available if leader == NO_LEADER else ErrorCode.none,
        "partition_index": partition,
        "leader_id": leader,
        "leader_epoch": reg.leader_epoch,
        "replica_nodes": reg.replicas,
        "isr_nodes": reg.isr,
        "offline_replicas": offline,
    }


def node_endpoint(broker, listener: str, node_id: int) -> tuple[str, int] | None:
    """Where clients reach broker `node_id` on `listener`: this one as it advertises itself,
    the others as they registered; None for one unknown or without that listener."""
    if node_id == broker.node_id:
        return broker.advertised_address(listener)
    registration = broker.image.brokers.get(node_id)
    if registration is None or listener not in registration.endpoints:
        return None
    return registration.endpoints[listener]


def broker_nodes(broker, ctx: RequestContext, class_name: str, include_fenced=False) -> list:
    """The brokers clients may reach, at their endpoints on the request's listener: this one
    as it advertises itself, the others as they registered; fenced ones only on request."""
    nodes = []
    for node_id, registration in sorted(broker.image.brokers.items()):
        endpoint = node_endpoint(broker, ctx.listener, node_id)
        if endpoint is None or (registration.fenced and not include_fenced):
            continue
        host, port = endpoint
        nodes.append(
            ctx.response(
                class_name,
                node_id=node_id,
                broker_id=node_id,
                host=host,
                port=port,
                rack=registration.rack,
                is_fenced=registration.fenced,
            )
        )
    return nodes


def _topic_error(ctx, name, topic_id, code):
    return ctx.response(
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=UNREQUESTED_OPERATIONS,
    )
