"""`python -m broker` as a child process, for the tests that need a real one (real clients,
kill -9, the control plane)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Broker settings for tests of groups: groups form at once (no initial rebalance delay), and
# members can have short sessions and frequent consumer-protocol heartbeats, so that a member
# that left or died is replaced in seconds.
FAST_GROUP_OVERRIDES = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=1000",
    "group.consumer.session.timeout.ms=6000",
    "group.consumer.min.session.timeout.ms=6000",
    "group.consumer.heartbeat.interval.ms=200",
    "group.consumer.min.heartbeat.interval.ms=200",
)
STARTED = re.compile(r"started .*listening on PLAINTEXT://[^:]*:(\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_broker(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m broker <args>` run to its exit, its output kept: for a broker that must refuse
    to start (a minute is far more than a refusal takes)."""
    return subprocess.run(
        [sys.executable, "-m", "broker", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


class BrokerProcess:
    """`python -m broker` on a loopback port; the same log dir and port across restarts.

    Cluster tests place brokers elsewhere: `host` and `port` pick the listener, `prefix` is
    put before the command (`ip netns exec <namespace>` runs the broker in a network namespace,
    keeping its process id, so signals reach the broker itself) and `env` adds variables."""

    def __init__(
        self,
        log_dir: Path,
        *overrides: str,
        host: str = "127.0.0.1",
        port: int | None = None,
        prefix: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.host = host
        self.port = port or free_port()
        self.overrides = list(overrides)
        self.prefix = list(prefix)
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []
        self._ready = threading.Event()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60) -> BrokerProcess:
        self.spawn()
        return self.wait_started(timeout)

    def spawn(self) -> None:
        """Start the process without waiting for it to listen (wait_started does), so that
        several brokers can start side by side."""
        args = [
            *self.prefix,
            sys.executable,
            "-m",
            "broker",
            "--override",
            f"listeners=PLAINTEXT://{self.host}:{self.port}",
            "--override",
            f"log.dirs={self.log_dir}",
            "--override",
            "metrics.listener=",
            *[a for o in self.overrides for a in ("--override", o)],
        ]
        self.proc = subprocess.Popen(
            args,
            cwd=REPO,
            env={**os.environ, **self.env} if self.env else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        ready = self._ready = threading.Event()
        listening = self._listening = threading.Event()

        def pump(proc=self.proc):
            for line in proc.stdout:
                self.output.append(line)
                if STARTED.search(line):
                    listening.set()
                    ready.set()
            ready.set()  # the process ended: stop waiting

        threading.Thread(target=pump, daemon=True).start()

    def wait_started(self, timeout: float = 60) -> BrokerProcess:
        # Its output ending is not its exit yet: whether it said it listens is what counts.
        started = self._ready.wait(timeout) and self._listening.is_set()
        if not started or self.proc.poll() is not None:
            status = self.proc.poll()
            raise RuntimeError(
                f"broker did not start (exit status {status}):\n" + "".join(self.output)
            )
        return self

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode if self.proc else 0
