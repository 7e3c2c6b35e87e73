"""The audit log through the REST API: read-only, admins only, filtered by user and action."""

from __future__ import annotations

import pytest

from api.models import AuditEntry

pytestmark = pytest.mark.django_db

URL = "/api/v1/audit/"


@pytest.fixture
def entries(viewer, operator):
    AuditEntry.objects.create(
        user=operator,
        username="otto",
        method="DELETE",
        path="/api/v1/groups/g1/",
        action="api:group-detail",
        resource="group/g1",
        status_code=204,
    )
    AuditEntry.objects.create(
        user=viewer,
        username="vera",
        method="POST",
        path="/api/v1/acls/",
        action="api:acl-list",
        resource="acl/TOPIC:LITERAL:t",
        status_code=403,
    )
    AuditEntry.objects.create(
        user=operator,
        username="otto",
        method="POST",
        path="/api/v1/groups/g2/offsets/",
        action="api:group-offsets",
        resource="group/g2",
        status_code=409,
        kafka_error="NON_EMPTY_GROUP",
        detail={"reset": {"to": "earliest"}},
    )


def test_admin_reads_the_log_newest_first(entries, admin_api):
    response = admin_api.get(URL)

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    newest = body["results"][0]
    assert newest["username"] == "otto"
    assert newest["action"] == "api:group-offsets"
    assert newest["kafka_error"] == "NON_EMPTY_GROUP"
    assert newest["detail"] == {"reset": {"to": "earliest"}}
    assert admin_api.get(f"{URL}{newest['id']}/").json() == newest


def test_filters(entries, admin_api):
    by_user = admin_api.get(URL, {"user": "otto"}).json()
    by_action = admin_api.get(URL, {"action": "ACL"}).json()
    both = admin_api.get(URL, {"user": "otto", "action": "group-detail"}).json()
    by_resource = admin_api.get(URL, {"resource": "group/g2"}).json()

    assert by_user["count"] == 2
    assert [e["username"] for e in by_action["results"]] == ["vera"]
    assert [e["resource"] for e in both["results"]] == ["group/g1"]
    assert [e["action"] for e in by_resource["results"]] == ["api:group-offsets"]


def test_paginated(admin_user, admin_api):
    AuditEntry.objects.bulk_create(
        AuditEntry(username="ada", method="POST", path=f"/p/{i}", status_code=201)
        for i in range(55)
    )

    first = admin_api.get(URL).json()
    second = admin_api.get(URL, {"page": 2}).json()

    assert first["count"] == 55 and len(first["results"]) == 50 and first["next"]
    assert len(second["results"]) == 5
    assert admin_api.get(URL, {"page": 9}).status_code == 404


def test_bad_filters_and_ids(admin_api):
    assert admin_api.get(URL, {"user": "x" * 151}).status_code == 400
    assert "user" in admin_api.get(URL, {"user": "a\x00b"}).json()
    assert admin_api.get(f"{URL}99999999/").status_code == 404
    assert admin_api.get(f"{URL}abc/").status_code == 404


def test_the_log_is_read_only_and_for_admins(entries, viewer_api, operator_api, admin_api, client):
    assert viewer_api.get(URL).status_code == 403
    assert operator_api.get(URL).status_code == 403
    assert client.get(URL).status_code == 401
    assert admin_api.post(URL, {}, format="json").status_code == 405
    entry = AuditEntry.objects.first()
    assert admin_api.delete(f"{URL}{entry.id}/").status_code == 405
    assert (
        admin_api.patch(f"{URL}{entry.id}/", {"status_code": 200}, format="json").status_code == 405
    )
    assert AuditEntry.objects.filter(status_code=405, username="ada").count() == 3
