"""ACLs: list with filters, create one binding, delete the bindings a filter matches.

Deleting takes a filter, as DeleteAcls does, so it is `POST acls/delete/` with the filter as its
body (a DELETE with a body is not reliably carried by proxies and clients) and answers the
bindings it deleted. Changing ACLs needs the admin role: they decide who may do what."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit, kafka
from api.permissions import ADMIN
from api.serializers.acls import (
    AclBindingSerializer,
    AclDeleteResultSerializer,
    AclDeleteSerializer,
    AclFilterSerializer,
)
from api.serializers.errors import errors
from api.views.base import BrokerViewSet


def binding_label(data: dict) -> str:
    return (
        f"acl/{data['resource_type']}:{data['pattern_type']}:{data['resource_name']}"
        f"/{data['principal']}@{data['host']}/{data['operation']}/{data['permission_type']}"
    )


class AclViewSet(BrokerViewSet):
    """ACL bindings of the cluster (DescribeAcls, CreateAcls, DeleteAcls)."""

    serializer_class = AclBindingSerializer
    write_role = ADMIN

    @extend_schema(
        parameters=[AclFilterSerializer],
        responses={200: AclBindingSerializer(many=True), **errors()},
    )
    def list(self, request: Request) -> Response:
        """The bindings matching the filter in the query (every binding without one)."""
        query = AclFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        bindings = kafka.call(lambda admin: admin.describe_acls(query.acl_filter()))
        return self.paginated(request, bindings)

    @extend_schema(request=AclBindingSerializer, responses={201: AclBindingSerializer, **errors()})
    def create(self, request: Request) -> Response:
        """Create one binding (any resource type, TRANSACTIONAL_ID included)."""
        serializer = AclBindingSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        binding = serializer.binding()
        data = AclBindingSerializer(binding).data
        audit.note(request, resource=binding_label(data), binding=data)
        kafka.call(lambda admin: admin.create_acls([binding]))
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=AclDeleteSerializer, responses={200: AclDeleteResultSerializer, **errors()}
    )
    @action(detail=False, methods=["post"], url_path="delete", url_name="delete")
    def delete_matching(self, request: Request) -> Response:
        """Delete every binding the filter matches (DeleteAcls); answers those deleted."""
        serializer = AclDeleteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        acl_filter = serializer.acl_filter()
        audit.note(request, resource="acls", filter=AclFilterSerializer(acl_filter).data)
        deleted = kafka.call(lambda admin: admin.delete_acls([acl_filter]))
        data = AclBindingSerializer(deleted, many=True).data
        audit.note(request, deleted=len(data))
        return Response({"deleted": data})
