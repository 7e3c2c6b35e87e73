"""DescribeTopicPartitions (KIP-966's paged Metadata, which Java admin clients since 3.8 call to
describe topics): topics in name order, their partitions up to a limit per response, and a
cursor where the next response goes on. Listed as Kafka's DescribeTopicPartitionsRequestHandler
and metadata cache list them."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import UNREQUESTED_OPERATIONS, authorized_operations
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.apis.metadata import partition_state
from broker.metadata.image import INTERNAL_TOPICS, topic_name_problem
from broker.security.operations import AclOperation, ResourceType

ZERO_UUID = uuid.UUID(int=0)


def _topic(
    ctx,
    code: ErrorCode,
    name: str,
    topic_id=ZERO_UUID,
    partitions=(),
    operations=UNREQUESTED_OPERATIONS,
):
    return ctx.response(
        "DescribeTopicPartitionsResponseTopic",
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=operations,
    )


def handle_describe_topic_partitions(broker, ctx: RequestContext, request) -> object:
    image = broker.image
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if fetch_all:
        names = {t.name for t in image.topics() if t.name >= after}
    else:
        names = {t.name for t in request.topics if t.name >= after}
        if cursor is not None and cursor.topic_name not in names:
            # Kafka: "the topic list should contain the cursor topic" (InvalidRequestException).
            return _refused(ctx, request)
    if cursor is not None and cursor.partition_index < 0:
        return _refused(ctx, request)  # Kafka: "the partition index ... can't be negative"
    topics, refused = [], []
    # At least one partition, as Kafka: a page of none would hand the client a cursor that
    # never moves.
    remaining = max(
        min(broker.config["max.request.partition.size.limit"], request.response_partition_limit),
        1,
    )
    next_cursor = None
    for name in sorted(names):
        if not broker.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            # Whether it exists stays secret; a listing of all topics just leaves it out.
            if not fetch_all:
                refused.append(_topic(ctx, ErrorCode.topic_authorization_failed, name))
            continue
        if remaining == 0:
            # Every partition before it was given: the next response starts at this topic.
            next_cursor = ctx.response("Cursor", topic_name=name, partition_index=0)
            break
        topic = image.topic(name)
        operations = authorized_operations(broker, ctx, True, ResourceType.TOPIC, name)
        if topic is None:
            if not fetch_all:
                code = (
                    ErrorCode.invalid_topic_exception
                    if topic_name_problem(name)
                    else ErrorCode.unknown_topic_or_partition
                )
                topics.append(_topic(ctx, code, name, operations=operations))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        upper = min(topic.partitions, first + remaining)
        partitions = tuple(
            ctx.response(
                "DescribeTopicPartitionsResponsePartition", **partition_state(broker, name, p)
            )
            for p in range(first, upper)
        )
        topics.append(_topic(ctx, ErrorCode.none, name, topic.topic_id, partitions, operations))
        if upper < topic.partitions:
            next_cursor = ctx.response("Cursor", topic_name=name, partition_index=upper)
            break
        remaining -= len(partitions)
    return _response(ctx, topics + refused, next_cursor)


def _refused(ctx, request) -> object:
    """Kafka's error response to an invalid request: every topic asked for, INVALID_REQUEST."""
    return _response(ctx, [_topic(ctx, ErrorCode.invalid_request, t.name) for t in request.topics])


def _response(ctx, topics: list, next_cursor=None) -> object:
    return ctx.response(
        "DescribeTopicPartitionsResponse",
        throttle_time=NO_THROTTLE,
        topics=tuple(topics),
        next_cursor=next_cursor,
    )
