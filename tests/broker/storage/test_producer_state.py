"""The idempotent producer's partition state: sans-io checks, snapshots, and its rebuild by the
log from the last snapshot plus the log tail."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.records.batch import build_batch, validate_produce_batch
from broker.storage import Log, LogConfig
from broker.storage.producer_state import (
    INT32_MAX,
    CorruptSnapshotError,
    ProducerStateError,
    ProducerStateManager,
    last_sequence,
)

PID = 7


def batch(seq, count=1, epoch=0, pid=PID, ts=1000):
    data = build_batch(
        [(None, b"v", [], ts)] * count, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )
    return data, validate_produce_batch(data)


def header(seq, count=1, epoch=0, pid=PID, ts=1000):
    return batch(seq, count, epoch, pid, ts)[1]


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
    data = state.encode_snapshot()
    loaded = ProducerStateManager.decode_snapshot(data)
    assert _as_dict(loaded) == _as_dict(state)
    for torn in (data[:-1], data[:3], data[:10] + bytes([data[10] ^ 1]) + data[11:]):
        with pytest.raises(CorruptSnapshotError):
            ProducerStateManager.decode_snapshot(torn)


def _as_dict(state):
    return {pid: (e.producer_epoch, list(e.batches)) for pid, e in state.producers.items()}


# ---- the log's producer state across roll, close and reopen ------------------------------

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)


def log_append(log, seq, count=1, epoch=0, pid=PID):
    data, h = batch(seq, count, epoch, pid)
    assert log.producer_state.check(h) is None
    return log.append(data, h, now_ms=1000)


writes = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 4), st.booleans()), min_size=1, max_size=60
)


@given(writes=writes, crash=st.booleans())
def test_rebuild_from_snapshot_and_log_tail_equals_live_state(tmp_path_factory, writes, crash):
    """Producers append (sometimes bumping their epoch); the log rolls (snapshots) as it goes.
    Reopened after a clean close or a crash (no close: last roll's snapshot + replay), the
    state equals the live one."""
    directory = tmp_path_factory.mktemp("p") / "t-0"
    log = Log.open(directory, CONFIG)
    next_seq: dict[int, tuple[int, int]] = {}
    for pid, count, bump in writes:
        epoch, seq = next_seq.get(pid, (0, 0))
        if bump and pid in next_seq:
            epoch, seq = epoch + 1, 0
        log_append(log, seq, count, epoch, pid)
        next_seq[pid] = (epoch, seq + count)
    live = _as_dict(log.producer_state)
    if crash:
        log.flush()
    else:
        log.close()
    reopened = Log.open(directory, CONFIG, recovery_point=0, clean_shutdown=not crash)
    assert _as_dict(reopened.producer_state) == live
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
