"""ElectLeaders, ListPartitionReassignments and AlterPartitionReassignments, as Kafka's
controller answers them (ReplicationControlManager).

In a cluster they are the controller's: another broker answers NOT_CONTROLLER and Kafka's
admin clients retry at the controller Metadata names. Alone, every partition has this broker
as its only replica, preferred leader and leader, so no election is ever needed and the only
assignment a partition can take is the one it has."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.controller.elections import (
    cancel_reassignment,
    preferred_election,
    reassign,
    unclean_election,
)
from broker.controller.placement import assignment_problem
from broker.security.operations import AclOperation

PREFERRED, UNCLEAN = 0, 1
NOT_NEEDED = "Leader election not needed for topic partition."
NOT_CONTROLLER = "This broker is not the controller."


def _not_controller(broker) -> bool:
    return broker.cluster is not None and not broker.cluster.is_controller


async def _apply(broker, changes: list, outcomes: dict) -> None:
    """Write the controller's `changes`; a change the store refused (this broker lost the
    controller lease meanwhile) answers NOT_CONTROLLER, so the client asks the new one."""
    if not changes:
        return
    applied = await broker.cluster.alter_partitions(changes)
    for (topic, partition, _, _), ok in zip(changes, applied, strict=True):
        if not ok:
            outcomes[topic, partition] = ErrorCode.not_controller, NOT_CONTROLLER


def _partition_error(broker, topic: str, partition: int) -> tuple[ErrorCode, str | None]:
    found = broker.image.topic(topic)
    if found is None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
    if not 0 <= partition < found.partitions:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
    return ErrorCode.none, None


# -- ElectLeaders ----------------------------------------------------------------------------


async def handle_elect_leaders(broker, ctx: RequestContext, request) -> object:
    election_type = getattr(request, "election_type", PREFERRED)
    top_error, top_message = ErrorCode.none, None
    if not authorize_cluster(broker, ctx, AclOperation.ALTER):
        top_error = ErrorCode.cluster_authorization_failed
    elif election_type not in (PREFERRED, UNCLEAN):
        top_error, top_message = ErrorCode.invalid_request, f"Unknown election type {election_type}"
    elif _not_controller(broker):
        top_error, top_message = ErrorCode.not_controller, NOT_CONTROLLER
    # Null asks for every partition, and Kafka lists only those it elected a leader for.
    asked_all = request.topic_partitions is None
    if asked_all:
        wanted = (
            [(t.name, i) for t in broker.image.topics() for i in range(t.partitions)]
            if top_error == ErrorCode.none
            else []
        )
    else:
        wanted = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    outcomes: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    changes = []
    usable = broker.image.usable_brokers()
    for topic, partition in wanted:
        if top_error != ErrorCode.none:
            outcomes[topic, partition] = top_error, top_message
            continue
        code, message = _partition_error(broker, topic, partition)
        if code == ErrorCode.none:
            reg = broker.image.partition(topic, partition)
            code, message, new = _election(reg, election_type, usable, topic, partition)
            if new is not None:
                changes.append((topic, partition, reg.partition_epoch, new))
        outcomes[topic, partition] = code, message
    await _apply(broker, changes, outcomes)
    results: dict[str, list] = {}
    for (topic, partition), (code, message) in outcomes.items():
        if asked_all and code != ErrorCode.none:
            continue
        results.setdefault(topic, []).append(
            ctx.response(
                "PartitionResult", partition_id=partition, error_code=code, error_message=message
            )
        )
    return ctx.response(
        "ElectLeadersResponse",
        throttle_time=NO_THROTTLE,
        error_code=top_error,
        replica_election_results=tuple(
            ctx.response("ReplicaElectionResult", topic=topic, partition_result=tuple(parts))
            for topic, parts in results.items()
        ),
    )


def _election(reg, election_type: int, usable: set[int], topic: str, partition: int):
    """(error code, message, the new registration or None) for one partition's election."""
    if election_type == PREFERRED:
        why = preferred_election(reg, usable)
        if why is None:
            return ErrorCode.none, None, reg.with_leader(reg.preferred_leader, reg.isr)
        if why == "not needed":
            return ErrorCode.election_not_needed, NOT_NEEDED, None
        return (
            ErrorCode.preferred_leader_not_available,
            f"Failed to elect leader for partition {topic}-{partition} under strategy "
            "PreferredReplicaPartitionLeaderElectionStrategy",
            None,
        )
    if not reg.offline:
        return ErrorCode.election_not_needed, NOT_NEEDED, None
    new = unclean_election(reg, usable)
    if new is None:
        return (
            ErrorCode.eligible_leaders_not_available,
            f"Failed to elect leader for partition {topic}-{partition} under strategy "
            "UncleanPartitionLeaderElectionStrategy",
            None,
        )
    return ErrorCode.none, None, new


# -- reassignments ---------------------------------------------------------------------------


def handle_list_partition_reassignments(broker, ctx: RequestContext, request) -> object:
    """The partitions whose reassignment is in progress (never one on a single broker)."""
    authorized = authorize_cluster(broker, ctx, AclOperation.DESCRIBE)
    code = ErrorCode.none if authorized else ErrorCode.cluster_authorization_failed
    if authorized and _not_controller(broker):
        code = ErrorCode.not_controller
    image = broker.image
    if request.topics is None:
        wanted = {t.name: range(t.partitions) for t in image.topics()}
    else:
        wanted = {t.name: t.partition_indexes for t in request.topics}
    topics = []
    for name, indexes in wanted.items() if code == ErrorCode.none else ():
        ongoing = [
            ctx.response(
                "OngoingPartitionReassignment",
                partition_index=i,
                replicas=reg.replicas,
                adding_replicas=reg.adding_replicas,
                removing_replicas=reg.removing_replicas,
            )
            for i in indexes
            if (reg := image.partition(name, i)) is not None
            and (reg.adding_replicas or reg.removing_replicas)
        ]
        if ongoing:
            topics.append(
                ctx.response("OngoingTopicReassignment", name=name, partitions=tuple(ongoing))
            )
    return ctx.response(
        "ListPartitionReassignmentsResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=NOT_CONTROLLER if code == ErrorCode.not_controller else None,
        topics=tuple(topics),
    )


def _reassignment_error(
    broker, topic: str, partition: int, replicas: tuple[int, ...] | None, allow_rf_change: bool
):
    """(error code, message, the new registration or None) for one partition."""
    code, message = _partition_error(broker, topic, partition)
    if code != ErrorCode.none:
        return code, message, None
    reg = broker.image.partition(topic, partition)
    if replicas is None:  # a cancellation
        if reg.adding_replicas or reg.removing_replicas:
            reverted = cancel_reassignment(reg, broker.image.usable_brokers())
            if reverted is None:
                return (
                    ErrorCode.invalid_replica_assignment,
                    f"Unable to revert partition assignment for {topic}-{partition} because "
                    "it would require an unclean leader election.",
                    None,
                )
            return ErrorCode.none, None, reverted
        return (
            ErrorCode.no_reassignment_in_progress,
            "No partition reassignment is in progress.",
            None,
        )
    problem = assignment_problem(replicas, broker.image.brokers)
    if problem:
        return ErrorCode.invalid_replica_assignment, problem, None
    current = [r for r in reg.replicas if r not in reg.adding_replicas]
    if not allow_rf_change and len(replicas) != len(current):
        return (
            ErrorCode.invalid_replication_factor,
            f"The replication factor is changed from {len(current)} to {len(replicas)} but "
            "allowReplicationFactorChange is false.",
            None,
        )
    if tuple(replicas) == tuple(current) and not reg.adding_replicas:
        return ErrorCode.none, None, None  # the assignment it has
    return ErrorCode.none, None, reassign(reg, tuple(replicas))


async def handle_alter_partition_reassignments(broker, ctx: RequestContext, request) -> object:
    allow_rf_change = getattr(request, "allow_replication_factor_change", True)
    authorized = authorize_cluster(broker, ctx, AclOperation.ALTER)
    top_error = ErrorCode.none if authorized else ErrorCode.cluster_authorization_failed
    top_message = None
    if authorized and _not_controller(broker):
        top_error, top_message = ErrorCode.not_controller, NOT_CONTROLLER
    outcomes = {}
    changes = []
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if top_error != ErrorCode.none:
                outcomes[key] = top_error, top_message
                continue
            code, message, new = _reassignment_error(
                broker, topic.name, p.partition_index, p.replicas, allow_rf_change
            )
            outcomes[key] = code, message
            if new is not None:
                old = broker.image.partition(*key)
                changes.append((*key, old.partition_epoch, new))
    await _apply(broker, changes, outcomes)
    responses = [
        ctx.response(
            "ReassignableTopicResponse",
            name=topic.name,
            partitions=tuple(
                ctx.response(
                    "ReassignablePartitionResponse",
                    partition_index=p.partition_index,
                    error_code=outcomes[topic.name, p.partition_index][0],
                    error_message=outcomes[topic.name, p.partition_index][1],
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    ]
    return ctx.response(
        "AlterPartitionReassignmentsResponse",
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=allow_rf_change,
        error_code=top_error,
        error_message=top_message,
        responses=tuple(responses),
    )
