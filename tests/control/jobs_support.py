"""What the job tests share: topics made with confluent-kafka, and waiting for a job the Celery
worker (conftest.py's celery_worker) runs."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from api.models import Job


def wait_finished(job_id, timeout: float = 60) -> Job:
    """The job once the worker has finished it (polling the database it writes to)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = Job.objects.get(pk=job_id)
        if job.finished:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {Job.objects.get(pk=job_id).state}")


def make_topic(bootstrap: str, name: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(30)
