"""Starting, stopping and watching a pipeline's runs, for the REST API, the console and the
Celery tasks.

A start makes a `starting` run and asks a worker to spawn its process; a stop marks the active
run `stopping`, which its process sees within a second (whatever host it runs on) and answers
by stopping its query. A run whose process is gone (it exited without saying so, or stopped
reporting) is failed by `check_runs`, with the end of its log as the error (scrubbed of
credentials: the REST API and the console show it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from broker.redaction import redact
from pipelines import principal
from pipelines.models import Pipeline, PipelineRun

LOG_TAIL_BYTES = 4000


class PipelineStateError(Exception):
    """A start of a pipeline already running, or a stop of one that is not."""


def define(serializer: Any, **extra: Any) -> Pipeline:
    """Save a pipeline's definition (a validated PipelineSerializer) and bring its principal's
    user and ACLs in step with it; when the broker refuses or cannot be reached, nothing is
    saved (KafkaAdminError, BrokerUnavailable)."""
    with transaction.atomic():
        pipeline = serializer.save(**extra)
        principal.sync(pipeline)
    return pipeline


def remove(pipeline: Pipeline) -> None:
    """Delete a pipeline, its principal's ACLs and user first (a pipeline left without them
    can be removed again; a principal left without its pipeline could not)."""
    principal.remove(pipeline)
    pipeline.delete()


def active_run(pipeline: Pipeline) -> PipelineRun | None:
    return pipeline.runs.filter(status__in=PipelineRun.ACTIVE).first()


def start(pipeline: Pipeline) -> PipelineRun:
    """Raises PipelineStateError, or KafkaAdminError / BrokerUnavailable when the pipeline's
    principal cannot be brought in step: each run starts with exactly the ACLs its definition
    needs (a pipeline defined before pipelines had principals gets its own here)."""
    from pipelines.tasks import spawn_pipeline_run

    principal.sync(pipeline)
    with transaction.atomic():
        Pipeline.objects.select_for_update().get(pk=pipeline.pk)
        if active_run(pipeline) is not None:
            raise PipelineStateError(f"pipeline {pipeline.name} is already running")
        run = PipelineRun.objects.create(pipeline=pipeline)
        transaction.on_commit(lambda: spawn_pipeline_run.delay(run.pk))
    return run


def stop(pipeline: Pipeline) -> PipelineRun:
    run = active_run(pipeline)
    if run is None:
        raise PipelineStateError(f"pipeline {pipeline.name} is not running")
    PipelineRun.objects.filter(pk=run.pk, status__in=PipelineRun.ACTIVE).update(
        status=PipelineRun.Status.STOPPING
    )
    run.refresh_from_db()
    return run


def log_path(run: PipelineRun) -> str:
    return str(settings.FJORD_PIPELINES_DIR / str(run.pipeline_id) / f"run-{run.pk}.log")


def spawn(run: PipelineRun) -> None:
    """The run's process, detached from the worker (its own session: a worker restart does not
    take it along), its output in the run's log."""
    path = log_path(run)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines.run", str(run.pipeline_id), "--run", str(run.pk)],
            cwd=settings.BASE_DIR,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    PipelineRun.objects.filter(pk=run.pk).update(
        host=socket.gethostname(), pid=proc.pid, heartbeat_at=timezone.now()
    )


def alive(pid: int) -> bool:
    """Whether the process runs: not gone, and not a zombie left for its parent (the worker
    that spawned it) to reap."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # pid (comm) state ...: the state follows the last ')', comm may hold any.
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return True  # no /proc here: signal 0 is all there is


def check_runs() -> list[PipelineRun]:
    """Fail the active runs whose process is gone: not alive on this host, or silent for
    FJORD_PIPELINE_HEARTBEAT_TIMEOUT seconds. Returns them."""
    host = socket.gethostname()
    silent_since = timezone.now() - timedelta(seconds=settings.FJORD_PIPELINE_HEARTBEAT_TIMEOUT)
    failed = []
    for run in PipelineRun.objects.filter(status__in=PipelineRun.ACTIVE):
        gone = run.pid is not None and run.host == host and not alive(run.pid)
        # No heartbeat at all: no worker ever spawned its process.
        last_heard = run.heartbeat_at or run.started_at
        if gone or last_heard < silent_since:
            changed = PipelineRun.objects.filter(pk=run.pk, status=run.status).update(
                status=PipelineRun.Status.FAILED,
                stopped_at=timezone.now(),
                last_error="the pipeline's process ended without stopping its query\n"
                + redact(log_tail(run)),
            )
            if changed:
                failed.append(run)
    return failed


def log_tail(run: PipelineRun) -> str:
    try:
        with open(log_path(run), "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - LOG_TAIL_BYTES))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def live_progress() -> list[dict]:
    """The active runs' latest figures, for the dashboards' samples: rates and batch duration
    from Spark's last progress event, total lag, rows in."""
    out = []
    for run in PipelineRun.objects.filter(status__in=PipelineRun.ACTIVE).select_related("pipeline"):
        progress = run.last_progress or {}
        out.append(
            {
                "pipeline": run.pipeline_id,
                "name": run.pipeline.name,
                "run": run.pk,
                "status": run.status,
                "batches": run.batches,
                "rows_in": run.rows_in,
                "input_rows_per_second": progress.get("inputRowsPerSecond") or 0.0,
                "processed_rows_per_second": progress.get("processedRowsPerSecond") or 0.0,
                "batch_duration_ms": progress.get("batchDuration") or 0,
                "lag": sum(run.lag.values()),
            }
        )
    return out
