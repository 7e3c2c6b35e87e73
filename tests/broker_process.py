"""`python -m broker` as a child process, for the tests that need a real one (real clients,
kill -9, the control plane)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
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


class BrokerProcess:
    """`python -m broker` on a loopback port; the same log dir and port across restarts."""

    def __init__(self, log_dir: Path, *overrides: str) -> None:
        self.log_dir = log_dir
        self.port = free_port()
        self.overrides = list(overrides)
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> BrokerProcess:
        args = [
            sys.executable,
            "-m",
            "broker",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "--override",
            f"log.dirs={self.log_dir}",
            "--override",
            "metrics.listener=",
            *[a for o in self.overrides for a in ("--override", o)],
        ]
        self.proc = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        ready = threading.Event()

        def pump(proc=self.proc):
            for line in proc.stdout:
                self.output.append(line)
                if STARTED.search(line):
                    ready.set()
            ready.set()  # the process ended: stop waiting

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            raise RuntimeError("broker did not start:\n" + "".join(self.output))
        return self

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

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
