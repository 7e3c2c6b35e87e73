"""Console pages for the cluster: its brokers, and each broker's configs (editable by admins)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from api.disk_usage import disk_usage
from api.permissions import ADMIN
from broker.client.models import ConfigResourceType
from webui.views.base import (
    BrokerCallFailed,
    broker_call,
    require_role_to_post,
    role_required,
)
from webui.views.configs import configs_page


@role_required()
def cluster(request: HttpRequest) -> HttpResponse:
    try:
        description = broker_call(request, lambda admin: admin.describe_cluster())
    except BrokerCallFailed:
        description = None
    usage = disk_usage() if description is not None else None
    log_dirs = [
        {"broker": b.node_id, **log_dir}
        for b in (description.brokers if usage is not None else [])
        for log_dir in usage.broker_log_dirs(b.node_id)
    ]
    return render(
        request, "webui/cluster/cluster.html", {"cluster": description, "log_dirs": log_dirs}
    )


@role_required()
def broker_configs(request: HttpRequest, broker_id: int) -> HttpResponse:
    require_role_to_post(request, ADMIN)
    try:
        description = broker_call(request, lambda admin: admin.describe_cluster())
    except BrokerCallFailed:
        description = None
    known = description is not None and any(b.node_id == broker_id for b in description.brokers)
    if not known:
        if description is not None:
            messages.error(request, f"No broker with id {broker_id} in the cluster.")
        context = {"broker_id": broker_id, "rows": [], "errors": {}, "found": False}
        return render(request, "webui/cluster/broker_configs.html", context, status=404)
    return configs_page(
        request,
        ConfigResourceType.BROKER,
        str(broker_id),
        noun=f"broker {broker_id}",
        template="webui/cluster/broker_configs.html",
        context={"broker_id": broker_id},
        success_url=reverse("webui:broker-configs", args=[broker_id]),
    )
