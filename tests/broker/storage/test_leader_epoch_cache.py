"""LeaderEpochCache against the cases of Kafka's LeaderEpochFileCacheTest, its checkpoint
file, and a model of Kafka's TreeMap-based cache driven by hypothesis."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.storage.checkpoint import CorruptCheckpointError
from broker.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    read_leader_epoch_checkpoint,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def cache(tmp_path):
    return LeaderEpochCache(tmp_path / LEADER_EPOCH_CHECKPOINT)


def entries(cache):
    return [(e.epoch, e.start_offset) for e in cache.entries]


def filled(cache, *pairs):
    for epoch, offset in pairs:
        cache.assign(epoch, offset)
    return cache


def test_add_epoch_and_its_start(cache):
    cache.assign(2, 10)
    assert cache.latest_epoch == 2
    assert entries(cache) == [(2, 10)]
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_the_latest_epoch_ends_at_the_log_end(cache):
    filled(cache, (2, 11), (2, 12))
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_undefined_epoch_requested(cache):
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    filled(cache, (2, 11), (3, 12))
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_an_assigned_epoch_keeps_its_start(cache):
    cache.assign(2, 9)
    assert not cache.assign(2, 10)
    assert entries(cache) == [(2, 9)]


def test_a_new_epoch_at_the_same_offset_replaces_the_old(cache):
    filled(cache, (2, 9), (3, 9))
    assert entries(cache) == [(3, 9)]


def test_empty_cache_knows_no_epoch(cache):
    assert cache.latest_epoch == UNDEFINED_EPOCH
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(7, 0) == UNDEFINED
    cache.truncate_from_start(7)
    cache.truncate_from_end(7)
    assert entries(cache) == []


def test_requested_epoch_below_the_first(cache):
    filled(cache, (5, 11), (6, 12), (7, 13))
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_same_epoch_at_an_earlier_offset_truncates(cache):
    filled(cache, (5, 11), (6, 12), (7, 13), (7, 12))
    assert entries(cache) == [(5, 11), (7, 12)]
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_previous_epoch_ends_where_the_next_begins(cache):
    filled(cache, (1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_epoch_between_entries(cache):
    filled(cache, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_epoch_above_the_latest_is_undefined(cache):
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_an_older_epoch_truncates_the_newer_ones(cache, caplog):
    filled(cache, (1, 5), (2, 6))
    cache.assign(1, 7)
    assert cache.latest_epoch == 1
    assert entries(cache) == [(1, 7)]
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED
    assert "caused truncation of conflicting entries" in caplog.text


def test_offsets_going_backwards_truncate(cache):
    filled(cache, (2, 6), (3, 5))
    assert entries(cache) == [(3, 5)]


def test_successive_elections_without_writes_do_not_warn(cache, caplog):
    filled(cache, (0, 0), (1, 0))
    assert entries(cache) == [(1, 0)]
    assert "conflicting" not in caplog.text


def test_track_epochs_as_leaders_change(cache):
    filled(cache, (0, 0), (1, 0))
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    assert cache.end_offset_for(1, 5) == (1, 5)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_track_epochs_as_follower_receives_messages(cache):
    filled(cache, (0, 0), (0, 1), (0, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7), (2, 8))
    assert cache.latest_epoch == 2
    assert cache.end_offset_for(2, 9) == (2, 9)
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


@pytest.mark.parametrize(
    ("end", "left"),
    [
        (8, [(2, 6)]),  # on a boundary: inclusive
        (9, [(2, 6), (3, 8)]),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
        (12, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_end(cache, end, left):
    filled(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(end)
    assert entries(cache) == left
    assert cache.latest_epoch == left[-1][0]


@pytest.mark.parametrize(
    ("start", "left"),
    [
        (8, [(3, 8), (4, 11)]),
        (9, [(3, 9), (4, 11)]),
        (1, [(2, 6), (3, 8), (4, 11)]),
        (6, [(2, 6), (3, 8), (4, 11)]),
        (11, [(4, 11)]),
        (15, [(4, 15)]),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(cache, start, left):
    filled(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start)
    assert entries(cache) == left


def test_truncate_from_start_keeps_the_first_epoch_moved(cache):
    filled(cache, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert entries(cache) == [(0, 5), (1, 7), (2, 10)]


def test_negative_entries_are_refused(cache):
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


# ---- checkpoint -----------------------------------------------------------------------------


def test_checkpoint_in_kafkas_format_read_back(cache):
    filled(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(11)
    cache.truncate_from_start(8)
    cache.write_checkpoint(_NoLock())
    assert cache.path.read_text() == "0\n1\n3 8\n"
    assert not cache.dirty
    loaded, read = LeaderEpochCache.load(cache.path)
    assert read and entries(loaded) == [(3, 8)] and not loaded.dirty


def test_checkpoint_written_only_when_changed(cache):
    cache.assign(2, 6)
    cache.write_checkpoint(_NoLock())
    cache.path.write_text("0\n0\n")  # a write now would overwrite this
    cache.assign(2, 9)  # no change
    cache.write_checkpoint(_NoLock())
    assert cache.path.read_text() == "0\n0\n"
    cache.assign(3, 9)
    cache.write_checkpoint(_NoLock())
    assert read_leader_epoch_checkpoint(cache.path) == [EpochEntry(2, 6), EpochEntry(3, 9)]


def test_missing_checkpoint_asks_for_a_rebuild(tmp_path):
    loaded, read = LeaderEpochCache.load(tmp_path / LEADER_EPOCH_CHECKPOINT)
    assert not read and entries(loaded) == [] and loaded.dirty


@pytest.mark.parametrize(
    "text",
    ["", "1\n0\n", "0\n2\n1 5\n", "0\n1\n1 x\n", "0\n1\n1 5 7\n", "0\n1\n-1 5\n", "\xff"],
)
def test_corrupt_checkpoint_asks_for_a_rebuild(tmp_path, text):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CorruptCheckpointError):
        read_leader_epoch_checkpoint(path)
    loaded, read = LeaderEpochCache.load(path)
    assert not read and entries(loaded) == []


def test_disordered_checkpoint_is_mended_as_kafka_assigns_it(tmp_path):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_text("0\n3\n1 5\n3 4\n2 9\n")
    loaded, read = LeaderEpochCache.load(path)
    assert read and entries(loaded) == [(2, 9)] and loaded.dirty


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---- model: Kafka's LeaderEpochFileCache, a map epoch -> start offset -----------------------


class KafkaModel:
    def __init__(self):
        self.epochs: dict[int, int] = {}

    def assign(self, epoch, offset):
        if self.epochs:
            latest = max(self.epochs)
            if epoch == latest and offset >= self.epochs[latest]:
                return
        for e in sorted(self.epochs, reverse=True):
            if e >= epoch or self.epochs[e] >= offset:
                del self.epochs[e]
            else:
                break
        self.epochs[epoch] = offset

    def truncate_from_end(self, end):
        if end >= 0 and self.epochs and self.epochs[max(self.epochs)] >= end:
            self.epochs = {e: o for e, o in self.epochs.items() if o < end}

    def truncate_from_start(self, start):
        removed = [e for e in sorted(self.epochs) if self.epochs[e] <= start]
        if removed:
            for e in removed:
                del self.epochs[e]
            self.epochs[removed[-1]] = start

    def end_offset_for(self, requested, leo):
        if requested == UNDEFINED_EPOCH:
            return UNDEFINED
        if self.epochs and max(self.epochs) == requested:
            return requested, leo
        higher = [e for e in self.epochs if e > requested]
        if not higher:
            return UNDEFINED
        floor = [e for e in self.epochs if e <= requested]
        end = self.epochs[min(higher)]
        return (max(floor), end) if floor else (requested, end)


_ops = st.one_of(
    st.tuples(st.just("assign"), st.integers(0, 6), st.integers(0, 30)),
    st.tuples(st.just("truncate_from_end"), st.integers(-1, 30)),
    st.tuples(st.just("truncate_from_start"), st.integers(-1, 30)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_ops, max_size=25), st.integers(-1, 7), st.integers(0, 40))
def test_matches_kafkas_cache(ops, requested, leo):
    cache = LeaderEpochCache(Path("never-written") / LEADER_EPOCH_CHECKPOINT)
    model = KafkaModel()
    for name, *args in ops:
        getattr(cache, name)(*args)
        getattr(model, name)(*args)
        assert entries(cache) == sorted(model.epochs.items())
        assert cache.latest_epoch == max(model.epochs, default=UNDEFINED_EPOCH)
    assert cache.end_offset_for(requested, leo) == model.end_offset_for(requested, leo)


def test_epoch_for_offset_is_the_epoch_that_wrote_it(cache):
    assert cache.epoch_for_offset(0) == UNDEFINED_EPOCH  # nothing known yet
    cache.assign(1, 5)
    cache.assign(3, 10)
    assert [cache.epoch_for_offset(o) for o in (4, 5, 9, 10, 99)] == [
        UNDEFINED_EPOCH,  # before the first known epoch's start
        1,
        1,
        3,
        3,  # the latest epoch runs to the log end and beyond
    ]
