"""Celery tasks of the control plane."""

from celery import shared_task

from api import jobs, sampling


# --- metrics history (owner: dashboards) ---
@shared_task(name="api.tasks.sample_broker_metrics", ignore_result=True)
def sample_broker_metrics() -> None:
    """One sample of the broker's metrics, stored and pushed to the dashboards."""
    sampling.sample()


@shared_task(name="api.tasks.prune_metric_history", ignore_result=True)
def prune_metric_history() -> int:
    """Samples past FJORD_METRICS_RETENTION deleted."""
    return sampling.prune()


# --- end metrics history ---


# --- jobs (owner: jobs) ---
@shared_task(name="api.tasks.run_job", ignore_result=True)
def run_job(job_id: str) -> None:
    """A long admin operation (api.jobs), its progress saved as it goes."""
    jobs.run(job_id)


# --- end jobs ---
