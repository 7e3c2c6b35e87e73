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
from broker.metadata.image import topic_name_problem
from broker.security.operations import AclOperation, ResourceType


async def handle_metadata(broker, ctx: RequestContext, request) -> object:
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
        if topic is None:
            code = (
                ErrorCode.invalid_topic_exception
                if topic_name_problem(name)
                else ErrorCode.unknown_topic_or_partition
            )
            results.append(_topic_error(ctx, name, topic_id, code))
            continue
        partitions = tuple(
            ctx.response("MetadataResponsePartition", **partition_state(broker, p))
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
        controller_id=broker.node_id,
        topics=tuple(results),
        cluster_authorized_operations=cluster_authorized_operations(
            broker, ctx, getattr(request, "include_cluster_authorized_operations", False)
        ),
    )


def partition_state(broker, partition: int) -> dict:
    """A partition's leader and replicas, as Metadata and DescribeTopicPartitions give them:
    this broker is each partition's only replica, in sync and leading."""
    return {
        "error_code": ErrorCode.none,
        "partition_index": partition,
        "leader_id": broker.node_id,
        "leader_epoch": broker.replica_manager.leader_epoch,
        "replica_nodes": (broker.node_id,),
        "isr_nodes": (broker.node_id,),
        "offline_replicas": (),
    }


def broker_nodes(broker, ctx: RequestContext, class_name: str, **extra) -> list:
    host, port = broker.advertised_address(ctx.listener)
    return [
        ctx.response(
            class_name,
            node_id=broker.node_id,
            broker_id=broker.node_id,
            host=host,
            port=port,
            rack=None,
            **extra,
        )
    ]


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
