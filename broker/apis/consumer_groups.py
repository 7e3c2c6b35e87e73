"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: the KIP-848 consumer group protocol.

Both versions of each are served, as by Kafka 4.x: ConsumerGroupHeartbeat v1 adds the
server-side regex subscription and makes the client generate its member id; ConsumerGroupDescribe
v1 adds the member type. A heartbeat needs READ on the group and DESCRIBE on the topics it
names; a regex it brings is resolved by the coordinator to the topics the member's principal
may DESCRIBE (Kafka's KAFKA-18813: the heartbeat carries the member's authorization, the
others are left out, not refused). A description needs DESCRIBE on the group and on every
topic its members hold.
"""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorized_operations, filter_authorized
from broker.apis.base import NO_THROTTLE, ApiSpec, RequestContext, answers_coordinator_errors
from broker.coordinator.assignors import Assignment
from broker.coordinator.consumer_group import ConsumerGroup, GroupError, HeartbeatRequest
from broker.security.operations import AclOperation, ResourceType

# ConsumerGroupDescribe v1's member type: how the member talks to the group (online migration).
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1


def _ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


@answers_coordinator_errors(lambda broker, ctx, request, code: _heartbeat_error(ctx, code, None))
async def handle_consumer_group_heartbeat(broker, ctx: RequestContext, request) -> object:
    coordinator = broker.group_coordinator
    # Kafka's isConsumerGroupProtocolEnabled: the protocol is configured and group.version >= 1
    # (one sent before a group.version downgrade took the API out of ApiVersions).
    if not broker.consumer_protocol_enabled:
        return _heartbeat_error(
            ctx, ErrorCode.unsupported_version, "The consumer group protocol is not enabled."
        )
    if not broker.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _heartbeat_error(ctx, ErrorCode.group_authorization_failed, None)
    subscribed = set(request.subscribed_topic_names or ())
    if filter_authorized(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, subscribed) != (
        subscribed
    ):
        return _heartbeat_error(ctx, ErrorCode.topic_authorization_failed, None)
    heartbeat = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned_partitions=(
            None
            if request.topic_partitions is None
            else {tp.topic_id: frozenset(tp.partitions) for tp in request.topic_partitions}
        ),
    )
    response = await broker.coordinator_runtime.run(
        request.group_id,
        lambda now_ms: coordinator.consumer.heartbeat(
            heartbeat,
            now_ms,
            client_id=ctx.client_id or "",
            client_host=f"/{ctx.client_host}",  # Kafka shows InetAddress.toString()
            api_version=ctx.api_version,
            describable=lambda names: filter_authorized(
                broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names
            ),
        ),
    )
    if response.error_code != ErrorCode.none:
        return _heartbeat_error(ctx, response.error_code, response.error_message)
    assignment = None
    if response.assignment is not None:
        assignment = ctx.response(
            "Assignment",
            topic_partitions=tuple(
                ctx.response("TopicPartitions", topic_id=topic_id, partitions=tuple(sorted(ps)))
                for topic_id, ps in sorted(response.assignment.items())
            ),
        )
    return ctx.response(
        "ConsumerGroupHeartbeatResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        member_id=response.member_id,
        member_epoch=response.member_epoch,
        heartbeat_interval=timedelta(milliseconds=response.heartbeat_interval_ms),
        assignment=assignment,
    )


def _heartbeat_error(ctx: RequestContext, code: ErrorCode, message: str | None) -> object:
    return ctx.response(
        "ConsumerGroupHeartbeatResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        member_id=None,
        member_epoch=0,
        heartbeat_interval=timedelta(0),
        assignment=None,
    )


async def handle_consumer_group_describe(broker, ctx: RequestContext, request) -> object:
    manager = broker.group_coordinator.consumer
    described = []
    for group_id in request.group_ids:
        if not group_id:
            described.append(_describe_error(ctx, group_id, ErrorCode.invalid_group_id, None))
            continue
        if not broker.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            code = ErrorCode.group_authorization_failed
        else:
            code = broker.coordinator_runtime.partitions.error(group_id)
        if code is not ErrorCode.none:
            described.append(_describe_error(ctx, group_id, code, None))
            continue
        try:
            group = manager.consumer_group(group_id)
        except GroupError as e:
            described.append(_describe_error(ctx, group_id, e.code, e.message))
            continue
        if not _may_describe_topics(broker, ctx, group):
            code = ErrorCode.topic_authorization_failed
            message = (
                "The described group uses topics that the client is not authorized to describe."
            )
            described.append(_describe_error(ctx, group_id, code, message))
            continue
        described.append(_describe(broker, ctx, group, request.include_authorized_operations))
    return ctx.response(
        "ConsumerGroupDescribeResponse", throttle_time=NO_THROTTLE, groups=tuple(described)
    )


def _describe_error(
    ctx: RequestContext, group_id: str, code: ErrorCode, message: str | None
) -> object:
    return ctx.response(
        "DescribedGroup",
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
        members=(),
    )


def _may_describe_topics(broker, ctx: RequestContext, group: ConsumerGroup) -> bool:
    """Clients may not learn of topics they cannot describe through a group's assignments."""
    topic_ids = set()
    for m in group.members.values():
        topic_ids.update(m.current.assigned_partitions)
        topic_ids.update(group.target_assignment.get(m.member_id, {}))
    names = {t.name for t in map(broker.image.topic_by_id, topic_ids) if t is not None}
    return filter_authorized(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names) == names


def _describe(broker, ctx: RequestContext, group: ConsumerGroup, include_operations: bool):

    def assignment(partitions: Assignment) -> object:
        topics = []
        for topic_id, ps in sorted(partitions.items()):
            topic = broker.image.topic_by_id(topic_id)
            if topic is not None:  # a deleted topic is on its way out of the assignment
                topics.append(
                    ctx.response(
                        "TopicPartitions",
                        topic_id=topic_id,
                        topic_name=topic.name,
                        partitions=tuple(sorted(ps)),
                    )
                )
        return ctx.response("Assignment", topic_partitions=tuple(topics))

    members = tuple(
        ctx.response(
            "Member",
            member_id=m.member_id,
            instance_id=m.metadata.instance_id,
            rack_id=m.metadata.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.metadata.client_id,
            client_host=m.metadata.client_host,
            subscribed_topic_names=m.metadata.subscribed_topic_names,
            subscribed_topic_regex=m.metadata.subscribed_topic_regex,
            assignment=assignment(m.current.assigned_partitions),
            target_assignment=assignment(group.target_assignment.get(m.member_id, {})),
            member_type=(CLASSIC_MEMBER_TYPE if m.uses_classic_protocol else CONSUMER_MEMBER_TYPE),
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    )
    return ctx.response(
        "DescribedGroup",
        error_code=ErrorCode.none,
        error_message=None,
        group_id=group.group_id,
        group_state=group.state_name,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=broker.group_coordinator.consumer.assignor_name(group.members.values()),
        members=members,
        authorized_operations=authorized_operations(
            broker, ctx, include_operations, ResourceType.GROUP, group.group_id
        ),
    )


SPECS: list[ApiSpec] = [
    ApiSpec(68, "ConsumerGroupHeartbeat", 0, 1, handle_consumer_group_heartbeat),
    ApiSpec(69, "ConsumerGroupDescribe", 0, 1, handle_consumer_group_describe),
]
