"""The control plane over a three-broker cluster (real broker processes sharing a throwaway
PostgreSQL database): the Brokers page and its REST endpoints, replicas and ISR on topic
pages, and the dashboard's metrics added up over every broker's endpoint (what held each one's
event loop kept its own), before and after a broker dies."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from broker_process import BrokerProcess, free_port
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from django.urls import reverse
from event_loop_support import assert_event_loop_figures, event_loop_timed
from polling import wait_for
from postgres_database import throwaway_database

from api import kafka, sampling

pytestmark = pytest.mark.django_db

NODES = (1, 2, 3)
WAIT_S = 30
STORE_PASSWORD = "cluster-store-pa55word"


@pytest.fixture(scope="module")
def store_url():
    """A PostgreSQL database of its own for the cluster's metadata, dropped afterwards; its
    URL carries a password, as a deployment's does."""
    with throwaway_database("fjord_cluster", password=STORE_PASSWORD) as url:
        yield url


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, store_url):
    """Brokers 1 to 3 with their metrics endpoints; a lapsed lease is fenced in seconds."""
    brokers = {}
    for node in NODES:
        metrics_port = free_port()
        brokers[node] = BrokerProcess(
            tmp_path_factory.mktemp(f"cluster-logs-{node}"),
            f"node.id={node}",
            f"metadata.store.url={store_url}",
            "broker.session.timeout.ms=3000",
            "broker.heartbeat.interval.ms=500",
            f"metrics.listener=http://127.0.0.1:{metrics_port}/metrics",
        )
        brokers[node].metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        for broker in brokers.values():
            broker.spawn()
        for broker in brokers.values():
            broker.wait_started()
        yield brokers
    finally:
        for broker in brokers.values():
            broker.stop()


@pytest.fixture
def cluster_settings(settings, cluster):
    """The control plane pointed at every broker of the cluster, as the launcher points it."""
    settings.FJORD_BOOTSTRAP = ",".join(b.bootstrap for b in cluster.values())
    settings.FJORD_METRICS_URL = ",".join(b.metrics_url for b in cluster.values())
    kafka.reset()
    yield cluster
    kafka.reset()


def brokers_listed(api, alive: set[int]) -> list[dict] | None:
    """The brokers REST endpoint's list once exactly `alive` are alive, else None."""
    response = api.get("/api/v1/brokers/")
    if response.status_code != 200:
        return None
    listed = response.json()["results"]
    return listed if {b["id"] for b in listed if not b["fenced"]} == alive else None


def topic_described(api, name: str, check: Callable[[dict], bool]) -> dict | None:
    response = api.get(f"/api/v1/topics/{name}/")
    if response.status_code != 200:
        return None
    body = response.json()
    return body if all(check(p) for p in body["partitions"]) else None


def test_brokers_page_lists_every_broker_with_the_controller(
    cluster_settings, viewer_api, viewer_browser
):
    listed = wait_for(lambda: brokers_listed(viewer_api, set(NODES)), WAIT_S, "three live brokers")
    cluster = viewer_api.get("/api/v1/cluster/").json()
    page = viewer_browser.get(reverse("webui:cluster"))

    assert [b["id"] for b in listed] == list(NODES)
    [controller] = [b["id"] for b in listed if b["controller"]]
    assert controller == cluster["controller_id"]
    assert [b["id"] for b in cluster["brokers"]] == list(NODES)
    for broker in listed:
        assert broker["port"] == cluster_settings[broker["id"]].port
        [log_dir] = broker["log_dirs"]
        assert log_dir["path"] == str(cluster_settings[broker["id"]].log_dir.absolute())
        assert broker["size_bytes"] == log_dir["size_bytes"]
    detail = viewer_api.get(f"/api/v1/brokers/{controller}/").json()
    assert detail["controller"] is True and detail["fenced"] is False

    assert page.status_code == 200
    shown = page.context["cluster"]
    assert [(b.node.node_id, b.controller, b.node.fenced) for b in shown.brokers] == [
        (node, node == controller, False) for node in NODES
    ]
    html = page.content.decode()
    for node in NODES:
        assert f'data-broker-id="{node}"' in html
    # One controller tag shown, the others hidden for the page's script to reveal.
    assert html.count('class="tag controller-tag">') == 1
    assert html.count('class="tag controller-tag" hidden>') == 2
    assert html.count('data-field="status">alive<') == 3


def test_the_store_url_is_shown_to_nobody(cluster_settings, viewer_api, admin_api, viewer_browser):
    """metadata.store.url holds the metadata database's password: REST and the console say it
    is set and sensitive, as kafka-configs does, never what it is, to viewers nor admins."""
    for api in (viewer_api, admin_api):
        response = api.get("/api/v1/brokers/1/configs/")
        assert response.status_code == 200
        assert STORE_PASSWORD not in response.content.decode()
        store = {c["name"]: c for c in response.json()}["metadata.store.url"]
        assert (store["value"], store["sensitive"]) == (None, True)
        assert store["source"] == "STATIC_BROKER_CONFIG"

    page = viewer_browser.get(reverse("webui:broker-configs", args=[1]))
    assert page.status_code == 200
    html = page.content.decode()
    assert STORE_PASSWORD not in html
    [row] = [r for r in page.context["rows"] if r["name"] == "metadata.store.url"]
    assert row["sensitive"] and row["value"] is None
    assert "(hidden)" in html


def test_a_replicated_topic_shows_its_replicas_and_isr(
    cluster_settings, operator_api, viewer_browser, unique
):
    name = unique("replicated")
    created = operator_api.post(
        "/api/v1/topics/",
        {"name": name, "partitions": 3, "replication_factor": 3},
        format="json",
    )
    assert created.status_code == 201, created.content

    described = wait_for(
        lambda: topic_described(operator_api, name, lambda p: len(p["isr"]) == 3),
        WAIT_S,
        "every replica in sync",
    )
    page = viewer_browser.get(reverse("webui:topic-detail", args=[name]))
    listed = operator_api.get("/api/v1/brokers/").json()["results"]

    for partition in described["partitions"]:
        assert sorted(partition["replicas"]) == list(NODES)
        assert sorted(partition["isr"]) == list(NODES)
        assert partition["leader"] in partition["replicas"]
        assert partition["offline_replicas"] == []
        assert partition["under_replicated"] is False
    assert sum(b["partitions_led"] for b in listed) >= 3
    assert all(b["partition_count"] >= 3 for b in listed)
    assert page.status_code == 200
    html = page.content.decode()
    for partition in described["partitions"]:
        isr = ", ".join(str(r) for r in partition["isr"])
        assert f'<td class="isr">{isr}</td>' in html
    assert "under-replicated" not in html


def under_replicated_sample() -> dict | None:
    data = sampling.sample()
    return data if data["under_replicated_partitions"] else None


def test_a_dead_broker_is_fenced_and_its_partitions_under_replicated(
    cluster_settings, viewer_api, viewer_browser, unique
):
    """Last in the module: it kills a broker of the shared cluster."""
    name = unique("failover")
    bootstrap = ",".join(b.bootstrap for b in cluster_settings.values())
    # The client must outlive its futures.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 3, 3)])[name].result(30)
    wait_for(
        lambda: topic_described(viewer_api, name, lambda p: len(p["isr"]) == 3),
        WAIT_S,
        "every replica in sync",
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(9):
        producer.produce(name, f"record-{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    for broker in cluster_settings.values():
        event_loop_timed(broker.metrics_url)
    before = sampling.sample()
    listed = wait_for(lambda: brokers_listed(viewer_api, set(NODES)), WAIT_S, "three live brokers")
    victim = next(b["id"] for b in listed if not b["controller"])

    cluster_settings[victim].kill()
    after = wait_for(
        under_replicated_sample, WAIT_S, "under-replicated partitions on the dashboard"
    )
    fenced = wait_for(
        lambda: brokers_listed(viewer_api, set(NODES) - {victim}),
        WAIT_S,
        f"broker {victim} fenced",
    )
    described = viewer_api.get(f"/api/v1/topics/{name}/").json()
    brokers_page = viewer_browser.get(reverse("webui:cluster")).content.decode()
    topic_page = viewer_browser.get(reverse("webui:topic-detail", args=[name])).content.decode()

    # Each broker's endpoint scraped, the figures added up: every replica reports its
    # partition, and the leader's offsets are the ones shown.
    assert before["broker"] == "up"
    assert [e["status"] for e in before["endpoints"]] == ["up", "up", "up"]
    # What held each broker's event loop is its own, in its row, never added up.
    for endpoint in before["endpoints"]:
        assert_event_loop_figures(endpoint)
    assert before["under_replicated_partitions"] == before["offline_partitions"] == 0
    assert before["active_controllers"] == 1
    mine = [p for p in before["partitions"] if p["topic"] == name]
    assert [p["high_watermark"] for p in mine] == [3, 3, 3]

    assert after["broker"] == "partial"
    assert cluster_settings[victim].metrics_url in after["error"]
    [gone] = [e for e in after["endpoints"] if e["status"] == "unreachable"]
    assert gone["url"] == cluster_settings[victim].metrics_url
    assert gone["event_loop_lag_max_ms"] is None and gone["gc_gen2_collections_total"] is None
    assert after["offline_partitions"] == 0
    [dead] = [b for b in fenced if b["id"] == victim]
    assert (dead["fenced"], dead["controller"], dead["log_dirs"]) == (True, False, None)
    for partition in described["partitions"]:
        assert victim not in partition["isr"]
        assert partition["offline_replicas"] == [victim]
        assert partition["under_replicated"] is True
    assert 'data-field="status">fenced<' in brokers_page
    assert "under-replicated" in topic_page and 'class="replica-offline"' in topic_page
