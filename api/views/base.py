"""What every broker-backed viewset shares: lists answered from the broker, searched and
paginated the DRF way, and configs altered the same way whatever the resource."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit, kafka
from api.serializers.topics import ConfigAlterSerializer
from broker.client.models import ConfigEntry, ConfigResourceType


def search(items: Sequence[Any], term: str | None, key: Callable[[Any], str]) -> list[Any]:
    """Items whose key contains the term, case-insensitively: the `?search=` of every list."""
    if not term:
        return list(items)
    term = term.casefold()
    return [item for item in items if term in key(item).casefold()]


def query_flag(request: Request, name: str, default: bool) -> bool:
    """A yes/no query parameter, spelt as DRF's BooleanField accepts it; anything else (or
    nothing) is the default."""
    value = request.query_params.get(name)
    if value in serializers.BooleanField.TRUE_VALUES:
        return True
    if value in serializers.BooleanField.FALSE_VALUES:
        return False
    return default


class BrokerViewSet(viewsets.GenericViewSet):
    """A viewset over broker state: no queryset, lists come from an admin client call."""

    def paginated(
        self,
        request: Request,
        items: Sequence[Any],
        serializer_class: type[serializers.BaseSerializer] | None = None,
    ) -> Response:
        serializer_class = serializer_class or self.get_serializer_class()
        page = self.paginate_queryset(list(items))
        context = self.get_serializer_context()
        if page is not None:
            return self.get_paginated_response(
                serializer_class(page, many=True, context=context).data
            )
        return Response(serializer_class(items, many=True, context=context).data)


def alter_resource_configs(
    request: Request, resource_type: ConfigResourceType, name: str
) -> list[ConfigEntry]:
    """PATCH of a resource's configs (topic, group, broker): IncrementalAlterConfigs with the
    SETs and DELETEs of a ConfigAlterSerializer, then the configs as they now are."""
    serializer = ConfigAlterSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    audit.note_config_changes(request, resource_type, name, serializer.validated_data)
    ops = serializer.operations()
    kafka.call(lambda admin: admin.incremental_alter_configs(resource_type, name, ops))
    return resource_configs(resource_type, name)


def resource_configs(resource_type: ConfigResourceType, name: str) -> list[ConfigEntry]:
    return kafka.call(lambda admin: admin.describe_configs(resource_type, name))
