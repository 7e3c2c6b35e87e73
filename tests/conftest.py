"""Fixtures shared by the broker tests: a broker in the test's event loop, and a real broker
process (python -m broker) for the client compatibility and crash tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import settings

# Tests assert behaviour, never timing: hypothesis' per-example deadline is off.
settings.register_profile("fjord", deadline=None)
settings.load_profile("fjord")

REPO = Path(__file__).resolve().parent.parent
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


@pytest.fixture(scope="session")
def broker_process(tmp_path_factory):
    """One real broker for the whole session (compat tests use distinct topic names)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("kafka-logs")).start()
    yield proc
    assert proc.stop() == 0, "".join(proc.output)


@pytest.fixture
def make_broker_process(tmp_path):
    procs = []

    def make(*overrides: str, log_dir: Path | None = None) -> BrokerProcess:
        p = BrokerProcess(log_dir or tmp_path / "kafka-logs", *overrides)
        procs.append(p)
        return p

    yield make
    for p in procs:
        if p.proc and p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


@contextlib.asynccontextmanager
async def running_broker(log_dir: Path, **overrides: str):
    """A broker in the current event loop on an ephemeral loopback port, with a connection;
    stopped cleanly on exit (so a second one on the same log dir tests restarts)."""
    from broker.client.connection import BrokerConnection
    from broker.config import BrokerConfig
    from broker.server.broker import Broker

    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(log_dir),
        "metrics.listener": "http://127.0.0.1:0/metrics",
    }
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    b = Broker(BrokerConfig(props))
    await b.start()
    conn = await BrokerConnection.open(*b.bound["PLAINTEXT"], client_id="fjord-test")
    try:
        yield b, conn
    finally:
        await conn.close()
        await b.stop()


@pytest.fixture
async def broker_and_client(tmp_path):
    async with running_broker(tmp_path / "kafka-logs") as running:
        yield running


@pytest.fixture
def broker(broker_and_client):
    """A broker in the test's own event loop, on an ephemeral loopback port."""
    return broker_and_client[0]


@pytest.fixture
def broker_client(broker_and_client):
    """A BrokerConnection to `broker`."""
    return broker_and_client[1]


def pytest_terminal_summary(terminalreporter) -> None:
    """What the fuzz tests (tests/fuzz) tried, when they ran; `make fuzz` asks for the table."""
    fuzz = sys.modules.get("fuzz_support")
    lines = fuzz.TALLY.report() if fuzz else []
    if lines:
        terminalreporter.section("fuzz")
        for line in lines:
            terminalreporter.write_line(line)


os.environ.setdefault("PYTHONUNBUFFERED", "1")
