"""kill -9 with an idempotent producer: the crash loop of test_crash_recovery, with
enable.idempotence=true and five requests in flight. Retries of batches written before a
kill are recognised by the producer state rebuilt at restart (last snapshot + log tail), so
every record is in the log exactly once, in production order."""

from __future__ import annotations

import pytest
import test_crash_recovery as crash
from confluent_kafka import Producer


def idempotent_producer(config: dict) -> Producer:
    return Producer(
        {**config, "enable.idempotence": True, "max.in.flight.requests.per.connection": 5}
    )


# Kept before the fixture swaps it: the exactly-once check adds to the crash test's own.
crash_check_log = crash.check_log


def check_exactly_once(run: crash.ProducerRun, got: dict) -> None:
    crash_check_log(run, got)
    for p, rows in got.items():
        values = [v for _, v in rows]
        expected = [b"n-%d" % i for i in range(p, run.produced, run.partitions)]
        assert values == expected, f"partition {p}: records duplicated, lost or reordered"


@pytest.fixture
def idempotent_crash_loop(monkeypatch, make_broker_process):
    monkeypatch.setattr(crash, "Producer", idempotent_producer)
    monkeypatch.setattr(crash, "check_log", check_exactly_once)
    return lambda *args, **kw: crash.crash_loop(make_broker_process, *args, **kw)


@pytest.mark.timeout(240)
def test_idempotent_records_survive_kill_9_exactly_once(idempotent_crash_loop):
    """Every append waits for its fsync before the answer, so a kill often lands between a
    write and its acknowledgement: the producer's retry is then a duplicate."""
    idempotent_crash_loop(1, "log.flush.interval.messages=1")


@pytest.mark.timeout(240)
def test_idempotent_records_survive_kill_9_exactly_once_small_segments(idempotent_crash_loop):
    """Segments roll every 8 KiB, so kills land between producer snapshots and restarts
    rebuild the state from a snapshot plus a replayed tail."""
    idempotent_crash_loop(
        3, "log.segment.bytes=8192", "log.index.interval.bytes=512", min_segments=3
    )
