"""/api/v1/cluster/ and /api/v1/brokers/: the cluster's brokers and their configs, as
kafka-broker-api-versions and kafka-configs --entity-type brokers see them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from api import kafka
from api.disk_usage import disk_usage
from api.permissions import ADMIN
from api.serializers.cluster import (
    BrokerSerializer,
    ClusterSerializer,
    ConfigAlterSerializer,
    ConfigEntrySerializer,
)
from api.views.base import BrokerViewSet, alter_resource_configs, resource_configs
from broker.client.models import ClusterDescription, ConfigResourceType, Node


def describe_cluster() -> ClusterDescription:
    return kafka.call(lambda admin: admin.describe_cluster())


def find_broker(broker_id: int) -> Node:
    """The broker with that node id, or a 404 (the control plane asks only brokers it knows)."""
    for node in describe_cluster().brokers:
        if node.node_id == broker_id:
            return node
    raise NotFound(f"No broker with id {broker_id} in the cluster.")


class ClusterViewSet(BrokerViewSet):
    """The cluster id, its controller and its brokers (DescribeCluster)."""

    serializer_class = ClusterSerializer
    pagination_class = None

    def list(self, request: Request) -> Response:
        return Response(ClusterSerializer(describe_cluster(), context={"disk": disk_usage()}).data)


class BrokerNodeViewSet(BrokerViewSet):
    """Brokers of the cluster and their configs; changing a broker config takes an admin."""

    serializer_class = BrokerSerializer
    lookup_field = "id"
    lookup_value_regex = "[0-9]{1,10}"
    action_roles = {"alter_configs": ADMIN}

    def get_serializer_context(self) -> dict:
        context = super().get_serializer_context()
        if self.action in ("list", "retrieve"):
            context["disk"] = disk_usage()
        return context

    def get_serializer_class(self):
        return {
            "configs": ConfigEntrySerializer,
            "alter_configs": ConfigAlterSerializer,
        }.get(self.action, BrokerSerializer)

    def list(self, request: Request) -> Response:
        return self.paginated(request, describe_cluster().brokers, BrokerSerializer)

    def retrieve(self, request: Request, id: str) -> Response:
        node = find_broker(int(id))
        return Response(BrokerSerializer(node, context=self.get_serializer_context()).data)

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
