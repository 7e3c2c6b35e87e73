"""Client quotas through the REST API: entities with defaults and combinations, filters,
updates and removal, the broker's refusals with Kafka's error name, validate_only, roles and
the audit log."""

from __future__ import annotations

import pytest
from quotas_support import HARMLESS_BYTE_RATE

from api.models import AuditEntry

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

URL = "/api/v1/quotas/"
DELETE_URL = f"{URL}delete/"


def set_quotas(api, entity: dict, quotas: dict, **extra):
    return api.post(URL, {"entity": entity, "quotas": quotas, **extra}, format="json")


def listed(api, **query) -> list[dict]:
    response = api.get(URL, query)
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_set_list_update_and_remove_quotas(clean_quotas, admin_api, unique):
    alice, app = unique("alice"), unique("app")

    created = set_quotas(
        admin_api, {"user": alice}, {"producer_byte_rate": 1048576, "request_percentage": 50.5}
    )
    set_quotas(admin_api, {"user": alice, "client_id": None}, {"consumer_byte_rate": 2048})
    set_quotas(admin_api, {"user": None}, {"producer_byte_rate": HARMLESS_BYTE_RATE})
    set_quotas(admin_api, {"client_id": app}, {"consumer_byte_rate": HARMLESS_BYTE_RATE})
    set_quotas(admin_api, {"ip": None}, {"connection_creation_rate": 100000})

    assert created.status_code == 200, created.content
    assert created.json() == {
        "entity": {"user": alice},
        "quotas": {"producer_byte_rate": 1048576, "request_percentage": 50.5},
    }
    # Users first (the default first), then client ids, then ips.
    assert listed(admin_api) == [
        {"entity": {"user": None}, "quotas": {"producer_byte_rate": HARMLESS_BYTE_RATE}},
        {
            "entity": {"user": alice},
            "quotas": {"producer_byte_rate": 1048576, "request_percentage": 50.5},
        },
        {"entity": {"user": alice, "client_id": None}, "quotas": {"consumer_byte_rate": 2048}},
        {"entity": {"client_id": app}, "quotas": {"consumer_byte_rate": HARMLESS_BYTE_RATE}},
        {"entity": {"ip": None}, "quotas": {"connection_creation_rate": 100000}},
    ]
    entities = lambda **q: [e["entity"] for e in listed(admin_api, **q)]  # noqa: E731
    assert entities(user=alice) == [{"user": alice}, {"user": alice, "client_id": None}]
    assert entities(user=alice, strict="true") == [{"user": alice}]
    assert entities(default="user") == [{"user": None}]
    assert entities(user=alice, default="client_id") == [{"user": alice, "client_id": None}]
    assert entities(any="client_id") == [{"user": alice, "client_id": None}, {"client_id": app}]
    assert entities(any="ip", strict="true") == [{"ip": None}]

    # Keys given are set, null removes one, the others stay.
    updated = set_quotas(
        admin_api, {"user": alice}, {"producer_byte_rate": 2048, "request_percentage": None}
    )
    assert updated.json()["quotas"] == {"producer_byte_rate": 2048}

    one_key = admin_api.post(
        DELETE_URL,
        {"entity": {"user": alice, "client_id": None}, "keys": ["consumer_byte_rate"]},
        format="json",
    )
    whole = admin_api.post(DELETE_URL, {"entity": {"user": alice}}, format="json")
    assert (one_key.status_code, whole.status_code) == (204, 204)
    assert entities(user=alice) == []
    again = admin_api.post(DELETE_URL, {"entity": {"user": alice}}, format="json")
    assert again.status_code == 404
    assert again.json()["kafka_error"] == "RESOURCE_NOT_FOUND"


@pytest.mark.parametrize(
    "entity, quotas, message",
    [
        ({"user": "u"}, {"producer_byte_rate": 1.5}, "fractional"),
        ({"user": "u"}, {"not_a_quota": 1}, "not_a_quota"),
        ({"client_id": "c"}, {"consumer_byte_rate": -1}, "greater than 0"),
        ({"user": "u", "ip": "127.0.0.1"}, {"producer_byte_rate": 1}, "IP entity"),
        ({"ip": None}, {"producer_byte_rate": 1}, "producer_byte_rate"),
        ({"ip": "not-an-address"}, {"connection_creation_rate": 1}, "not-an-address"),
        ({}, {"producer_byte_rate": 1}, "empty"),
    ],
)
def test_the_brokers_refusals_are_400_with_kafkas_error(
    clean_quotas, admin_api, entity, quotas, message
):
    response = set_quotas(admin_api, entity, quotas)

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["kafka_error"] == "INVALID_REQUEST"
    assert message in body["detail"]
    assert listed(admin_api) == []


@pytest.mark.parametrize(
    "body, field",
    [
        ({"entity": {"client-id": "c"}, "quotas": {"consumer_byte_rate": 1}}, "entity"),
        ({"entity": {"user": "u"}, "quotas": {}}, "quotas"),
        ({"entity": {"user": "u"}, "quotas": {"producer_byte_rate": "fast"}}, "quotas"),
        ({"entity": {"user": ""}, "quotas": {"producer_byte_rate": 1}}, "entity"),
        ({"quotas": {"producer_byte_rate": 1}}, "entity"),
        ({"entity": "user=u", "quotas": {"producer_byte_rate": 1}}, "entity"),
    ],
)
def test_malformed_bodies_get_field_errors(admin_api, body, field):
    response = admin_api.post(URL, body, format="json")

    assert response.status_code == 400
    assert field in response.json()


def test_validate_only_checks_without_changing(clean_quotas, admin_api, unique):
    user = unique("val")

    valid = set_quotas(admin_api, {"user": user}, {"producer_byte_rate": 10}, validate_only=True)
    invalid = set_quotas(
        admin_api, {"user": user}, {"producer_byte_rate": 10.5}, validate_only=True
    )

    assert valid.status_code == 200
    assert valid.json() == {"entity": {"user": user}, "quotas": {}}
    assert invalid.status_code == 400 and invalid.json()["kafka_error"] == "INVALID_REQUEST"
    assert listed(admin_api) == []


def test_bad_filters(broker_settings, admin_api):
    twice = admin_api.get(URL, {"user": "u", "default": "user"})
    unknown = admin_api.get(URL, {"default": "group"})

    # The broker refuses a type matched twice, as it would refuse kafka-configs.
    assert twice.status_code == 400 and twice.json()["kafka_error"] == "INVALID_REQUEST"
    assert unknown.status_code == 400 and "default" in unknown.json()


def test_viewers_read_and_admins_change_quotas(
    clean_quotas, viewer_api, operator_api, admin_api, client
):
    body = {"entity": {"user": "x"}, "quotas": {"producer_byte_rate": 1}}
    removal = {"entity": {"user": "x"}}

    assert viewer_api.get(URL).status_code == 200
    for api in (viewer_api, operator_api):
        assert api.post(URL, body, format="json").status_code == 403
        assert api.post(DELETE_URL, removal, format="json").status_code == 403
    assert client.get(URL).status_code == 401
    assert listed(admin_api) == []


def test_changes_are_audited(clean_quotas, admin_api, unique):
    user = unique("aud")

    set_quotas(admin_api, {"user": user, "client_id": None}, {"producer_byte_rate": 4096})
    admin_api.post(DELETE_URL, {"entity": {"user": user, "client_id": None}}, format="json")
    set_quotas(admin_api, {"user": user}, {"producer_byte_rate": 0.5})

    resource = f"quota/client-id=<default>,user={user}"
    created, removed = AuditEntry.objects.filter(resource=resource).order_by("id")
    assert (created.action, created.status_code) == ("api:quota-list", 200)
    assert created.detail == {"quotas": {"producer_byte_rate": 4096.0}, "validate_only": False}
    assert (removed.action, removed.status_code) == ("api:quota-delete", 204)
    assert removed.detail == {"keys": "all", "removed": ["producer_byte_rate"]}
    refused = AuditEntry.objects.get(resource=f"quota/user={user}")
    assert (refused.status_code, refused.kafka_error) == (400, "INVALID_REQUEST")
