"""Quota throttling on the dashboard: the summary of the broker's quota metrics (throttle time
per second and per throttled response, rate against limit), a real broker throttling a
client, and the dashboard page showing it."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from django.utils import timezone
from jobs_support import make_topic
from prometheus_client.parser import text_string_to_metric_families
from quotas_support import HARMLESS_BYTE_RATE

from api import kafka, metrics
from api.models import MetricSnapshot
from broker.client.models import ClientQuotaAlteration, ClientQuotaEntity

pytestmark = pytest.mark.django_db

FAMILIES = """\
# HELP fjord_quota_throttle_time_ms Throttle time given to the entity's responses.
# TYPE fjord_quota_throttle_time_ms counter
fjord_quota_throttle_time_ms_total{{quota_type="produce",user="alice",client_id=""}} {alice_ms}
fjord_quota_throttle_time_ms_total{{quota_type="fetch",user="",client_id="app"}} 0.0
{extra_ms}
# HELP fjord_quota_throttled Responses throttled for the entity.
# TYPE fjord_quota_throttled counter
fjord_quota_throttled_total{{quota_type="produce",user="alice",client_id=""}} {alice_count}
fjord_quota_throttled_total{{quota_type="fetch",user="",client_id="app"}} 0.0
{extra_count}
# HELP fjord_quota_rate Measured usage of a quota entity.
# TYPE fjord_quota_rate gauge
fjord_quota_rate{{quota_type="produce",user="alice",client_id=""}} 3072.0
fjord_quota_rate{{quota_type="fetch",user="",client_id="app"}} 10.0
# HELP fjord_quota_limit The quota that applies to the entity.
# TYPE fjord_quota_limit gauge
fjord_quota_limit{{quota_type="produce",user="alice",client_id=""}} 1024.0
# HELP fjord_connection_creation_throttled Connections closed for their address's rate.
# TYPE fjord_connection_creation_throttled counter
fjord_connection_creation_throttled_total{{ip="10.0.0.7"}} {connections}
"""


def families(alice_ms, alice_count, connections, new_entity=None):
    extra_ms = extra_count = ""
    if new_entity:
        labels = 'quota_type="request",user="bob",client_id="cli"'
        extra_ms = f"fjord_quota_throttle_time_ms_total{{{labels}}} {new_entity[0]}"
        extra_count = f"fjord_quota_throttled_total{{{labels}}} {new_entity[1]}"
    text = FAMILIES.format(
        alice_ms=alice_ms,
        alice_count=alice_count,
        connections=connections,
        extra_ms=extra_ms,
        extra_count=extra_count,
    )
    return list(text_string_to_metric_families(text))


def row(summary: dict, quota_type: str) -> dict:
    [found] = [q for q in summary["quotas"] if q["quota_type"] == quota_type]
    return found


def test_summary_of_quota_metrics():
    first = metrics.summarize(families(1000.0, 10.0, 2.0))
    # As stored in PostgreSQL and read back for the next sample.
    stored = json.loads(json.dumps(first))
    second = metrics.summarize(families(3000.0, 14.0, 5.0, new_entity=(600.0, 3.0)), stored, 2.0)

    assert row(first, "produce") == {
        "quota_type": "produce",
        "user": "alice",
        "client_id": "",
        "throttle_time_ms_per_second": None,
        "throttled_per_second": None,
        "mean_throttle_ms": None,
        "throttle_time_ms_total": 1000,
        "throttled_total": 10,
        "rate": 3072.0,
        "limit": 1024.0,
        "usage": 3.0,
    }
    assert first["quota_throttle_time_ms_per_second"] is None
    assert first["connections_throttled"] == [
        {"ip": "10.0.0.7", "throttled_total": 2, "throttled_per_second": None}
    ]
    alice = row(second, "produce")
    assert (alice["throttle_time_ms_per_second"], alice["throttled_per_second"]) == (1000.0, 2.0)
    assert alice["mean_throttle_ms"] == 500.0
    # An entity first seen now counts from zero; one never throttled has no mean throttle.
    bob = row(second, "request")
    assert (bob["throttle_time_ms_per_second"], bob["mean_throttle_ms"]) == (300.0, 200.0)
    app = row(second, "fetch")
    assert (app["throttle_time_ms_per_second"], app["mean_throttle_ms"]) == (0.0, None)
    assert (app["limit"], app["usage"]) == (None, None)
    # The most throttled first.
    assert [q["quota_type"] for q in second["quotas"]] == ["produce", "request", "fetch"]
    assert second["quota_throttle_time_ms_per_second"] == 1300.0
    assert second["connections_throttled_per_second"] == 1.5


def produce_as(bootstrap: str, topic: str, client_id: str) -> None:
    """20 kB in one Produce request: twice a 1 kB/s quota over Kafka's shortest quota window
    (ten one-second samples), so its response is throttled."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 200})
    for _ in range(20):
        producer.produce(topic, b"x" * 1000)
    assert producer.flush(60) == 0


def test_a_throttled_client_shows_on_the_dashboard(clean_quotas, unique):
    client_id, topic = unique("slow"), unique("quota")
    make_topic(clean_quotas.bootstrap, topic, 1)
    kafka.call(
        lambda admin: admin.alter_client_quotas(
            [
                ClientQuotaAlteration(
                    ClientQuotaEntity({"client-id": client_id}), {"producer_byte_rate": 1024}
                ),
                # A default beside it: the client's own quota is the one that applies.
                ClientQuotaAlteration(
                    ClientQuotaEntity({"client-id": None}),
                    {"producer_byte_rate": HARMLESS_BYTE_RATE},
                ),
            ]
        )
    )
    first = metrics.summarize(metrics.scrape(clean_quotas.metrics_url))
    taken = time.monotonic()

    produce_as(clean_quotas.bootstrap, topic, client_id)

    deadline = time.monotonic() + 30
    while True:
        second = metrics.summarize(
            metrics.scrape(clean_quotas.metrics_url), first, time.monotonic() - taken
        )
        [produce] = [
            q
            for q in second["quotas"]
            if (q["client_id"], q["quota_type"]) == (client_id, "produce")
        ] or [None]
        if produce and produce["throttled_total"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert produce is not None, second["quotas"]
    assert produce["user"] == ""
    assert produce["limit"] == 1024.0
    assert produce["throttle_time_ms_per_second"] > 0 and produce["mean_throttle_ms"] > 0
    assert second["quota_throttle_time_ms_per_second"] > 0


def test_the_dashboard_shows_quota_throttling(admin_browser):
    sample = metrics.summarize(
        families(3000.0, 14.0, 5.0), metrics.summarize(families(1000.0, 10.0, 2.0)), 2.0
    )
    MetricSnapshot.objects.create(taken_at=timezone.now(), data=sample)

    page = admin_browser.get("/").content.decode()

    assert 'id="quota-throttling"' in page
    assert "user alice" in page and "client id app" in page
    assert 'data-field="quota_throttle_time_ms_per_second"' in page
