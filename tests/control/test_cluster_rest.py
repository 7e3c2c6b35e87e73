"""/api/v1/cluster/ and /api/v1/brokers/: against a real broker, cross-checked with
confluent-kafka."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from rest_framework.test import APIClient

from api.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def confluent(broker_settings):
    return AdminClient({"bootstrap.servers": broker_settings.bootstrap})


@pytest.fixture
def broker_id(confluent):
    return confluent.list_topics(timeout=30).controller_id


def test_cluster_needs_credentials(broker_settings):
    assert APIClient().get("/api/v1/cluster/").status_code == 401
    assert APIClient().get("/api/v1/brokers/").status_code == 401


def test_cluster_describes_brokers_as_confluent_sees_them(viewer_api, confluent):
    metadata = confluent.list_topics(timeout=30)

    response = viewer_api.get("/api/v1/cluster/")

    assert response.status_code == 200
    body = response.json()
    assert body["cluster_id"] == metadata.cluster_id
    assert body["controller_id"] == metadata.controller_id
    assert {(b["id"], b["host"], b["port"]) for b in body["brokers"]} == {
        (b.id, b.host, b.port) for b in metadata.brokers.values()
    }


def test_cluster_log_dirs_only_when_not_declined(viewer_api, broker_settings, control_broker):
    """The console's Brokers page refreshes every few seconds without log dirs: no broker is
    asked to list its replicas then."""
    asked = viewer_api.get("/api/v1/cluster/").json()
    declined = viewer_api.get("/api/v1/cluster/?log_dirs=false").json()

    [with_dirs] = asked["brokers"]
    [without] = declined["brokers"]
    assert [d["path"] for d in with_dirs["log_dirs"]] == [str(control_broker.log_dir.absolute())]
    assert (without["log_dirs"], without["size_bytes"]) == (None, None)
    assert {k: v for k, v in without.items() if k not in ("log_dirs", "size_bytes")} == {
        k: v for k, v in with_dirs.items() if k not in ("log_dirs", "size_bytes")
    }


def test_brokers_list_and_detail(viewer_api, broker_id, control_broker, confluent, unique):
    topic = unique("log-dirs")
    confluent.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    listed = viewer_api.get("/api/v1/brokers/").json()
    detail = viewer_api.get(f"/api/v1/brokers/{broker_id}/")

    assert [b["id"] for b in listed["results"]] == [broker_id]
    assert detail.status_code == 200
    assert detail.json()["id"] == broker_id
    [log_dir] = detail.json()["log_dirs"]
    assert log_dir["path"] == str(control_broker.log_dir.absolute())
    assert log_dir["partition_count"] >= 2
    assert log_dir["used_bytes"] + log_dir["usable_bytes"] <= log_dir["total_bytes"]
    assert 0 < log_dir["usable_bytes"]


def test_unknown_broker_is_404(viewer_api, broker_settings):
    assert viewer_api.get("/api/v1/brokers/4242/").status_code == 404
    assert viewer_api.get("/api/v1/brokers/4242/configs/").status_code == 404
    assert viewer_api.get("/api/v1/brokers/9999999999/").status_code == 404
    assert viewer_api.get("/api/v1/brokers/x/").status_code == 404


def test_broker_configs_show_value_and_source(viewer_api, broker_id):
    response = viewer_api.get(f"/api/v1/brokers/{broker_id}/configs/")

    assert response.status_code == 200
    configs = {c["name"]: c for c in response.json()}
    assert configs["num.partitions"]["source"] in {"STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"}
    assert set(configs["num.partitions"]) == {"name", "value", "source", "read_only", "sensitive"}


def test_admin_sets_and_deletes_a_broker_config(admin_api, admin_user, broker_id, confluent):
    url = f"/api/v1/brokers/{broker_id}/configs/"

    set_response = admin_api.patch(url, {"set": {"log.retention.ms": "7200000"}}, format="json")
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    seen = confluent.describe_configs([resource])[resource].result(timeout=30)
    delete_response = admin_api.patch(url, {"delete": ["log.retention.ms"]}, format="json")

    assert set_response.status_code == 200, set_response.content
    after_set = {c["name"]: c for c in set_response.json()}
    assert after_set["log.retention.ms"]["value"] == "7200000"
    assert after_set["log.retention.ms"]["source"] == "DYNAMIC_BROKER_CONFIG"
    assert seen["log.retention.ms"].value == "7200000"
    after_delete = {c["name"]: c for c in delete_response.json()}
    assert after_delete["log.retention.ms"]["source"] != "DYNAMIC_BROKER_CONFIG"
    entry = AuditEntry.objects.filter(resource=f"broker/{broker_id}").first()
    assert (entry.user, entry.method, entry.status_code) == (admin_user, "PATCH", 200)
    # Only names: broker configs hold secrets.
    assert entry.detail == {"set": [], "delete": ["log.retention.ms"]}


def test_invalid_broker_config_is_400_with_the_kafka_error(admin_api, broker_id):
    response = admin_api.patch(
        f"/api/v1/brokers/{broker_id}/configs/",
        {"set": {"log.retention.ms": "forever"}},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["kafka_error"] == "INVALID_CONFIG"


def test_broker_configs_bad_input_is_400(admin_api, broker_id):
    response = admin_api.patch(f"/api/v1/brokers/{broker_id}/configs/", {}, format="json")

    assert response.status_code == 400
    assert "non_field_errors" in response.json()


@pytest.mark.parametrize("api", ["viewer_api", "operator_api"])
def test_only_admins_alter_broker_configs(request, api, broker_id):
    client = request.getfixturevalue(api)

    response = client.patch(
        f"/api/v1/brokers/{broker_id}/configs/",
        {"set": {"log.retention.ms": "1"}},
        format="json",
    )

    assert response.status_code == 403
    assert client.get(f"/api/v1/brokers/{broker_id}/configs/").status_code == 200
