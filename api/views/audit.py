"""The audit log: who changed what, when, and how it ended. Admins only; nobody writes it but
the AuditMiddleware."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets

from api.models import AuditEntry
from api.permissions import ADMIN
from api.serializers.audit import AuditEntrySerializer, AuditQuerySerializer
from api.serializers.errors import errors


def filtered(queryset: QuerySet, query: dict) -> QuerySet:
    if query.get("user"):
        queryset = queryset.filter(username=query["user"])
    if query.get("action"):
        queryset = queryset.filter(action__icontains=query["action"])
    if query.get("resource"):
        queryset = queryset.filter(resource__icontains=query["resource"])
    return queryset


@extend_schema_view(
    list=extend_schema(
        parameters=[AuditQuerySerializer],
        responses={200: AuditEntrySerializer(many=True), **errors()},
    ),
    retrieve=extend_schema(responses={200: AuditEntrySerializer, **errors(404)}),
)
class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    """Every mutating call through the API or the console, newest first."""

    queryset = AuditEntry.objects.all()
    lookup_value_regex = r"[0-9]{1,18}"
    serializer_class = AuditEntrySerializer
    read_role = ADMIN
    write_role = ADMIN

    def get_queryset(self) -> QuerySet:
        queryset = super().get_queryset()
        if self.action != "list":
            return queryset
        query = AuditQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return filtered(queryset, query.validated_data)
