"""ACLs through the REST API against a broker with Kafka's StandardAuthorizer, cross-checked
with confluent-kafka's AdminClient both ways. The control plane and the confluent client connect
over PLAINTEXT as User:ANONYMOUS, a super user of that broker."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from api.models import AuditEntry

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]

URL = "/api/v1/acls/"
DELETE_URL = "/api/v1/acls/delete/"


def binding(**fields) -> dict:
    return {
        "resource_type": "TOPIC",
        "resource_name": "orders",
        "pattern_type": "LITERAL",
        "principal": "User:alice",
        "host": "*",
        "operation": "READ",
        "permission_type": "ALLOW",
    } | fields


def test_acl_created_through_rest_is_seen_by_confluent(
    acl_settings, admin_api, confluent_acls, unique
):
    topic = unique("orders")

    response = admin_api.post(
        URL, binding(resource_name=topic, pattern_type="prefixed"), format="json"
    )

    assert response.status_code == 201, response.content
    assert response.json() == binding(resource_name=topic, pattern_type="PREFIXED")
    [seen] = confluent_acls(ResourceType.TOPIC, topic)
    assert seen.principal == "User:alice"
    assert seen.operation == AclOperation.READ
    assert seen.permission_type == AclPermissionType.ALLOW
    assert seen.resource_pattern_type == ResourcePatternType.PREFIXED


def test_acl_created_by_confluent_is_listed_with_filters(
    acl_settings, viewer_api, confluent, unique
):
    txn_id = unique("txn")
    created = [
        AclBinding(
            ResourceType.TRANSACTIONAL_ID,
            txn_id,
            ResourcePatternType.LITERAL,
            "User:bob",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.TRANSACTIONAL_ID,
            txn_id,
            ResourcePatternType.LITERAL,
            "User:carol",
            "10.0.0.1",
            AclOperation.DESCRIBE,
            AclPermissionType.DENY,
        ),
    ]
    for future in confluent.create_acls(created).values():
        future.result(30)

    everything = viewer_api.get(URL, {"resource_name": txn_id})
    bobs = viewer_api.get(
        URL, {"resource_type": "TRANSACTIONAL_ID", "resource_name": txn_id, "principal": "User:bob"}
    )
    denied = viewer_api.get(URL, {"resource_name": txn_id, "permission_type": "deny"})

    assert everything.status_code == 200
    assert everything.json()["count"] == 2
    assert bobs.json()["results"] == [
        binding(
            resource_type="TRANSACTIONAL_ID",
            resource_name=txn_id,
            principal="User:bob",
            operation="WRITE",
        )
    ]
    assert [b["principal"] for b in denied.json()["results"]] == ["User:carol"]
    assert denied.json()["results"][0]["host"] == "10.0.0.1"


def test_delete_returns_the_bindings_the_filter_matched(
    acl_settings, admin_api, confluent_acls, unique
):
    group = unique("group")
    for op in ("READ", "DESCRIBE"):
        assert (
            admin_api.post(
                URL,
                binding(resource_type="GROUP", resource_name=group, operation=op),
                format="json",
            ).status_code
            == 201
        )

    response = admin_api.post(
        DELETE_URL,
        {"resource_type": "GROUP", "resource_name": group, "operation": "READ"},
        format="json",
    )

    assert response.status_code == 200, response.content
    assert response.json() == {
        "deleted": [binding(resource_type="GROUP", resource_name=group, operation="READ")]
    }
    [left] = confluent_acls(ResourceType.GROUP, group)
    assert left.operation == AclOperation.DESCRIBE


def test_every_resource_type_can_be_bound(acl_settings, admin_api, unique):
    name = unique("r")
    cases = [
        binding(resource_type="CLUSTER", resource_name="kafka-cluster", operation="ALTER"),
        binding(resource_type="TRANSACTIONAL_ID", resource_name=name, operation="WRITE"),
        # KIP-939's operation comes through from the broker's enum.
        binding(resource_type="TRANSACTIONAL_ID", resource_name=name, operation="TWO_PHASE_COMMIT"),
        binding(resource_type="DELEGATION_TOKEN", resource_name=name, operation="DESCRIBE"),
        binding(resource_type="USER", resource_name=name, operation="CREATE_TOKENS"),
    ]
    for case in cases:
        assert admin_api.post(URL, case, format="json").status_code == 201, case
    listed = admin_api.get(URL, {"principal": "User:alice", "resource_type": "ANY"}).json()
    types = {b["resource_type"] for b in listed["results"]}
    assert {"CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER"} <= types
    response = admin_api.post(
        DELETE_URL, {"resource_type": "CLUSTER", "principal": "User:alice"}, format="json"
    )
    assert len(response.json()["deleted"]) == 1


def test_creating_an_acl_is_audited(acl_settings, admin_api, unique):
    topic = unique("audited")

    admin_api.post(URL, binding(resource_name=topic), format="json")
    admin_api.post(DELETE_URL, {"resource_type": "ANY", "resource_name": topic}, format="json")

    created, deleted = AuditEntry.objects.filter(username="ada").order_by("id")
    assert created.action == "api:acl-list" and created.status_code == 201
    assert created.resource == f"acl/TOPIC:LITERAL:{topic}/User:alice@*/READ/ALLOW"
    assert created.detail["binding"]["resource_name"] == topic
    assert deleted.action == "api:acl-delete" and deleted.detail["deleted"] == 1


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"resource_type": "BOGUS"}, "resource_type"),
        ({"resource_type": "ANY"}, "resource_type"),
        ({"pattern_type": "MATCH"}, "pattern_type"),
        ({"operation": "ANY"}, "operation"),
        ({"operation": 3}, "operation"),
        ({"permission_type": "MAYBE"}, "permission_type"),
        ({"principal": "alice"}, "principal"),
        ({"principal": ":alice"}, "principal"),
        ({"resource_name": ""}, "resource_name"),
        ({"resource_name": None}, "resource_name"),
        ({"resource_type": "CLUSTER", "resource_name": "other"}, "resource_name"),
    ],
)
def test_bad_bindings_get_field_errors(acl_settings, admin_api, fields, field):
    response = admin_api.post(URL, binding(**fields), format="json")

    assert response.status_code == 400
    assert field in response.json()


def test_host_and_pattern_default_to_any_host_and_literal(acl_settings, admin_api, unique):
    body = binding(resource_name=unique("t"), host="")
    del body["pattern_type"]

    response = admin_api.post(URL, body, format="json")

    assert response.status_code == 201
    assert response.json()["host"] == "*"
    assert response.json()["pattern_type"] == "LITERAL"


def test_a_missing_field_is_named(admin_api):
    response = admin_api.post(URL, {"resource_type": "TOPIC"}, format="json")

    assert response.status_code == 400
    assert {"resource_name", "principal", "operation", "permission_type"} <= set(response.json())


def test_bad_filters_get_field_errors(admin_api):
    assert "operation" in admin_api.get(URL, {"operation": "FLY"}).json()
    assert admin_api.get(URL, {"principal": "nobody"}).status_code == 400
    empty = admin_api.post(DELETE_URL, {}, format="json")
    assert empty.status_code == 400
    assert "resource_type" in empty.json()


def test_changing_acls_needs_the_admin_role(acl_settings, viewer_api, operator_api, client, unique):
    topic = unique("t")

    assert viewer_api.get(URL).status_code == 200
    assert client.get(URL).status_code == 401
    assert (
        client.post(URL, binding(resource_name=topic), content_type="application/json").status_code
        == 401
    )
    for api in (viewer_api, operator_api):
        assert api.post(URL, binding(resource_name=topic), format="json").status_code == 403
        assert api.post(DELETE_URL, {"resource_name": topic}, format="json").status_code == 403
    refused = AuditEntry.objects.filter(username="otto").first()
    assert refused.status_code == 403


def test_a_broker_without_authorizer_answers_security_disabled(broker_settings, admin_api):
    listed = admin_api.get(URL)
    created = admin_api.post(URL, binding(), format="json")

    assert listed.status_code == 403
    assert listed.json()["kafka_error"] == "SECURITY_DISABLED"
    assert created.status_code == 403
    assert created.json()["kafka_error"] == "SECURITY_DISABLED"
    assert AuditEntry.objects.get(username="ada").kafka_error == "SECURITY_DISABLED"
