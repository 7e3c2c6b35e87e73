"""ListOffsets: earliest, latest, by timestamp (time index) and max timestamp; DESCRIBE on the
topic."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import filter_authorized
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.security.operations import AclOperation, ResourceType

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # no tiered storage: the same as EARLIEST
READ_COMMITTED = 1


def handle_list_offsets(broker, ctx: RequestContext, request) -> object:
    rm = broker.replica_manager
    isolation_level = getattr(request, "isolation_level", 0)
    names = (t.name for t in request.topics)
    describable = filter_authorized(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if topic.name in describable:
                log, code = rm.lookup(topic.name, p.partition_index)
            else:
                log, code = None, ErrorCode.topic_authorization_failed
            if code == ErrorCode.none:
                code = rm.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
            offset = timestamp = -1
            if code == ErrorCode.none:
                offset, timestamp = _offset_for(log, p.timestamp, isolation_level)
            partitions.append(
                ctx.response(
                    "ListOffsetsPartitionResponse",
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=rm.leader_epoch if code == ErrorCode.none else -1,
                )
            )
        topics.append(
            ctx.response("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions))
        )
    return ctx.response("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _offset_for(log, spec: int, isolation_level: int) -> tuple[int, int]:
    """(offset, timestamp) ListOffsets answers for `spec`: a timestamp, or EARLIEST, LATEST
    or MAX_TIMESTAMP (v0 has its own rule: Log.offsets_before)."""
    # What a consumer of this isolation level may fetch (Kafka's lastFetchableOffset): LATEST
    # answers it, and a lookup never answers an offset at or beyond it.
    last_fetchable = (
        log.last_stable_offset if isolation_level == READ_COMMITTED else log.high_watermark
    )
    if spec == LATEST:
        return last_fetchable, -1
    if spec in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1
    if spec == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
    elif spec >= 0:
        found = log.offset_for_timestamp(spec)
    else:
        found = None
    if found is None or found[0] >= last_fetchable:
        return -1, -1
    return found
