"""The console's home page: the live dashboard of the broker's metrics."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from api import sampling
from api.permissions import VIEWER, has_role
from api.probes import broker_reachability


@login_required
def home(request: HttpRequest) -> HttpResponse:
    may_view = has_role(request.user, VIEWER)
    snapshot = sampling.latest() if may_view else None
    sample = sampling.public(snapshot.data) if snapshot is not None else None
    broker = broker_reachability()
    return render(
        request,
        "webui/home.html",
        {
            "broker": broker,
            "bootstrap_servers": len(broker["bootstrap"].split(",")),
            "may_view": may_view,
            "sample": sample,
            "dashboard_config": {
                "websocket_path": "/ws/dashboard/",
                "history_url": reverse("api:metrics-history"),
                "interval_seconds": settings.FJORD_METRICS_INTERVAL,
                # What the time charts show: the last ten minutes.
                "window_seconds": 600,
                "initial": sample,
            },
        },
    )
