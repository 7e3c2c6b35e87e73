"""The idempotent producer's partition state: sans-io checks, snapshots, and its rebuild by the
log from the last snapshot plus the log tail."""

from __future__ import annotations

import os
import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.records.batch import build_batch, validate_produce_batch
from broker.records.control import ABORT, COMMIT
from broker.storage import Log, LogConfig
from broker.storage.producer_state import (
    INT32_MAX,
    CompletedTxn,
    CorruptSnapshotError,
    ProducerSnapshot,
    ProducerStateError,
    ProducerStateManager,
    last_sequence,
)

PID = 7


def batch(seq, count=1, epoch=0, pid=PID, ts=1000, transactional=False):
    data = build_batch(
        [(None, b"v", [], ts)] * count,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
    )
    return data, validate_produce_batch(data)


def header(seq, count=1, epoch=0, pid=PID, ts=1000, transactional=False):
    return batch(seq, count, epoch, pid, ts, transactional)[1]


def produce(state, offsets, seq, count=1, epoch=0, pid=PID, ts=1000):
    """What Produce does: check, then record the append at the next offsets."""
    h = header(seq, count, epoch, pid, ts)
    duplicate = state.check(h)
    if duplicate is None:
        state.update(h, offsets[0], offsets[0] + count - 1, ts)
        offsets[0] += count
    return duplicate


def rejected(state, h) -> ErrorCode:
    with pytest.raises(ProducerStateError) as e:
        state.check(h)
    return e.value.error_code


def test_unknown_producer_may_start_at_any_sequence():
    state = ProducerStateManager()
    assert state.check(header(42)) is None


def test_retry_of_one_of_the_last_five_batches_returns_its_offsets():
    state, offsets = ProducerStateManager(), [0]
    for seq in range(0, 12, 2):
        assert produce(state, offsets, seq, count=2) is None
    # Batches 2..11 (first offsets 2..10) are cached; 0-1 fell out of the window.
    dup = state.check(header(4, count=2))
    assert (dup.first_offset, dup.last_offset) == (4, 5)
    assert state.check(header(10, count=2)).first_offset == 10
    assert rejected(state, header(0, count=2)) == ErrorCode.out_of_order_sequence_number
    # A batch overlapping a cached one without matching it is out of order too.
    assert rejected(state, header(4, count=1)) == ErrorCode.out_of_order_sequence_number


def test_sequence_gap_is_out_of_order():
    state, offsets = ProducerStateManager(), [0]
    produce(state, offsets, 0, count=3)
    assert rejected(state, header(4)) == ErrorCode.out_of_order_sequence_number
    assert state.check(header(3)) is None


def test_older_epoch_is_fenced_and_new_epoch_starts_at_zero():
    state, offsets = ProducerStateManager(), [0]
    produce(state, offsets, 0, epoch=3)
    assert rejected(state, header(1, epoch=2)) == ErrorCode.invalid_producer_epoch
    assert rejected(state, header(1, epoch=4)) == ErrorCode.out_of_order_sequence_number
    produce(state, offsets, 0, epoch=4)
    # The new epoch forgot the old one's batches: sequence 0 at epoch 3 is fenced, not a dup.
    assert rejected(state, header(0, epoch=3)) == ErrorCode.invalid_producer_epoch
    assert state.check(header(0, epoch=4)).first_offset == 1


def test_sequences_wrap_after_int32_max():
    assert last_sequence(INT32_MAX - 1, 3) == 1
    state, offsets = ProducerStateManager(), [0]
    produce(state, offsets, INT32_MAX - 1, count=2)
    assert state.check(header(0, count=5)) is None
    produce(state, offsets, 0, count=5)
    assert state.check(header(INT32_MAX - 1, count=2)).first_offset == 0
    produce(state, offsets, INT32_MAX - 2, count=4, pid=8)
    assert state.producers[8].batches[-1].last_seq == 0
    assert state.check(header(1, pid=8)) is None


def test_expiry_uses_the_last_batch_timestamp():
    state, offsets = ProducerStateManager(), [0]
    produce(state, offsets, 0, pid=1, ts=1000)
    produce(state, offsets, 0, pid=2, ts=5000)
    assert state.remove_expired(now_ms=6000, expiration_ms=5000) == 1
    assert set(state.producers) == {2}


def test_snapshot_round_trip_and_corruption():
    state, offsets = ProducerStateManager(), [0]
    for pid in range(3):
        for seq in range(7):
            produce(state, offsets, seq, pid=pid, epoch=pid)
    # Transactions: pid 5 open (began after pid 4's), pid 4 open, pid 1 ended by a marker.
    state.update(header(0, pid=5, transactional=True), 40, 40, 1000)
    state.update(header(0, pid=4, epoch=2, transactional=True), 41, 42, 1000)
    state.append_end_txn_marker(1, 1, COMMIT, 7, 43, 2000)
    data = state.encode_snapshot()
    loaded = ProducerStateManager.decode_snapshot(data)
    assert _as_dict(loaded) == _as_dict(state)
    assert loaded.ongoing_transactions() == {5: 40, 4: 41}
    assert loaded.first_unstable_offset == 40
    assert loaded.producers[1].coordinator_epoch == 7
    for torn in (data[:-1], data[:3], data[:10] + bytes([data[10] ^ 1]) + data[11:]):
        with pytest.raises(CorruptSnapshotError):
            ProducerStateManager.decode_snapshot(torn)
    # A version-1 snapshot (no transaction fields) is unknown: recovery replays instead.
    old = struct.pack(">hI", 1, crc32c.crc32c(data[6:])) + data[6:]
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.decode_snapshot(old)


def test_transaction_bookkeeping():
    state = ProducerStateManager()
    assert state.first_unstable_offset is None
    assert state.update(header(0, count=2, transactional=True), 0, 1, 1000) is True
    assert state.update(header(2, transactional=True), 2, 2, 1000) is False  # same txn
    assert state.update(header(0, pid=8, transactional=True), 3, 3, 1000) is True
    assert state.ongoing_transactions() == {PID: 0, 8: 3}
    # An epoch bump keeps the transaction open (the coordinator aborts it with a marker).
    state.update(header(0, epoch=1, transactional=True), 4, 4, 1000)
    assert state.producers[PID].current_txn_first_offset == 0
    completed = state.append_end_txn_marker(PID, 1, ABORT, 3, 5, 3000)
    assert completed == CompletedTxn(PID, 0, 5, True)
    assert state.last_stable_offset(completed) == 3  # pid 8 is still open
    assert state.first_unstable_offset == 3
    assert state.append_end_txn_marker(PID, 1, ABORT, 3, 6, 3000) is None  # a retried marker
    completed = state.append_end_txn_marker(8, 0, COMMIT, 3, 7, 3000)
    assert completed == CompletedTxn(8, 3, 7, False)
    assert state.last_stable_offset(completed) == 8
    assert state.ongoing_transactions() == {}
    assert state.active_producers() == [
        ProducerSnapshot(PID, 1, 0, 3000, 3, -1),
        ProducerSnapshot(8, 0, 0, 3000, 3, -1),
    ]


def _as_dict(state):
    return {
        pid: (
            e.producer_epoch,
            list(e.batches),
            e.coordinator_epoch,
            e.current_txn_first_offset,
            e.last_timestamp,
        )
        for pid, e in state.producers.items()
    }


# ---- the log's producer state across roll, close and reopen ------------------------------

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)


def log_append(log, seq, count=1, epoch=0, pid=PID, transactional=False, ts=1000):
    data, h = batch(seq, count, epoch, pid, ts, transactional)
    assert log.producer_state.check(h) is None
    return log.append(data, h, now_ms=ts)


# (producer, records, action): data, data with an epoch bump, transactional data, or a
# COMMIT / ABORT marker (at the producer's epoch, or bumping it as transactions v2 do).
ACTIONS = ["data", "bump", "txn", "commit", "abort", "abort-bump"]
writes = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 4), st.sampled_from(ACTIONS)),
    min_size=1,
    max_size=60,
)


def _log_view(log):
    return (
        _as_dict(log.producer_state),
        log.ongoing_transactions(),
        log.last_stable_offset,
        {s.base_offset: s.txn_index.entries() for s in log.segments if len(s.txn_index)},
        log.aborted_transactions(0, log.log_end_offset),
    )


@given(writes=writes, crash=st.booleans())
def test_rebuild_from_snapshot_and_log_tail_equals_live_state(tmp_path_factory, writes, crash):
    """Producers append, bump epochs, write transactions and end them with markers; the log
    rolls (snapshots) as it goes. Reopened after a clean close or a crash (no close: last
    roll's snapshot + replay, every txn index rebuilt from the markers), the producer state,
    ongoing transactions, LSO and txn indexes equal the live ones."""
    directory = tmp_path_factory.mktemp("p") / "t-0"
    log = Log.open(directory, CONFIG)
    next_seq: dict[int, tuple[int, int]] = {}
    in_txn: set[int] = set()
    now = 1000
    for pid, count, action in writes:
        now += 1
        epoch, seq = next_seq.get(pid, (0, 0))
        if action in ("commit", "abort", "abort-bump"):
            if action == "abort-bump":
                epoch, seq = epoch + 1, 0
            log.append_marker(pid, epoch, action == "commit", 0, now_ms=now, leader_epoch=0)
            next_seq[pid] = (epoch, seq)
            in_txn.discard(pid)
            continue
        if action == "bump" and pid in next_seq:
            epoch, seq = epoch + 1, 0
        transactional = action == "txn" or pid in in_txn
        log_append(log, seq, count, epoch, pid, transactional, ts=now)
        if transactional:
            in_txn.add(pid)
        next_seq[pid] = (epoch, seq + count)
    live = _log_view(log)
    if crash:
        log.flush()
    else:
        log.close()
    reopened = Log.open(directory, CONFIG, recovery_point=0, clean_shutdown=not crash)
    assert _log_view(reopened) == live
    reopened.close()


def test_snapshots_at_roll_and_close_and_recovery_drops_those_past_the_log_end(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    for seq in range(0, 40, 4):
        log_append(log, seq, count=4)
    rolled = sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert rolled and len(rolled) == len(log.segments) - 1
    end = log.log_end_offset
    log.close()
    assert (tmp_path / "t-0" / f"{end:020d}.snapshot").exists()
    # A snapshot beyond what the log holds (its batches were lost) must not be trusted.
    (tmp_path / "t-0" / f"{end + 100:020d}.snapshot").write_bytes(
        ProducerStateManager().encode_snapshot()
    )
    # A torn newest snapshot: the older one plus replay gives the same state.
    (tmp_path / "t-0" / f"{end:020d}.snapshot").write_bytes(b"\0" * 8)
    # A snapshot write cut short before its rename is debris.
    (tmp_path / "t-0" / f"{end:020d}.snapshot.tmp").write_bytes(b"\0" * 3)
    reopened = Log.open(tmp_path / "t-0", CONFIG, clean_shutdown=True)
    assert reopened.producer_state.check(header(36, count=4)).first_offset == 36
    assert not (tmp_path / "t-0" / f"{end + 100:020d}.snapshot").exists()
    assert not (tmp_path / "t-0" / f"{end:020d}.snapshot.tmp").exists()
    reopened.close()


def test_retention_deletes_the_snapshots_of_deleted_segments(tmp_path):
    config = LogConfig(
        segment_bytes=600, index_interval_bytes=100, retention_ms=10, file_delete_delay_ms=0
    )
    log = Log.open(tmp_path / "t-0", config)
    for seq in range(0, 40, 4):
        log_append(log, seq, count=4)
    bases = [s.base_offset for s in log.segments]
    # Every segment is past retention: the log rolls (a snapshot at its end) and drops them.
    assert log.enforce_retention(now_ms=10**13) == len(bases)
    snapshots = {n for n in os.listdir(tmp_path / "t-0") if n.endswith(".snapshot")}
    assert snapshots == {f"{log.log_end_offset:020d}.snapshot"}
    # The producer's state outlives its batches (KIP-360): a retry still finds its offsets.
    assert log.producer_state.check(header(36, count=4)).first_offset == 36
    log.close()
