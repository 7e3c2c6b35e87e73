"""The console's home page: the live dashboard, rendered with the latest sample so that it is
not blank before the websocket's first message."""

import re
import socket

import pytest
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.test import Client
from django.utils import timezone

from api import metrics
from api.models import MetricSnapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def listening_port():
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def store_sample(**data) -> MetricSnapshot:
    taken_at = timezone.now()
    return MetricSnapshot.objects.create(
        taken_at=taken_at,
        data={"broker": "up", "taken_at": taken_at.isoformat(), "counters": {}, **data},
    )


def test_the_dashboard_needs_a_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_home_page_is_the_dashboard_with_broker_reachability(
    viewer_browser, settings, listening_port
):
    settings.FJORD_BOOTSTRAP = f"127.0.0.1:{listening_port}"

    response = viewer_browser.get("/")

    assert response.status_code == 200
    assert "webui/home.html" in [t.name for t in response.templates]
    page = response.content.decode()
    assert "Fjord console" in page
    assert 'class="status status-reachable"' in page
    assert f"127.0.0.1:{listening_port}" in page
    for chart in (
        "chart-offsets",
        "chart-producers",
        "chart-transactions",
        "chart-fetch-sessions",
        "chart-throughput",
        "chart-requests",
    ):
        assert f'<canvas id="{chart}"' in page
    assert 'id="last-sample"' in page
    assert 'id="dashboard-config"' in page
    assert "/ws/dashboard/" in page
    assert "/api/v1/metrics/history/" in page


def test_home_page_shows_an_unreachable_broker(viewer_browser, settings):
    with socket.create_server(("127.0.0.1", 0)) as server:
        closed_port = server.getsockname()[1]
    settings.FJORD_BOOTSTRAP = f"127.0.0.1:{closed_port}"

    assert 'class="status status-unreachable"' in viewer_browser.get("/").content.decode()


def test_every_asset_is_served_locally(viewer_browser):
    page = viewer_browser.get("/").content.decode()

    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', page)
    assert {"/static/webui/charts.js", "/static/webui/dashboard.js"} <= set(assets)
    assert all(asset.startswith("/static/") for asset in assets)
    assert "//" not in "".join(assets)
    for asset in ("webui/charts.js", "webui/dashboard.js", "webui/console.css"):
        assert finders.find(asset), asset


def test_the_latest_sample_is_rendered_into_the_page(viewer_browser):
    store_sample(
        producer_ids_live=7,
        partitions=[
            {
                "topic": "orders",
                "partition": 1,
                "log_start_offset": 0,
                "high_watermark": 12,
                "last_stable_offset": 9,
            }
        ],
        transactions=[
            {
                "transactional_id": "stuck-tx",
                "producer_id": 3,
                "producer_epoch": 0,
                "state": "Ongoing",
                "age_seconds": 120.0,
                "timeout_ms": 60000,
                "hanging": True,
                "partitions": [{"topic": "orders", "partition": 1}],
            }
        ],
        requests={
            "Produce": {
                "requests_total": 5,
                "requests_per_second": 1.5,
                "latency_ms": 2.0,
                "bytes_in_per_second": 100.0,
                "bytes_out_per_second": 10.0,
            }
        },
        endpoints=[
            {
                "url": "http://127.0.0.1:9101/metrics",
                "status": "up",
                "event_loop_lag_max_ms": 3.5,
                "event_loop_lag_mean_ms": 0.25,
                "gc_collections_total": 40,
                "gc_gen2_collections_total": 2,
                "gc_gen2_pause_mean_ms": 1.5,
                "gc_gen2_pause_time_ms_total": 3.0,
                "gc_frozen_objects": 90000,
            },
            # A broker older than the event loop metrics.
            {
                "url": "http://127.0.0.1:9102/metrics",
                "status": "up",
                **dict.fromkeys(metrics.BROKER_FIELDS),
            },
        ],
    )

    page = viewer_browser.get("/").content.decode()

    assert re.search(
        r'<tr data-topic="orders" data-partition="1">.*?<td class="lso">9</td>'
        r'<td class="hw">12</td>',
        page,
        re.S,
    )
    assert '<tr data-transactional-id="stuck-tx" class="hanging">' in page
    assert re.search(r'data-field="producer_ids_live">7<', page)
    assert '<tr data-api="Produce">' in page
    assert re.search(
        r'<tr data-url="http://127.0.0.1:9101/metrics">\s*<td class="id">[^<]+</td>\s*'
        r'<td class="lag-max">3.5</td>.*?<td class="gen2">2</td>',
        page,
        re.S,
    )
    older = re.search(r'<tr data-url="http://127.0.0.1:9102/metrics">(.*?)</tr>', page, re.S)
    # Its figures are n/a, not an error.
    assert older[1].count(">n/a</td>") == len(metrics.BROKER_FIELDS)
    # The raw counters stay out of the page.
    assert '"counters"' not in page


def test_users_without_a_role_see_no_dashboard(db):
    browser = Client()
    browser.force_login(User.objects.create_user("nobody", password="pw-Secret-1"))

    page = browser.get("/").content.decode()

    assert "no role" in page
    assert "dashboard.js" not in page
    assert "chart-offsets" not in page
