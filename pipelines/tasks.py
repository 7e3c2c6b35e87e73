"""Celery tasks of the pipelines."""

from celery import shared_task

from pipelines import lifecycle
from pipelines.models import PipelineRun


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
    """Runs whose process died marked failed."""
    return len(lifecycle.check_runs())
