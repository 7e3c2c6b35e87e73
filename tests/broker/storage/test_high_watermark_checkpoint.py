"""The high watermark of a replicated log: moved by replication only, what depends on it, and
its replication-offset-checkpoint (Kafka's per log dir file of high watermarks)."""

from __future__ import annotations

import shutil

import pytest
from test_log_recovery import values
from test_log_transactions import Producer
from test_log_truncation import T0, append

from broker.storage import Log, LogConfig, LogManager, OffsetOutOfRangeError
from broker.storage.checkpoint import read_checkpoint, write_checkpoint
from broker.storage.manager import CLEAN_SHUTDOWN_FILE, REPLICATION_OFFSET_CHECKPOINT

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100, file_delete_delay_ms=0)


def replicated(directory, config=SMALL):
    return Log.open(directory, config, high_watermark_follows_appends=False, now_ms=T0)


def test_appends_leave_a_replicated_logs_high_watermark_alone(tmp_path):
    log = replicated(tmp_path / "t-0")
    for i in range(10):
        append(log, b"v%d" % i)
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (10, 0, 0)
    assert log.read(0, 1 << 20, max_offset=log.high_watermark).size == 0
    assert log.maybe_increment_high_watermark(4)
    assert not log.maybe_increment_high_watermark(4)
    assert not log.maybe_increment_high_watermark(3)  # a leader's only goes up
    assert log.high_watermark == 4
    with pytest.raises(ValueError):
        log.maybe_increment_high_watermark(11)
    # A follower takes its leader's, within its own log.
    assert log.update_high_watermark(2) == 2
    assert log.update_high_watermark(100) == 10
    log.delete_records_before(3, now_ms=T0)
    assert log.update_high_watermark(0) == 3


def test_what_depends_on_the_high_watermark(tmp_path):
    config = LogConfig(
        segment_bytes=600, index_interval_bytes=100, file_delete_delay_ms=0, retention_bytes=0
    )
    log = replicated(tmp_path / "t-0", config)
    a = Producer(log, 1)
    for i in range(20):
        append(log, b"v%d" % i)
    a.send(1)  # 20: a transaction begins
    append(log, b"w")
    assert len(log.segments) > 2
    # Nothing above the high watermark is deleted, by retention or by DeleteRecords.
    assert log.enforce_retention(T0) == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(5, now_ms=T0)
    log.maybe_increment_high_watermark(15)
    assert log.last_stable_offset == 15
    assert log.enforce_retention(T0) > 0
    assert log.log_start_offset <= 15 and log.segments[1].base_offset > 15
    assert log.delete_records_before(15, now_ms=T0) == 15
    log.maybe_increment_high_watermark(22)
    assert log.last_stable_offset == 20  # the open transaction's first offset
    a.end(commit=True)
    assert log.last_stable_offset == 22  # the marker is not below the high watermark yet
    log.maybe_increment_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 23


def manager_of(*log_dirs, follows=False):
    manager = LogManager(list(log_dirs), high_watermark_follows_appends=follows)
    manager.load(lambda topic: SMALL, now_ms=T0)
    return manager


def test_the_high_watermark_checkpoint_round_trip(tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    manager = manager_of(d1, d2)
    logs = {p: manager.create("t", p, SMALL, now_ms=T0) for p in range(3)}
    assert not any(log.high_watermark_follows_appends for log in logs.values())
    for p, log in logs.items():
        for i in range(5 + p):
            append(log, b"v%d" % i)
        log.maybe_increment_high_watermark(2 + p)
    manager.checkpoint()
    written = {
        **read_checkpoint(d1 / REPLICATION_OFFSET_CHECKPOINT),
        **read_checkpoint(d2 / REPLICATION_OFFSET_CHECKPOINT),
    }
    assert written == {("t", 0): 2, ("t", 1): 3, ("t", 2): 4}
    assert (d1 / REPLICATION_OFFSET_CHECKPOINT).read_text().startswith("0\n")
    # After kill -9: the files as they are, no clean shutdown marker.
    crashed = tmp_path / "crashed"
    for d in (d1, d2):
        shutil.copytree(d, crashed / d.name)
    again = manager_of(crashed / "d1", crashed / "d2")
    assert {p: again.get("t", p).high_watermark for p in range(3)} == {0: 2, 1: 3, 2: 4}
    assert {p: again.get("t", p).log_end_offset for p in range(3)} == {0: 5, 1: 6, 2: 7}
    # And after a clean shutdown, which writes the file too.
    logs[0].maybe_increment_high_watermark(5)
    manager.close()
    assert (d1 / CLEAN_SHUTDOWN_FILE).exists()
    reopened = manager_of(d1, d2)
    assert [reopened.get("t", p).high_watermark for p in range(3)] == [5, 3, 4]
    reopened.close()


def test_checkpointed_high_watermarks_are_clamped_to_the_log(tmp_path):
    manager = manager_of(tmp_path)
    for p in range(4):
        log = manager.create("t", p, SMALL, now_ms=T0)
        for i in range(10):
            append(log, b"v%d" % i)
        log.maybe_increment_high_watermark(8)
        log.delete_records_before(6, now_ms=T0)
    manager.close()
    # Beyond the log end (the log lost its tail), below the log start, absent.
    write_checkpoint(
        tmp_path / REPLICATION_OFFSET_CHECKPOINT, {("t", 0): 50, ("t", 1): 2, ("t", 2): 7}
    )
    again = manager_of(tmp_path)
    assert [again.get("t", p).high_watermark for p in range(4)] == [10, 6, 7, 6]
    again.close()
    (tmp_path / REPLICATION_OFFSET_CHECKPOINT).write_text("0\n3\nt 0 1\n")  # torn
    again = manager_of(tmp_path)
    assert [again.get("t", p).high_watermark for p in range(4)] == [6, 6, 6, 6]
    again.close()


def test_a_single_node_keeps_the_high_watermark_at_the_log_end(tmp_path):
    manager = manager_of(tmp_path, follows=True)
    log = manager.create("t", 0, SMALL, now_ms=T0)
    assert log.high_watermark_follows_appends
    for i in range(10):
        append(log, b"v%d" % i)
    assert log.high_watermark == log.last_stable_offset == 10
    manager.close()
    assert read_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT) == {("t", 0): 10}
    write_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT, {("t", 0): 3})
    again = manager_of(tmp_path, follows=True)
    assert again.get("t", 0).high_watermark == 10
    again.close()


def test_truncation_brings_the_checkpointed_high_watermark_down(tmp_path):
    manager = manager_of(tmp_path)
    log = manager.create("t", 0, SMALL, now_ms=T0)
    for i in range(30):
        append(log, b"v%d" % i)
    log.maybe_increment_high_watermark(25)
    manager.checkpoint()
    assert manager.truncate_to("t", 0, 12)
    assert read_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT) == {("t", 0): 12}
    assert log.high_watermark == 12 and values(log)[-1][0] == 11
    manager.truncate_fully_and_start_at("t", 0, 40)
    assert read_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT) == {("t", 0): 40}
    manager.close()
