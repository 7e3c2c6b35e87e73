import socket

import pytest
from django.test import Client
from django.urls import reverse


@pytest.fixture
def client():
    # tests/conftest.py's broker `client` would otherwise shadow pytest-django's.
    return Client()


@pytest.fixture
def listening_port():
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


@pytest.fixture
def closed_port():
    with socket.create_server(("127.0.0.1", 0)) as server:
        return server.getsockname()[1]


def test_health_reports_unreachable_broker(client, settings, closed_port):
    settings.FJORD_BOOTSTRAP = f"127.0.0.1:{closed_port}"

    response = client.get(reverse("api:health-list"))

    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "broker": {"bootstrap": f"127.0.0.1:{closed_port}", "status": "unreachable"},
    }


def test_health_reports_reachable_broker(client, settings, listening_port):
    settings.FJORD_BOOTSTRAP = f"127.0.0.1:{listening_port}"

    response = client.get("/api/v1/health/")

    assert response.status_code == 200
    assert response.json()["broker"]["status"] == "reachable"


def test_health_reachable_when_any_bootstrap_server_answers(
    client, settings, closed_port, listening_port
):
    settings.FJORD_BOOTSTRAP = f"127.0.0.1:{closed_port},127.0.0.1:{listening_port}"

    assert client.get("/api/v1/health/").json()["broker"]["status"] == "reachable"


def test_health_needs_no_credentials_even_when_bad_ones_are_sent(client, settings, closed_port):
    settings.FJORD_BOOTSTRAP = f"127.0.0.1:{closed_port}"

    response = client.get("/api/v1/health/", HTTP_AUTHORIZATION="Basic bm9ib2R5Om5vdGhpbmc=")

    assert response.status_code == 200


@pytest.mark.django_db
def test_rest_of_the_api_needs_a_login(client):
    response = client.get("/api/v1/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.django_db
def test_an_unrouted_api_path_is_a_json_404(client, settings):
    settings.DEBUG = False

    response = client.get("/api/v1/groups/a%01b/")

    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}
    assert client.get("/no-such-page/")["Content-Type"].startswith("text/html")
