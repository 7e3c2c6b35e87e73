"""Celery tasks of the pipelines."""

import logging

from celery import shared_task

from pipelines import lifecycle
from pipelines.models import PipelineRun

log = logging.getLogger("fjord.pipelines")


@shared_task(name="pipelines.tasks.spawn_pipeline_run", ignore_result=True)
def spawn_pipeline_run(run_id: int) -> None:
    """The run's `python -m pipelines.run` process, on this worker's host."""
    run = PipelineRun.objects.get(pk=run_id)
    if run.status == PipelineRun.Status.STARTING:
        lifecycle.spawn(run)
    else:  # stopped before a worker took it
        PipelineRun.objects.filter(pk=run_id, status=PipelineRun.Status.STOPPING).update(
            status=PipelineRun.Status.STOPPED
        )


@shared_task(name="pipelines.tasks.check_pipeline_runs", ignore_result=True)
def check_pipeline_runs() -> int:
    """Runs whose process died marked failed. Beat sends it every few seconds and Celery's
    own lines about it are at DEBUG (control.log_filters): a failed run has a line of its own."""
    failed = lifecycle.check_runs()
    for run in failed:
        log.warning(
            "pipeline %r: run %s failed, its process ended without stopping its query",
            run.pipeline.name,
            run.pk,
        )
    return len(failed)
