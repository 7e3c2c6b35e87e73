"""The log cleaner (cleanup.policy=compact) on real logs in temporary directories: latest value
per key, tombstones and transaction markers in two passes, producer state kept for
idempotence, the dirty-ratio and compaction-lag gates, and the crash safety of the swap."""

from __future__ import annotations

import dataclasses
import os
import shutil

import pytest

from broker.records.batch import build_batch, crc_matches, decode_batch, iter_batches, read_header
from broker.records.compression import LZ4
from broker.records.control import ABORT, parse_marker
from broker.records.entries import entry_records
from broker.records.errors import InvalidRecordError
from broker.records.legacy import to_legacy
from broker.storage import Log, LogConfig, LogManager
from broker.storage.cleaner import (
    Cleaner,
    CleanerConfig,
    LogCleaner,
    group_segments_by_size,
    log_to_clean,
)
from broker.storage.manager import CLEANER_OFFSET_CHECKPOINT

T0 = 1_700_000_000_000
RETENTION = 60_000  # delete.retention.ms
COMPACT = LogConfig(
    cleanup_policy="compact",
    index_interval_bytes=64,
    file_delete_delay_ms=0,
    delete_retention_ms=RETENTION,
    min_cleanable_dirty_ratio=0.5,
)
TP = ("t", 0)


def put(log: Log, *records, now=T0, pid=-1, epoch=-1, seq=-1, txn=False, compression=0):
    """Append one batch of (key, value) records as Produce does, producer state checks
    included; returns the batch's header as stored."""
    data = build_batch(
        [(k, v, [], now) for k, v in records],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
        compression=compression,
    )
    header = read_header(data)
    if pid >= 0:
        assert log.producer_state.check(header) is None
    result = log.append(data, header, now_ms=now)
    return dataclasses.replace(header, base_offset=result.base_offset)


def end_txn(log: Log, pid: int, commit: bool, now=T0, epoch=0) -> int:
    return log.append_marker(pid, epoch, commit, 0, now_ms=now, leader_epoch=0).base_offset


def batches(log: Log, start: int | None = None):
    """Every batch from `start` (the log start) read as a consumer fetches it: whole, CRC
    intact, offsets strictly increasing across holes."""
    offset = log.log_start_offset if start is None else start
    out, last = [], -1
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 20)
        if not fetched.size:
            break
        buf = b"".join(bytes(c) for c in fetched.records)
        for pos, h in iter_batches(buf):
            assert crc_matches(buf, pos, h)
            assert h.base_offset > last
            last = h.last_offset
            out.append(decode_batch(buf[pos : pos + h.size]))
            offset = h.next_offset
    return out


def records(log: Log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(h.record_offset(r), r.key, r.value) for h, rs in batches(log, start) for r in rs]


def read_committed(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer returns: the client's algorithm over the fetched
    batches and the aborted transactions the broker reports with them."""
    aborted = sorted(
        log.aborted_transactions(log.log_start_offset, log.last_stable_offset),
        key=lambda t: t[1],
    )
    skipping: set[int] = set()
    out = []
    for header, rs in batches(log):
        if header.base_offset >= log.last_stable_offset:
            break
        while aborted and aborted[0][1] <= header.last_offset:
            skipping.add(aborted.pop(0)[0])
        if header.is_control:
            if rs and parse_marker(rs[0].key, rs[0].value)[0] == ABORT:
                skipping.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in skipping:
            continue
        out += [(header.record_offset(r), r.key, r.value) for r in rs]
    return out


def clean(log: Log, now: int, first_dirty: int | None = None, config: CleanerConfig | None = None):
    """One cleaning round of `log` from `first_dirty`, whatever the dirty ratio."""
    cleanable, _ = log_to_clean(TP, log, first_dirty, now)
    log.begin_cleaning()
    try:
        return Cleaner(config).clean(cleanable, now)
    finally:
        log.end_cleaning(now)


def open_log(path, config=COMPACT) -> Log:
    return Log.open(path, config, clean_shutdown=True, now_ms=T0)


def test_keeps_the_latest_value_per_key_at_its_offset(tmp_path):
    log = open_log(tmp_path / "t-0")
    for i in range(5):
        put(log, (b"a", b"a%d" % i), (b"b", b"b%d" % i))
        put(log, (b"c%d" % i, b"once"))
        log.roll(T0)
    expected = {k: (o, v) for o, k, v in records(log)}
    put(log, (b"a", b"active"), (b"a", b"active2"))  # the active segment is never cleaned
    active = log.active_segment
    active_bytes = active.read_at(0, active.size)

    end, stats = clean(log, T0)

    assert end == active.base_offset
    kept = records(log)
    assert kept[:-2] == sorted((o, k, v) for k, (o, v) in expected.items())
    assert kept[-2:] == [
        (active.base_offset, b"a", b"active"),
        (active.base_offset + 1, b"a", b"active2"),
    ]
    assert log.active_segment is active and active.read_at(0, active.size) == active_bytes
    assert stats.messages_written < stats.messages_read
    # Holes are allowed: a fetch at a removed offset answers from the next batch kept.
    assert 0 not in {o for o, _, _ in kept}
    assert log.read(0, 1 << 20).first_offset == kept[0][0]
    assert log.log_start_offset == 0 and log.log_end_offset == active.base_offset + 2


def test_segments_are_grouped_and_a_reopened_log_reads_the_same(tmp_path):
    log = open_log(tmp_path / "t-0")
    for i in range(6):
        put(log, (b"k", b"v%d" % i), (b"x%d" % i, b"y"))
        log.roll(T0)
    assert len(log.segments) == 7
    clean(log, T0)
    assert len(log.segments) == 2  # six small segments fit one
    before = records(log)
    log.close()
    reopened = Log.open(tmp_path / "t-0", COMPACT, clean_shutdown=False, now_ms=T0)
    assert records(reopened) == before
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]


def test_group_segments_by_size_respects_the_segment_size(tmp_path):
    log = open_log(tmp_path / "t-0", dataclasses.replace(COMPACT, segment_bytes=10_000))
    for i in range(6):
        put(log, (b"k%d" % i, b"v" * 3000))
        log.roll(T0)
    segments = log.segments[:-1]
    groups = group_segments_by_size(segments, 10_000, COMPACT.segment_index_bytes, 6)
    assert [len(g) for g in groups] == [3, 3]
    assert [s for g in groups for s in g] == segments


def test_compressed_batches_keep_their_codec(tmp_path):
    log = open_log(tmp_path / "t-0")
    put(log, (b"a", b"1"), (b"b", b"1"), (b"c", b"1"), compression=LZ4)
    put(log, (b"b", b"2"))
    log.roll(T0)
    clean(log, T0)
    (first, kept), _ = batches(log)
    assert first.compression == LZ4
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert [(r.key, r.value) for r in kept] == [(b"a", b"1"), (b"c", b"1")]


def test_tombstones_stay_until_delete_retention_ms_has_passed(tmp_path):
    log = open_log(tmp_path / "t-0")
    put(log, (b"a", b"1"), (b"b", b"1"))
    put(log, (b"a", None))
    log.roll(T0)
    end, _ = clean(log, T0)
    assert records(log) == [(1, b"b", b"1"), (2, b"a", None)]
    tombstone_batch = batches(log)[-1][0]
    assert tombstone_batch.has_delete_horizon
    assert tombstone_batch.base_timestamp == T0 + RETENTION

    # A later round before the horizon keeps it, ...
    put(log, (b"c", b"1"), now=T0 + 1)
    log.roll(T0 + 1)
    end, _ = clean(log, T0 + RETENTION - 1, end)
    assert (2, b"a", None) in records(log)
    # ... one at the horizon drops it.
    put(log, (b"d", b"1"), now=T0 + 2)
    log.roll(T0 + 2)
    clean(log, T0 + RETENTION, end)
    assert [k for _, k, _ in records(log)] == [b"b", b"c", b"d"]


def test_record_timestamps_survive_the_delete_horizon(tmp_path):
    log = open_log(tmp_path / "t-0")
    put(log, (b"a", b"1"), now=T0 - 500)
    put(log, (b"a", None), (b"b", b"2"), now=T0 - 100)
    log.roll(T0)
    clean(log, T0)
    header, rs = batches(log)[-1]
    assert header.has_delete_horizon
    assert [header.record_timestamp(r) for r in rs] == [T0 - 100, T0 - 100]
    assert header.max_timestamp == T0 - 100


def test_an_idempotent_retry_after_cleaning_is_still_a_duplicate(tmp_path):
    log = open_log(tmp_path / "t-0")
    pid = 7
    put(log, (b"a", b"1"), (b"b", b"1"), pid=pid, epoch=0, seq=0)
    last = put(log, (b"c", b"1"), (b"d", b"1"), pid=pid, epoch=0, seq=2)
    put(log, (b"a", b"2"), (b"b", b"2"), (b"c", b"2"), (b"d", b"2"))  # supersedes everything
    log.roll(T0)
    clean(log, T0)

    kept = batches(log)
    # The producer's first batch went; its last one stays as an empty header with the
    # sequence range of the batch it was.
    assert [(h.base_offset, h.records_count) for h, _ in kept] == [(2, 0), (4, 4)]
    empty = kept[0][0]
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (pid, 0, 2)
    assert empty.last_offset_delta == 1

    retry = read_header(
        build_batch(
            [(b"c", b"1", [], T0), (b"d", b"1", [], T0)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=2,
        )
    )
    assert log.producer_state.check(retry).last_offset == last.last_offset
    # The same after a restart that rebuilds the producer state from the cleaned log alone.
    log.close()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    reopened = Log.open(tmp_path / "t-0", COMPACT, clean_shutdown=False, now_ms=T0)
    assert reopened.producer_state.check(retry).last_offset == last.last_offset
    nxt = read_header(
        build_batch([(b"e", b"1", [], T0)], producer_id=pid, producer_epoch=0, base_sequence=4)
    )
    assert reopened.producer_state.check(nxt) is None


def test_a_producer_gone_from_the_producer_state_keeps_nothing(tmp_path):
    log = open_log(tmp_path / "t-0")
    put(log, (b"a", b"1"), pid=7, epoch=0, seq=0)
    put(log, (b"a", b"2"), (b"b", b"1"))
    put(log, (b"b", b"2"))
    log.roll(T0)
    log.producer_state.remove_expired(T0 + 1, 1)
    clean(log, T0)
    assert [h.producer_id for h, _ in batches(log)] == [-1, -1]


def test_aborted_data_goes_and_markers_go_only_when_safe(tmp_path):
    log = open_log(tmp_path / "t-0")
    p1, p2 = 100, 200
    put(log, (b"x", b"old"))
    aborted = put(log, (b"x", b"aborted"), pid=p1, epoch=0, seq=0, txn=True)
    abort_marker = end_txn(log, p1, commit=False)
    put(log, (b"y", b"committed"), pid=p2, epoch=0, seq=0, txn=True)
    commit_marker = end_txn(log, p2, commit=True)
    log.roll(T0)
    # p1 writes again, so its aborted batch is not what its producer state remembers last.
    put(log, (b"z", b"1"), pid=p1, epoch=0, seq=1, txn=True)
    end_txn(log, p1, commit=True)
    log.roll(T0)
    committed_view = read_committed(log)
    assert (aborted.base_offset, b"x", b"aborted") not in committed_view

    # Pass 1: the aborted data goes, the map ignores it (the old x stays), and the ABORT
    # marker stays with its txn index entry.
    end, _ = clean(log, T0)
    offsets = {h.base_offset for h, _ in batches(log)}
    assert aborted.base_offset not in offsets
    assert {abort_marker, commit_marker} <= offsets
    assert records(log)[0] == (0, b"x", b"old")
    assert log.aborted_transactions(0, log.log_end_offset) == [(p1, aborted.base_offset)]
    assert read_committed(log) == committed_view

    # Pass 2: nothing of the aborted transaction is left; its marker gets a delete horizon.
    put(log, (b"w", b"1"), now=T0 + 1)
    log.roll(T0 + 1)
    end, _ = clean(log, T0 + 1, end)
    marker = next(h for h, _ in batches(log) if h.base_offset == abort_marker)
    assert marker.has_delete_horizon and marker.base_timestamp == T0 + 1 + RETENTION
    assert log.aborted_transactions(0, log.log_end_offset) == []
    # The COMMIT marker stays while its transaction has data.
    assert commit_marker in {h.base_offset for h, _ in batches(log)}
    assert read_committed(log) == committed_view + [(end - 1, b"w", b"1")]

    # Pass 3, past the horizon: the ABORT marker goes.
    put(log, (b"v", b"1"), now=T0 + 2)
    log.roll(T0 + 2)
    clean(log, T0 + 1 + RETENTION, end)
    kept = {h.base_offset for h, _ in batches(log)}
    assert abort_marker not in kept and commit_marker in kept
    reopened_view = read_committed(log)
    assert [r for r in reopened_view if r[1] in (b"x", b"y", b"z")] == [
        r for r in committed_view if r[1] in (b"x", b"y", b"z")
    ]


def test_a_commit_marker_goes_once_its_data_is_gone(tmp_path):
    log = open_log(tmp_path / "t-0")
    put(log, (b"k", b"txn"), pid=5, epoch=0, seq=0, txn=True)
    commit_marker = end_txn(log, 5, commit=True)
    put(log, (b"k", b"later"), pid=5, epoch=0, seq=1)  # 5's last batch: not the txn's
    log.roll(T0)
    end, _ = clean(log, T0)  # the data goes; the marker saw it in this pass: it stays
    assert commit_marker in {h.base_offset for h, _ in batches(log)}
    put(log, (b"o", b"1"))
    log.roll(T0)
    end, _ = clean(log, T0, end)  # no data left: a delete horizon
    put(log, (b"p", b"1"))
    log.roll(T0)
    clean(log, T0 + RETENTION, end)
    assert commit_marker not in {h.base_offset for h, _ in batches(log)}
    assert [k for _, k, _ in records(log)] == [b"k", b"o", b"p"]


def test_nothing_at_or_past_the_last_stable_offset_is_cleaned(tmp_path):
    log = open_log(tmp_path / "t-0")
    put(log, (b"a", b"1"))
    log.roll(T0)
    put(log, (b"a", b"pending"), pid=9, epoch=0, seq=0, txn=True)  # stays open
    put(log, (b"a", b"2"))
    log.roll(T0)
    put(log, (b"a", b"3"))
    log.roll(T0)
    before = records(log)
    end, _ = clean(log, T0)
    assert end == log.segments[1].base_offset
    assert records(log) == before  # the dirty section below the LSO holds a's first value only


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path):
    config = dataclasses.replace(COMPACT, min_compaction_lag_ms=10_000)
    log = open_log(tmp_path / "t-0", config)
    put(log, (b"a", b"1"), now=T0 - 20_000)
    put(log, (b"a", b"2"), now=T0 - 20_000)
    log.roll(T0)
    put(log, (b"a", b"3"), now=T0 - 5_000)
    log.roll(T0)
    end, _ = clean(log, T0)
    assert end == log.segments[1].base_offset
    assert [v for _, _, v in records(log)] == [b"2", b"3"]


def test_max_compaction_lag_rolls_the_active_segment(tmp_path):
    config = dataclasses.replace(COMPACT, max_compaction_lag_ms=1_000)
    log = open_log(tmp_path / "t-0", config)
    put(log, (b"a", b"1"), now=T0)
    put(log, (b"a", b"2"), now=T0 + 1_001)
    assert len(log.segments) == 2


def manager_with_log(tmp_path, config=COMPACT):
    manager = LogManager([tmp_path])
    manager.load(lambda _name: config, now_ms=T0)
    return manager, manager.create(*TP, config, now_ms=T0)


def test_the_dirty_ratio_gates_cleaning_and_the_checkpoint_persists(tmp_path):
    manager, log = manager_with_log(tmp_path)
    cleaner = LogCleaner(manager)
    for i in range(10):
        put(log, (b"k%d" % (i % 3), b"v" * 100))
        log.roll(T0)
    result = cleaner.clean_filthiest_log(T0)
    assert result is not None and result.end_offset == log.active_segment.base_offset
    assert manager.cleaner_offsets() == {TP: result.end_offset}
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines()[2] == (
        f"t 0 {result.end_offset}"
    )

    # A little dirt is below min.cleanable.dirty.ratio (0.5): nothing to do.
    put(log, (b"k0", b"w" * 100))
    log.roll(T0)
    assert cleaner.clean_filthiest_log(T0) is None
    # More than the clean part is: cleaned.
    for _ in range(4):
        put(log, (b"k1", b"w" * 100))
        log.roll(T0)
    result = cleaner.clean_filthiest_log(T0)
    assert result is not None
    assert [v[:1] for _, _, v in records(log)] == [b"v", b"w", b"w"]
    manager.close()

    reloaded = LogManager([tmp_path])
    reloaded.load(lambda _name: COMPACT, now_ms=T0)
    assert reloaded.cleaner_offsets() == {TP: result.end_offset}
    assert LogCleaner(reloaded).clean_filthiest_log(T0) is None
    reloaded.close()


def test_max_compaction_lag_overrides_the_dirty_ratio(tmp_path):
    config = dataclasses.replace(
        COMPACT, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5_000
    )
    manager, log = manager_with_log(tmp_path, config)
    put(log, (b"a", b"1"), now=T0)
    put(log, (b"a", b"2"), now=T0)
    log.roll(T0)
    cleaner = LogCleaner(manager)
    assert cleaner.clean_filthiest_log(T0 + 1_000) is not None  # all dirty: 1.0 > 0.99
    put(log, (b"a", b"3"), now=T0 + 1_000)
    log.roll(T0 + 1_000)
    for _ in range(5):
        put(log, (b"b", b"x" * 200), now=T0 + 1_000)
    assert cleaner.clean_filthiest_log(T0 + 2_000) is None  # below the ratio, not overdue
    assert cleaner.clean_filthiest_log(T0 + 7_000) is not None  # overdue
    assert [v for _, k, v in records(log) if k == b"a"] == [b"3"]
    manager.close()


def test_logs_without_compact_are_never_cleaned(tmp_path):
    manager, log = manager_with_log(tmp_path, LogConfig(file_delete_delay_ms=0))
    for _ in range(3):
        put(log, (b"a", b"1"))
        log.roll(T0)
    assert LogCleaner(manager).clean_filthiest_log(T0) is None
    manager.close()


def test_a_full_offset_map_cleans_in_several_rounds(tmp_path):
    manager, log = manager_with_log(
        tmp_path, dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.0)
    )
    twin = open_log(tmp_path / "twin")
    for i in range(12):
        for target in (log, twin):
            put(target, (b"k%d" % (i % 6), b"v%d" % i))
            target.roll(T0)
    tiny = CleanerConfig(dedupe_buffer_size=4 * 128)  # three keys a round
    cleaner = LogCleaner(manager, tiny)
    first = cleaner.clean_filthiest_log(T0)
    assert first is not None and first.end_offset < log.active_segment.base_offset
    assert cleaner.clean_logs(T0) >= 1
    assert manager.cleaner_offsets()[TP] == log.active_segment.base_offset
    clean(twin, T0)
    assert records(log) == records(twin)
    manager.close()


def test_a_deleted_log_is_not_cleaned_and_its_checkpoint_entry_goes(tmp_path):
    manager, log = manager_with_log(
        tmp_path, dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.0)
    )
    for _ in range(3):
        put(log, (b"a", b"1"))
        log.roll(T0)
    cleaner = LogCleaner(manager)
    assert cleaner.clean_filthiest_log(T0) is not None
    manager.abort_and_pause_cleaning(TP)
    put(log, (b"a", b"2"))
    log.roll(T0)
    assert cleaner.clean_filthiest_log(T0) is None  # paused
    manager.resume_cleaning(TP)
    manager.delete(*TP)
    assert manager.cleaner_offsets() == {}
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines()[:2] == ["0", "0"]
    manager.close()


def test_segments_deleted_during_a_round_are_left_alone(tmp_path):
    """DeleteRecords (on the event loop) removes segments the cleaner is reading: their swap
    is given up, their files stay readable until the round ends, the log stays sound."""
    config = dataclasses.replace(COMPACT, cleanup_policy="compact,delete", segment_bytes=300)
    log = open_log(tmp_path / "t-0", config)
    for i in range(8):
        put(log, (b"k%d" % (i % 2), b"v%d" % i + b"." * 60))
        log.roll(T0)
    cut = log.segments[4].base_offset
    deleted = []

    def delete_records_once():
        if not deleted:
            deleted.append(log.delete_records_before(cut, now_ms=T0))

    cleanable, _ = log_to_clean(TP, log, None, T0)
    log.begin_cleaning()
    try:
        Cleaner(check_done=delete_records_once).clean(cleanable, T0)
    finally:
        log.end_cleaning(T0)
    assert deleted == [cut] and log.log_start_offset == cut
    assert [v[:2] for _, _, v in records(log)] == [b"v6", b"v7"]
    assert not [
        n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap", ".deleted"))
    ]


# ---- crash safety of the swap ---------------------------------------------------------------


def twin_logs(tmp_path):
    """The same appends in two directories; `cleaned` is then cleaned and both closed.
    Returns (uncleaned dir, cleaned dir, records before, records after, swapped base)."""
    dirs = tmp_path / "crashed-0", tmp_path / "cleaned-0"
    logs = [open_log(d) for d in dirs]
    for log in logs:
        for i in range(6):
            put(log, (b"a", b"%d" % i), (b"b%d" % (i % 2), b"x"))
            log.roll(T0)
        put(log, (b"a", b"active"))
    before = records(logs[0])
    clean(logs[1], T0)
    after = records(logs[1])
    base = logs[1].segments[0].base_offset
    assert len(logs[1].segments) == 2 and before != after
    for log in logs:
        log.close()
    return dirs[0], dirs[1], before, after, base


def name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def reopen(path) -> Log:
    return Log.open(path, COMPACT, clean_shutdown=False, now_ms=T0)


def test_a_crash_before_the_swap_leaves_the_old_segments(tmp_path):
    crashed, cleaned, before, _, base = twin_logs(tmp_path)
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(cleaned / name(base, suffix), crashed / name(base, suffix + ".cleaned"))
    log = reopen(crashed)
    assert records(log) == before
    assert not [n for n in os.listdir(crashed) if ".cleaned" in n]


def test_a_crash_while_renaming_to_swap_leaves_the_old_segments(tmp_path):
    crashed, cleaned, before, _, base = twin_logs(tmp_path)
    shutil.copy(cleaned / name(base, ".log"), crashed / name(base, ".log.swap"))
    shutil.copy(cleaned / name(base, ".index"), crashed / name(base, ".index.cleaned"))
    log = reopen(crashed)
    assert records(log) == before
    assert not [n for n in os.listdir(crashed) if n.endswith((".cleaned", ".swap"))]


@pytest.mark.parametrize("old_segments_renamed", [0, 2, 6])
def test_a_crash_after_the_swap_file_is_complete_finishes_the_swap(tmp_path, old_segments_renamed):
    crashed, cleaned, before, after, base = twin_logs(tmp_path)
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(cleaned / name(base, suffix), crashed / name(base, suffix + ".swap"))
    old = sorted(n for n in os.listdir(crashed) if n.endswith(".log"))[:-1]
    for n in old[:old_segments_renamed]:
        os.rename(crashed / n, crashed / (n + ".deleted"))
    log = reopen(crashed)
    assert records(log) == after
    assert len(log.segments) == 2
    assert not [n for n in os.listdir(crashed) if n.endswith((".swap", ".deleted"))]
    # The rebuilt indexes serve reads at any offset.
    for offset, key, value in after:
        fetched = records(log, offset)  # whole batches: from the one holding `offset`
        assert fetched[0][0] <= offset and (offset, key, value) in fetched[:2]


def test_a_segment_that_does_not_read_to_its_end_is_left_alone(tmp_path):
    log = open_log(tmp_path / "t-0")
    put(log, (b"a", b"1"))
    put(log, (b"a", b"2"))
    log.roll(T0)
    first = log.segments[0].log_path
    log.close()
    with open(first, "ab") as f:
        f.write(b"\x00" * 100)  # not a batch: a cleaner must not drop it silently
    log = open_log(tmp_path / "t-0")
    before = records(log)
    with pytest.raises(InvalidRecordError):
        clean(log, T0)
    assert records(log) == before and log.segments[0].size == first.stat().st_size
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]


@pytest.mark.parametrize("version", ["0.9.0", "0.10.2"])
def test_old_format_entries_compact_with_holes_in_their_wrappers(tmp_path, version):
    """Magic 0/1 logs (seed 004): a wrapper keeps its surviving messages at their offsets
    (magic 1: relative offsets with holes, KIP-31), plain messages go one by one, tombstones go
    once their segment is older than delete.retention.ms; what stays reads back whole."""
    config = dataclasses.replace(COMPACT, message_format_version=version)
    log = open_log(tmp_path / "t-0", config)

    def put_old(*pairs, compression=0):
        data = build_batch([(k, v, [], T0) for k, v in pairs], compression=compression)
        log.append_legacy(to_legacy(data, log.config.message_format_magic), now_ms=T0)

    put_old((b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"d", b"1"), compression=LZ4)  # 0-3
    put_old((b"b", b"2"), (b"e", b"1"))  # 4, 5 uncompressed: one entry each
    put_old((b"c", None), (b"e", b"2"), compression=LZ4)  # 6-7
    put_old((b"f", b"1"))  # 8: the group's last entry
    log.roll(T0)
    clean(log, T0)
    wanted = [(0, b"a", b"1"), (3, b"d", b"1"), (4, b"b", b"2"), (6, b"c", None)]
    wanted += [(7, b"e", b"2"), (8, b"f", b"1")]
    assert old_records(log) == wanted
    magic = log.config.message_format_magic
    assert {h.magic for s in log.segments for _, h in iter_batches(s.read_at(0, s.size))} == {magic}
    # The tombstone stays while its segment is younger than delete.retention.ms.
    put_old((b"g", b"1"))
    log.roll(T0)
    clean(log, T0 + RETENTION - 1, 0)
    assert (6, b"c", None) in old_records(log)
    for segment in log.segments[:-1]:
        segment.set_last_modified(T0 - RETENTION - 1)
    clean(log, T0, 0)
    assert [r[1] for r in old_records(log)] == [b"a", b"d", b"b", b"e", b"f", b"g"]
    log.close()
    reopened = open_log(tmp_path / "t-0", config)
    assert [r[1] for r in old_records(reopened)] == [b"a", b"d", b"b", b"e", b"f", b"g"]
    reopened.close()


def old_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out, offset, last = [], log.log_start_offset, -1
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 20)
        buf = b"".join(bytes(c) for c in fetched.records)
        for pos, h in iter_batches(buf):
            assert crc_matches(buf, pos, h)
            for r in entry_records(buf[pos : pos + h.size]):
                assert r.offset > last
                last = r.offset
                out.append((r.offset, r.key, r.value))
        offset = fetched.next_offset
    return out
