"""The authorization steps handlers share (Kafka's AuthHelper): a check on the cluster,
filtering names by an operation, and the authorized-operations bitfields of Metadata,
DescribeCluster, DescribeGroups and ConsumerGroupDescribe."""

from __future__ import annotations

from collections.abc import Iterable

from broker.apis.base import RequestContext
from broker.security.acl import CLUSTER_NAME
from broker.security.operations import (
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bitfield,
)

UNREQUESTED_OPERATIONS = -(2**31)


def authorize_cluster(broker, ctx: RequestContext, operation: AclOperation) -> bool:
    return broker.authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def creatable_topics(broker, ctx: RequestContext, names: Iterable[str]) -> set[str]:
    """The topics the principal may create: all with CREATE on the cluster, else those with
    CREATE on the topic (Kafka's CreateTopics and Metadata auto-creation)."""
    if authorize_cluster(broker, ctx, AclOperation.CREATE):
        return set(names)
    return filter_authorized(broker, ctx, AclOperation.CREATE, ResourceType.TOPIC, names)


def filter_authorized(
    broker,
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """The names (each asked about once) on which the operation is allowed."""
    return {n for n in set(names) if broker.authorize(ctx, operation, resource_type, n)}


def authorized_operations(
    broker, ctx: RequestContext, requested: bool, resource_type: ResourceType, name: str
) -> int:
    """The bitfield of the resource's operations the principal may perform, or the schema's
    "not requested" value."""
    if not requested:
        return UNREQUESTED_OPERATIONS
    return operations_bitfield(
        op
        for op in SUPPORTED_OPERATIONS[resource_type]
        if broker.authorize(ctx, op, resource_type, name)
    )


def cluster_authorized_operations(broker, ctx: RequestContext, requested: bool) -> int:
    """As Kafka: a principal that may not DESCRIBE the cluster learns nothing, not even
    which of its other operations it may perform."""
    if requested and not authorize_cluster(broker, ctx, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(broker, ctx, requested, ResourceType.CLUSTER, CLUSTER_NAME)
