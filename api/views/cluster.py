"""/api/v1/cluster/ and /api/v1/brokers/: the cluster's brokers and their configs, as
kafka-broker-api-versions, kafka-log-dirs and kafka-configs --entity-type brokers see them."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from api import kafka
from api.brokers import cluster_overview
from api.permissions import ADMIN
from api.serializers.cluster import (
    BrokerSerializer,
    ClusterSerializer,
    ConfigAlterSerializer,
    ConfigEntrySerializer,
)
from api.views.base import BrokerViewSet, alter_resource_configs, query_flag, resource_configs
from broker.client.models import ConfigResourceType, Node


def no_such_broker(broker_id: int | str) -> NotFound:
    return NotFound(f"No broker with id {broker_id} in the cluster.")


def find_broker(broker_id: int) -> Node:
    """The broker with that node id, fenced or not, or a 404 (the control plane asks only
    brokers it knows)."""
    described = kafka.call(lambda admin: admin.describe_cluster(include_fenced_brokers=True))
    for node in described.brokers:
        if node.node_id == broker_id:
            return node
    raise no_such_broker(broker_id)


class ClusterViewSet(BrokerViewSet):
    """The cluster id, its controller and its brokers (DescribeCluster)."""

    serializer_class = ClusterSerializer
    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "log_dirs",
                bool,
                description="Ask each broker for its log dirs (the default); false leaves "
                "them null, for a view refreshed often that does not show them.",
            )
        ]
    )
    def list(self, request: Request) -> Response:
        overview = cluster_overview(log_dirs=query_flag(request, "log_dirs", default=True))
        return Response(ClusterSerializer(overview).data)


class BrokerNodeViewSet(BrokerViewSet):
    """Brokers of the cluster, fenced ones included: the controller, partitions led, log dirs;
    and their configs, which an admin may change."""

    serializer_class = BrokerSerializer
    lookup_field = "id"
    lookup_value_regex = "[0-9]{1,10}"
    action_roles = {"alter_configs": ADMIN}

    def get_serializer_class(self):
        return {
            "configs": ConfigEntrySerializer,
            "alter_configs": ConfigAlterSerializer,
        }.get(self.action, BrokerSerializer)

    def list(self, request: Request) -> Response:
        return self.paginated(request, cluster_overview().brokers, BrokerSerializer)

    def retrieve(self, request: Request, id: str) -> Response:
        broker = cluster_overview().broker(int(id))
        if broker is None:
            raise no_such_broker(id)
        return Response(BrokerSerializer(broker).data)

    @extend_schema(responses=ConfigEntrySerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def configs(self, request: Request, id: str) -> Response:
        node = find_broker(int(id))
        return Response(
            ConfigEntrySerializer(
                resource_configs(ConfigResourceType.BROKER, str(node.node_id)), many=True
            ).data
        )

    @extend_schema(request=ConfigAlterSerializer, responses=ConfigEntrySerializer(many=True))
    @configs.mapping.patch
    def alter_configs(self, request: Request, id: str) -> Response:
        node = find_broker(int(id))
        configs = alter_resource_configs(request, ConfigResourceType.BROKER, str(node.node_id))
        return Response(ConfigEntrySerializer(configs, many=True).data)
