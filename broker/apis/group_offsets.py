"""FindCoordinator, OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DeleteGroups.

Authorization as in Kafka: finding a coordinator needs DESCRIBE on the group or transactional
id; committing READ on the group and on each topic; fetching DESCRIBE on the group, and offsets
of topics the principal may not DESCRIBE are refused or left out; deleting offsets DELETE on
the group and READ on each topic; deleting a group DELETE on it; ListGroups shows every group
to DESCRIBE on the cluster, otherwise the groups the principal may DESCRIBE."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster, filter_authorized
from broker.apis.base import NO_THROTTLE, ApiSpec, RequestContext, answers_coordinator_errors
from broker.apis.metadata import node_endpoint
from broker.coordinator.offsets import NO_OFFSET, CommittedOffset, OffsetCommitRequest
from broker.coordinator.records import ZERO_UUID
from broker.security.operations import AclOperation, ResourceType
from broker.server.coordinator_log import CoordinatorError

GROUP_KEY, TRANSACTION_KEY = 0, 1
_KEY_RESOURCES = {
    GROUP_KEY: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
    TRANSACTION_KEY: (
        ResourceType.TRANSACTIONAL_ID,
        ErrorCode.transactional_id_authorization_failed,
    ),
}


async def handle_find_coordinator(broker, ctx: RequestContext, request) -> object:
    keys = list(getattr(request, "coordinator_keys", ()) or [getattr(request, "key", "")])
    key_type = getattr(request, "key_type", GROUP_KEY)
    if key_type not in _KEY_RESOURCES:
        found = (ErrorCode.invalid_request, f"unknown coordinator key type {key_type}", -1, "", -1)
        results = [(key, *found) for key in keys]
    else:
        resource_type, refused = _KEY_RESOURCES[key_type]
        allowed = filter_authorized(broker, ctx, AclOperation.DESCRIBE, resource_type, keys)
        if key_type == GROUP_KEY:
            runtime = broker.coordinator_runtime
        else:
            runtime = broker.transaction_runtime
        if allowed:
            await runtime.ensure_topic()
        results = [
            _coordinator(broker, ctx, runtime.partitions, key)
            if key in allowed
            else (key, refused, None, -1, "", -1)
            for key in keys
        ]
    if ctx.api_version < 4:
        _, code, message, node_id, host, port = results[0]
        return ctx.response(
            "FindCoordinatorResponse",
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            node_id=node_id,
            host=host,
            port=port,
        )
    return ctx.response(
        "FindCoordinatorResponse",
        throttle_time=NO_THROTTLE,
        coordinators=tuple(
            ctx.response(
                "Coordinator",
                key=key,
                node_id=node_id,
                host=host,
                port=port,
                error_code=code,
                error_message=message,
            )
            for key, code, message, node_id, host, port in results
        ),
    )


def _coordinator(broker, ctx: RequestContext, partitions, key: str) -> tuple:
    """The leader of the key's partition of the coordinator's topic, at its endpoint on the
    request's listener; COORDINATOR_NOT_AVAILABLE while the partition has none."""
    leader = partitions.leader(key)
    endpoint = node_endpoint(broker, ctx.listener, leader) if leader >= 0 else None
    if endpoint is None:
        return key, ErrorCode.coordinator_not_available, None, -1, "", -1
    return key, ErrorCode.none, None, leader, *endpoint


# OffsetCommit and OffsetFetch v10 name topics by id instead of name (KIP-848), in requests and
# responses alike.
TOPIC_IDS_VERSION = 10


def _named(broker, ctx: RequestContext, topics) -> list[tuple[str | None, object]]:
    """(name, requested topic) for each requested topic: v10 names it by id, and an id this
    broker does not know (the zero id, which kio reads as None, included) names none."""
    if ctx.api_version < TOPIC_IDS_VERSION:
        return [(t.name, t) for t in topics]
    image = broker.image
    found = [(image.topic_by_id(t.topic_id) if t.topic_id else None, t) for t in topics]
    return [(meta.name if meta else None, t) for meta, t in found]


def _offset_commit_error(broker, ctx: RequestContext, request, code: ErrorCode) -> object:
    topics = _named(broker, ctx, request.topics)
    return _offset_commit_response(ctx, topics, _all_partitions(topics, code))


@answers_coordinator_errors(_offset_commit_error)
async def handle_offset_commit(broker, ctx: RequestContext, request) -> object:
    topics = _named(broker, ctx, request.topics)
    if not broker.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        errors = _all_partitions(topics, ErrorCode.group_authorization_failed)
        return _offset_commit_response(ctx, topics, errors)
    readable = filter_authorized(
        broker, ctx, AclOperation.READ, ResourceType.TOPIC, (n for n, _ in topics if n is not None)
    )
    # As Kafka's KafkaApis: an unknown id first (whether it is authorized cannot be told),
    # then READ on the topic, then the partition must exist (Kafka refuses offsets of topics
    # and partitions it does not have, which would otherwise outlive any topic of that name).
    errors = {
        **_all_partitions(
            [(n, t) for n, t in topics if n is not None and n not in readable],
            ErrorCode.topic_authorization_failed,
        ),
        **_all_partitions([(n, t) for n, t in topics if n is None], ErrorCode.unknown_topic_id),
        **{
            (name, p.partition_index): ErrorCode.unknown_topic_or_partition
            for name, t in topics
            if name in readable
            for p in t.partitions
            if broker.image.partition(name, p.partition_index) is None
        },
    }
    partitions = [
        OffsetCommitRequest(
            topic=name,
            partition=p.partition_index,
            offset=p.committed_offset,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
            metadata=p.committed_metadata,
            topic_id=getattr(t, "topic_id", None) or ZERO_UUID,
        )
        for name, t in topics
        if name in readable
        for p in t.partitions
        if (name, p.partition_index) not in errors
    ]
    if not partitions:
        return _offset_commit_response(ctx, topics, errors)
    # v2-v4 may ask for a retention of their own; -1 means the broker's.
    retention = getattr(request, "retention_time", None)
    retention_ms = (
        int(retention.total_seconds() * 1000)
        if isinstance(retention, timedelta)
        else (retention if retention is not None else -1)
    )
    coordinator = broker.group_coordinator
    committed = await broker.coordinator_runtime.run(
        request.group_id,
        lambda now_ms: coordinator.commit_offsets(
            request.group_id,
            request.member_id,
            request.generation_id_or_member_epoch,
            getattr(request, "group_instance_id", None),
            partitions,
            now_ms,
            ctx.api_version,
            expire_timestamp=now_ms + retention_ms if retention_ms >= 0 else -1,
        ),
    )
    return _offset_commit_response(ctx, topics, {**errors, **committed})


def _all_partitions(topics, code: ErrorCode) -> dict[tuple[str | None, int], ErrorCode]:
    """`code` for each partition of (name, request topic) pairs; topics of unknown ids share
    the name None, and so one error."""
    return {(name, p.partition_index): code for name, t in topics for p in t.partitions}


def _offset_commit_response(ctx: RequestContext, topics, errors) -> object:
    return ctx.response(
        "OffsetCommitResponse",
        throttle_time=NO_THROTTLE,
        topics=tuple(
            ctx.response(
                "OffsetCommitResponseTopic",
                # v10 answers by the id it was asked by, known or not; earlier ones by name.
                name=name,
                topic_id=getattr(t, "topic_id", None),
                partitions=tuple(
                    ctx.response(
                        "OffsetCommitResponsePartition",
                        partition_index=p.partition_index,
                        error_code=errors[(name, p.partition_index)],
                    )
                    for p in t.partitions
                ),
            )
            for name, t in topics
        ),
    )


async def handle_offset_fetch(broker, ctx: RequestContext, request) -> object:
    await broker.coordinator_runtime.ensure_topic()
    # v7+: a consumer about to start from its committed offsets may ask not to be given one
    # that an open transaction is about to replace (UNSTABLE_OFFSET_COMMIT, it retries).
    require_stable = getattr(request, "require_stable", False)
    if ctx.api_version >= 8:
        groups = tuple(
            _fetch_group(
                broker,
                ctx,
                g.group_id,
                g.topics,
                getattr(g, "member_id", None),
                getattr(g, "member_epoch", -1),
                require_stable,
                batched=True,
            )
            for g in request.groups
        )
        return ctx.response("OffsetFetchResponse", throttle_time=NO_THROTTLE, groups=groups)
    error, topics = _fetch_group(
        broker, ctx, request.group_id, request.topics, None, -1, require_stable, batched=False
    )
    return ctx.response(
        "OffsetFetchResponse", throttle_time=NO_THROTTLE, topics=topics, error_code=error
    )


def _fetch_group(
    broker, ctx, group_id, topics, member_id, member_epoch, require_stable, batched: bool
):
    by_id = ctx.api_version >= TOPIC_IDS_VERSION
    unknown_ids: list = []  # v10's request topics of ids this broker does not know
    if topics is None:
        wanted = topic_ids = None
    else:
        named = _named(broker, ctx, topics)
        wanted = [(n, p) for n, t in named if n is not None for p in t.partition_indexes or ()]
        unknown_ids = [t for n, t in named if n is None]
        topic_ids = {n: t.topic_id for n, t in named if n is not None} if by_id else None
    if not broker.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        error = ErrorCode.group_authorization_failed
    else:
        error = broker.coordinator_runtime.partitions.error(group_id)
    if error is not ErrorCode.none:
        # Before v2 the error is told partition by partition.
        refused = CommittedOffset(NO_OFFSET, -1, "", error)
        offsets = dict.fromkeys(wanted or (), refused) if ctx.api_version < 2 else {}
    else:
        error, offsets = _fetch_describable(
            broker, ctx, group_id, wanted, member_id, member_epoch, require_stable, topic_ids
        )
    prefix = "OffsetFetchResponse"
    names = ("Topics", "Partitions") if batched else ("Topic", "Partition")

    def partition(index: int, committed: CommittedOffset | None):
        return ctx.response(
            prefix + names[1],
            partition_index=index,
            committed_offset=committed.offset if committed else -1,
            committed_leader_epoch=committed.leader_epoch if committed else -1,
            metadata=committed.metadata if committed else "",
            error_code=committed.error_code if committed else ErrorCode.none,
        )

    by_topic: dict[str, list] = {}
    for (topic, index), committed in offsets.items():
        by_topic.setdefault(topic, []).append(partition(index, committed))
    ids = _response_topic_ids(broker, by_topic, topic_ids) if by_id else {}
    response_topics = [
        ctx.response(prefix + names[0], name=t, topic_id=ids.get(t), partitions=tuple(ps))
        for t, ps in by_topic.items()
        if not by_id or t in ids
    ]
    if error is ErrorCode.none:
        unknown = CommittedOffset(NO_OFFSET, -1, "", ErrorCode.unknown_topic_id)
        response_topics += [
            ctx.response(
                prefix + names[0],
                topic_id=t.topic_id,
                partitions=tuple(partition(p, unknown) for p in t.partition_indexes),
            )
            for t in unknown_ids
        ]
    if batched:
        return ctx.response(
            "OffsetFetchResponseGroup",
            group_id=group_id,
            topics=tuple(response_topics),
            error_code=error,
        )
    return error, tuple(response_topics)


def _response_topic_ids(broker, names, topic_ids) -> dict:
    """The id v10 answers each topic by: the one it was asked by, or (all offsets asked for)
    the topic's current id. A topic that no longer exists has none: its offsets are left out,
    as Kafka does."""
    if topic_ids is not None:
        return topic_ids
    current = broker.image.topic
    return {t: meta.topic_id for t in names if (meta := current(t)) is not None}


_TOPIC_REFUSED = CommittedOffset(NO_OFFSET, -1, "", ErrorCode.topic_authorization_failed)


def _fetch_describable(
    broker, ctx, group_id, wanted, member_id, member_epoch, require_stable, topic_ids
):
    """Offsets of topics the principal may DESCRIBE; the others are refused when named and
    left out of a fetch of all offsets."""
    coordinator = broker.group_coordinator
    if wanted is None:
        error, offsets = coordinator.fetch_offsets(
            group_id, None, member_id, member_epoch, require_stable=require_stable
        )
        topics = (topic for topic, _ in offsets)
        describable = filter_authorized(
            broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics
        )
        return error, {tp: c for tp, c in offsets.items() if tp[0] in describable}
    topics = (topic for topic, _ in wanted)
    describable = filter_authorized(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)
    error, offsets = coordinator.fetch_offsets(
        group_id,
        [tp for tp in wanted if tp[0] in describable],
        member_id,
        member_epoch,
        require_stable=require_stable,
        topic_ids=topic_ids,
    )
    if error is not ErrorCode.none:
        return error, offsets
    return error, {tp: offsets[tp] if tp[0] in describable else _TOPIC_REFUSED for tp in wanted}


@answers_coordinator_errors(
    lambda broker, ctx, request, code: _offset_delete_response(ctx, request, code, {})
)
async def handle_offset_delete(broker, ctx: RequestContext, request) -> object:
    if not broker.authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        error, errors = ErrorCode.group_authorization_failed, {}
    else:
        readable = filter_authorized(
            broker, ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
        )
        wanted = [
            (t.name, p.partition_index)
            for t in request.topics
            if t.name in readable
            for p in t.partitions
        ]
        coordinator = broker.group_coordinator
        error, errors = await broker.coordinator_runtime.run(
            request.group_id, lambda now_ms: coordinator.delete_offsets(request.group_id, wanted)
        )
        refused = [(t.name, t) for t in request.topics if t.name not in readable]
        errors = {**errors, **_all_partitions(refused, ErrorCode.topic_authorization_failed)}
    return _offset_delete_response(ctx, request, error, errors)


def _offset_delete_response(ctx: RequestContext, request, error: ErrorCode, errors) -> object:
    return ctx.response(
        "OffsetDeleteResponse",
        error_code=error,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            ctx.response(
                "OffsetDeleteResponseTopic",
                name=t.name,
                partitions=tuple(
                    ctx.response(
                        "OffsetDeleteResponsePartition",
                        partition_index=p.partition_index,
                        error_code=errors.get((t.name, p.partition_index), ErrorCode.none),
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
        if error == ErrorCode.none
        else (),
    )


def handle_list_groups(broker, ctx: RequestContext, request) -> object:
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    groups = broker.group_coordinator.list_groups(states or None, types or None)
    if not authorize_cluster(broker, ctx, AclOperation.DESCRIBE):
        describable = filter_authorized(
            broker, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in groups)
        )
        groups = [g for g in groups if g.group_id in describable]
    return ctx.response(
        "ListGroupsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        groups=tuple(
            ctx.response(
                "ListedGroup",
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in groups
        ),
    )


async def handle_delete_groups(broker, ctx: RequestContext, request) -> object:
    coordinator = broker.group_coordinator
    names = list(request.groups_names)
    results: dict[str, ErrorCode] = {}
    deletable = filter_authorized(broker, ctx, AclOperation.DELETE, ResourceType.GROUP, names)
    for group_id in set(names) - deletable:
        results[group_id] = ErrorCode.group_authorization_failed
    # One operation per group: each group's records go to its own partition.
    for group_id in deletable:
        try:
            outcome = await broker.coordinator_runtime.run(
                group_id, lambda now_ms, g=group_id: coordinator.delete_groups([g])
            )
        except CoordinatorError as e:
            outcome = {group_id: e.code}
        results.update(outcome)
    return ctx.response(
        "DeleteGroupsResponse",
        throttle_time=NO_THROTTLE,
        results=tuple(
            ctx.response("DeletableGroupResult", group_id=g, error_code=results[g]) for g in names
        ),
    )


SPECS: list[ApiSpec] = [
    ApiSpec(10, "FindCoordinator", 0, 6, handle_find_coordinator),
    # v10 of OffsetCommit and OffsetFetch name topics by id (Kafka 4.1).
    ApiSpec(8, "OffsetCommit", 2, 10, handle_offset_commit),
    ApiSpec(9, "OffsetFetch", 1, 10, handle_offset_fetch),
    ApiSpec(47, "OffsetDelete", 0, 0, handle_offset_delete),
    ApiSpec(16, "ListGroups", 0, 5, handle_list_groups),
    ApiSpec(42, "DeleteGroups", 0, 2, handle_delete_groups),
]
