"""ElectLeaders, ListPartitionReassignments and AlterPartitionReassignments, as Kafka's
controller answers them (ReplicationControlManager) for a cluster of one broker: every
partition has this broker as its only replica, its preferred leader, and its leader, so no
election is ever needed and the only assignment a partition can take is the one it has."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.security.operations import AclOperation

PREFERRED, UNCLEAN = 0, 1
NOT_NEEDED = "Leader election not needed for topic partition."


def _partition_error(broker, topic: str, partition: int) -> tuple[ErrorCode, str | None]:
    found = broker.image.topic(topic)
    if found is None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
    if not 0 <= partition < found.partitions:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
    return ErrorCode.none, None


# -- ElectLeaders ----------------------------------------------------------------------------


def handle_elect_leaders(broker, ctx: RequestContext, request) -> object:
    election_type = getattr(request, "election_type", PREFERRED)
    top_error, top_message = ErrorCode.none, None
    if not authorize_cluster(broker, ctx, AclOperation.ALTER):
        top_error = ErrorCode.cluster_authorization_failed
    elif election_type not in (PREFERRED, UNCLEAN):
        top_error, top_message = ErrorCode.invalid_request, f"Unknown election type {election_type}"
    # Null asks for every partition, and Kafka lists only those whose election was needed:
    # none here.
    results: dict[str, list] = {}
    if request.topic_partitions is not None:
        for topic in request.topic_partitions:
            for partition in topic.partitions:
                if top_error != ErrorCode.none:
                    code, message = top_error, top_message
                else:
                    code, message = _partition_error(broker, topic.topic, partition)
                    if code == ErrorCode.none:
                        # The preferred leader leads (PREFERRED), a leader exists (UNCLEAN).
                        code, message = ErrorCode.election_not_needed, NOT_NEEDED
                results.setdefault(topic.topic, []).append(
                    ctx.response(
                        "PartitionResult",
                        partition_id=partition,
                        error_code=code,
                        error_message=message,
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


# -- reassignments ---------------------------------------------------------------------------


def handle_list_partition_reassignments(broker, ctx: RequestContext, request) -> object:
    """None is ever in progress: a partition's only replica cannot move off the only broker."""
    authorized = authorize_cluster(broker, ctx, AclOperation.DESCRIBE)
    return ctx.response(
        "ListPartitionReassignmentsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none if authorized else ErrorCode.cluster_authorization_failed,
        error_message=None,
        topics=(),
    )


def _reassignment_error(
    broker, topic: str, partition: int, replicas: tuple[int, ...] | None
) -> tuple[ErrorCode, str | None]:
    code, message = _partition_error(broker, topic, partition)
    if code != ErrorCode.none:
        return code, message
    if replicas is None:  # a cancellation
        return ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."
    if not replicas:
        return (
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    previous = None
    for replica in sorted(replicas):
        if replica != broker.node_id:
            return (
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {replica}, but no such "
                f"broker is registered.",
            )
        if replica == previous:
            return (
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {replica} more than once.",
            )
        previous = replica
    # Only [this broker] is left: the assignment the partition has, a change to nothing (and
    # never one of replication factor, whatever allow_replication_factor_change says).
    return ErrorCode.none, None


def handle_alter_partition_reassignments(broker, ctx: RequestContext, request) -> object:
    allow_rf_change = getattr(request, "allow_replication_factor_change", True)
    authorized = authorize_cluster(broker, ctx, AclOperation.ALTER)
    top_error = ErrorCode.none if authorized else ErrorCode.cluster_authorization_failed
    responses = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if authorized:
                code, message = _reassignment_error(
                    broker, topic.name, p.partition_index, p.replicas
                )
            else:
                code, message = top_error, None
            partitions.append(
                ctx.response(
                    "ReassignablePartitionResponse",
                    partition_index=p.partition_index,
                    error_code=code,
                    error_message=message,
                )
            )
        responses.append(
            ctx.response("ReassignableTopicResponse", name=topic.name, partitions=tuple(partitions))
        )
    return ctx.response(
        "AlterPartitionReassignmentsResponse",
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=allow_rf_change,
        error_code=top_error,
        error_message=None,
        responses=tuple(responses),
    )
