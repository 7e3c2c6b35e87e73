"""The live dashboard's websocket (/ws/dashboard/) on the real ASGI application, over the Redis
channel layer: samples reach the browser as they are taken, and an open transaction shows as a
last stable offset below the high watermark until it commits."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from event_loop_support import assert_event_loop_figures, event_loop_timed

from api import sampling
from control.asgi import application
from webui.consumers import FORBIDDEN, UNAUTHENTICATED

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/ws/dashboard/"
ORIGIN = (b"origin", b"http://testserver")
RECEIVE_TIMEOUT = 30


def session_headers(user: User) -> list[tuple[bytes, bytes]]:
    browser = Client()
    browser.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [ORIGIN, (b"cookie", cookie.encode())]


@pytest.fixture
def viewer_headers(viewer):
    return session_headers(viewer)


@pytest.fixture
def roleless_headers(db):
    return session_headers(User.objects.create_user("nobody", password="pw-Secret-1"))


def sample_and_disconnect() -> dict:
    # The thread's database connection would otherwise outlive the test database.
    try:
        return sampling.sample()
    finally:
        connections.close_all()


async def take_sample() -> dict:
    """A sample taken in another thread, as beat's worker takes it in another process."""
    return await sync_to_async(sample_and_disconnect, thread_sensitive=False)()


async def sample_seen(communicator: WebsocketCommunicator) -> dict:
    """Take a sample and return it as the websocket delivered it; earlier messages (the
    latest stored sample, sent on connect) are skipped."""
    taken = await take_sample()
    while True:
        message = await communicator.receive_json_from(timeout=RECEIVE_TIMEOUT)
        assert message["type"] == "sample"
        if message["data"]["taken_at"] == taken["taken_at"]:
            return message["data"]


def offsets(data: dict, topic: str) -> dict[int, tuple[int, int]]:
    return {
        p["partition"]: (p["last_stable_offset"], p["high_watermark"])
        for p in data["partitions"]
        if p["topic"] == topic
    }


async def test_the_stream_shows_lso_below_hw_while_a_transaction_is_open(
    broker_settings, viewer_headers, unique
):
    topic, txn_id = unique("dash"), unique("dash-tx")
    admin = AdminClient({"bootstrap.servers": broker_settings.bootstrap})
    await sync_to_async(admin.create_topics([NewTopic(topic, 2, 1)])[topic].result)(30)
    producer = Producer(
        {"bootstrap.servers": broker_settings.bootstrap, "transactional.id": txn_id}
    )
    await sync_to_async(producer.init_transactions)(30)
    await sync_to_async(producer.begin_transaction)()
    for partition in (0, 1):
        for i in range(3):
            producer.produce(topic, f"{partition}-{i}".encode(), partition=partition)
    assert await sync_to_async(producer.flush)(30) == 0

    communicator = WebsocketCommunicator(application, PATH, headers=viewer_headers)
    connected, _ = await communicator.connect(timeout=RECEIVE_TIMEOUT)
    assert connected
    try:
        open_ = await sample_seen(communicator)
        assert open_["broker"] == "up"
        seen = offsets(open_, topic)
        assert set(seen) == {0, 1}
        for lso, hw in seen.values():
            assert lso < hw
        assert txn_id in [t["transactional_id"] for t in open_["transactions"]]

        await sync_to_async(producer.commit_transaction)(30)

        committed = offsets(await sample_seen(communicator), topic)
        assert set(committed) == {0, 1}
        for lso, hw in committed.values():
            assert lso == hw
            # The three records and the commit marker.
            assert hw == 4
    finally:
        await communicator.disconnect()


async def test_a_new_page_gets_the_latest_sample_at_once(broker_settings, viewer_headers):
    await sync_to_async(event_loop_timed)(broker_settings.metrics_url)
    taken = await take_sample()

    communicator = WebsocketCommunicator(application, PATH, headers=viewer_headers)
    connected, _ = await communicator.connect(timeout=RECEIVE_TIMEOUT)
    assert connected
    try:
        message = await communicator.receive_json_from(timeout=RECEIVE_TIMEOUT)
        assert message["type"] == "sample"
        assert message["data"]["taken_at"] == taken["taken_at"]
        assert "counters" not in message["data"]
        # The broker's own event loop and collector figures, for its row of the dashboard.
        [endpoint] = message["data"]["endpoints"]
        assert endpoint["url"] == broker_settings.metrics_url
        assert_event_loop_figures(endpoint)
    finally:
        await communicator.disconnect()


async def test_anonymous_users_are_refused():
    communicator = WebsocketCommunicator(application, PATH, headers=[ORIGIN])
    connected, code = await communicator.connect(timeout=RECEIVE_TIMEOUT)
    assert not connected
    assert code == UNAUTHENTICATED
    await communicator.disconnect()


async def test_users_without_a_role_are_refused(roleless_headers):
    communicator = WebsocketCommunicator(application, PATH, headers=roleless_headers)
    connected, code = await communicator.connect(timeout=RECEIVE_TIMEOUT)
    assert not connected
    assert code == FORBIDDEN
    await communicator.disconnect()


async def test_other_origins_are_refused(viewer_headers):
    headers = [(b"origin", b"http://evil.example")] + viewer_headers[1:]
    communicator = WebsocketCommunicator(application, PATH, headers=headers)
    connected, _ = await communicator.connect(timeout=RECEIVE_TIMEOUT)
    assert not connected
    await communicator.disconnect()
