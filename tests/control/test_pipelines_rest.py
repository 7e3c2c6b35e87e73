"""Pipelines through REST: definitions checked as the fjord source checks its options, roles
and the audit log, and runs end to end: a Celery worker spawns `python -m pipelines.run`, Spark
copies a topic exactly once through the pipeline's SQL, a stop stops it, a process killed with
SIGKILL is shown failed, and a restart resumes from the checkpoint."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import pytest
from django.utils import timezone
from pipelines_support import (
    CommittedReader,
    committed_to_end,
    definition,
    produce,
    run_state,
    upper_case_copy,
    wait_run,
)

from api.models import AuditEntry
from pipelines import lifecycle
from pipelines.models import Pipeline, PipelineRun

pytestmark = pytest.mark.timeout(300)


@pytest.mark.django_db
def test_operators_define_pipelines_and_viewers_read_them(operator_api, viewer_api, unique):
    created = operator_api.post("/api/v1/pipelines/", definition(unique), format="json")
    assert created.status_code == 201, created.data
    pk = created.data["id"]
    assert created.data["status"] == "new" and created.data["created_by"] == "otto"
    assert viewer_api.get(f"/api/v1/pipelines/{pk}/").data["sink_topic"] == "out"
    assert (
        viewer_api.post("/api/v1/pipelines/", definition(unique), format="json").status_code == 403
    )
    changed = operator_api.patch(
        f"/api/v1/pipelines/{pk}/", {"trigger_interval_ms": 5000}, format="json"
    )
    assert changed.status_code == 200 and changed.data["trigger_interval_ms"] == 5000
    assert viewer_api.get(f"/api/v1/pipelines/{pk}/runs/").data["results"] == []
    assert operator_api.delete(f"/api/v1/pipelines/{pk}/").status_code == 204
    assert not Pipeline.objects.filter(pk=pk).exists()
    actions = list(
        AuditEntry.objects.filter(resource__startswith="pipeline/").values_list("method", flat=True)
    )
    assert sorted(actions) == ["DELETE", "PATCH", "POST"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields, field, message",
    [
        ({"source_pattern": "in.*"}, "source_topics", "not both"),
        ({"source_topics": []}, "source_topics", "not both"),
        ({"starting_offsets": "{oops"}, "starting_offsets", "invalid JSON"),
        ({"options": {"colour": "blue"}}, "options", "option 'colour': not an option a pipeline"),
        ({"options": {"maxOffsetsPerTrigger": "-3"}}, "options", "must be positive"),
        ({"sink_topic": "no spaces"}, "sink_topic", "letters, digits"),
        ({"trigger_interval_ms": 5}, "trigger_interval_ms", "100"),
        ({"transformation": "SELECT nope FROM source"}, "transformation", "`nope` cannot be"),
        ({"transformation": "SELEKT 1"}, "transformation", "PARSE_SYNTAX_ERROR"),
        ({"transformation": "SELECT key FROM source"}, "transformation", "'value' column"),
        (
            {"transformation": "SELECT headers, value FROM source"},
            "transformation",
            "`headers` cannot be",
        ),
    ],
)
def test_bad_definitions_are_refused_naming_the_field(operator_api, unique, fields, field, message):
    response = operator_api.post("/api/v1/pipelines/", definition(unique, **fields), format="json")
    assert response.status_code == 400
    assert message in str(response.data[field])


@pytest.mark.django_db
@pytest.mark.parametrize(
    "option",
    [
        # Where it connects, and with what security and credentials: the control plane's.
        "kafka.bootstrap.servers",
        "KAFKA.BOOTSTRAP.SERVERS",
        "kafka.security.protocol",
        "kafka.sasl.mechanism",
        "kafka.sasl.jaas.config",
        "kafka.ssl.ca.location",
        "kafka.client.id",
        # What it reads: the definition's.
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "kafka.isolation.level",
    ],
)
def test_options_naming_a_destination_or_credentials_are_refused(operator_api, unique, option):
    given = {"maxOffsetsPerTrigger": "100", option: "elsewhere.example:9092"}
    response = operator_api.post(
        "/api/v1/pipelines/", definition(unique, options=given), format="json"
    )
    assert response.status_code == 400, response.data
    assert f"option '{option}'" in str(response.data["options"])
    assert not Pipeline.objects.exists()


@pytest.mark.django_db
def test_options_that_shape_the_read_are_kept(operator_api, unique):
    given = {"maxOffsetsPerTrigger": 100, "failOnDataLoss": False, "kafka.fetch.max.bytes": "1024"}
    response = operator_api.post(
        "/api/v1/pipelines/", definition(unique, options=given), format="json"
    )
    assert response.status_code == 201, response.data
    assert response.data["options"] == {
        "maxOffsetsPerTrigger": "100",
        "failOnDataLoss": "false",
        "kafka.fetch.max.bytes": "1024",
    }


@pytest.mark.django_db
def test_a_topic_column_is_refused(operator_api, unique):
    """A pipeline writes only to its sink topic: a `topic` column would name another."""
    sql = "SELECT value, 'elsewhere' AS topic FROM source"
    response = operator_api.post(
        "/api/v1/pipelines/", definition(unique, transformation=sql), format="json"
    )
    assert response.status_code == 400
    assert "'topic' column is refused" in str(response.data["transformation"])


@pytest.mark.django_db
def test_a_source_pattern_needs_a_literal_prefix(operator_api, unique):
    """Its principal's READ is PREFIXED on the pattern's literal prefix."""
    for pattern in (".*", "(?i)orders.*", "orders|payments"):
        response = operator_api.post(
            "/api/v1/pipelines/",
            definition(unique, source_topics=[], source_pattern=pattern),
            format="json",
        )
        assert response.status_code == 400, pattern
        assert "literal characters" in str(response.data["source_pattern"])
    response = operator_api.post(
        "/api/v1/pipelines/",
        definition(unique, source_topics=[], source_pattern=r"orders\.(eu|us)-.*"),
        format="json",
    )
    assert response.status_code == 201, response.data


@pytest.mark.django_db
def test_viewers_never_see_a_secret_in_options_or_errors(
    settings, tmp_path, operator, viewer_api, viewer_browser
):
    """Saved before options were allowlisted (or behind the API's back), a credential in the
    options is masked; a run's error is scrubbed when recorded."""
    pipeline = Pipeline.objects.create(
        name="old",
        source_topics=["in"],
        sink_topic="out",
        options={
            "kafka.sasl.jaas.config": 'username="fjord" password="hunter2-options"',
            "maxOffsetsPerTrigger": "10",
        },
        created_by=operator,
    )
    settings.FJORD_PIPELINES_DIR = tmp_path
    run = PipelineRun.objects.create(pipeline=pipeline, pid=2**22 + 1, host="elsewhere")
    PipelineRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(days=1))
    log = lifecycle.log_path(run)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w") as f:
        f.write('connecting with sasl.jaas.config=username="fjord" password="hunter2-log";\n')
        f.write("database postgres://fjord:hunter2-url@db:5432/fjord unreachable\n")

    assert [r.pk for r in lifecycle.check_runs()] == [run.pk]

    shown = viewer_api.get(f"/api/v1/pipelines/{pipeline.pk}/").content.decode()
    runs = viewer_api.get(f"/api/v1/pipelines/{pipeline.pk}/runs/").content.decode()
    page = viewer_browser.get(f"/pipelines/{pipeline.pk}/").content.decode()
    for answer in (shown, runs, page):
        assert "hunter2" not in answer
    assert "postgres://fjord:****@db:5432/fjord unreachable" in runs
    assert '"maxOffsetsPerTrigger":"10"' in shown


@pytest.mark.django_db(transaction=True)
def test_a_pipeline_runs_stops_dies_and_resumes_exactly_once(worker_settings, operator_api, unique):
    bootstrap = worker_settings.bootstrap
    source, sink = unique("pipe-in"), unique("pipe-out")
    pk = upper_case_copy(operator_api, unique, bootstrap, source, sink, 100, partitions=2)["id"]
    reader = CommittedReader(bootstrap, sink)
    try:
        started = operator_api.post(f"/api/v1/pipelines/{pk}/start/")
        assert started.status_code == 202, started.data
        assert operator_api.post(f"/api/v1/pipelines/{pk}/start/").status_code == 409
        copied = reader.until(100)
        assert copied == sorted(b"R%d" % i for i in range(100)), run_state(started.data["id"])
        run = wait_run(started.data["id"], lambda r: r.rows_in >= 100, "100 rows in")
        assert run.status == "running" and run.batches >= 1
        assert set(run.lag) == {f"{source}-0", f"{source}-1"}

        assert operator_api.post(f"/api/v1/pipelines/{pk}/stop/").status_code == 202
        run = wait_run(run.pk, lambda r: r.status == "stopped", "stopped")
        assert run.stopped_at is not None and run.last_error == ""
        assert operator_api.post(f"/api/v1/pipelines/{pk}/stop/").status_code == 409

        # Killed: the run is failed; started again, it goes on from its checkpoint.
        second = operator_api.post(f"/api/v1/pipelines/{pk}/start/").data
        produce(bootstrap, source, [b"s%d" % i for i in range(50)])
        assert len(reader.until(150)) == 150
        run = wait_run(second["id"], lambda r: r.pid is not None and r.status == "running", "up")
        os.kill(run.pid, signal.SIGKILL)
        # What the beat's check_pipeline_runs does every few seconds, here each poll.
        run = wait_run(
            run.pk, lambda r: lifecycle.check_runs() is None or r.status == "failed", "failed"
        )
        assert "ended without stopping its query" in run.last_error
        third = operator_api.post(f"/api/v1/pipelines/{pk}/start/").data
        produce(bootstrap, source, [b"t%d" % i for i in range(50)])
        expected = (
            [b"R%d" % i for i in range(100)]
            + [b"S%d" % i for i in range(50)]
            + [b"T%d" % i for i in range(50)]
        )
        assert reader.until(200) == sorted(expected)
        operator_api.post(f"/api/v1/pipelines/{pk}/stop/")
        wait_run(third["id"], lambda r: r.status == "stopped", "stopped")
        assert committed_to_end(bootstrap, sink) == sorted(expected)  # nothing written twice
    finally:
        reader.close()
        for run in PipelineRun.objects.filter(status__in=PipelineRun.ACTIVE, pid__isnull=False):
            os.kill(run.pid, signal.SIGKILL)
