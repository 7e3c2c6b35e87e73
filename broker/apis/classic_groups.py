"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups: the classic group protocol.

Each handler turns the request of any served version into the classic group manager's terms
(fields a version lacks take Kafka's defaults), runs it through the coordinator runtime, and
writes the answer back in the request's version. The versions are Kafka 4.x's: JoinGroup v0-1
were removed by KIP-896; SyncGroup v5 adds the protocol type and name; LeaveGroup v3 (KIP-345)
removes several members, by member or instance id; DescribeGroups v6 (KIP-1043) reports unknown
groups as GROUP_ID_NOT_FOUND. All need READ on the group (DescribeGroups: DESCRIBE), else
GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorized_operations
from broker.apis.base import NO_THROTTLE, ApiSpec, RequestContext, answers_coordinator_errors
from broker.coordinator.classic_group import (
    GroupDescription,
    JoinRequest,
    JoinResponse,
    MemberIdentity,
    Protocol,
    SyncRequest,
    SyncResponse,
)
from broker.security.operations import AclOperation, ResourceType

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS = 11, 12, 13, 14, 15


def _ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


def _client_host(ctx: RequestContext) -> str:
    return f"/{ctx.client_host}"  # Kafka shows InetAddress.toString()


def _may_read(broker, ctx: RequestContext, group_id: str) -> bool:
    return broker.authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id)


def _join_error(broker, ctx: RequestContext, request, code: ErrorCode) -> object:
    return ctx.response(
        "JoinGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        generation_id=-1,
        protocol_type=None,
        protocol_name=None if ctx.api_version >= 7 else "",
        leader="",
        skip_assignment=False,
        member_id="",
        members=(),
    )


@answers_coordinator_errors(_join_error)
async def handle_join_group(broker, ctx: RequestContext, request) -> object:
    if not _may_read(broker, ctx, request.group_id):
        return _join_error(broker, ctx, request, ErrorCode.group_authorization_failed)
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        session_timeout_ms=_ms(request.session_timeout),
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        protocol_type=request.protocol_type,
        protocols=tuple(Protocol(p.name, p.metadata) for p in request.protocols),
        api_version=ctx.api_version,
    )
    coordinator = broker.group_coordinator
    response: JoinResponse = await broker.coordinator_runtime.run(
        request.group_id, lambda now_ms: coordinator.join_group(join, now_ms)
    )
    protocol_name = response.protocol_name
    if ctx.api_version < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    return ctx.response(
        "JoinGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=response.error,
        generation_id=response.generation_id,
        protocol_type=response.protocol_type,
        protocol_name=protocol_name,
        leader=response.leader,
        skip_assignment=response.skip_assignment,
        member_id=response.member_id,
        members=tuple(
            ctx.response(
                "JoinGroupResponseMember",
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata,
            )
            for m in response.members
        ),
    )


def _sync_error(broker, ctx: RequestContext, request, code: ErrorCode) -> object:
    return ctx.response(
        "SyncGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        protocol_type=None,
        protocol_name=None,
        assignment=b"",
    )


@answers_coordinator_errors(_sync_error)
async def handle_sync_group(broker, ctx: RequestContext, request) -> object:
    if not _may_read(broker, ctx, request.group_id):
        return _sync_error(broker, ctx, request, ErrorCode.group_authorization_failed)
    sync = SyncRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=request.generation_id,
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: a.assignment for a in request.assignments},
    )
    coordinator = broker.group_coordinator
    response: SyncResponse = await broker.coordinator_runtime.run(
        request.group_id, lambda now_ms: coordinator.sync_group(sync, now_ms)
    )
    return ctx.response(
        "SyncGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=response.error,
        protocol_type=response.protocol_type,
        protocol_name=response.protocol_name,
        assignment=response.assignment,
    )


def _heartbeat_error(broker, ctx: RequestContext, request, code: ErrorCode) -> object:
    return ctx.response("HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=code)


@answers_coordinator_errors(_heartbeat_error)
async def handle_heartbeat(broker, ctx: RequestContext, request) -> object:
    if not _may_read(broker, ctx, request.group_id):
        return _heartbeat_error(broker, ctx, request, ErrorCode.group_authorization_failed)
    coordinator = broker.group_coordinator
    error = await broker.coordinator_runtime.run(
        request.group_id,
        lambda now_ms: coordinator.heartbeat(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            request.generation_id,
            now_ms,
        ),
    )
    return _heartbeat_error(broker, ctx, request, error)


def _leave_error(broker, ctx: RequestContext, request, code: ErrorCode) -> object:
    return ctx.response(
        "LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=code, members=()
    )


@answers_coordinator_errors(_leave_error)
async def handle_leave_group(broker, ctx: RequestContext, request) -> object:
    if not _may_read(broker, ctx, request.group_id):
        return _leave_error(broker, ctx, request, ErrorCode.group_authorization_failed)
    batched = ctx.api_version >= 3
    members = (
        [MemberIdentity(m.member_id, m.group_instance_id) for m in request.members]
        if batched
        else [MemberIdentity(request.member_id, None)]
    )
    coordinator = broker.group_coordinator
    response = await broker.coordinator_runtime.run(
        request.group_id,
        lambda now_ms: coordinator.leave_group(request.group_id, members, now_ms),
    )
    if not batched:
        # Before v3 the one member's error is the response's.
        error = response.error if response.error != ErrorCode.none else response.members[0].error
        return _leave_error(broker, ctx, request, error)
    return ctx.response(
        "LeaveGroupResponse",
        throttle_time=NO_THROTTLE,
        error_code=response.error,
        members=tuple(
            ctx.response(
                "MemberResponse",
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=m.error,
            )
            for m in response.members
        ),
    )


async def handle_describe_groups(broker, ctx: RequestContext, request) -> object:
    include_operations = getattr(request, "include_authorized_operations", False)
    return ctx.response(
        "DescribeGroupsResponse",
        throttle_time=NO_THROTTLE,
        groups=tuple(
            _described_group(broker, ctx, _describe(broker, ctx, group_id), include_operations)
            for group_id in request.groups
        ),
    )


def _describe(broker, ctx: RequestContext, group_id: str) -> GroupDescription:
    if not broker.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return GroupDescription(group_id, "", error=ErrorCode.group_authorization_failed)
    error = broker.coordinator_runtime.partitions.error(group_id)
    if error is not ErrorCode.none:
        return GroupDescription(group_id, "", error=error)
    coordinator = broker.group_coordinator
    description = coordinator.classic.describe_group(group_id)
    if description.error != ErrorCode.group_id_not_found:
        return description
    if group_id not in coordinator.groups and coordinator.offsets.has_offsets(group_id):
        # Offsets committed without group management make an empty, "simple" classic group.
        return GroupDescription(group_id, "Empty")
    if ctx.api_version < 6:
        return GroupDescription(group_id, description.state)  # Dead, without an error
    return description


def _described_group(
    broker, ctx: RequestContext, group: GroupDescription, include_operations: bool
):
    return ctx.response(
        "DescribedGroup",
        error_code=group.error,
        error_message=group.error_message,
        group_id=group.group_id,
        group_state=group.state,
        protocol_type=group.protocol_type,
        protocol_data=group.protocol_data,
        members=tuple(
            ctx.response(
                "DescribedGroupMember",
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in group.members
        ),
        authorized_operations=authorized_operations(
            broker,
            ctx,
            include_operations and group.error is not ErrorCode.group_authorization_failed,
            ResourceType.GROUP,
            group.group_id,
        ),
    )


SPECS: list[ApiSpec] = [
    ApiSpec(JOIN_GROUP, "JoinGroup", 2, 9, handle_join_group),
    ApiSpec(HEARTBEAT, "Heartbeat", 0, 4, handle_heartbeat),
    ApiSpec(LEAVE_GROUP, "LeaveGroup", 0, 5, handle_leave_group),
    ApiSpec(SYNC_GROUP, "SyncGroup", 0, 5, handle_sync_group),
    ApiSpec(DESCRIBE_GROUPS, "DescribeGroups", 0, 6, handle_describe_groups),
]
