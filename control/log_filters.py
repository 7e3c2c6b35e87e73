"""Logging filters of the control plane."""

import logging
from typing import Any

from django.conf import settings


def _beat_task(record: logging.LogRecord) -> str | None:
    """The task a Celery line is about: beat's "Sending due task <entry> (<task>)", the
    worker's "Task <task>[<id>] received" and "succeeded" (whose arguments are a mapping)."""
    args: Any = record.args
    if isinstance(args, dict):
        return args.get("name")
    if isinstance(args, tuple) and len(args) == 2 and isinstance(args[1], str):
        return args[1]
    return None


class RoutineTasks(logging.Filter):
    """Celery's lines about the tasks of beat's schedule, at DEBUG: beat sends one every second
    or so, and their sent/received/succeeded lines would bury every other line. They are kept
    where DEBUG is enabled (DJANGO_LOG_LEVEL or Celery's --loglevel DEBUG); other tasks' lines
    (jobs, pipeline runs) are left as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
        if _beat_task(record) not in scheduled:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
