"""DeleteRecords: advance a partition's log start offset; DELETE on the topic."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import filter_authorized
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.security.operations import AclOperation, ResourceType
from broker.storage import OffsetOutOfRangeError

HIGH_WATERMARK = -1


async def handle_delete_records(broker, ctx: RequestContext, request) -> object:
    rm = broker.replica_manager
    names = (t.name for t in request.topics)
    deletable = filter_authorized(broker, ctx, AclOperation.DELETE, ResourceType.TOPIC, names)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if topic.name in deletable:
                log, code = rm.lookup(topic.name, p.partition_index)
            else:
                log, code = None, ErrorCode.topic_authorization_failed
            low_watermark = -1
            if code == ErrorCode.none and not log.config.delete:
                # Kafka: a compact-only topic keeps every key's latest record, so no prefix of
                # it may be deleted.
                code = ErrorCode.policy_violation
            if code == ErrorCode.none:
                target = log.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                if target < 0:
                    code = ErrorCode.offset_out_of_range
                else:
                    try:
                        low_watermark = await broker.delete_records(log, target)
                    except OffsetOutOfRangeError:
                        code = ErrorCode.offset_out_of_range
            partitions.append(
                ctx.response(
                    "DeleteRecordsPartitionResult",
                    partition_index=p.partition_index,
                    low_watermark=low_watermark,
                    error_code=code,
                )
            )
        topics.append(
            ctx.response("DeleteRecordsTopicResult", name=topic.name, partitions=tuple(partitions))
        )
    return ctx.response("DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))
