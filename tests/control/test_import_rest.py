"""The topic import job: a file written by the export job, uploaded through the REST API or the
console, produced to a topic by the job's one producer, against the real broker; read back
with confluent-kafka."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import deque

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from django.core.files.uploadedfile import SimpleUploadedFile
from jobs_support import make_topic, wait_finished

from api import jobs
from api.models import AuditEntry, Job
from api.topic_import import Deliveries
from broker.client import KafkaAdminError
from broker.client.routing import partition_for_key


def line(partition: int, key: bytes | None, value: bytes | None, **fields) -> bytes:
    """One record of an export file, as the export job writes it."""

    def b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode()

    record = {
        "partition": partition,
        "offset": 0,
        "timestamp": fields.get("timestamp", 1_700_000_000_000),
        "key": b64(key),
        "value": b64(value),
        "headers": [[name, b64(data)] for name, data in fields.get("headers", [])],
    }
    return json.dumps(record).encode() + b"\n"


def upload(body: bytes, name: str = "export.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, body, content_type="application/x-ndjson")


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list]:
    """Every record of the topic by partition, up to each partition's high watermark: key,
    value, headers, (timestamp type, timestamp)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    found: dict[int, list] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    while len(at_end) < partitions and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            at_end.add(message.partition())
            continue
        found[message.partition()].append(
            (message.key(), message.value(), message.headers() or [], message.timestamp())
        )
    consumer.close()
    assert len(at_end) == partitions, f"{topic} was not read to its end"
    return found


def produce_source(bootstrap: str, topic: str) -> int:
    """Records with what an import must keep: null and empty keys and values, binary bytes,
    repeated and null header values, explicit timestamps, in three partitions."""
    producer = Producer({"bootstrap.servers": bootstrap})
    records = [
        (0, None, bytes(range(256)), [("bin", b"\x00\xff"), ("none", None)], 1_600_000_000_000),
        (0, b"tombstone", None, [], 1_600_000_000_001),
        (1, b"", b"", [("h", b"1"), ("h", b"2")], 1_600_000_000_002),
    ] + [(2, f"k{i}".encode(), bytes([i]) * i, [], 1_650_000_000_000 + i) for i in range(40)]
    for partition, key, value, headers, timestamp in records:
        producer.produce(
            topic, value, key, partition=partition, headers=headers, timestamp=timestamp
        )
    assert producer.flush(30) == 0
    return len(records)


@pytest.mark.django_db(transaction=True)
def test_an_export_imported_into_a_new_topic_has_the_same_records(
    worker_settings, settings, operator_api, unique
):
    bootstrap = worker_settings.bootstrap
    source, target = unique("import-source"), unique("import-target")
    make_topic(bootstrap, source, 3)
    make_topic(bootstrap, target, 3)
    count = produce_source(bootstrap, source)
    exported = operator_api.post("/api/v1/jobs/export-topic/", {"topic": source}, format="json")
    assert wait_finished(exported.data["id"]).state == Job.State.SUCCEEDED
    body = b"".join(operator_api.get(f"/api/v1/jobs/{exported.data['id']}/download/"))

    response = operator_api.post(
        "/api/v1/jobs/import-topic/",
        {"file": upload(body), "topic": target},
        format="multipart",
    )

    assert response.status_code == 202, response.data
    assert response.data["params"]["records"] == count
    job = wait_finished(response.data["id"])
    assert job.state == Job.State.SUCCEEDED, job.error
    assert job.result == {"topic": target, "records": count}
    assert job.done == job.total == count
    records = read_all(bootstrap, source, 3)
    assert sum(len(r) for r in records.values()) == count
    assert read_all(bootstrap, target, 3) == records
    # The upload lived only as long as its job.
    assert list(settings.FJORD_IMPORT_DIR.iterdir()) == []
    entry = AuditEntry.objects.get(action="api:job-import-topic")
    assert entry.status_code == 202 and entry.detail["topic"] == target


@pytest.mark.django_db
def test_the_partitioner_places_records_a_smaller_topic_lacks_partitions_for(
    broker_settings, operator_api, unique, settings, tmp_path
):
    settings.FJORD_IMPORT_DIR = tmp_path
    topic = unique("import-partitioner")
    make_topic(broker_settings.bootstrap, topic, 2)
    keys = [f"key-{i}".encode() for i in range(30)]
    body = b"".join(line(7, key, b"v", timestamp=1000) for key in keys)

    kept = operator_api.post(
        "/api/v1/jobs/import-topic/", {"file": upload(body), "topic": topic}, format="multipart"
    )
    assert kept.status_code == 404
    assert kept.data["kafka_error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert "partition 7" in kept.data["detail"]
    started_ms = int(time.time() * 1000)
    response = operator_api.post(
        "/api/v1/jobs/import-topic/",
        {"file": upload(body), "topic": topic, "partitioning": "partitioner", "timestamps": "now"},
        format="multipart",
    )
    assert response.status_code == 202, response.data

    jobs.run(response.data["id"])

    job = Job.objects.get(pk=response.data["id"])
    assert job.state == Job.State.SUCCEEDED, job.error
    found = read_all(broker_settings.bootstrap, topic, 2)
    placed = {key: p for p, records in found.items() for key, *_ in records}
    # Kafka's murmur2 partitioner, as a Java producer would place them.
    assert placed == {key: partition_for_key(key, 2) for key in keys}
    assert all(ts >= started_ms for records in found.values() for *_, (_, ts) in records)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db
def test_a_record_the_topic_refuses_fails_the_job_with_its_line_and_what_was_written(
    broker_settings, operator_api, unique, settings, tmp_path
):
    settings.FJORD_IMPORT_DIR = tmp_path
    topic = unique("import-too-large")
    make_topic(broker_settings.bootstrap, topic, 1, {"max.message.bytes": "2000"})
    body = b"".join(
        [line(0, b"before", b"x") for _ in range(20)]
        + [line(0, b"big", b"x" * 5000)]
        + [line(0, b"after", b"x") for _ in range(20)]
    )
    response = operator_api.post(
        "/api/v1/jobs/import-topic/", {"file": upload(body), "topic": topic}, format="multipart"
    )
    assert response.status_code == 202, response.data

    jobs.run(response.data["id"])

    job = Job.objects.get(pk=response.data["id"])
    assert job.state == Job.State.FAILED
    assert job.error.startswith("MESSAGE_TOO_LARGE")
    assert job.result["failed_line"] == 21
    written = read_all(broker_settings.bootstrap, topic, 1)[0]
    assert job.result["records"] == job.done == len(written)
    assert [key for key, *_ in written[:20]] == [b"before"] * 20
    assert b"big" not in [key for key, *_ in written]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "bad, message",
    [
        (b"not json\n", "Line 2: Expecting value"),
        (b"[1, 2]\n", "Line 2: not a JSON object"),
        (b'{"partition": 0}\n', "Line 2: no timestamp, key, value, headers"),
        (line(-1, b"k", b"v"), "Line 2: partition must be an integer from 0"),
        (line(0, b"k", b"v").replace(b'"dg=="', b'"d!"'), "Line 2: value must be base64"),
        (line(0, b"k", b"v", headers=[("h", b"1")]).replace(b'["h", ', b"["), "Line 2: headers"),
        (line(0, None, b"v", timestamp="yesterday"), "Line 2: timestamp must be"),
        (b"\xff\xfe\n", "Line 2:"),
    ],
)
def test_a_malformed_file_is_refused_with_the_line_that_is_wrong(
    operator_api, settings, tmp_path, bad, message
):
    settings.FJORD_IMPORT_DIR = tmp_path
    body = line(0, b"k", b"v") + bad + line(0, b"k", b"v")

    response = operator_api.post(
        "/api/v1/jobs/import-topic/", {"file": upload(body), "topic": "t"}, format="multipart"
    )

    assert response.status_code == 400
    assert response.data["file"][0].startswith(message), response.data
    assert not Job.objects.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields, field",
    [
        ({"file": b"\n\n", "topic": "t"}, "file"),
        ({"topic": "t"}, "file"),
        ({"file": line(0, None, b"v"), "topic": "bad name"}, "topic"),
        ({"file": line(0, None, b"v"), "topic": "t", "partitioning": "random"}, "partitioning"),
        ({"file": line(0, None, b"v"), "topic": "t", "timestamps": "later"}, "timestamps"),
    ],
)
def test_invalid_imports_are_refused_with_field_errors(operator_api, fields, field):
    if "file" in fields:
        fields = {**fields, "file": upload(fields["file"])}

    response = operator_api.post("/api/v1/jobs/import-topic/", fields, format="multipart")

    assert response.status_code == 400
    assert field in response.data
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_an_import_into_a_missing_topic_answers_kafkas_error(
    broker_settings, operator_api, settings, tmp_path
):
    settings.FJORD_IMPORT_DIR = tmp_path

    response = operator_api.post(
        "/api/v1/jobs/import-topic/",
        {"file": upload(line(0, None, b"v")), "topic": "no-such-import-target"},
        format="multipart",
    )

    assert response.status_code == 404
    assert response.data["kafka_error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert not Job.objects.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.django_db
def test_only_operators_import_and_only_as_multipart(viewer_api, operator_api):
    body = {"file": upload(line(0, None, b"v")), "topic": "t"}

    assert viewer_api.post("/api/v1/jobs/import-topic/", body, format="multipart").status_code == (
        403
    )
    as_json = operator_api.post("/api/v1/jobs/import-topic/", {"topic": "t"}, format="json")
    assert as_json.status_code == 415
    anonymous = operator_api.__class__()
    assert anonymous.post("/api/v1/jobs/import-topic/", {"topic": "t"}).status_code == 401
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_console_imports_from_the_jobs_page(
    broker_settings, operator, client, unique, settings, tmp_path
):
    settings.FJORD_IMPORT_DIR = tmp_path
    client.force_login(operator)
    topic = unique("console-import")
    make_topic(broker_settings.bootstrap, topic, 1)
    page = client.get("/jobs/").content.decode()
    assert 'id="import-topic-form" enctype="multipart/form-data"' in page

    refused = client.post(
        "/jobs/", {"kind": "import_topic", "topic": topic, "file": upload(b"{}\n")}
    )
    assert refused.status_code == 400
    assert "Line 1: no partition" in refused.content.decode()
    missing = client.post(
        "/jobs/",
        {"kind": "import_topic", "topic": unique("absent"), "file": upload(line(0, None, b"v"))},
    )
    assert "UNKNOWN_TOPIC_OR_PARTITION" in missing.content.decode()
    started = client.post(
        "/jobs/",
        {
            "kind": "import_topic",
            "topic": topic,
            "partitioning": "partitioner",
            "file": upload(line(3, None, b"v")),
        },
    )

    job = Job.objects.get()
    assert started.status_code == 302 and started["Location"] == f"/jobs/{job.pk}/"
    assert job.params["partitioning"] == "partitioner" and job.params["upload"] == "export.jsonl"
    assert [p.name for p in tmp_path.iterdir()] == [job.params["file"]]


async def queued(future: asyncio.Future) -> asyncio.Future:
    """What Producer.send answers: the record's future, once it is queued."""
    return future


async def test_deliveries_count_acknowledged_records_as_they_come_and_wait_past_the_limit():
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(4)]
    deliveries = Deliveries(limit=2)
    futures[0].set_result("metadata")

    for line, future in enumerate(futures[:3], start=1):
        await deliveries.add(line, queued(future))
    assert deliveries.written == 1 and [line for line, _ in deliveries.pending] == [2, 3]
    fourth = asyncio.ensure_future(deliveries.add(4, queued(futures[3])))
    for _ in range(5):
        await asyncio.sleep(0)  # the loop's turns, not a wait: the fourth is held by the second
    assert not fourth.done()
    futures[1].set_result("metadata")
    await fourth
    assert deliveries.written == 2 and [line for line, _ in deliveries.pending] == [3, 4]

    futures[2].set_exception(KafkaAdminError(10, "MESSAGE_TOO_LARGE"))
    futures[3].set_result("metadata")
    with pytest.raises(KafkaAdminError):
        await deliveries.settle()
    deliveries.count_settled()
    assert (deliveries.written, deliveries.failed_line, deliveries.pending) == (3, 3, deque())
