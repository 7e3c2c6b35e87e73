import socket

import pytest
from django.test import Client


@pytest.fixture
def client():
    # tests/conftest.py's broker `client` would otherwise shadow pytest-django's.
    return Client()


@pytest.fixture
def listening_port():
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def test_home_page_shows_the_console_and_broker_reachability(client, settings, listening_port):
    settings.FJORD_BOOTSTRAP = f"127.0.0.1:{listening_port}"

    response = client.get("/")

    assert response.status_code == 200
    assert "webui/home.html" in [t.name for t in response.templates]
    page = response.content.decode()
    assert "Fjord console" in page
    assert 'class="status status-reachable"' in page
    assert f"127.0.0.1:{listening_port}" in page


def test_home_page_shows_an_unreachable_broker(client, settings):
    with socket.create_server(("127.0.0.1", 0)) as server:
        closed_port = server.getsockname()[1]
    settings.FJORD_BOOTSTRAP = f"127.0.0.1:{closed_port}"

    assert 'class="status status-unreachable"' in client.get("/").content.decode()
