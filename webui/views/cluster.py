"""Console pages for the cluster: its brokers, and each broker's configs (editable by admins)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from api.permissions import ADMIN
from broker.client.models import ConfigResourceType
from webui.views.base import BrokerCallFailed, broker_call, role_required
from webui.views.topics import config_rows, edit_configs, require_role_to_post


@role_required()
def cluster(request: HttpRequest) -> HttpResponse:
    try:
        description = broker_call(request, lambda admin: admin.describe_cluster())
    except BrokerCallFailed:
        description = None
    return render(request, "webui/cluster/cluster.html", {"cluster": description})


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
    entries, errors, changed = edit_configs(
        request, ConfigResourceType.BROKER, str(broker_id), f"broker/{broker_id}"
    )
    if changed:
        messages.success(request, f"Configs of broker {broker_id} updated.")
        return redirect("webui:broker-configs", broker_id=broker_id)
    context = {
        "broker_id": broker_id,
        "rows": config_rows(entries or []),
        "errors": errors,
        "found": entries is not None,
    }
    status = 404 if entries is None else 400 if errors else 200
    return render(request, "webui/cluster/broker_configs.html", context, status=status)
