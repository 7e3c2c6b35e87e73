"""Test hooks of the exactly-once sink's crash tests (tests/pipelines/test_eos_pipeline_crash.py):
the points where its steps are made to fail, each once. Off unless FJORD_SINK_FAULT_DIR names
a directory (which records what already failed):

- FJORD_SINK_CRASH_AT=<step>: the process group FJORD_SINK_CRASH_PGID names (the pipeline's
  driver, its JVM and Python workers; Spark's Python workers run in a group of their own) is
  SIGKILLed at that step of the driver's commit: a driver that dies there.
- FJORD_SINK_FAIL_TASK=1: a write task raises once its rows are sent, before it prepares:
  Spark retries it."""

from __future__ import annotations

import os
import signal

CRASH_STEPS = ("before-decision", "after-decision", "after-first-commit", "after-commits")


def crash_point(step: str) -> None:
    if os.environ.get("FJORD_SINK_CRASH_AT") == step and _first_time(f"crash-{step}"):
        os.killpg(int(os.environ["FJORD_SINK_CRASH_PGID"]), signal.SIGKILL)


def fail_task_once() -> None:
    if os.environ.get("FJORD_SINK_FAIL_TASK") and _first_time("task"):
        raise RuntimeError("FJORD_SINK_FAIL_TASK: this write task fails once")


def _first_time(fault: str) -> bool:
    directory = os.environ.get("FJORD_SINK_FAULT_DIR")
    if not directory:
        return False
    try:
        os.close(os.open(os.path.join(directory, fault), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True
