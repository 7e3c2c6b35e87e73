"""Settings of `make test`: the real PostgreSQL and Redis of DEVELOPERS.md, unless the
environment names others. pytest-django creates and drops its own test database on that
server."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fjord")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/1")
# Samples are taken by the tests themselves (api.sampling), not by a beat no test runs.
os.environ.setdefault("FJORD_SAMPLER", "beat")
# Development mode, as `make run`'s: plain HTTP on 127.0.0.1, static files without
# collectstatic. Processes the tests start inherit it.
os.environ.setdefault("DJANGO_DEBUG", "1")

from control.settings import *  # noqa: E402,F403

# A test database, a Celery queue and channel-layer keys per pytest process: runs side by side
# (a developer's and CI's) must not drop each other's database or take each other's tasks. The
# queue's name goes through the environment to the worker processes tests start.
# pytest-xdist's workers inherit the environment of the process that started them, which set
# a queue for itself: each worker takes its own.
_queue = os.environ.setdefault("FJORD_TEST_QUEUE", f"fjord-test-{os.getpid()}")
if (_worker := os.environ.get("PYTEST_XDIST_WORKER")) and not _queue.endswith(f"-{_worker}"):
    _queue = os.environ["FJORD_TEST_QUEUE"] = f"{_queue}-{os.getpid()}-{_worker}"
DATABASES["default"]["TEST"] = {"NAME": f"test_fjord_{os.getpid()}"}  # noqa: F405
CELERY_TASK_DEFAULT_QUEUE = _queue
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"asgi-test-{os.getpid()}"  # noqa: F405
