"""Client quotas (DescribeClientQuotas, AlterClientQuotas) by user, client id and ip.

Setting is `POST quotas/` (an upsert of the keys given); removing takes an entity, which no
URL path names well (a null name is the default entity), so it is `POST quotas/delete/` with
the entity as its body, as ACLs are deleted. Quotas are cluster configs: changing them needs
the admin role, as broker configs do."""

from __future__ import annotations

from collections.abc import Iterable

from drf_spectacular.utils import extend_schema
from kio.schema.errors import ErrorCode
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit, kafka
from api.permissions import ADMIN
from api.serializers.errors import errors
from api.serializers.quotas import (
    ENTITY_TYPES,
    QuotaAlterSerializer,
    QuotaEntrySerializer,
    QuotaFilterSerializer,
    QuotaRemoveSerializer,
    entity_data,
    entity_of,
)
from api.views.base import BrokerViewSet
from broker.client import KafkaAdminError
from broker.client.admin_quotas import entity_label
from broker.client.models import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
)


def quota_label(entity: ClientQuotaEntity) -> str:
    return f"quota/{entity_label(entity)}"


def _sort_key(entity: ClientQuotaEntity) -> tuple:
    # Users, then client ids, then ips; within a type the default first, then by name, each
    # entity before its combinations with further types.
    entries, types = entity.entries, list(ENTITY_TYPES.values())
    first = min(types.index(t) for t in entries) if entries else len(types)
    return first, tuple(
        (t in entries, entries.get(t) is not None, entries.get(t) or "") for t in types
    )


def entries_data(described: dict[ClientQuotaEntity, dict[str, float]]) -> list[dict]:
    return [
        {"entity": entity_data(entity), "quotas": dict(sorted(described[entity].items()))}
        for entity in sorted(described, key=_sort_key)
    ]


async def describe_entity(admin, entity: ClientQuotaEntity) -> dict[str, float]:
    """The quotas of exactly that entity (none: an empty dict)."""
    components = [
        ClientQuotaFilterComponent.of_default_entity(t)
        if name is None
        else ClientQuotaFilterComponent.of_entity(t, name)
        for t, name in entity.entries.items()
    ]
    described = await admin.describe_client_quotas(components, strict=True)
    return described.get(entity, {})


async def set_quotas(
    admin, entity: ClientQuotaEntity, quotas: dict[str, float | None], validate_only: bool
) -> dict[str, float]:
    """Set (None: remove) the keys, then the entity's quotas as they now are."""
    await admin.alter_client_quotas([ClientQuotaAlteration(entity, quotas)], validate_only)
    return await describe_entity(admin, entity)


async def remove_quotas(
    admin, entity: ClientQuotaEntity, keys: Iterable[str] | None = None
) -> list[str]:
    """Remove the keys (every key the entity has: None) and answer them; RESOURCE_NOT_FOUND
    when removing every key of an entity that has none."""
    if keys is None:
        keys = sorted(await describe_entity(admin, entity))
        if not keys:
            raise KafkaAdminError.from_code(
                ErrorCode.resource_not_found,
                f"{entity_label(entity)} has no quota.",
                entity_label(entity),
            )
    removed = list(keys)
    await admin.alter_client_quotas(
        [ClientQuotaAlteration(entity, dict.fromkeys(removed))], validate_only=False
    )
    return removed


class QuotaViewSet(BrokerViewSet):
    """Client quotas of the cluster by entity."""

    serializer_class = QuotaEntrySerializer
    write_role = ADMIN

    @extend_schema(
        parameters=[QuotaFilterSerializer],
        responses={200: QuotaEntrySerializer(many=True), **errors()},
    )
    def list(self, request: Request) -> Response:
        """The entities matching the filter in the query, with their quotas (all without
        one); users first, then client ids, then ips, each type's default first."""
        query = QuotaFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        components, strict = query.components(), query.validated_data["strict"]
        described = kafka.call(lambda admin: admin.describe_client_quotas(components, strict))
        return self.paginated(request, entries_data(described))

    @extend_schema(request=QuotaAlterSerializer, responses={200: QuotaEntrySerializer, **errors()})
    def create(self, request: Request) -> Response:
        """Set an entity's quotas (create or update the keys given; null removes a key);
        answers the entity's quotas as they now are (unchanged with validate_only)."""
        serializer = QuotaAlterSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        entity = entity_of(d["entity"])
        audit.note(
            request,
            resource=quota_label(entity),
            quotas=d["quotas"],
            validate_only=d["validate_only"],
        )
        quotas = kafka.call(
            lambda admin: set_quotas(admin, entity, d["quotas"], d["validate_only"])
        )
        return Response(QuotaEntrySerializer({"entity": d["entity"], "quotas": quotas}).data)

    @extend_schema(request=QuotaRemoveSerializer, responses={204: None, **errors()})
    @action(detail=False, methods=["post"], url_path="delete", url_name="delete")
    def remove(self, request: Request) -> Response:
        """Remove the keys named, or every quota of the entity (RESOURCE_NOT_FOUND, 404, when
        it has none)."""
        serializer = QuotaRemoveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        entity = entity_of(d["entity"])
        audit.note(request, resource=quota_label(entity), keys=d.get("keys", "all"))
        removed = kafka.call(lambda admin: remove_quotas(admin, entity, d.get("keys")))
        audit.note(request, removed=removed)
        return Response(status=status.HTTP_204_NO_CONTENT)
