"""The leader epoch cache inside Log: assigned by appends and markers, checkpointed by flush,
recovered (or rebuilt from the batches) by Log.open, cut by DeleteRecords and retention, left
right by compaction."""

from __future__ import annotations

import dataclasses
import os

import pytest
from test_cleaner import COMPACT, clean

from broker.records.batch import build_batch, iter_batches, read_header, validate_produce_batch
from broker.records.legacy import to_legacy
from broker.storage import Log, LogConfig, LogManager
from broker.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    read_leader_epoch_checkpoint,
)

T0 = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=200, file_delete_delay_ms=0)


def append(log, epoch, count=1, key=None, value=b"v" * 20):
    data = build_batch([(key, value, [], T0) for _ in range(count)])
    return log.append(data, validate_produce_batch(data), now_ms=T0, leader_epoch=epoch)


def entries(log):
    return [(e.epoch, e.start_offset) for e in log.leader_epochs.entries]


def checkpoint_text(log):
    return (log.directory / LEADER_EPOCH_CHECKPOINT).read_text()


def reopen(log, config=SMALL, *, clean_shutdown=True):
    return Log.open(
        log.directory,
        config,
        recovery_point=log.recovery_point,
        log_start_offset=log.log_start_offset,
        clean_shutdown=clean_shutdown,
        now_ms=T0,
    )


def stored_epochs(log):
    """(base offset, partition leader epoch) of every batch in the log's files."""
    return [
        (h.base_offset, h.partition_leader_epoch)
        for s in log.segments
        for _, h in s.batches_from(0)
    ]


@pytest.fixture
def log(tmp_path):
    return Log.open(tmp_path / "t-0", SMALL, clean_shutdown=True, now_ms=T0)


def test_appends_and_markers_assign_epochs_checkpointed_across_a_restart(log):
    append(log, 1, count=2)
    log.append_marker(7, 0, True, 0, now_ms=T0, leader_epoch=3)
    append(log, 3)
    assert entries(log) == [(1, 0), (3, 2)]
    log.close()
    assert checkpoint_text(log) == "0\n2\n1 0\n3 2\n"  # Kafka's leader-epoch-checkpoint
    reopened = reopen(log)
    assert entries(reopened) == [(1, 0), (3, 2)]
    assert not reopened.leader_epochs.dirty  # nothing to write back
    assert reopened.end_offset_for_epoch(1) == (1, 2)
    assert reopened.end_offset_for_epoch(2) == (1, 2)
    assert reopened.end_offset_for_epoch(3) == (3, 4)
    assert reopened.end_offset_for_epoch(0) == (0, 0)
    assert reopened.end_offset_for_epoch(4) == (-1, -1)


def test_appends_leave_the_checkpoint_to_flush(log):
    append(log, 1)
    path = log.directory / LEADER_EPOCH_CHECKPOINT
    assert not path.exists()
    log.flush()
    assert checkpoint_text(log) == "0\n1\n1 0\n"
    path.unlink()
    log.flush()  # written only when the entries changed
    assert not path.exists()


def test_batches_without_an_epoch_assign_none_and_replicas_keep_theirs(log):
    append(log, None)
    assert entries(log) == []
    data = build_batch([(None, b"x", [], T0)], base_offset=5, partition_leader_epoch=4)
    log.append(data, read_header(data), now_ms=T0, assign_offsets=False)
    assert entries(log) == [(4, 5)]


def test_unclean_restart_recovers_epochs_written_after_the_checkpoint(log):
    append(log, 1, count=3)
    log.flush()
    append(log, 2)  # not flushed: the checkpoint lacks epoch 2
    assert checkpoint_text(log) == "0\n1\n1 0\n"
    recovered = reopen(log, clean_shutdown=False)
    assert entries(recovered) == [(1, 0), (2, 3)]


def test_checkpointed_epochs_past_the_recovered_end_are_dropped(log):
    append(log, 1, count=2)
    append(log, 2)
    log.flush()
    assert checkpoint_text(log) == "0\n2\n1 0\n2 2\n"
    segment = log.active_segment.log_path
    os.truncate(segment, os.path.getsize(segment) - 1)  # tear the epoch-2 batch
    recovered = reopen(log, clean_shutdown=False)
    recovered_end = recovered.log_end_offset
    assert recovered_end == 2
    assert entries(recovered) == [(1, 0)]
    recovered.flush()
    assert checkpoint_text(recovered) == "0\n1\n1 0\n"


@pytest.mark.parametrize("damage", ["deleted", "corrupt", "unknown version"])
def test_a_lost_checkpoint_is_rebuilt_from_the_batches(log, damage, caplog):
    append(log, 1, count=2)
    append(log, 3)
    append(log, 4, count=2)
    log.close()
    path = log.directory / LEADER_EPOCH_CHECKPOINT
    if damage == "deleted":
        path.unlink()
    else:
        path.write_text("0\n3\n1 0\n3 x\n" if damage == "corrupt" else "1\n0\n")
    reopened = reopen(log)
    assert entries(reopened) == [(1, 0), (3, 2), (4, 3)]
    reopened.flush()
    assert checkpoint_text(reopened) == "0\n3\n1 0\n3 2\n4 3\n"
    assert (damage == "deleted") != ("rebuilding the leader epoch cache" in caplog.text)


def test_delete_records_moves_the_first_epoch_to_the_new_start(log):
    for epoch in (0, 0, 2, 2, 5):
        append(log, epoch, count=2)
    assert entries(log) == [(0, 0), (2, 4), (5, 8)]
    log.delete_records_before(5)
    assert entries(log) == [(2, 5), (5, 8)]
    log.flush()
    assert checkpoint_text(log) == "0\n2\n2 5\n5 8\n"
    assert entries(reopen(log)) == [(2, 5), (5, 8)]


def test_retention_moves_the_first_epoch_to_the_new_start(log):
    for epoch in range(8):
        append(log, epoch, count=4, value=b"r" * 100)  # ~500-byte batches: two per segment
    assert len(log.segments) == 4
    log.update_config(dataclasses.replace(SMALL, retention_bytes=1100))
    assert log.enforce_retention(T0)
    start = log.log_start_offset
    assert start > 0
    assert entries(log) == [(epoch, 4 * epoch) for epoch in range(start // 4, 8)]


def test_compaction_keeps_the_epochs_of_the_batches_it_keeps(tmp_path):
    log = Log.open(tmp_path / "t-0", COMPACT, clean_shutdown=True, now_ms=T0)
    for epoch, key, value in [(1, b"a", b"1"), (1, b"b", b"2"), (2, b"a", b"3"), (3, b"c", b"4")]:
        append(log, epoch, key=key, value=value)
    before = entries(log)
    log.roll(T0)
    append(log, 3, key=b"d", value=b"5")
    clean(log, T0)
    assert [o for o, _ in stored_epochs(log)] == [1, 2, 3, 4]  # offset 0 was cleaned away
    assert entries(log) == before  # Kafka leaves the cache alone when cleaning
    log.close()
    (log.directory / LEADER_EPOCH_CHECKPOINT).unlink()
    rebuilt = Log.open(log.directory, COMPACT, clean_shutdown=True, now_ms=T0)
    assert entries(rebuilt) == [(1, 1), (2, 2), (3, 3)]


def test_an_old_format_append_clears_the_cache(log, caplog):
    append(log, 0)
    legacy = to_legacy(build_batch([(b"k", b"v", [], T0)]), 1)
    log.append_legacy(legacy, now_ms=T0)
    assert entries(log) == []
    assert log.end_offset_for_epoch(0) == (-1, -1)
    assert "clearing the leader epoch cache" in caplog.text


def test_becoming_leader_starts_the_epoch_at_the_log_end(log):
    log.assign_epoch_start_offset(0)
    assert log.end_offset_for_epoch(0) == (0, 0)
    append(log, 0, count=3)
    log.assign_epoch_start_offset(0)  # already known: unchanged
    log.assign_epoch_start_offset(1)
    assert entries(log) == [(0, 0), (1, 3)]


def test_each_batch_is_stored_with_the_epoch_the_cache_records(log):
    append(log, 2, count=2)
    append(log, 6)
    buf = b"".join(bytes(c) for c in log.read(0, 1 << 20).records)
    assert [(h.base_offset, h.partition_leader_epoch) for _, h in iter_batches(buf)] == [
        (0, 2),
        (2, 6),
    ]


def test_a_deleted_log_writes_no_checkpoint_over_a_topic_created_again(tmp_path):
    """The deleted log's cache still says its old directory: a flush after the delete must
    not write there, where the topic created again under the name keeps its own."""
    manager = LogManager([tmp_path])
    manager.load(lambda topic: SMALL)
    old = manager.create("t", 0, SMALL)
    append(old, 5)
    manager.delete("t", 0)
    new = manager.create("t", 0, SMALL)
    append(new, 0)
    new.flush()
    old.flush()  # a flush round that still held the deleted log
    assert read_leader_epoch_checkpoint(new.directory / LEADER_EPOCH_CHECKPOINT) == [
        EpochEntry(0, 0)
    ]
    manager.close()


def test_a_log_kept_in_an_old_format_records_no_epoch(tmp_path):
    legacy = dataclasses.replace(SMALL, message_format_version="0.10.2")
    log = Log.open(tmp_path / "t-0", legacy, clean_shutdown=True, now_ms=T0)
    log.assign_epoch_start_offset(3)
    assert entries(log) == []
