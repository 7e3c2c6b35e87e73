"""The broker's metrics as the dashboards read them: the summary of a real broker's
Prometheus endpoint, the sampled history with its retention, and the metrics API."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from django.contrib.auth.models import User
from django.utils import timezone
from event_loop_support import assert_event_loop_figures, event_loop_timed
from rest_framework.test import APIClient

from api import metrics, sampling
from api.models import MetricSnapshot
from api.tasks import prune_metric_history, sample_broker_metrics

pytestmark = pytest.mark.django_db


@pytest.fixture
def listening_port_closed():
    with socket.create_server(("127.0.0.1", 0)) as server:
        return server.getsockname()[1]


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    # The client must outlive its futures.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, f"value-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def partition(summary: dict, topic: str, number: int = 0) -> dict:
    [row] = [p for p in summary["partitions"] if (p["topic"], p["partition"]) == (topic, number)]
    return row


def test_summary_of_a_real_brokers_endpoint(broker_settings, unique):
    event_loop_timed(broker_settings.metrics_url)
    topic = unique("metrics")
    create_topic(broker_settings.bootstrap, topic)
    produce(broker_settings.bootstrap, topic, 3)

    first = metrics.summarize(metrics.scrape(broker_settings.metrics_url))

    assert first["broker"] == "up"
    assert partition(first, topic) == {
        "topic": topic,
        "partition": 0,
        "high_watermark": 3,
        "last_stable_offset": 3,
        "log_start_offset": 0,
    }
    # Internal topics are the coordinators' business, not the dashboards'.
    assert not [p for p in first["partitions"] if p["topic"].startswith("__")]
    assert first["producer_ids_live"] >= 1
    for field in metrics.SCALAR_FIELDS:
        assert field in first
    assert_event_loop_figures(first)
    # Nothing to compare with: no rates yet.
    assert first["bytes_in_per_second"] is None
    assert first["requests"]["Produce"]["requests_per_second"] is None
    assert first["requests"]["Produce"]["requests_total"] >= 1

    produce(broker_settings.bootstrap, topic, 2)
    second = metrics.summarize(metrics.scrape(broker_settings.metrics_url), first, 2.0)

    assert partition(second, topic)["high_watermark"] == 5
    produced = second["requests"]["Produce"]
    assert produced["requests_total"] > first["requests"]["Produce"]["requests_total"]
    assert produced["requests_per_second"] > 0
    assert produced["latency_ms"] > 0
    assert second["bytes_in_per_second"] > 0
    assert second["bytes_out_per_second"] >= 0
    assert second["requests_per_second"] >= produced["requests_per_second"]
    assert second["fetch_session_evictions_per_second"] == 0


def test_a_broker_without_event_loop_metrics_has_none_of_their_figures(broker_settings):
    # A broker older than these metrics serves the same endpoint without them.
    older = [
        family
        for family in metrics.scrape(broker_settings.metrics_url)
        if not family.name.startswith(("fjord_event_loop_", "fjord_gc_"))
    ]

    summary = metrics.summarize(older)

    assert summary["broker"] == "up"
    assert {field: summary[field] for field in metrics.BROKER_FIELDS} == dict.fromkeys(
        metrics.BROKER_FIELDS
    )
    for field in metrics.SCALAR_FIELDS:
        assert field in summary


def test_a_counter_reset_counts_from_zero(broker_settings):
    families = metrics.scrape(broker_settings.metrics_url)
    now = metrics.summarize(families)
    # A previous sample with higher counters: the broker restarted in between.
    before = {"counters": {k: v for k, v in now["counters"].items()}}
    before["counters"]["requests"] = {
        api: total + 1000 for api, total in now["counters"]["requests"].items()
    }

    later = metrics.summarize(families, before, 10.0)

    for figures in later["requests"].values():
        assert figures["requests_per_second"] == figures["requests_total"] / 10.0


def test_sample_stores_a_snapshot_with_rates_against_the_previous_one(broker_settings, unique):
    topic = unique("sampled")
    create_topic(broker_settings.bootstrap, topic)
    produce(broker_settings.bootstrap, topic, 1)

    first = sampling.sample()
    produce(broker_settings.bootstrap, topic, 1)
    second = sampling.sample()

    assert MetricSnapshot.objects.count() == 2
    stored = MetricSnapshot.objects.latest()
    assert stored.data["taken_at"] == second["taken_at"]
    assert "counters" in stored.data  # kept for the next sample's rates ...
    assert "counters" not in second  # ... but not shown
    assert partition(first, topic)["high_watermark"] == 1
    assert partition(second, topic)["high_watermark"] == 2
    assert second["bytes_in_per_second"] > 0
    assert second["transactions"] == []


def test_celery_tasks_sample_and_prune(broker_settings, settings):
    sample_broker_metrics.apply()
    assert MetricSnapshot.objects.count() == 1

    settings.FJORD_METRICS_RETENTION = 0
    assert prune_metric_history.apply().get() == 1


def test_beat_schedule_names_registered_tasks(settings):
    from control.celery import app

    app.loader.import_default_modules()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in app.tasks


def test_an_unreachable_broker_gives_an_unreachable_snapshot(settings, listening_port_closed):
    settings.FJORD_METRICS_URL = f"http://127.0.0.1:{listening_port_closed}/metrics"

    data = sampling.sample()

    assert data["broker"] == "unreachable"
    assert str(listening_port_closed) in data["error"]
    assert MetricSnapshot.objects.latest().data["broker"] == "unreachable"


def test_every_endpoint_is_sampled_and_one_that_fails_leaves_the_others_rates(
    broker_settings, settings, listening_port_closed, unique
):
    closed = f"http://127.0.0.1:{listening_port_closed}/metrics"
    settings.FJORD_METRICS_URL = f"{broker_settings.metrics_url}, {closed}"
    event_loop_timed(broker_settings.metrics_url)
    topic = unique("partial")
    create_topic(broker_settings.bootstrap, topic)
    produce(broker_settings.bootstrap, topic, 1)

    first = sampling.sample()
    produce(broker_settings.bootstrap, topic, 1)
    data = sampling.sample()

    assert data["broker"] == "partial"
    assert closed in data["error"] and broker_settings.metrics_url not in data["error"]
    up, down = data["endpoints"]
    assert (up["url"], up["status"]) == (broker_settings.metrics_url, "up")
    assert "down_since" not in up
    # Each broker's own event loop figures, not added up.
    assert_event_loop_figures(up)
    assert not set(metrics.BROKER_FIELDS) & set(data)
    # Down since the first sample that found it so; nothing is known of its event loop.
    assert down == {
        "url": closed,
        "status": "unreachable",
        "down_since": first["taken_at"],
        **dict.fromkeys(metrics.BROKER_FIELDS),
    }
    assert partition(data, topic)["high_watermark"] == 2
    # The broker that answered has its rates, against its own counters.
    assert data["bytes_in_per_second"] > 0
    assert list(MetricSnapshot.objects.latest().data["counters"]) == [broker_settings.metrics_url]


def test_a_sample_after_one_of_the_single_broker_layout_starts_its_rates_afresh(
    broker_settings,
):
    MetricSnapshot.objects.create(
        taken_at=timezone.now(),
        data={"broker": "up", "counters": {"requests": {"Produce": 1.0}}},
    )

    data = sampling.sample()

    assert data["broker"] == "up"
    assert data["bytes_in_per_second"] is None
    assert data["requests"]["Metadata"]["requests_per_second"] is None


def test_prune_honours_retention_and_thins_older_samples(settings):
    settings.FJORD_METRICS_RETENTION = 3600
    now = timezone.now()
    detail = {"partitions": [], "transactions": [], "requests": {}, "counters": {}}
    data = {"broker": "up", "producer_ids_live": 2, **detail}
    old = MetricSnapshot.objects.create(taken_at=now - timedelta(seconds=3700), data=data)
    kept = MetricSnapshot.objects.create(taken_at=now - timedelta(seconds=3500), data=data)
    recent = MetricSnapshot.objects.create(taken_at=now - timedelta(seconds=5), data=data)

    assert sampling.prune() == 1

    assert list(MetricSnapshot.objects.all()) == [recent, kept]
    assert not MetricSnapshot.objects.filter(pk=old.pk).exists()
    # Past FULL_SAMPLE_SECONDS only the scalar values the history charts need are kept.
    kept.refresh_from_db()
    assert kept.data == {"broker": "up", "producer_ids_live": 2}
    recent.refresh_from_db()
    assert recent.data == data


def test_open_transactions_are_listed_with_their_age(broker_settings, unique):
    topic, txn_id = unique("txn"), unique("tx")
    create_topic(broker_settings.bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": broker_settings.bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 600000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(30) == 0
    try:
        data = sampling.sample()
    finally:
        producer.abort_transaction(30)

    [mine] = [t for t in data["transactions"] if t["transactional_id"] == txn_id]
    assert mine["state"] == "Ongoing"
    assert mine["timeout_ms"] == 600000
    assert mine["hanging"] is False
    assert mine["age_seconds"] >= 0
    assert mine["partitions"] == [{"topic": topic, "partition": 0}]
    assert data["transactions_ongoing"] >= 1
    assert partition(data, topic)["last_stable_offset"] == 0
    assert partition(data, topic)["high_watermark"] == 1
    assert data["partitions_behind"] >= 1


# --- the API ---


def test_current_is_404_before_any_sample(viewer_api):
    response = viewer_api.get("/api/v1/metrics/current/")
    assert response.status_code == 404


def test_current_shows_the_latest_sample(broker_settings, viewer_api, unique):
    event_loop_timed(broker_settings.metrics_url)
    topic = unique("current")
    create_topic(broker_settings.bootstrap, topic)
    sampling.sample()
    taken = sampling.sample()

    response = viewer_api.get("/api/v1/metrics/current/")

    assert response.status_code == 200
    body = response.json()
    assert body["broker"] == "up"
    assert "counters" not in body
    assert partition(body, topic)["high_watermark"] == 0
    assert body["taken_at"].replace("Z", "+00:00") == taken["taken_at"]
    assert set(metrics.SCALAR_FIELDS) <= set(body)
    [endpoint] = body["endpoints"]
    assert endpoint["url"] == broker_settings.metrics_url
    assert_event_loop_figures(endpoint)


def snapshots(count: int, start=None) -> list[MetricSnapshot]:
    start = start or timezone.now() - timedelta(seconds=count)
    return [
        MetricSnapshot.objects.create(
            taken_at=start + timedelta(seconds=i),
            data={"broker": "up", "producer_ids_live": i, "bytes_in_per_second": None},
        )
        for i in range(count)
    ]


def test_history_gives_series_of_the_fields_asked_for(viewer_api):
    made = snapshots(5)

    response = viewer_api.get(
        "/api/v1/metrics/history/",
        {"fields": "producer_ids_live,bytes_in_per_second", "since": made[0].taken_at.isoformat()},
    )

    assert response.status_code == 200
    body = response.json()
    assert body["step"] == 1
    assert len(body["taken_at"]) == 5
    assert body["series"] == {
        "producer_ids_live": [0, 1, 2, 3, 4],
        "bytes_in_per_second": [None] * 5,
    }


def test_history_is_downsampled_to_the_points_asked_for(viewer_api):
    made = snapshots(50)

    response = viewer_api.get(
        "/api/v1/metrics/history/",
        {
            "fields": "producer_ids_live",
            "points": 10,
            "since": made[0].taken_at.isoformat(),
            "until": made[-1].taken_at.isoformat(),
        },
    )

    body = response.json()
    assert response.status_code == 200
    assert 2 <= len(body["taken_at"]) <= 10
    assert body["step"] == 5
    series = body["series"]["producer_ids_live"]
    assert series[0] == 0 and series[-1] == 49  # the newest sample always ends it
    assert series == sorted(series)


def test_history_defaults_to_every_field_of_the_last_minutes(viewer_api):
    snapshots(3)
    MetricSnapshot.objects.create(taken_at=timezone.now() - timedelta(hours=2), data={})

    body = viewer_api.get("/api/v1/metrics/history/").json()

    assert set(body["series"]) == set(metrics.SCALAR_FIELDS)
    assert len(body["taken_at"]) == 3


@pytest.mark.parametrize(
    "query, field",
    [
        ({"fields": "nope"}, "fields"),
        ({"fields": "producer_ids_live,counters"}, "fields"),
        ({"fields": ","}, "fields"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01T00:00:00Z"}, "until"),
        ({"points": "1"}, "points"),
        ({"points": "100000"}, "points"),
        ({"points": "x"}, "points"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
    ],
)
def test_history_rejects_bad_queries_with_field_errors(viewer_api, query, field):
    response = viewer_api.get("/api/v1/metrics/history/", query)
    assert response.status_code == 400
    assert field in response.json()


def test_history_takes_extreme_dates(viewer_api):
    response = viewer_api.get("/api/v1/metrics/history/", {"until": "0001-01-01T00:00:00Z"})
    assert response.status_code == 200
    assert response.json()["taken_at"] == []


def test_metrics_need_a_login_and_a_role(db):
    anonymous = APIClient()
    assert anonymous.get("/api/v1/metrics/current/").status_code == 401
    assert anonymous.get("/api/v1/metrics/history/").status_code == 401

    roleless = APIClient()
    roleless.force_authenticate(User.objects.create_user("nobody", password="pw-Secret-1"))
    assert roleless.get("/api/v1/metrics/history/").status_code == 403


def test_metrics_are_read_only(admin_api):
    assert admin_api.post("/api/v1/metrics/current/", {}).status_code == 405
    assert admin_api.delete("/api/v1/metrics/history/").status_code == 405


@pytest.mark.parametrize(
    "moment",
    ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "0001-01-01T00:10:00Z"],
)
def test_history_answers_dates_at_the_ends_of_the_calendar(viewer_api, moment):
    for key in ("since", "until"):
        response = viewer_api.get("/api/v1/metrics/history/", {key: moment})
        assert response.status_code in (200, 400), response.content


def test_current_shows_a_thinned_or_unreachable_sample(viewer_api):
    MetricSnapshot.objects.create(taken_at=timezone.now(), data={"broker": "up"})
    assert viewer_api.get("/api/v1/metrics/current/").status_code == 200
    # A sample taken before the endpoints carried their brokers' event loop figures: null.
    endpoint = {"url": "http://127.0.0.1:1/metrics", "status": "up"}
    MetricSnapshot.objects.create(
        taken_at=timezone.now(), data={"broker": "up", "endpoints": [endpoint]}
    )
    body = viewer_api.get("/api/v1/metrics/current/").json()
    assert body["endpoints"] == [{**endpoint, **dict.fromkeys(metrics.BROKER_FIELDS)}]
    MetricSnapshot.objects.create(taken_at=timezone.now(), data=metrics.unreachable("refused"))
    body = viewer_api.get("/api/v1/metrics/current/").json()
    assert body["broker"] == "unreachable"
    assert body["error"] == "refused"
