"""Console pages for the cluster: its brokers, and each broker's configs (editable by admins)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from api import sampling
from api.brokers import cluster_overview
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
    """The Brokers page: alive or fenced, the controller, partitions led, log dirs."""
    try:
        overview = cluster_overview(lambda operation: broker_call(request, operation))
    except BrokerCallFailed:
        overview = None
    brokers = overview.brokers if overview is not None else []
    context = {
        "cluster": overview,
        # What the metrics sampler found down, shown even when no broker answers for the
        # cluster (a lone broker that stopped).
        "down": [
            {"url": e["url"], "since": parse_datetime(e["down_since"])}
            for e in sampling.down(sampling.latest())
        ],
        "alive": sum(1 for b in brokers if not b.node.fenced),
        "log_dirs": [
            {"broker": b.node.node_id, **log_dir} for b in brokers for log_dir in b.log_dirs or ()
        ],
        # The refresh shows no log dirs: it spares every broker listing its replicas. The latest
        # metrics sample says which brokers are down.
        "brokers_config": {
            "api_url": reverse("api:cluster-list") + "?log_dirs=false",
            "metrics_url": reverse("api:metrics-current"),
            "refresh_seconds": 5,
        },
    }
    return render(request, "webui/cluster/cluster.html", context)


@role_required()
def broker_configs(request: HttpRequest, broker_id: int) -> HttpResponse:
    require_role_to_post(request, ADMIN)
    try:
        description = broker_call(
            request, lambda admin: admin.describe_cluster(include_fenced_brokers=True)
        )
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
