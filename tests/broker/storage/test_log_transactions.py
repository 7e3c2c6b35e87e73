"""Transactions in the log (KIP-98): markers, the last stable offset, the txn index, and their
recovery after crashes."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil

import pytest
from kio.schema.errors import ErrorCode

from broker.records.batch import build_batch, iter_batches, read_header, validate_produce_batch
from broker.records.control import ABORT, COMMIT, read_control
from broker.storage import Log, LogConfig
from broker.storage.producer_state import ProducerSnapshot, ProducerStateError

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100, file_delete_delay_ms=0)


class Producer:
    """A producer writing to one log the way Produce and WriteTxnMarkers do."""

    def __init__(self, log: Log, pid: int, epoch: int = 0) -> None:
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0

    def batch(self, count=1, transactional=True, ts=1000):
        data = build_batch(
            [(None, b"p%d-%d" % (self.pid, self.seq + i), [], ts) for i in range(count)],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            transactional=transactional,
        )
        return data, validate_produce_batch(data)

    def send(self, count=1, transactional=True, ts=1000):
        data, header = self.batch(count, transactional, ts)
        assert self.log.producer_state.check(header) is None
        result = self.log.append(data, header, now_ms=ts)
        self.seq += count
        return result

    def end(self, commit: bool, coordinator_epoch=0, now=2000, epoch=None):
        epoch = self.epoch if epoch is None else epoch
        return self.log.append_marker(
            self.pid, epoch, commit, coordinator_epoch, now_ms=now, leader_epoch=0
        )


def control_batches(log):
    out = []
    for segment in log.segments:
        for pos, header in segment.batches_from(0):
            if header.is_control:
                out.append((header, read_control(segment.read_at(pos, header.size))))
    return out


def index_entries(log):
    return {s.base_offset: s.txn_index.entries() for s in log.segments if len(s.txn_index)}


def txn_files(directory):
    return sorted(p.name for p in directory.iterdir() if ".txnindex" in p.name)


def test_lso_with_interleaved_transactions_of_several_producers(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    a, b, c = Producer(log, 1), Producer(log, 2), Producer(log, 3)
    c.send(2, transactional=False)  # 0-1
    assert log.last_stable_offset == log.high_watermark == 2
    a.send(2)  # 2-3: A's transaction begins
    b.send(1)  # 4
    a.send(1)  # 5
    c.send(1, transactional=False)  # 6: plain data behind the open transactions
    assert log.ongoing_transactions() == {1: 2, 2: 4}
    assert (log.last_stable_offset, log.high_watermark) == (2, 7)
    # read_committed stops before the first open transaction's first batch.
    assert log.read(0, 1 << 20, max_offset=log.last_stable_offset).next_offset == 2
    assert log.read(2, 1 << 20, max_offset=log.last_stable_offset).size == 0
    marker = a.end(commit=True)  # 7
    assert (marker.base_offset, marker.last_offset) == (7, 7)
    assert log.ongoing_transactions() == {2: 4}
    assert log.last_stable_offset == 4
    assert log.read(0, 1 << 20, max_offset=4).next_offset == 4
    b.end(commit=False)  # 8
    assert log.ongoing_transactions() == {}
    assert log.last_stable_offset == log.high_watermark == 9
    assert log.aborted_transactions(0, 9) == [(2, 4)]
    assert log.aborted_transactions(5, 9) == [(2, 4)]  # it spans the start: still reported
    assert log.aborted_transactions(9, 20) == []
    assert log.aborted_transactions(0, 4) == []  # it starts at the upper bound
    a.send(1)  # 9: a new transaction of A
    assert log.last_stable_offset == 9
    assert [(h.base_offset, m) for h, m in control_batches(log)] == [
        (7, (COMMIT, 0)),
        (8, (ABORT, 0)),
    ]
    log.close()


def test_an_aborted_entry_records_the_lso_after_it(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    a, b = Producer(log, 1), Producer(log, 2)
    a.send(3)  # 0-2
    b.send(1)  # 3
    a.end(commit=False)  # 4: B still open from 3
    b.end(commit=False)  # 5: nothing open any more
    (entries,) = index_entries(log).values()
    assert [
        (e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries
    ] == [
        (1, 0, 4, 3),
        (2, 3, 5, 6),
    ]
    # [0, 2) overlaps only A, but A's LSO (3) says B may have begun below 2: B is looked at.
    assert log.aborted_transactions(0, 2) == [(1, 0)]
    assert log.aborted_transactions(0, 4) == [(1, 0), (2, 3)]
    log.close()


def test_aborted_transactions_across_many_segments_match_a_model(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    rng = random.Random(98)
    producers = [Producer(log, pid) for pid in range(5)]
    open_since: dict[int, int] = {}
    aborted = []  # (pid, first, marker offset), in marker order
    for _ in range(300):
        p = rng.choice(producers)
        if p.pid in open_since and rng.random() < 0.3:
            commit = rng.random() < 0.5
            marker = p.end(commit).base_offset
            if not commit:
                aborted.append((p.pid, open_since[p.pid], marker))
            del open_since[p.pid]
        else:
            first = p.send(rng.randint(1, 3)).base_offset
            open_since.setdefault(p.pid, first)
    assert len(log.segments) > 10 and len(aborted) > 10
    assert log.ongoing_transactions() == {
        pid: first for pid, first in sorted(open_since.items(), key=lambda kv: kv[1])
    }
    end = log.log_end_offset
    assert log.last_stable_offset == min(open_since.values(), default=end)

    def expected(start, upper):
        return [(pid, first) for pid, first, last in aborted if last >= start and first < upper]

    for start in range(0, end, 7):
        for upper in (start + 1, start + 10, start + 60, end):
            assert log.aborted_transactions(start, upper) == expected(start, upper)
    # Only segments holding an ABORT marker have a txn index file.
    with_markers = {
        s.base_offset
        for s in log.segments
        if any(s.base_offset <= last < s.next_offset for _, _, last in aborted)
    }
    assert {int(n[:20]) for n in txn_files(tmp_path / "t-0")} == with_markers
    log.close()
    reopened = Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True)
    for start in range(0, end, 13):
        assert reopened.aborted_transactions(start, end) == expected(start, end)
    reopened.close()


def test_zombie_markers_are_refused_and_write_nothing(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Producer(log, 5, epoch=3)
    p.send(2)
    p.end(commit=True, coordinator_epoch=4)
    end = log.log_end_offset
    with pytest.raises(ProducerStateError) as e:
        p.end(commit=False, epoch=2, coordinator_epoch=4)
    assert e.value.error_code == ErrorCode.invalid_producer_epoch
    with pytest.raises(ProducerStateError) as e:
        p.end(commit=False, coordinator_epoch=3)
    assert e.value.error_code == ErrorCode.transaction_coordinator_fenced
    assert log.log_end_offset == end
    assert len(control_batches(log)) == 1
    log.close()


def test_a_marker_without_a_transaction_is_written_and_records_the_epochs(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    result = log.append_marker(9, 4, False, 2, now_ms=5000, leader_epoch=0)
    assert (result.base_offset, log.log_end_offset) == (0, 1)
    assert log.last_stable_offset == 1
    assert log.aborted_transactions(0, 1) == []  # an empty transaction is not indexed
    assert txn_files(tmp_path / "t-0") == []
    assert log.producers() == [ProducerSnapshot(9, 4, -1, 5000, 2, -1)]
    with pytest.raises(ProducerStateError):
        log.append_marker(9, 3, True, 2, now_ms=5000, leader_epoch=0)
    # Only a marker was seen at this epoch: the producer's data starts at sequence 0.
    p = Producer(log, 9, epoch=4)
    _, gap = p.batch(1)
    gap = dataclasses.replace(gap, base_sequence=17)
    with pytest.raises(ProducerStateError) as e:
        log.producer_state.check(gap)
    assert e.value.error_code == ErrorCode.out_of_order_sequence_number
    p.send(1)
    log.close()


def test_markers_leave_sequences_alone_and_an_epoch_bump_resets_them(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Producer(log, 1)
    first, _ = p.batch(2)
    p.send(2)
    p.send(1)
    p.end(commit=True)
    # After the marker a retry of the first batch is still a duplicate, with its offsets.
    dup = log.producer_state.check(validate_produce_batch(first))
    assert (dup.first_offset, dup.last_offset) == (0, 1)
    p.send(1)  # sequence 3 continues the same epoch
    # A marker with a bumped epoch (transactions v2) forgets the old epoch's batches.
    p.end(commit=False, epoch=1)
    assert log.producers()[0].last_sequence == -1
    p.epoch, p.seq = 1, 0
    p.send(1)
    assert log.producers()[0].current_txn_start_offset == log.log_end_offset - 1
    log.close()


def test_plain_data_while_a_transaction_is_open_is_invalid_txn_state(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Producer(log, 1)
    p.send(1)
    _, plain = p.batch(1, transactional=False)
    with pytest.raises(ProducerStateError) as e:
        log.producer_state.check(plain)
    assert e.value.error_code == ErrorCode.invalid_txn_state
    p.end(commit=True)
    assert log.producer_state.check(plain) is None
    log.close()


def test_coordinator_batches_without_sequence_open_a_transaction(tmp_path):
    """TxnOffsetCommit records: the group coordinator writes them with the producer's id and
    epoch, the transactional bit and no sequence."""
    log = Log.open(tmp_path / "t-0", LogConfig())
    Producer(log, 1).send(2, transactional=False)
    data = build_batch(
        [(b"k", b"v", [], 3000)], producer_id=7, producer_epoch=2, transactional=True
    )
    header = read_header(data)
    assert log.producer_state.check(header) is None
    log.append(data, header, now_ms=3000)
    assert log.ongoing_transactions() == {7: 2}
    assert log.last_stable_offset == 2
    assert log.producers()[1] == ProducerSnapshot(7, 2, -1, 3000, -1, 2)
    stale = build_batch(
        [(b"k", b"v", [], 3000)], producer_id=7, producer_epoch=1, transactional=True
    )
    with pytest.raises(ProducerStateError) as e:
        log.producer_state.check(read_header(stale))
    assert e.value.error_code == ErrorCode.invalid_producer_epoch
    log.append_marker(7, 2, True, 0, now_ms=3001, leader_epoch=0)
    assert log.last_stable_offset == log.log_end_offset == 4
    log.close()


def test_expiry_keeps_producers_in_the_middle_of_a_transaction(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    Producer(log, 1).send(1, ts=1000)
    Producer(log, 2).send(1, transactional=False, ts=1000)
    assert log.producer_state.remove_expired(now_ms=10**9, expiration_ms=1) == 1
    assert log.ongoing_transactions() == {1: 0}
    assert log.last_stable_offset == 0
    log.close()


def test_stable_bytes_grow_only_below_the_lso(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    a, c = Producer(log, 1), Producer(log, 3)
    plain = c.send(1, transactional=False).size
    assert log.stable_bytes == plain
    txn = a.send(2).size
    later = c.send(1, transactional=False).size
    assert log.stable_bytes == plain  # behind the open transaction
    marker = a.end(commit=True).size
    assert log.stable_bytes == plain + txn + later + marker
    log.close()


def test_lso_never_below_the_log_start_offset(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    a, c = Producer(log, 1), Producer(log, 2)
    a.send(1)  # 0: stays open
    for _ in range(30):
        c.send(2, transactional=False)
    assert log.last_stable_offset == 0
    start = log.segments[2].base_offset
    assert log.delete_records_before(start) == start
    assert log.last_stable_offset == start
    log.close()


def test_clean_reopen_keeps_transactions_and_the_index(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    a, b = Producer(log, 1), Producer(log, 2)
    for _ in range(10):
        a.send(2)
        b.send(2)
    a.end(commit=False)
    entries, lso = index_entries(log), log.last_stable_offset
    log.close()
    reopened = Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True)
    assert index_entries(reopened) == entries
    assert reopened.last_stable_offset == lso == 2
    assert reopened.ongoing_transactions() == {2: 2}
    reopened.close()


# ---- crashes ------------------------------------------------------------------------------


def crash_copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_a_torn_tail_that_cut_a_marker_reopens_the_transaction(tmp_path):
    log = Log.open(tmp_path / "src", CONFIG)
    a, c = Producer(log, 1), Producer(log, 2)
    c.send(1, transactional=False)
    a.send(3)  # 1-3
    c.send(1, transactional=False)  # 4
    marker = a.end(commit=False)  # 5
    assert log.last_stable_offset == 6 and log.aborted_transactions(0, 6) == [(1, 1)]
    active = log.active_segment
    marker_pos = [pos for pos, h in active.batches_from(0) if h.is_control][-1]
    for cut in range(marker_pos, active.size, 9):
        directory = crash_copy(tmp_path / "src", tmp_path / f"cut{cut}")
        os.truncate(directory / active.log_path.name, cut)
        reopened = Log.open(directory, CONFIG, recovery_point=0, clean_shutdown=False)
        assert reopened.log_end_offset == marker.base_offset
        assert reopened.ongoing_transactions() == {1: 1}
        assert reopened.last_stable_offset == 1
        assert reopened.aborted_transactions(0, 10) == []
        assert txn_files(directory) == []
        # The coordinator retries the marker: the same abort, indexed again.
        reopened.append_marker(1, 0, False, 0, now_ms=3000, leader_epoch=0)
        assert reopened.aborted_transactions(0, 10) == [(1, 1)]
        reopened.delete()
    log.close()


@pytest.mark.parametrize("lost", ["file", "entry"])
def test_a_crash_between_marker_and_index_write_loses_nothing(tmp_path, lost):
    log = Log.open(tmp_path / "src", CONFIG)
    a, b, c = Producer(log, 1), Producer(log, 2), Producer(log, 3)
    b.send(1)
    b.end(commit=False)  # an earlier abort, in the index before the crash
    a.send(2)  # A's transaction begins in an early segment
    for _ in range(20):
        c.send(2, transactional=False)
    log.flush()
    recovery_point = log.recovery_point
    assert len(log.segments) > 2
    if lost == "entry":
        b.send(1)
        b.end(commit=False)  # indexed in the active segment before the crash
    a.end(commit=False)
    marker_segment = log.active_segment
    assert marker_segment.base_offset > 3  # the marker lands segments after A began
    expected_entries = index_entries(log)
    expected = log.aborted_transactions(0, log.log_end_offset)
    assert expected[0] == (2, 0) and expected[-1] == (1, 2)
    directory = crash_copy(tmp_path / "src", tmp_path / "crash")
    index_path = directory / marker_segment.txn_index.path.name
    if lost == "file":
        assert len(marker_segment.txn_index) == 1
        index_path.unlink()
    else:
        assert len(marker_segment.txn_index) == 2
        os.truncate(index_path, 34)  # the marker reached the log, its entry did not
    reopened = Log.open(directory, CONFIG, recovery_point=recovery_point, clean_shutdown=False)
    assert index_entries(reopened) == expected_entries
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == expected
    assert reopened.last_stable_offset == reopened.log_end_offset
    reopened.close()
    log.close()


def test_rebuild_replays_from_before_the_segment_even_past_a_newer_snapshot(tmp_path):
    log = Log.open(tmp_path / "src", LogConfig())
    a = Producer(log, 1)
    a.send(2)
    a.end(commit=False)
    log.close()  # a snapshot at the log end, inside the active segment
    log = Log.open(tmp_path / "src", LogConfig(), clean_shutdown=True)
    a.log = log
    a.send(1)
    a.end(commit=False)
    expected = index_entries(log)
    assert [len(e) for e in expected.values()] == [2]
    directory = crash_copy(tmp_path / "src", tmp_path / "crash")
    (directory / log.active_segment.txn_index.path.name).unlink()
    reopened = Log.open(directory, LogConfig(), recovery_point=0, clean_shutdown=False)
    assert index_entries(reopened) == expected
    reopened.close()
    log.close()


def test_a_corrupt_txn_index_is_rebuilt(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    a = Producer(log, 1)
    for _ in range(3):
        a.send(2)
        a.end(commit=False)
    entries = index_entries(log)
    log.close()
    (path,) = [tmp_path / "t-0" / n for n in txn_files(tmp_path / "t-0")]
    path.write_bytes(path.read_bytes()[:-5])
    reopened = Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True)
    assert index_entries(reopened) == entries
    reopened.close()


def test_an_orphan_txn_index_is_removed_at_load(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    Producer(log, 1).send(1)
    log.close()
    orphan = tmp_path / "t-0" / f"{500:020d}.txnindex"
    orphan.write_bytes(b"\0" * 34)
    Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True).close()
    assert not orphan.exists()


# ---- deletion -----------------------------------------------------------------------------


def aborting_log(directory, config):
    """A log whose segments hold ABORT markers; returns it with (pid, first, marker offset)."""
    log = Log.open(directory, config)
    a, c = Producer(log, 1), Producer(log, 2)
    aborted = []
    for _ in range(6):
        first = a.send(2, ts=1000).base_offset
        for _ in range(3):
            c.send(2, transactional=False, ts=1000)
        aborted.append((1, first, a.end(commit=False, now=1000).base_offset))
    return log, aborted


def test_retention_deletes_txn_indexes_with_their_segments(tmp_path):
    config = LogConfig(
        segment_bytes=700, index_interval_bytes=100, retention_ms=10, file_delete_delay_ms=100
    )
    directory = tmp_path / "t-0"
    log, _ = aborting_log(directory, config)
    before = txn_files(directory)
    assert len(before) >= 2
    segments = len(log.segments)
    assert log.enforce_retention(now_ms=10**6) == segments
    # file.delete.delay.ms: renamed first, unlinked once the delay has passed.
    assert all(n.endswith(".txnindex.deleted") for n in txn_files(directory))
    assert len(txn_files(directory)) == len(before)
    assert log.aborted_transactions(0, log.log_end_offset) == []
    log.enforce_retention(now_ms=10**6 + 100)
    assert txn_files(directory) == []
    log.close()


def test_delete_records_drops_the_txn_indexes_of_deleted_segments(tmp_path):
    directory = tmp_path / "t-0"
    log, aborted = aborting_log(directory, CONFIG)
    assert len(log.aborted_transactions(0, log.log_end_offset)) == len(aborted)
    keep = log.segments[-3]
    deleted_bases = [s.base_offset for s in log.segments if s.base_offset < keep.base_offset]
    assert log.delete_records_before(keep.base_offset) == keep.base_offset
    assert [s.base_offset for s in log.segments][0] == keep.base_offset
    names = txn_files(directory)
    assert not any(int(n[:20]) in deleted_bases for n in names)
    assert not any(n.endswith(".deleted") for n in names)
    start = log.log_start_offset
    survivors = [(pid, first) for pid, first, last in aborted if last >= start]
    assert survivors and len(survivors) < len(aborted)
    assert log.aborted_transactions(start, log.log_end_offset) == survivors
    log.close()


def test_fetch_range_and_lso_read(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    a, c = Producer(log, 1), Producer(log, 2)
    c.send(2, transactional=False)  # 0-1
    a.send(1)  # 2
    c.send(1, transactional=False)  # 3
    data = log.read(0, 1 << 20, max_offset=log.last_stable_offset)
    assert [h.base_offset for _, h in iter_batches(bytes(data.records[0]))] == [0]
    assert (data.first_offset, data.next_offset) == (0, 2)
    # An offset past the LSO but within the log is empty, not out of range.
    empty = log.read(3, 1 << 20, max_offset=log.last_stable_offset)
    assert (empty.size, empty.next_offset) == (0, 3)
    log.close()
