from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from api.probes import broker_reachability
from api.serializers.health import HealthSerializer


class HealthViewSet(viewsets.ViewSet):
    """Liveness of the control plane and whether it reaches the broker."""

    # Load balancers and orchestrators probe without credentials.
    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(responses=HealthSerializer)
    def list(self, request: Request) -> Response:
        return Response({"status": "ok", "broker": broker_reachability()})
