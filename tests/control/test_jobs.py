"""Background jobs: started through the REST API or the console, run by a real Celery worker
process over the real Redis, against the real broker, their progress in the database."""

from __future__ import annotations

import base64
import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from jobs_support import make_topic, wait_finished

from api import jobs
from api.models import AuditEntry, Job


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, key, value in records:
        producer.produce(topic, value, key, partition=partition, headers=[("h", b"1")])
    assert producer.flush(30) == 0


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(
        offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
    )
    consumer.close()


def committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    found = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=30)
    consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found}


@pytest.mark.django_db(transaction=True)
def test_reset_offsets_job_moves_every_partition_and_reports_progress(
    worker_settings, operator_api, unique
):
    bootstrap = worker_settings.bootstrap
    topic, group = unique("reset"), unique("group")
    make_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, [(p, b"k", b"v") for p in range(3) for _ in range(4)])
    commit(bootstrap, group, {(topic, p): 4 for p in range(3)})

    response = operator_api.post(
        "/api/v1/jobs/reset-offsets/", {"group_id": group, "to": "earliest"}, format="json"
    )

    assert response.status_code == 202, response.data
    assert response.data["state"] == "pending"
    job = wait_finished(response.data["id"])
    assert job.state == Job.State.SUCCEEDED, job.error
    assert (job.done, job.total, job.progress) == (3, 3, 1.0)
    assert job.result["offsets"] == {f"{topic}-{p}": 0 for p in range(3)}
    assert committed(bootstrap, group, [(topic, p) for p in range(3)]) == {
        (topic, p): 0 for p in range(3)
    }
    entry = AuditEntry.objects.get(action="api:job-reset-offsets")
    assert entry.username == "otto" and entry.status_code == 202
    assert entry.detail["group_id"] == group

    shown = operator_api.get(f"/api/v1/jobs/{job.pk}/").data
    assert shown["state"] == "succeeded" and shown["progress"] == 1.0


@pytest.mark.django_db(transaction=True)
def test_export_job_writes_committed_records_to_a_downloadable_file(
    worker_settings, operator_api, unique
):
    bootstrap = worker_settings.bootstrap
    topic = unique("export")
    make_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(40)])
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn")})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"aborted", partition=0)
    txn.flush(30)
    txn.abort_transaction(30)
    produce(bootstrap, topic, [(0, b"after", b"abort")])

    response = operator_api.post(
        "/api/v1/jobs/export-topic/",
        {"topic": topic, "isolation_level": "read_committed"},
        format="json",
    )

    assert response.status_code == 202, response.data
    job = wait_finished(response.data["id"])
    assert job.state == Job.State.SUCCEEDED, job.error
    assert job.result["records"] == 41
    # Offsets measure progress: the aborted record and its marker count as done too.
    assert job.done == job.total == 43
    download = operator_api.get(f"/api/v1/jobs/{job.pk}/")
    assert download.data["download"].endswith(f"/api/v1/jobs/{job.pk}/download/")
    body = b"".join(operator_api.get(f"/api/v1/jobs/{job.pk}/download/").streaming_content)
    lines = [json.loads(line) for line in body.decode().splitlines()]
    values = [base64.b64decode(line["value"]) for line in lines]
    assert len(lines) == 41 and b"aborted" not in values
    assert b"abort" in values
    assert sorted(base64.b64decode(line["key"]) for line in lines if line["partition"] == 1) == (
        sorted(f"k{i}".encode() for i in range(1, 40, 2))
    )
    assert lines[0]["headers"] == [["h", base64.b64encode(b"1").decode()]]


@pytest.mark.django_db
def test_a_job_that_breaks_is_failed_not_left_running(broker_settings, operator):
    # Parameters the API would have refused, written straight to the table.
    job = Job.objects.create(kind=Job.Kind.RESET_OFFSETS, params={}, created_by=operator)

    with pytest.raises(KeyError):
        jobs.run(str(job.pk))

    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert job.error == "internal error: KeyError: 'group_id'"
    assert job.finished_at is not None


@pytest.mark.django_db
def test_a_failed_job_keeps_the_kafka_error(broker_settings, operator):
    job = Job.objects.create(
        kind=Job.Kind.EXPORT_TOPIC, params={"topic": "no-such-topic-here"}, created_by=operator
    )

    jobs.run(str(job.pk))

    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert job.error.startswith("UNKNOWN_TOPIC_OR_PARTITION")
    assert job.finished_at is not None


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path, body, field",
    [
        ("reset-offsets", {"group_id": "g", "to": "offset"}, "value"),
        ("reset-offsets", {"group_id": "g", "to": "somewhere"}, "to"),
        ("reset-offsets", {"group_id": "g", "to": "timestamp", "value": -5}, "value"),
        ("reset-offsets", {"to": "earliest"}, "group_id"),
        ("reset-offsets", {"group_id": "g", "to": "latest", "topics": ["bad name"]}, "topics"),
        ("export-topic", {"topic": ""}, "topic"),
        ("export-topic", {"topic": "t", "partitions": [-1]}, "partitions"),
        ("export-topic", {"topic": "t", "isolation_level": "dirty"}, "isolation_level"),
    ],
)
def test_invalid_jobs_are_refused_with_field_errors(operator_api, path, body, field):
    response = operator_api.post(f"/api/v1/jobs/{path}/", body, format="json")

    assert response.status_code == 400
    assert field in response.data
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_viewers_see_jobs_but_cannot_start_or_download_them(viewer_api, operator):
    job = Job.objects.create(kind=Job.Kind.EXPORT_TOPIC, params={"topic": "t"}, created_by=operator)

    assert viewer_api.get("/api/v1/jobs/").data["count"] == 1
    assert viewer_api.get(f"/api/v1/jobs/{job.pk}/").data["created_by"] == "otto"
    refused = viewer_api.post("/api/v1/jobs/export-topic/", {"topic": "t"}, format="json")
    assert refused.status_code == 403
    assert viewer_api.get(f"/api/v1/jobs/{job.pk}/download/").status_code == 403
    assert AuditEntry.objects.get().status_code == 403


@pytest.mark.django_db
def test_an_unfinished_export_has_nothing_to_download(operator_api, operator):
    job = Job.objects.create(kind=Job.Kind.EXPORT_TOPIC, params={"topic": "t"}, created_by=operator)

    response = operator_api.get(f"/api/v1/jobs/{job.pk}/download/")

    assert response.status_code == 404
    assert operator_api.get(f"/api/v1/jobs/{job.pk}/").data["download"] is None


@pytest.mark.django_db(transaction=True)
def test_console_starts_a_job_and_shows_its_progress(worker_settings, operator, client, unique):
    client.force_login(operator)
    topic = unique("console-export")
    make_topic(worker_settings.bootstrap, topic, 1)
    produce(worker_settings.bootstrap, topic, [(0, b"k", b"v")])

    page = client.get("/jobs/")
    assert page.status_code == 200 and b'id="export-topic-form"' in page.content
    started = client.post("/jobs/", {"kind": "export_topic", "topic": topic, "partitions": "0"})

    assert started.status_code == 302
    job = Job.objects.get()
    assert started["Location"] == f"/jobs/{job.pk}/"
    assert job.params == {"topic": topic, "partitions": [0], "isolation_level": "read_uncommitted"}
    assert wait_finished(job.pk).state == Job.State.SUCCEEDED
    detail = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Download the export" in detail and f"/api/v1/jobs/{job.pk}/" in detail


@pytest.mark.django_db
def test_console_job_form_shows_field_errors(operator, client):
    client.force_login(operator)

    response = client.post("/jobs/", {"kind": "reset_offsets", "group_id": "g", "to": "offset"})

    assert response.status_code == 400
    assert "Needed to reset to a offset." in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_reset_to_an_offset_is_clamped_to_the_log(broker_settings, operator, unique):
    bootstrap = broker_settings.bootstrap
    topic, group = unique("clamp"), unique("group")
    make_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [(0, b"k", b"v")] * 3)
    commit(bootstrap, group, {(topic, 0): 1, (topic, 1): 0})
    job = Job.objects.create(
        kind=Job.Kind.RESET_OFFSETS,
        params={"group_id": group, "to": "offset", "value": 99},
        created_by=operator,
    )

    jobs.run(str(job.pk))

    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.error
    # Past the high watermark a consumer would reset again by auto.offset.reset.
    assert job.result["offsets"] == {f"{topic}-0": 3, f"{topic}-1": 0}
    assert committed(bootstrap, group, [(topic, 0), (topic, 1)]) == {(topic, 0): 3, (topic, 1): 0}
