"""A broker that stops answering: the Brokers page and the live dashboard say it is down and
since when (the first sample that found it so), and no longer once it answers again."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from broker_process import BrokerProcess, free_port
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import Client
from django.urls import reverse
from test_dashboard_ws import (  # the dashboard's viewer on its websocket
    PATH,
    RECEIVE_TIMEOUT,
    sample_seen,
    viewer_headers,  # noqa: F401 (a fixture)
)

from api import kafka
from control.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_broker(tmp_path, settings):
    """A broker of this test's own, to stop and start again, with the control plane on it."""
    metrics_url = f"http://127.0.0.1:{free_port()}/metrics"
    broker = BrokerProcess(tmp_path, f"metrics.listener={metrics_url}").start()
    broker.metrics_url = metrics_url
    settings.FJORD_BOOTSTRAP = broker.bootstrap
    settings.FJORD_METRICS_URL = metrics_url
    kafka.reset()
    yield broker
    broker.stop()
    kafka.reset()


def brokers_page(user) -> str:
    browser = Client()
    browser.force_login(user)
    try:
        response = browser.get(reverse("webui:cluster"))
        assert response.status_code == 200
        return response.content.decode()
    finally:
        connections.close_all()


def endpoint(data: dict) -> dict:
    (only,) = data["endpoints"]
    return only


async def test_a_stopped_broker_is_shown_down_since_its_first_failed_sample(
    own_broker,
    viewer,
    viewer_headers,  # noqa: F811
):
    page = sync_to_async(brokers_page, thread_sensitive=False)
    communicator = WebsocketCommunicator(application, PATH, headers=viewer_headers)
    connected, _ = await communicator.connect(timeout=RECEIVE_TIMEOUT)
    assert connected
    try:
        assert "down_since" not in endpoint(await sample_seen(communicator))

        await sync_to_async(own_broker.kill)()
        first = await sample_seen(communicator)
        assert first["broker"] == "unreachable"
        since = endpoint(first)["down_since"]
        assert since == first["taken_at"]
        # Later samples keep the outage's start.
        assert endpoint(await sample_seen(communicator))["down_since"] == since
        html = await page(viewer)
        assert "down since" in html
        assert f'<time datetime="{since}">' in html
        assert own_broker.metrics_url in html

        await sync_to_async(own_broker.start)()
        back = await sample_seen(communicator)
        assert back["broker"] == "up"
        assert "down_since" not in endpoint(back)
        assert "down since" not in await page(viewer)
    finally:
        await communicator.disconnect()
