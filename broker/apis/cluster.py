"""DescribeCluster: the cluster id, the controller and the brokers."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import UNREQUESTED_OPERATIONS, cluster_authorized_operations
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.apis.metadata import broker_nodes, controller_id

BROKERS_ENDPOINT = 1


def handle_describe_cluster(broker, ctx: RequestContext, request) -> object:
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint_type != BROKERS_ENDPOINT:
        return ctx.response(
            "DescribeClusterResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="Only the brokers endpoint type is served",
            endpoint_type=endpoint_type,
            cluster_id=broker.image.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=UNREQUESTED_OPERATIONS,
        )
    return ctx.response(
        "DescribeClusterResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=BROKERS_ENDPOINT,
        cluster_id=broker.image.cluster_id,
        controller_id=controller_id(broker),
        # v2 (KIP-1073) lists fenced brokers too when `include_fenced_brokers` asks for them.
        brokers=tuple(
            broker_nodes(
                broker,
                ctx,
                "DescribeClusterBroker",
                include_fenced=getattr(request, "include_fenced_brokers", False),
            )
        ),
        cluster_authorized_operations=cluster_authorized_operations(
            broker, ctx, request.include_cluster_authorized_operations
        ),
    )
