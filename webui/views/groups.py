"""Console pages for consumer groups: list, detail with members and lag, offset reset, group
configs and deletion with confirmation. Input goes through the API's serializers."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import register_converter, reverse
from rest_framework import serializers

from api import audit
from api.permissions import OPERATOR
from api.serializers.groups import (
    GROUP_TYPES,
    RESET_TARGETS,
    ResetOffsetsSerializer,
)
from api.views.groups import describe_with_lag, offsets_data, reset_offsets
from broker.client.models import ConfigResourceType
from webui.views.base import (
    BrokerCallFailed,
    broker_call,
    confirmed_call,
    paginate,
    require_role_to_post,
    role_required,
)
from webui.views.configs import configs_page


class KafkaIdConverter:
    """`<kafka_id:...>` in webui/urls.py: a group id, transactional id or user name, which may
    be any string but a path separator or a control character."""

    regex = r"[^/\x00-\x1f\x7f]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


# Registered on import: webui/urls.py imports this module before its patterns use it.
register_converter(KafkaIdConverter, "kafka_id")


@role_required()
def group_list(request: HttpRequest) -> HttpResponse:
    group_type = request.GET.get("type", "")
    types = [group_type] if group_type in GROUP_TYPES else []
    try:
        groups = broker_call(request, lambda admin: admin.list_groups(types=types))
    except BrokerCallFailed:
        groups = []
    page, q = paginate(request, groups, lambda g: g.group_id)
    return render(
        request,
        "webui/groups/list.html",
        {"page": page, "q": q, "type": group_type, "group_types": GROUP_TYPES},
    )


@role_required()
def group_detail(request: HttpRequest, group_id: str) -> HttpResponse:
    try:
        group = broker_call(request, lambda admin: describe_with_lag(admin, group_id))
    except BrokerCallFailed:
        return redirect("webui:group-list")
    return render(request, "webui/groups/detail.html", {"group": group, "group_id": group_id})


def reset_data(post: Any) -> dict[str, Any]:
    """The reset form as the API's JSON: partitions as a comma-separated list, empty fields
    left out."""
    data: dict[str, Any] = {
        f: post[f] for f in ("to", "value", "topic") if post.get(f, "").strip() != ""
    }
    partitions = post.get("partitions", "").strip()
    if partitions:
        data["partitions"] = [p.strip() for p in partitions.split(",") if p.strip()]
    data["dry_run"] = post.get("dry_run") == "on"
    return data


@role_required(OPERATOR)
def group_reset(request: HttpRequest, group_id: str) -> HttpResponse:
    form: Any = {"to": "earliest"}
    errors: Any = {}
    result = None
    if request.method == "POST":
        form = request.POST
        serializer = ResetOffsetsSerializer(data=reset_data(request.POST))
        if serializer.is_valid():
            plan = serializer.validated_data
            audit.note(request, resource=f"group/{group_id}", reset=dict(plan))
            try:
                offsets = broker_call(request, lambda admin: reset_offsets(admin, group_id, plan))
            except BrokerCallFailed:
                pass
            except serializers.ValidationError as e:
                errors = e.detail
            else:
                result = offsets_data(offsets)
                if plan["dry_run"]:
                    messages.info(request, "Dry run: these are the offsets a reset would commit.")
                else:
                    audit.note(
                        request, offsets=[f"{t}-{p}={o}" for (t, p), o in sorted(offsets.items())]
                    )
                    messages.success(request, f"Offsets of group {group_id} reset.")
        else:
            errors = serializer.errors
    return render(
        request,
        "webui/groups/reset.html",
        {
            "group_id": group_id,
            "form": form,
            "errors": errors,
            "result": result,
            "targets": RESET_TARGETS,
        },
        status=400 if errors else 200,
    )


@role_required()
def group_configs_page(request: HttpRequest, group_id: str) -> HttpResponse:
    require_role_to_post(request, OPERATOR)
    return configs_page(
        request,
        ConfigResourceType.GROUP,
        group_id,
        noun=f"group {group_id}",
        template="webui/groups/configs.html",
        context={"group_id": group_id},
        success_url=reverse("webui:group-configs", args=[group_id]),
    )


@role_required(OPERATOR)
def group_delete(request: HttpRequest, group_id: str) -> HttpResponse:
    return confirmed_call(
        request,
        lambda admin: admin.delete_groups([group_id]),
        resource=f"group/{group_id}",
        done=f"Group {group_id} deleted.",
        success_url=reverse("webui:group-list"),
        cancel_url=reverse("webui:group-detail", args=[group_id]),
        title=f"Delete group {group_id}",
        message=f"Delete consumer group {group_id} and its committed offsets? "
        "Its consumers would start again from auto.offset.reset.",
        action_label="Delete group",
    )
