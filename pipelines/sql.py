"""A pipeline's transformation checked before it is saved, for the control plane: in a process
of its own (`python -m pipelines.sql_checker`), started on first use and kept for the next
check, so that neither the statement nor Spark ever runs in the web or worker process.

There Spark's parser reads the statement, `pipelines.sql_policy` holds its plan to one query
over `source`, and only then Spark's analyser resolves it against the source's columns (an empty
view) and the sink checks its columns. Nothing is executed. The checker gets no secret of the
control plane: its environment is only what Java and Python need."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading

from pipelines.sql_policy import TransformationError

__all__ = ["CheckerUnavailable", "TransformationError", "check_transformation", "warm_up"]

# What the checker's Python and Java need of this process's environment; nothing else passes.
CHECKER_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "JAVA_HOME", "TMPDIR", "PYTHONPATH")
# The first check starts Spark's JVM.
START_TIMEOUT_S = 180.0
# A check takes well under a second once the JVM runs; Spark still evaluates some constant
# expressions while it analyses (a catastrophic regex in a VALUES row), which only a deadline
# ends: the checker is then killed, and started again for the next check.
CHECK_TIMEOUT_S = 20.0


class CheckerUnavailable(RuntimeError):
    """The checker did not answer (it died, or took too long): nothing was decided."""


class SqlChecker:
    """The checker process, one check at a time; started again when it is gone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._stop(self._process)

    def warm_up(self) -> None:
        """Start the checker in the background when none runs, so that the check a person is
        about to ask for does not wait for Spark's JVM to start."""
        if self._process is None or self._process.poll() is not None:
            threading.Thread(target=self._warm, daemon=True).start()

    def _warm(self) -> None:
        try:
            self.check("SELECT key, value FROM source", False)
        except CheckerUnavailable:
            pass  # the next check starts another

    def check(self, sql: str, include_headers: bool) -> list[str]:
        with self._lock:
            starting = self._process is None or self._process.poll() is not None
            if starting:
                self._process = self._start()
            answer = self._ask(
                self._process,
                {"sql": sql, "include_headers": include_headers},
                START_TIMEOUT_S if starting else CHECK_TIMEOUT_S,
            )
        if "error" in answer:
            raise TransformationError(answer["error"])
        return answer["columns"]

    @staticmethod
    def _start() -> subprocess.Popen[str]:
        env = {name: os.environ[name] for name in CHECKER_ENVIRONMENT if name in os.environ}
        return subprocess.Popen(
            [sys.executable, "-m", "pipelines.sql_checker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=tempfile.gettempdir(),
            env=env,
            text=True,
        )

    def _ask(self, process: subprocess.Popen[str], request: dict, timeout: float) -> dict:
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], timeout)
            line = process.stdout.readline() if ready else ""
        except OSError:
            line = ""
        if not line:
            self._stop(process)
            raise CheckerUnavailable("the SQL checker did not answer; try again")
        return json.loads(line)

    def _stop(self, process: subprocess.Popen[str]) -> None:
        process.kill()
        process.wait()
        self._process = None


_checker = SqlChecker()


def warm_up() -> None:
    _checker.warm_up()


def check_transformation(sql: str, include_headers: bool = False) -> list[str]:
    """The columns the transformation gives; TransformationError naming why it cannot run, or
    CheckerUnavailable."""
    return _checker.check(sql, include_headers)
