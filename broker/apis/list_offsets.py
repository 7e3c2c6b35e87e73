"""ListOffsets: earliest, latest, by timestamp (time index) and max timestamp, and the tiered
storage specs as Kafka answers them for a log without remote storage; DESCRIBE on the topic.

v10's `timeout` bounds a look-up in remote storage (KIP-1075): with none, every answer is
immediate and the timeout unused."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import filter_authorized
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.security.operations import AclOperation, ResourceType

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405; no tiered storage: the local log is the log, as EARLIEST
LATEST_TIERED = -5  # KIP-1005; nothing tiered: offset -1
EARLIEST_PENDING_UPLOAD = -6  # KIP-1023; nothing to upload: offset -1
READ_COMMITTED = 1
UNKNOWN = (-1, -1)  # (offset, timestamp): Kafka's UNKNOWN_OFFSET and UNKNOWN_TIMESTAMP

# The first version each spec is valid in (Kafka's ReplicaManager.timestampMinSupportedVersion):
# older versions, and negative timestamps that are no spec, get UNSUPPORTED_VERSION.
SPEC_SINCE = {
    LATEST: 1,
    EARLIEST: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL: 8,
    LATEST_TIERED: 9,
    EARLIEST_PENDING_UPLOAD: 11,
}


def handle_list_offsets(broker, ctx: RequestContext, request) -> object:
    rm = broker.replica_manager
    isolation_level = getattr(request, "isolation_level", 0)
    names = (t.name for t in request.topics)
    describable = filter_authorized(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if topic.name not in describable:
                log, code = None, ErrorCode.topic_authorization_failed
            elif p.timestamp < 0 and ctx.api_version < SPEC_SINCE.get(p.timestamp, 1 << 15):
                log, code = None, ErrorCode.unsupported_version
            else:
                log, code = rm.lookup(
                    topic.name, p.partition_index, getattr(p, "current_leader_epoch", -1)
                )
            offset, timestamp = UNKNOWN
            if code == ErrorCode.none:
                offset, timestamp = _offset_for(log, p.timestamp, isolation_level)
            partitions.append(
                ctx.response(
                    "ListOffsetsPartitionResponse",
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    # No offset found (nothing tiered, no record at the timestamp): Kafka
                    # answers without an epoch.
                    leader_epoch=log.leader_epochs.epoch_for_offset(offset) if offset >= 0 else -1,
                )
            )
        topics.append(
            ctx.response("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions))
        )
    return ctx.response("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _offset_for(log, spec: int, isolation_level: int) -> tuple[int, int]:
    """(offset, timestamp) ListOffsets answers for `spec`: a timestamp or one of the specs
    above (v0 has its own rule: Log.offsets_before)."""
    # What a consumer of this isolation level may fetch (Kafka's lastFetchableOffset): LATEST
    # answers it, and a lookup never answers an offset at or beyond it.
    last_fetchable = (
        log.last_stable_offset if isolation_level == READ_COMMITTED else log.high_watermark
    )
    if spec == LATEST:
        return last_fetchable, -1
    if spec in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1
    if spec in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        # Kafka's UnifiedLog without remote storage: no offset is in (or bound for) it.
        return UNKNOWN
    found = log.max_timestamp_offset() if spec == MAX_TIMESTAMP else log.offset_for_timestamp(spec)
    if found is None or found[0] >= last_fetchable:
        return UNKNOWN
    return found
