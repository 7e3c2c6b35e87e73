"""SCRAM users through the REST API, cross-checked with confluent-kafka's AdminClient; the
password is never answered nor audited."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ScramMechanism

from api.models import AuditEntry

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

URL = "/api/v1/users/"
PASSWORD = "correct-horse-battery-staple"


@pytest.fixture
def confluent(broker_settings):
    return ConfluentAdmin({"bootstrap.servers": broker_settings.bootstrap})


def test_upsert_list_and_delete_a_user(broker_settings, admin_api, confluent, unique):
    name = unique("alice")

    created = admin_api.post(
        URL,
        {"name": name, "mechanism": "SCRAM-SHA-256", "iterations": 8192, "password": PASSWORD},
        format="json",
    )
    second = admin_api.post(URL, {"name": name, "password": PASSWORD}, format="json")
    listed = admin_api.get(URL, {"search": name})
    one = admin_api.get(f"{URL}{name}/")

    assert created.status_code == 201, created.content
    assert created.json() == {"name": name, "mechanism": "SCRAM-SHA-256", "iterations": 8192}
    assert second.json() == {"name": name, "mechanism": "SCRAM-SHA-512", "iterations": 4096}
    expected = {
        "name": name,
        "credentials": [
            {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
            {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
        ],
    }
    assert listed.json()["results"] == [expected]
    assert one.json() == expected
    described = confluent.describe_user_scram_credentials([name])[name].result(30)
    assert sorted((c.mechanism, c.iterations) for c in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192),
        (ScramMechanism.SCRAM_SHA_512, 4096),
    ]

    one_mechanism = admin_api.delete(f"{URL}{name}/?mechanism=SCRAM-SHA-256")
    assert one_mechanism.status_code == 204
    assert admin_api.get(f"{URL}{name}/").json()["credentials"] == [
        {"mechanism": "SCRAM-SHA-512", "iterations": 4096}
    ]
    assert admin_api.delete(f"{URL}{name}/").status_code == 204
    gone = admin_api.get(f"{URL}{name}/")
    assert gone.status_code == 404
    assert gone.json()["kafka_error"] == "RESOURCE_NOT_FOUND"
    again = admin_api.delete(f"{URL}{name}/?mechanism=SCRAM-SHA-512")
    assert again.status_code == 404
    assert again.json()["kafka_error"] == "RESOURCE_NOT_FOUND"


def test_the_password_is_never_audited(broker_settings, admin_api, unique):
    name = unique("bob")

    admin_api.post(URL, {"name": name, "password": PASSWORD}, format="json")
    admin_api.delete(f"{URL}{name}/?mechanism=SCRAM-SHA-512")

    created, deleted = AuditEntry.objects.filter(resource=f"user/{name}").order_by("id")
    assert created.status_code == 201
    assert created.detail == {"mechanism": "SCRAM-SHA-512", "iterations": 4096}
    assert deleted.action == "api:user-detail" and deleted.status_code == 204
    everything = json.dumps(list(AuditEntry.objects.values()), default=str)
    assert PASSWORD not in everything


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "u", "password": PASSWORD, "iterations": 100}, "iterations"),
        ({"name": "u", "password": PASSWORD, "iterations": 2**40}, "iterations"),
        ({"name": "u", "password": PASSWORD, "mechanism": "PLAIN"}, "mechanism"),
        ({"name": "u"}, "password"),
        ({"name": "u", "password": ""}, "password"),
        ({"password": PASSWORD}, "name"),
        ({"name": "", "password": PASSWORD}, "name"),
        ({"name": "a/b", "password": PASSWORD}, "name"),
        ({"name": ["u"], "password": PASSWORD}, "name"),
    ],
)
def test_bad_users_get_field_errors(admin_api, body, field):
    response = admin_api.post(URL, body, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert PASSWORD not in response.content.decode()


def test_bad_mechanism_on_delete(admin_api):
    response = admin_api.delete(f"{URL}u/?mechanism=MD5")
    blank = admin_api.delete(f"{URL}u/?mechanism=")

    assert response.status_code == 400
    assert "mechanism" in response.json()
    assert blank.status_code == 400 and "mechanism" in blank.json()


def test_users_are_admin_only_even_to_read(broker_settings, viewer_api, operator_api, client):
    for api in (viewer_api, operator_api):
        assert api.get(URL).status_code == 403
        assert api.post(URL, {"name": "x", "password": PASSWORD}, format="json").status_code == 403
        assert api.delete(f"{URL}x/").status_code == 403
    assert client.get(URL).status_code == 401
    assert client.post(URL, {"name": "x", "password": PASSWORD}).status_code == 401
