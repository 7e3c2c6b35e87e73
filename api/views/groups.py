"""Consumer groups: list, describe with members and lag, delete, committed offsets and their
reset, group configs. Changes need the operator role; a reset needs a group without active
members, as kafka-consumer-groups --reset-offsets does."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit, kafka
from api.offset_reset import ensure_inactive, target_offsets
from api.serializers.errors import errors
from api.serializers.groups import (
    CommittedOffsetSerializer,
    GroupDescriptionSerializer,
    GroupListingSerializer,
    GroupSearchSerializer,
    ResetOffsetsResultSerializer,
    ResetOffsetsSerializer,
)
from api.serializers.topics import ConfigAlterSerializer, ConfigEntrySerializer
from api.views.base import BrokerViewSet, alter_resource_configs, resource_configs, search
from broker.client import AdminClient
from broker.client.models import ConfigResourceType

# Group ids are any string but a path separator or a control character.
GROUP_ID_PATTERN = r"[^/\x00-\x1f\x7f]+"


async def describe_with_lag(admin: AdminClient, group_id: str) -> dict[str, Any]:
    """The group's description with the lag of each partition it committed for."""
    group = await admin.describe_group(group_id)
    lag = await admin.group_lag(group_id)
    return {
        "group_id": group.group_id,
        "group_type": group.group_type,
        "state": group.state,
        "protocol_type": group.protocol_type,
        "protocol": group.protocol,
        "group_epoch": group.group_epoch,
        "members": group.members,
        "lag": lag,
        "total_lag": sum(max(p.lag, 0) for p in lag),
    }


async def planned_offsets(admin: AdminClient, group_id: str, plan: dict[str, Any]) -> dict:
    """The offsets a reset moves the group to, per partition."""
    topic, partitions = plan.get("topic"), plan.get("partitions")
    if topic is None:
        tps = sorted(await admin.list_group_offsets(group_id))
        if not tps:
            raise serializers.ValidationError(
                {"topic": "The group has committed no offsets: name the topic to reset."}
            )
    elif partitions is None:
        [description] = await admin.describe_topics([topic])
        tps = [(topic, p.partition) for p in description.partitions]
    else:
        tps = [(topic, p) for p in partitions]
    return await target_offsets(admin, tps, plan["to"], plan.get("value"))


async def reset_offsets(admin: AdminClient, group_id: str, plan: dict[str, Any]) -> dict:
    await ensure_inactive(admin, group_id)
    offsets = await planned_offsets(admin, group_id, plan)
    if not plan["dry_run"] and offsets:
        await admin.alter_group_offsets(group_id, offsets)
    return offsets


def offsets_data(offsets: dict) -> list[dict[str, Any]]:
    return [
        {"topic": t, "partition": p, "committed_offset": o} for (t, p), o in sorted(offsets.items())
    ]


class GroupViewSet(BrokerViewSet):
    """Consumer groups, classic and KIP-848 (ListGroups, DescribeGroups,
    ConsumerGroupDescribe, OffsetFetch, OffsetCommit, DeleteGroups, group configs)."""

    serializer_class = GroupListingSerializer
    lookup_field = "group_id"
    lookup_value_regex = GROUP_ID_PATTERN

    @extend_schema(
        parameters=[GroupSearchSerializer],
        responses={200: GroupListingSerializer(many=True), **errors()},
    )
    def list(self, request: Request) -> Response:
        query = GroupSearchSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        groups = kafka.call(
            lambda admin: admin.list_groups(
                states=[q["state"]] if q.get("state") else (),
                types=[q["type"]] if "type" in q else (),
            )
        )
        return self.paginated(request, search(groups, q.get("search"), lambda g: g.group_id))

    @extend_schema(responses={200: GroupDescriptionSerializer, **errors(404)})
    def retrieve(self, request: Request, group_id: str) -> Response:
        """Members with their assignments, and the lag of each committed partition."""
        described = kafka.call(lambda admin: describe_with_lag(admin, group_id))
        return Response(GroupDescriptionSerializer(described).data)

    @extend_schema(responses={204: None, **errors(404, 409)})
    def destroy(self, request: Request, group_id: str) -> Response:
        """Delete the group and its committed offsets; NON_EMPTY_GROUP (409) while it has
        members."""
        audit.note(request, resource=f"group/{group_id}")
        kafka.call(lambda admin: admin.delete_groups([group_id]))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        methods=["GET"],
        request=None,
        responses={200: CommittedOffsetSerializer(many=True), **errors(404)},
    )
    @extend_schema(
        methods=["POST"],
        request=ResetOffsetsSerializer,
        responses={200: ResetOffsetsResultSerializer, **errors(404, 409)},
    )
    @action(detail=True, methods=["get", "post"], pagination_class=None)
    def offsets(self, request: Request, group_id: str) -> Response:
        """GET: the committed offsets. POST: reset them (the group must be inactive)."""
        if request.method == "GET":
            offsets = kafka.call(lambda admin: admin.list_group_offsets(group_id))
            return Response(offsets_data(offsets))
        serializer = ResetOffsetsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        plan = serializer.validated_data
        audit.note(request, resource=f"group/{group_id}", reset=dict(plan))
        offsets = kafka.call(lambda admin: reset_offsets(admin, group_id, plan))
        if not plan["dry_run"]:
            audit.note(request, offsets=[f"{t}-{p}={o}" for (t, p), o in sorted(offsets.items())])
        return Response(
            {"group_id": group_id, "dry_run": plan["dry_run"], "offsets": offsets_data(offsets)}
        )

    @extend_schema(responses={200: ConfigEntrySerializer(many=True), **errors()})
    @action(detail=True, methods=["get"], pagination_class=None)
    def configs(self, request: Request, group_id: str) -> Response:
        """The group's configs (KIP-848: consumer.session.timeout.ms,
        consumer.heartbeat.interval.ms, ...) with their sources."""
        return Response(
            ConfigEntrySerializer(
                resource_configs(ConfigResourceType.GROUP, group_id), many=True
            ).data
        )

    @extend_schema(
        request=ConfigAlterSerializer,
        responses={200: ConfigEntrySerializer(many=True), **errors()},
    )
    @configs.mapping.patch
    def alter_configs(self, request: Request, group_id: str) -> Response:
        """SET the configs in `set`, DELETE (back to the broker's defaults) those in `delete`."""
        configs = alter_resource_configs(request, ConfigResourceType.GROUP, group_id)
        return Response(ConfigEntrySerializer(configs, many=True).data)
