"""A pipeline's transformation through the REST API and the console's form: one query over
`source`, checked without running it. Each statement here once got a secret, a local file or a
write through the check; now each is refused with its reason, and nothing of it runs."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.conf import settings

from pipelines import sql
from pipelines.models import Pipeline, PipelineRun

pytestmark = pytest.mark.timeout(300)

SECRET_GETTER = "reflect('java.lang.System', 'getenv', 'DJANGO_SECRET_KEY')"


def definition(unique, transformation: str) -> dict:
    return {
        "name": unique("sql"),
        "source_topics": ["in"],
        "sink_topic": "out",
        "transformation": transformation,
    }


def refusals(directory) -> list[tuple[str, str]]:
    """Statements that reached outside the query, with the reason each is refused for."""
    return [
        (f"SELECT raise_error({SECRET_GETTER}) AS value FROM source", "`reflect` calls Java"),
        (f"SELECT key, {SECRET_GETTER} AS value FROM source", "`reflect` calls Java"),
        ("SELECT value FROM text.`/etc/hostname`", "reads `text./etc/hostname`"),
        (
            "SELECT s.key, f.value FROM source s JOIN text.`/etc/hostname` f ON true",
            "reads `text./etc/hostname`",
        ),
        (
            f"INSERT OVERWRITE DIRECTORY '{directory}' USING text SELECT value FROM source",
            "insert into dir",
        ),
        ("CACHE TABLE cached AS SELECT key, value FROM source", "cache table"),
        ("SET spark.sql.ansi.enabled=false", "set command"),
        (
            "CREATE OR REPLACE TEMPORARY VIEW files USING text OPTIONS (path '/etc/hostname')",
            "only a query over `source`",
        ),
    ]


@pytest.mark.django_db
def test_statements_reaching_outside_the_query_are_refused_through_rest(
    operator_api, unique, tmp_path
):
    kept = tmp_path / "kept.txt"
    kept.write_text("here before")
    with open("/etc/hostname") as f:
        hostname = f.read().strip()
    for statement, reason in refusals(tmp_path):
        response = operator_api.post(
            "/api/v1/pipelines/", definition(unique, statement), format="json"
        )
        assert response.status_code == 400, statement
        assert reason in str(response.data["transformation"]), response.data
        body = response.content.decode()
        assert settings.SECRET_KEY not in body
        assert f'"{hostname}"' not in body and f"[{hostname}]" not in body
    assert not Pipeline.objects.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]
    assert kept.read_text() == "here before"


@pytest.mark.django_db
def test_a_saved_pipeline_cannot_be_changed_into_one(operator_api, unique):
    created = operator_api.post(
        "/api/v1/pipelines/", definition(unique, "SELECT key, value FROM source"), format="json"
    )
    assert created.status_code == 201, created.data
    changed = operator_api.patch(
        f"/api/v1/pipelines/{created.data['id']}/",
        {"transformation": f"SELECT key, {SECRET_GETTER} AS value FROM source"},
        format="json",
    )
    assert changed.status_code == 400
    assert "`reflect` calls Java methods" in str(changed.data["transformation"])
    assert Pipeline.objects.get(pk=created.data["id"]).transformation == (
        "SELECT key, value FROM source"
    )


@pytest.mark.django_db
def test_the_console_form_refuses_them_too(admin_browser, unique, tmp_path):
    for statement, reason in refusals(tmp_path):
        page = admin_browser.post(
            "/pipelines/new/",
            {
                "name": unique("form"),
                "source_topics": "in",
                "sink_topic": "out",
                "starting_offsets": "latest",
                "trigger_interval_ms": "1000",
                "transformation": statement,
            },
        )
        assert page.status_code == 400, statement
        body = page.content.decode()
        assert reason.replace("`", "&#x60;") in body or reason in body, body[-3000:]
        assert settings.SECRET_KEY not in body
    assert not Pipeline.objects.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db(transaction=True)
def test_the_run_checks_the_definition_again(worker_settings, operator_api, unique):
    """A definition changed behind the API's back (in the database) is refused by its run."""
    created = operator_api.post(
        "/api/v1/pipelines/", definition(unique, "SELECT key, value FROM source"), format="json"
    )
    assert created.status_code == 201, created.data
    pk = created.data["id"]
    Pipeline.objects.filter(pk=pk).update(
        transformation=f"SELECT key, {SECRET_GETTER} AS value FROM source"
    )
    started = operator_api.post(f"/api/v1/pipelines/{pk}/start/")
    assert started.status_code == 202, started.data
    deadline = time.monotonic() + 240
    run = PipelineRun.objects.get(pk=started.data["id"])
    while run.status in PipelineRun.ACTIVE and time.monotonic() < deadline:
        time.sleep(0.2)
        run.refresh_from_db()
    assert run.status == PipelineRun.Status.FAILED, (run.status, run.last_error)
    assert "`reflect` calls Java methods" in run.last_error
    assert run.batches == 0


@pytest.mark.django_db
def test_opening_the_form_starts_the_checker(admin_browser):
    """Spark's JVM takes seconds to start: it starts while the person fills the form in."""
    sql._checker.close()
    assert admin_browser.get("/pipelines/new/").status_code == 200
    deadline = time.monotonic() + 60
    while sql._checker.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sql._checker.pid is not None


@pytest.mark.django_db
def test_a_checker_that_does_not_answer_decides_nothing(
    admin_browser, operator_api, monkeypatch, unique
):
    """REST answers 503 and the console keeps the form, saying so; the next check starts a new
    checker."""
    assert sql.check_transformation("SELECT key, value FROM source") == ["key", "value"]
    monkeypatch.setattr(sql, "CHECK_TIMEOUT_S", 0.5)
    os.kill(sql._checker.pid, signal.SIGSTOP)
    response = operator_api.post(
        "/api/v1/pipelines/", definition(unique, "SELECT key, value FROM source"), format="json"
    )
    assert response.status_code == 503, response.data
    assert "did not answer" in response.data["detail"]

    sql.check_transformation("SELECT key, value FROM source")  # a checker of its own, warm
    os.kill(sql._checker.pid, signal.SIGSTOP)
    page = admin_browser.post(
        "/pipelines/new/",
        {
            "name": unique("form"),
            "source_topics": "in",
            "sink_topic": "out",
            "transformation": "SELECT key, value FROM source",
        },
    )
    assert page.status_code == 400
    assert "did not answer" in page.content.decode()
    assert not Pipeline.objects.exists()
