"""A follower's truncation (Kafka's UnifiedLog.truncateTo and truncateFullyAndStartAt): the
segments, indexes, transactions, producer state and leader epochs it leaves, and appends after
it. Each truncated log is also checked against one rebuilt from its batches alone."""

from __future__ import annotations

import shutil
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from test_log_properties import batch_specs, check, configs, model_and_log, scan
from test_log_recovery import values
from test_log_transactions import Producer

from broker.records.batch import build_batch, iter_batches, validate_produce_batch
from broker.storage import Log, LogConfig, LogManager, OffsetOutOfRangeError
from broker.storage.checkpoint import read_checkpoint
from broker.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT
from broker.storage.manager import RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT
from broker.storage.producer_state import ProducerStateError

T0 = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100, file_delete_delay_ms=0)


def batch(value: bytes, *, count=1, ts=T0, epoch=0, base_offset=0, **producer):
    data = build_batch(
        [(None, value + b"-%d" % i, [], ts + i) for i in range(count)],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        **producer,
    )
    return data, validate_produce_batch(data)


def append(log, value: bytes, *, count=1, ts=T0, epoch=0):
    data, header = batch(value, count=count, ts=ts)
    return log.append(data, header, now_ms=ts, leader_epoch=epoch)


def append_at(log, offset: int, value: bytes, *, count=1, ts=T0, epoch=0, **producer):
    """A batch as a follower gets it from its leader: offsets and epoch already stamped."""
    data, header = batch(value, count=count, ts=ts, epoch=epoch, base_offset=offset, **producer)
    return log.append(data, header, now_ms=ts, assign_offsets=False)


def replicate(source, target, start=None):
    """Append `source`'s batches from `start` to `target` as a follower does."""
    offset = source.log_start_offset if start is None else start
    while offset < source.log_end_offset:
        buf = b"".join(bytes(c) for c in source.read(offset, 1 << 20).records)
        for pos, h in iter_batches(buf):
            if h.base_offset >= offset:
                target.append(
                    memoryview(buf)[pos : pos + h.size], h, now_ms=T0, assign_offsets=False
                )
            offset = h.next_offset


def files(directory, suffix):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def assert_matches_rebuild(log, directory):
    """What the log derives from its batches (indexes, txn indexes, producer state, leader
    epochs) equals what a log built from those batches alone derives."""
    fresh = Log.open(directory, log.config, log_start_offset=log.log_start_offset, now_ms=T0)
    replicate(log, fresh)
    try:
        assert fresh.log_end_offset <= log.log_end_offset
        assert values(log) == values(fresh)
        for offset in range(log.log_start_offset, log.log_end_offset):
            fetched = log.read(offset, 1)
            assert fetched.first_offset <= offset < fetched.next_offset or not fetched.size
        assert sorted(log.producers(), key=lambda p: p.producer_id) == sorted(
            fresh.producers(), key=lambda p: p.producer_id
        )
        assert log.ongoing_transactions() == fresh.ongoing_transactions()
        end = log.log_end_offset
        assert log.collect_aborted_txns(log.log_start_offset, end) == (
            fresh.collect_aborted_txns(log.log_start_offset, end)
        )
        assert log.leader_epochs.entries == fresh.leader_epochs.entries
        assert log.max_timestamp_offset() == fresh.max_timestamp_offset()
        segments = log.segments
        ends = [s.base_offset for s in segments[1:]] + [log.log_end_offset]
        for segment, segment_end in zip(segments, ends, strict=True):
            # No index entry for an offset the segment no longer holds.
            assert segment.time_index.last_entry[1] < max(segment_end, segment.base_offset + 1)
            assert segment.offset_index.last_entry[0] < max(segment_end, segment.base_offset + 1)
        for ts in range(T0 - 1, T0 + 200, 7):
            assert log.offset_for_timestamp(ts) == fresh.offset_for_timestamp(ts)
    finally:
        fresh.delete()


def segments_of_one_batch_each(directory, batches=30, config=SMALL):
    log = Log.open(directory, config, now_ms=T0)
    for i in range(batches):
        append(log, b"v%d" % i, ts=T0 + i)
    assert len(log.segments) >= 4
    return log


# ---- where the cut falls ------------------------------------------------------------------


def test_truncating_inside_a_segment_cuts_its_file_and_indexes(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0")
    before, segments = values(log), log.segments
    held = segments[1]
    offset = held.base_offset + 2
    position = held.translate_offset(offset)[0]
    later = [s.log_path.name for s in segments[2:]]
    assert log.truncate_to(offset, now_ms=T0)
    assert log.log_end_offset == log.high_watermark == offset
    assert log.recovery_point <= offset
    assert values(log) == before[:offset]
    assert log.segments == segments[:2] and log.active_segment is held
    assert held.size == position == held.log_path.stat().st_size
    assert held.offset_index.last_entry[0] < offset and held.time_index.last_entry[1] < offset
    # The later segments wait out file.delete.delay.ms as *.deleted, then go.
    assert files(log.directory, ".log.deleted") == sorted(n + ".deleted" for n in later)
    log.enforce_retention(T0)
    assert files(log.directory, ".deleted") == []
    assert_matches_rebuild(log, tmp_path / "rebuilt")
    # The leader's next batch lands at exactly the offset, and appends go on from it.
    assert append_at(log, offset, b"new").base_offset == offset
    assert append(log, b"newer").base_offset == offset + 1
    after = values(log)
    assert after == before[:offset] + [(offset, b"new-0"), (offset + 1, b"newer-0")]
    log.close()
    reopened = Log.open(log.directory, SMALL, clean_shutdown=True)
    assert values(reopened) == after
    assert_matches_rebuild(reopened, tmp_path / "rebuilt")
    reopened.close()


def test_truncating_at_a_segment_base_keeps_that_segment_empty(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0")
    before, segments = values(log), log.segments
    boundary = segments[2]
    offset = boundary.base_offset
    assert log.truncate_to(offset)
    assert log.segments == segments[:3]
    assert log.active_segment is boundary and boundary.size == 0
    assert boundary.log_path.stat().st_size == 0
    assert values(log) == before[:offset]
    assert_matches_rebuild(log, tmp_path / "rebuilt")
    assert append_at(log, offset, b"new").base_offset == offset
    assert log.active_segment is boundary and boundary.size > 0
    assert values(log, offset) == [(offset, b"new-0")]


def test_truncating_across_several_segments(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0", batches=60)
    before = values(log)
    assert len(log.segments) > 6
    assert log.truncate_to(3, now_ms=T0)
    assert len(log.segments) == 1 and log.log_end_offset == 3
    assert values(log) == before[:3]
    log.enforce_retention(T0)
    assert files(log.directory, ".log") == [log.active_segment.log_path.name]
    assert_matches_rebuild(log, tmp_path / "rebuilt")
    for i in range(40):  # rolls again past the old segments' offsets
        append(log, b"again%d" % i, ts=T0 + i)
    assert values(log)[3:6] == [(3, b"again0-0"), (4, b"again1-0"), (5, b"again2-0")]
    assert_matches_rebuild(log, tmp_path / "rebuilt")


def test_an_offset_inside_a_batch_takes_the_whole_batch(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    append(log, b"a", count=3)  # 0-2
    append(log, b"b", count=3)  # 3-5
    assert log.truncate_to(4)
    assert log.log_end_offset == 3
    assert values(log) == [(0, b"a-0"), (1, b"a-1"), (2, b"a-2")]
    assert append_at(log, 3, b"c", count=2).base_offset == 3
    append(log, b"d", count=4)  # 5-8
    log.delete_records_before(6, now_ms=T0)  # inside the batch
    assert log.truncate_to(6)
    assert log.log_start_offset == log.log_end_offset == 5


def test_truncating_at_or_past_the_end_changes_nothing_but_an_empty_epoch(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0")
    end, sizes = log.log_end_offset, [s.size for s in log.segments]
    log.assign_epoch_start_offset(7)  # leader for a moment, nothing written in epoch 7
    assert log.leader_epochs.latest_epoch == 7
    assert not log.truncate_to(end + 5)
    assert not log.truncate_to(end)
    assert log.log_end_offset == end and [s.size for s in log.segments] == sizes
    assert log.leader_epochs.entries[-1].epoch == 0


def test_truncating_below_the_log_start_starts_over_there(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0")
    log.delete_records_before(20, now_ms=T0)
    assert log.truncate_to(12)
    assert log.log_start_offset == log.log_end_offset == log.high_watermark == 12
    assert len(log.segments) == 1 and log.active_segment.base_offset == 12
    assert values(log) == []
    assert append_at(log, 12, b"x").base_offset == 12


def test_time_lookups_after_truncation(tmp_path):
    config = LogConfig(segment_bytes=10_000, index_interval_bytes=200, file_delete_delay_ms=0)
    log = Log.open(tmp_path / "t-0", config)
    # Timestamps rise and fall, so the largest kept one lies after the last time index
    # entry the cut leaves, and the largest of all lies beyond the cut.
    stamps = [T0 + t for t in (5, 50, 20, 60, 30, 90, 10, 150, 40, 200, 15)]
    for i, ts in enumerate(stamps):
        append(log, b"t%d" % i, ts=ts)
    assert len(log.active_segment.time_index) > 1
    assert log.max_timestamp_offset() == (9, T0 + 200)
    assert log.truncate_to(8)
    segment = log.active_segment
    assert segment.time_index.last_entry[0] < T0 + 150
    assert segment.max_timestamp_so_far == T0 + 150
    assert log.max_timestamp_offset() == (7, T0 + 150)
    assert log.offset_for_timestamp(T0 + 151) is None
    assert log.offset_for_timestamp(T0 + 100) == (7, T0 + 150)
    assert log.offset_for_timestamp(T0 + 55) == (3, T0 + 60)
    append_at(log, 8, b"new", ts=T0 + 170)
    assert log.offset_for_timestamp(T0 + 151) == (8, T0 + 170)
    assert_matches_rebuild(log, tmp_path / "rebuilt")
    log.close()
    reopened = Log.open(log.directory, config, clean_shutdown=True)
    assert reopened.max_timestamp_offset() == (8, T0 + 170)
    assert reopened.offset_for_timestamp(T0 + 100) == (7, T0 + 150)


# ---- transactions and producer state ------------------------------------------------------


def diverged_transactions(log):
    """A log whose last offsets (7 on) a follower must give up; returns the producers."""
    a, b, c, d = (Producer(log, pid) for pid in (1, 2, 3, 4))
    c.send(2, transactional=False)  # 0-1
    b.send(1)  # 2: B's transaction...
    b.end(commit=False)  # 3: ...aborted before the cut
    a.send(2)  # 4-5: A's transaction begins before the cut...
    c.send(1, transactional=False)  # 6
    a.end(commit=False)  # 7: ...and its abort marker lies beyond it
    d.send(1)  # 8: D's transaction begins beyond the cut
    c.send(1, transactional=False)  # 9
    return a, b, c, d


def test_a_transaction_whose_marker_is_cut_is_ongoing_again(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    diverged_transactions(log)
    assert log.ongoing_transactions() == {4: 8}
    assert log.aborted_transactions(0, 10) == [(2, 2), (1, 4)]
    assert log.truncate_to(7)
    # A's transaction is open again from its first offset; D's first batch is gone with it.
    assert log.ongoing_transactions() == {1: 4}
    assert log.last_stable_offset == 4
    assert log.aborted_transactions(0, 7) == [(2, 2)]
    assert [len(s.txn_index) for s in log.segments if len(s.txn_index)] == [1]
    assert_matches_rebuild(log, tmp_path / "rebuilt")
    # The leader committed A instead: the follower takes its marker, and the LSO moves on.
    leader = Log.open(tmp_path / "leader-0", SMALL)
    replicate(log, leader)
    Producer(leader, 1).end(commit=True)
    replicate(leader, log, 7)
    assert log.ongoing_transactions() == {}
    assert log.last_stable_offset == log.log_end_offset == 8
    assert log.aborted_transactions(0, 8) == [(2, 2)]
    assert_matches_rebuild(log, tmp_path / "rebuilt")


def test_the_txn_index_loses_the_entries_beyond_the_cut_across_segments(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    a, b = Producer(log, 1), Producer(log, 2)
    aborts = []
    for round_ in range(8):
        a.send(2)
        b.send(1, transactional=False)
        aborts.append(a.end(commit=round_ % 2 == 0).base_offset)
    indexed = [s for s in log.segments if len(s.txn_index)]
    assert len(indexed) > 2
    cut = aborts[5]  # an abort marker: its entry goes, the earlier ones stay
    assert log.truncate_to(cut)
    kept = [offset for offset in aborts[:5] if aborts.index(offset) % 2]
    assert [t.last_offset for t in log.collect_aborted_txns(0, cut)] == kept
    on_disk = sorted(p.name for p in log.directory.glob("*.txnindex"))
    assert on_disk == sorted(s.txn_index.path.name for s in log.segments if len(s.txn_index))
    assert log.ongoing_transactions() == {1: cut - 3}
    assert_matches_rebuild(log, tmp_path / "rebuilt")
    log.close()
    reopened = Log.open(log.directory, SMALL, clean_shutdown=True)
    assert [t.last_offset for t in reopened.collect_aborted_txns(0, cut)] == kept
    assert reopened.ongoing_transactions() == {1: cut - 3}


def test_producer_sequences_continue_from_the_cut(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    p = Producer(log, 9, epoch=2)
    for _ in range(12):
        p.send(2, transactional=False)  # sequences 0..23 at offsets 0..23
    assert len(log.segments) > 1 and files(log.directory, ".snapshot")
    assert log.truncate_to(10)
    assert [s.last_sequence for s in log.producers()] == [9]
    assert all(int(n[:20]) <= 10 for n in files(log.directory, ".snapshot"))

    def header(seq, count=2):
        return batch(b"p", count=count, producer_id=9, producer_epoch=2, base_sequence=seq)[1]

    # The leader's next batch continues the sequence: accepted, not out of order.
    assert log.producer_state.check(header(10)) is None
    with pytest.raises(ProducerStateError) as gap:
        log.producer_state.check(header(12))
    assert gap.value.error_code == ErrorCode.out_of_order_sequence_number
    # A retry of a kept batch is a duplicate with its offsets; the cut one's is not.
    assert log.producer_state.check(header(8)).first_offset == 8
    data, h = batch(b"p", count=2, producer_id=9, producer_epoch=2, base_sequence=10)
    assert log.append(data, h, now_ms=T0).base_offset == 10
    assert log.producer_state.check(header(12)) is None
    assert_matches_rebuild(log, tmp_path / "rebuilt")


def test_stable_bytes_never_go_back(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL, high_watermark_follows_appends=False)
    a, c = Producer(log, 1), Producer(log, 3)
    c.send(1, transactional=False)
    assert log.stable_bytes == 0  # not below the high watermark yet
    log.maybe_increment_high_watermark(1)
    plain = log.stable_bytes
    assert plain > 0
    a.send(1)  # 1
    a.end(commit=False)  # 2
    c.send(1, transactional=False)  # 3
    log.maybe_increment_high_watermark(4)
    assert log.stable_bytes > plain
    seen = log.stable_bytes
    assert log.truncate_to(2)  # A's transaction is open again, the HW comes down
    assert log.high_watermark == 2 and log.last_stable_offset == 1
    assert log.stable_bytes == seen
    Producer(log, 1).end(commit=True)  # the leader's marker
    log.maybe_increment_high_watermark(3)
    assert log.stable_bytes > seen


# ---- leader epochs --------------------------------------------------------------------------


def test_leader_epochs_after_truncation(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    for epoch in (0, 1, 2):
        for i in range(5):
            append(log, b"e%d-%d" % (epoch, i), epoch=epoch)
    assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries] == [
        (0, 0),
        (1, 5),
        (2, 10),
    ]
    assert log.truncate_to(7)
    assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries] == [(0, 0), (1, 5)]
    assert log.end_offset_for_epoch(1) == (1, 7)
    assert log.end_offset_for_epoch(2) == (-1, -1)
    append_at(log, 7, b"new", epoch=3)
    assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries][-1] == (3, 7)
    log.flush()
    assert (log.directory / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n3\n0 0\n1 5\n3 7\n"
    # Cut again at the new epoch's start: the epoch goes with its only batch.
    assert log.truncate_to(7)
    assert log.leader_epochs.latest_epoch == 1
    assert_matches_rebuild(log, tmp_path / "rebuilt")


# ---- truncate_fully_and_start_at -------------------------------------------------------------


def test_truncate_fully_and_start_at_then_appends(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0")
    Producer(log, 5).send(1)  # an ongoing transaction and a producer to forget
    log.flush()
    assert files(log.directory, ".snapshot") and (log.directory / LEADER_EPOCH_CHECKPOINT).exists()
    log.truncate_fully_and_start_at(500, now_ms=T0)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert (log.high_watermark, log.recovery_point, log.last_stable_offset) == (500, 500, 500)
    assert [s.base_offset for s in log.segments] == [500]
    assert log.producers() == [] and log.ongoing_transactions() == {}
    assert log.leader_epochs.entries == []
    assert files(log.directory, ".snapshot") == []
    assert not (log.directory / LEADER_EPOCH_CHECKPOINT).exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(499, 100)
    assert append_at(log, 500, b"x", epoch=4).base_offset == 500
    assert append(log, b"y", epoch=4).base_offset == 501
    assert values(log) == [(500, b"x-0"), (501, b"y-0")]
    assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries] == [(4, 500)]
    log.enforce_retention(T0)
    assert files(log.directory, ".log") == [log.active_segment.log_path.name]
    assert_matches_rebuild(log, tmp_path / "rebuilt")
    log.close()
    reopened = Log.open(log.directory, SMALL, clean_shutdown=True)
    assert reopened.log_start_offset == 500
    assert values(reopened) == [(500, b"x-0"), (501, b"y-0")]
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epochs.entries] == [(4, 500)]


def test_truncate_fully_to_an_earlier_offset(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0")
    log.delete_records_before(20, now_ms=T0)
    log.truncate_fully_and_start_at(3)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (3, 3, 3)
    for i in range(20):
        append(log, b"n%d" % i)
    assert values(log)[0] == (3, b"n0-0") and log.log_end_offset == 23
    assert_matches_rebuild(log, tmp_path / "rebuilt")


def test_an_unclean_reopen_after_truncation(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0")
    log.flush()
    stale_recovery_point = log.recovery_point  # checkpointed before the cut
    assert log.truncate_to(11)
    append_at(log, 11, b"new", epoch=1)
    crashed = tmp_path / "crash-0"
    shutil.copytree(log.directory, crashed)  # what kill -9 leaves: nothing flushed since
    reopened = Log.open(crashed, SMALL, recovery_point=stale_recovery_point, clean_shutdown=False)
    assert values(reopened) == values(log)
    assert reopened.leader_epochs.entries == log.leader_epochs.entries
    assert_matches_rebuild(reopened, tmp_path / "rebuilt")


# ---- the cleaner ----------------------------------------------------------------------------


def test_no_truncation_below_the_active_segment_under_the_cleaner(tmp_path):
    log = segments_of_one_batch_each(tmp_path / "t-0")
    end = log.log_end_offset
    log.begin_cleaning()
    with pytest.raises(RuntimeError):
        log.truncate_to(3)
    with pytest.raises(RuntimeError):
        log.truncate_fully_and_start_at(100)
    assert log.log_end_offset == end and len(log.segments) > 1
    # The cleaner never reads the active segment: cutting only that one may go ahead.
    assert log.truncate_to(end - 1)
    log.end_cleaning(T0)
    assert log.truncate_to(3)


def test_log_manager_truncation_waits_for_the_cleaning_to_stop(tmp_path):
    manager = LogManager([tmp_path])
    manager.load(lambda topic: SMALL)
    log = manager.create("t", 0, SMALL)
    for i in range(30):
        append(log, b"v%d" % i)
    tp = ("t", 0)
    manager.update_cleaner_offset(tp, 25)
    abort = manager.begin_cleaning(tp)  # the cleaner thread, mid-round
    done = []
    truncation = threading.Thread(target=lambda: done.append(manager.truncate_to("t", 0, 5)))
    truncation.start()
    try:
        assert abort.wait(30), "the truncation did not ask the cleaning to stop"
        assert truncation.is_alive() and log.log_end_offset == 30 and not done
    finally:
        manager.done_cleaning(tp)  # the cleaner lets go of the log
        truncation.join(30)
    assert done == [True] and log.log_end_offset == 5
    first_dirty = manager.cleaner_offsets()[tp]
    assert first_dirty == log.active_segment.base_offset <= 5
    assert manager.begin_cleaning(tp) is not None  # resumed
    manager.done_cleaning(tp)
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT)[tp] <= 5
    assert read_checkpoint(tmp_path / REPLICATION_OFFSET_CHECKPOINT)[tp] == 5
    assert not manager.truncate_to("t", 0, 5) and not manager.truncate_to("absent", 0, 1)
    manager.truncate_fully_and_start_at("t", 0, 40)
    assert log.log_start_offset == log.log_end_offset == 40
    assert manager.cleaner_offsets()[tp] == first_dirty  # not beyond the active segment
    manager.close()
    again = LogManager([tmp_path])
    again.load(lambda topic: SMALL)
    assert again.get("t", 0).log_start_offset == 40
    again.close()


# ---- against a model --------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=batch_specs,
    config=configs,
    data=st.data(),
)
def test_truncate_then_refetch_matches_the_model(tmp_path_factory, specs, config, data):
    """A follower truncating at any batch boundary and fetching the rest again ends with the
    same records, indexes and time lookups as the log it started from, reopened or not."""
    root = tmp_path_factory.mktemp("prop")
    leader, model = model_and_log(root / "leader-0", specs, config)
    follower = Log.open(root / "follower-0", config)
    replicate(leader, follower)
    boundaries = sorted({h.base_offset for s in follower.segments for _, h in s.batches_from(0)})
    offset = data.draw(st.sampled_from(boundaries))
    assert follower.truncate_to(offset)
    assert scan(follower, 0) == model[:offset]
    replicate(leader, follower, offset)
    check(follower, model)
    follower.close()
    reopened = Log.open(root / "follower-0", config, clean_shutdown=True)
    check(reopened, model)
    reopened.close()
    leader.close()
    shutil.rmtree(root)
