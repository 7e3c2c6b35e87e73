"""Celery's worker and beat as `make run` starts them: the tasks of beat's schedule (a metrics
sample every second, the pipeline runs' check every 5 s) leave no line at the default level,
nor does Celery's warning about running as root; with DEBUG asked for, their lines are back."""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from api.models import MetricSnapshot
from pipelines.models import Pipeline, PipelineRun
from pipelines.tasks import check_pipeline_runs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUTINE = ("Sending due task", "sample_broker_metrics[", "check_pipeline_runs[")
DEADLINE_SECONDS = 60


class Output:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()

    def pump(self, stream) -> None:
        for line in stream:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, *texts: str) -> bool:
        """Whether every text has appeared in a line before the deadline."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        with self.changed:
            while not all(any(t in line for line in self.lines) for t in texts):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True


@contextmanager
def worker_and_beat(tmp_path, control_broker, **env: str) -> Iterator[Output]:
    """`celery -A control worker` and `beat` at INFO, as control.launch starts them, on the test
    database and control_broker."""
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "control.settings_test",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
        "FJORD_VAR_DIR": str(tmp_path),
        "FJORD_BOOTSTRAP": control_broker.bootstrap,
        "FJORD_METRICS_URL": control_broker.metrics_url,
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    celery = [sys.executable, "-m", "celery", "-A", "control"]
    output = Output()
    procs = []
    try:
        for argv in (
            [*celery, "worker", "--pool", "solo", "--without-mingle", "--without-gossip"],
            [*celery, "beat"],
        ):
            proc = subprocess.Popen(
                [*argv, "--loglevel", "INFO"],
                cwd=REPO,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            procs.append(proc)
            threading.Thread(target=output.pump, args=(proc.stdout,), daemon=True).start()
        yield output
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


@pytest.mark.django_db(transaction=True)
def test_beats_routine_tasks_leave_no_line_at_the_default_level(tmp_path, control_broker):
    with worker_and_beat(tmp_path, control_broker) as output:
        assert output.wait_for(" ready."), "".join(output.lines)
        deadline = time.monotonic() + DEADLINE_SECONDS
        # Three samples stored: beat sent them and the worker ran them.
        while MetricSnapshot.objects.count() < 3:
            assert time.monotonic() < deadline, "".join(output.lines)
            time.sleep(0.2)
    text = "".join(output.lines)
    assert not [line for line in output.lines if any(r in line for r in ROUTINE)], text
    assert "superuser privileges" not in text


@pytest.mark.django_db(transaction=True)
def test_beats_routine_tasks_are_logged_with_debug_asked_for(tmp_path, control_broker):
    with worker_and_beat(tmp_path, control_broker, DJANGO_LOG_LEVEL="DEBUG") as output:
        assert output.wait_for(
            "Sending due task sample-broker-metrics",
            "api.tasks.sample_broker_metrics[",
            "] received",
            "] succeeded",
        ), "".join(output.lines)


@pytest.mark.django_db
def test_a_run_the_check_failed_has_a_line_of_its_own(operator, settings, tmp_path, caplog):
    settings.FJORD_PIPELINES_DIR = tmp_path
    pipeline = Pipeline.objects.create(
        name="copy-orders", source_topics=["in"], sink_topic="out", created_by=operator
    )
    run = PipelineRun.objects.create(pipeline=pipeline, pid=2**22 + 1, host="elsewhere")
    PipelineRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(days=1))

    assert check_pipeline_runs() == 1

    (line,) = [r for r in caplog.records if r.name == "fjord.pipelines"]
    assert line.levelname == "WARNING"
    assert f"pipeline 'copy-orders': run {run.pk} failed" in line.getMessage()
