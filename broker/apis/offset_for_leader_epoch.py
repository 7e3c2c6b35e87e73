"""OffsetForLeaderEpoch: the end offset of a leader epoch, for clients' truncation checks.
Followers pass with CLUSTER_ACTION on the cluster, clients need DESCRIBE on the topic."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster, filter_authorized
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.security.operations import AclOperation, ResourceType


def handle_offset_for_leader_epoch(broker, ctx: RequestContext, request) -> object:
    rm = broker.replica_manager
    names = {t.topic for t in request.topics}
    if not authorize_cluster(broker, ctx, AclOperation.CLUSTER_ACTION):
        names = filter_authorized(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if topic.topic in names:
                log, code = rm.lookup(topic.topic, p.partition, p.current_leader_epoch)
            else:
                log, code = None, ErrorCode.topic_authorization_failed
            epoch = end_offset = -1
            if code == ErrorCode.none:
                epoch, end_offset = log.end_offset_for_epoch(p.leader_epoch)
            partitions.append(
                ctx.response(
                    "EpochEndOffset",
                    error_code=code,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        topics.append(
            ctx.response(
                "OffsetForLeaderTopicResult", topic=topic.topic, partitions=tuple(partitions)
            )
        )
    return ctx.response(
        "OffsetForLeaderEpochResponse", throttle_time=NO_THROTTLE, topics=tuple(topics)
    )
