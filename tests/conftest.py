"""Fixtures shared by the broker tests: a broker in the test's event loop, and a real broker
process (python -m broker) for the client compatibility and crash tests."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from hypothesis import settings
from in_process_broker import running_broker

# Tests assert behaviour, never timing: hypothesis' per-example deadline is off.
settings.register_profile("fjord", deadline=None)
settings.load_profile("fjord")


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


def pytest_collection_finish(session) -> None:
    """pytest-xdist hands tests to its workers by node id: of tests sharing one, it would run
    only the first, and say nothing of the others."""
    counts = Counter(item.nodeid for item in session.items)
    shared = sorted(nodeid for nodeid, count in counts.items() if count > 1)
    if shared:
        raise pytest.UsageError(f"tests share node ids: {shared[:5]}")


def pytest_terminal_summary(terminalreporter) -> None:
    """What the fuzz tests (tests/fuzz) tried, when they ran; `make fuzz` asks for the table."""
    fuzz = sys.modules.get("fuzz_support")
    lines = fuzz.TALLY.report() if fuzz else []
    if lines:
        terminalreporter.section("fuzz")
        for line in lines:
            terminalreporter.write_line(line)


os.environ.setdefault("PYTHONUNBUFFERED", "1")
