"""The fetch session cache (KIP-227) as plain objects: epochs, cached partition state, which
partitions a response must carry, rotation, change tracking and the eviction rules."""

from __future__ import annotations

import itertools
import sys
import uuid

from hypothesis import given
from hypothesis import strategies as st

from broker.fetch_session import (
    EVICTION_MS,
    INVALID_HIGH_WATERMARK,
    MAX_EPOCH,
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    next_epoch,
)

T0 = 1_700_000_000_000


def parts(n: int, topic: str = "t", offset: int = 0) -> list[CachedPartition]:
    return [CachedPartition(topic, None, p, offset, 1 << 20) for p in range(n)]


def respond(
    session: FetchSession,
    partition: int,
    *,
    topic: str = "t",
    hw: int = 0,
    lso: int | None = None,
    start: int = 0,
    size: int = 0,
    error: int = 0,
    read_committed: bool = False,
) -> bool:
    return session.record_response(
        session.partitions[(topic, partition)],
        error_code=error,
        high_watermark=hw,
        last_stable_offset=hw if lso is None else lso,
        log_start_offset=start,
        records_size=size,
        read_committed=read_committed,
    )


def settle(session: FetchSession, hw: int = 0) -> None:
    """Answer every partition as caught up at `hw`, as after a full response."""
    for cached in session.changed_partitions():
        cached.fetch_offset = hw
        respond(session, cached.partition, topic=cached.topic, hw=hw)


def sequential_ids(start: int = 1):
    counter = itertools.count(start)
    return lambda: next(counter)


# -- epochs and ids ----------------------------------------------------------------------------


def test_epochs_are_positive_and_wrap_to_one_after_max_int():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(-1) == -1


def test_new_session_starts_at_epoch_one_with_a_unique_nonzero_id():
    # The generator repeats itself and offers 0 (no session): both are skipped.
    ids = iter([0, 7, 7, 0, 9])
    cache = FetchSessionCache(10, new_session_id=lambda: next(ids))
    first = cache.maybe_create_session(T0, False, False, parts(1))
    second = cache.maybe_create_session(T0, False, False, parts(1))
    assert (first.id, second.id) == (7, 9)
    assert first.epoch == second.epoch == 1


def test_default_session_ids_are_random_32_bit_positive():
    cache = FetchSessionCache(100)
    ids = {cache.maybe_create_session(T0, False, False, parts(1)).id for _ in range(100)}
    assert len(ids) == 100
    assert all(0 < i < 2**31 for i in ids)


def test_session_keeps_the_seed_fields():
    cache = FetchSessionCache(10)
    session = cache.maybe_create_session(T0, True, False, parts(2))
    assert session.privileged and session.creation_ms == session.last_used_ms == T0
    cached = session.partitions[("t", 1)]
    assert (cached.topic, cached.partition, cached.fetch_offset) == ("t", 1, 0)
    assert cached.partition_max_bytes == 1 << 20
    assert cached.high_watermark == INVALID_HIGH_WATERMARK
    cache.touch(session, T0 + 5)
    assert session.last_used_ms == T0 + 5


# -- what a response carries ---------------------------------------------------------------------


def test_a_partition_is_included_until_the_fetcher_has_been_told_its_state():
    session = FetchSessionCache(10).maybe_create_session(T0, False, False, parts(1))
    assert respond(session, 0, hw=0)  # the first answer: the cached high watermark is invalid
    assert not respond(session, 0, hw=0)
    assert respond(session, 0, hw=3, size=100)  # new data and a new high watermark
    assert respond(session, 0, hw=3, start=2)  # the log start offset moved
    assert not respond(session, 0, hw=3, start=2)


def test_errors_are_always_included_and_the_next_good_answer_too():
    session = FetchSessionCache(10).maybe_create_session(T0, False, False, parts(1))
    respond(session, 0, hw=5)
    assert respond(session, 0, hw=-1, error=3)
    assert respond(session, 0, hw=-1, error=3)
    assert respond(session, 0, hw=5)  # same high watermark as before the error, still sent
    assert not respond(session, 0, hw=5)


def test_last_stable_offset_changes_matter_to_read_committed_only():
    session = FetchSessionCache(10).maybe_create_session(T0, False, False, parts(1))
    respond(session, 0, hw=10, lso=4, read_committed=True)
    assert respond(session, 0, hw=10, lso=8, read_committed=True)
    assert not respond(session, 0, hw=10, lso=9, read_committed=False)


def test_rotation_moves_partitions_that_returned_data_to_the_end():
    session = FetchSessionCache(10).maybe_create_session(T0, False, False, parts(4))
    assert [c.partition for c in session.changed_partitions()] == [0, 1, 2, 3]
    respond(session, 1, hw=5, size=10)
    respond(session, 0, hw=5, size=10)
    respond(session, 2, hw=5)  # no data: keeps its place
    assert [c.partition for c in session.partitions.values()] == [2, 3, 1, 0]
    assert [c.partition for c in session.changed_partitions()] == [2, 3, 1, 0]


def test_full_response_state_does_not_rotate():
    session = FetchSessionCache(10).maybe_create_session(T0, False, False, parts(2))
    session.record_response(
        session.partitions[("t", 0)],
        error_code=0,
        high_watermark=5,
        last_stable_offset=5,
        log_start_offset=0,
        records_size=10,
        read_committed=False,
        rotate=False,
    )
    assert [c.partition for c in session.partitions.values()] == [0, 1]


# -- change tracking ------------------------------------------------------------------------------


def test_only_changed_partitions_are_pending_however_large_the_session():
    cache = FetchSessionCache(10)
    session = cache.maybe_create_session(T0, False, False, parts(10_000))
    settle(session)
    assert session.changed_partitions() == []
    # Sets never shrink and iteration costs their largest size: the emptied set of the
    # session's creation must not stay 10,000 slots wide, or every idle fetch pays for it.
    assert sys.getsizeof(session._changed) == sys.getsizeof(set())
    cache.partition_changed("t", None, 4321, 100)
    cache.partition_changed("other", None, 4321, 100)  # no session holds it
    assert [c.partition for c in session.changed_partitions()] == [4321]


def test_a_partition_stays_pending_while_the_fetcher_has_not_caught_up():
    cache = FetchSessionCache(10)
    session = cache.maybe_create_session(T0, False, False, parts(1))
    settle(session)
    cache.partition_changed("t", None, 0, 100)
    respond(session, 0, hw=2, size=100)
    assert session.changed == {("t", 0)}  # data returned, the fetcher still at offset 0
    cache.update(session, [CachedPartition("t", None, 0, 2, 1 << 20)], [])
    assert not respond(session, 0, hw=2)  # it moved to the high watermark: nothing new
    assert session.changed == frozenset()


def test_failing_partitions_stay_pending():
    session = FetchSessionCache(10).maybe_create_session(T0, False, False, parts(1))
    respond(session, 0, hw=-1, error=3)
    assert session.changed == {("t", 0)}


def test_read_committed_pending_bound_is_the_last_stable_offset():
    session = FetchSessionCache(10).maybe_create_session(T0, False, False, parts(1, offset=4))
    respond(session, 0, hw=10, lso=4, read_committed=True)
    assert session.changed == frozenset()  # data above the LSO is not available yet


def test_sessions_by_topic_id_hear_of_changes_by_topic_id():
    cache = FetchSessionCache(10)
    topic_id = uuid.uuid4()
    session = cache.maybe_create_session(
        T0, False, True, [CachedPartition("t", topic_id, 0, 0, 1 << 20)]
    )
    session.record_response(
        session.partitions[(topic_id, 0)],
        error_code=0,
        high_watermark=0,
        last_stable_offset=0,
        log_start_offset=0,
        records_size=0,
        read_committed=False,
    )
    cache.partition_changed("t", uuid.uuid4(), 0, 10)  # a recreated topic of the same name
    assert session.changed == frozenset()
    cache.partition_changed("t", topic_id, 0, 10)
    assert session.changed == {(topic_id, 0)}


def test_listeners_hear_appended_bytes():
    cache = FetchSessionCache(10)
    session = cache.maybe_create_session(T0, False, False, parts(2))
    heard = []
    session.listeners.add(heard.append)
    cache.partition_changed("t", None, 1, 123)
    cache.partition_changed("t", None, 0)
    assert heard == [123, 0]


# -- incremental updates --------------------------------------------------------------------------


def test_update_adds_updates_and_removes():
    cache = FetchSessionCache(10)
    session = cache.maybe_create_session(T0, False, False, parts(3))
    settle(session)
    added, updated, removed = cache.update(
        session,
        [CachedPartition("t", None, 1, 7, 500), CachedPartition("u", None, 0, 0, 1 << 20)],
        [("t", 2), ("nope", 0)],
    )
    assert (added, updated, removed) == ([("u", 0)], [("t", 1)], [("t", 2)])
    assert list(session.partitions) == [("t", 0), ("t", 1), ("u", 0)]
    assert (
        session.partitions[("t", 1)].fetch_offset,
        session.partitions[("t", 1)].partition_max_bytes,
    ) == (7, 500)
    assert session.changed == {("t", 1), ("u", 0)}
    assert cache.partitions_cached == 3
    cache.partition_changed("t", None, 2, 10)  # removed: no longer heard of
    assert ("t", 2) not in session.changed


def test_remove_is_not_an_eviction_and_forgets_the_partitions():
    cache = FetchSessionCache(10)
    session = cache.maybe_create_session(T0, False, False, parts(3))
    assert (len(cache), cache.partitions_cached) == (1, 3)
    assert cache.remove(session.id) is session
    assert cache.remove(session.id) is None
    assert (len(cache), cache.partitions_cached, cache.evictions) == (0, 0, 0)
    cache.partition_changed("t", None, 0, 10)  # the index forgot it too


# -- eviction ------------------------------------------------------------------------------------


def full_cache(*sessions: tuple[bool, int, int]) -> tuple[FetchSessionCache, list[FetchSession]]:
    """A cache with exactly these (privileged, partitions, creation ms) sessions."""
    cache = FetchSessionCache(len(sessions), new_session_id=sequential_ids())
    made = [
        cache.maybe_create_session(created, privileged, False, parts(size))
        for privileged, size, created in sessions
    ]
    return cache, made


def test_a_full_cache_of_fresh_consumer_sessions_refuses_a_consumer():
    cache, made = full_cache((False, 1, T0), (False, 1, T0))
    assert cache.maybe_create_session(T0 + 1000, False, False, parts(500)) is None
    assert len(cache) == 2 and cache.evictions == 0


def test_rule_1_a_follower_evicts_the_smallest_consumer_session_even_a_fresh_one():
    cache, (big, small, follower) = full_cache((False, 5, T0), (False, 2, T0), (True, 1, T0))
    new = cache.maybe_create_session(T0 + 1000, True, False, parts(1))
    assert new is not None and new.privileged
    assert small.id not in cache and big.id in cache and follower.id in cache
    assert cache.evictions == 1


def test_a_follower_cannot_evict_a_fresh_follower():
    cache, _ = full_cache((True, 1, T0), (True, 1, T0))
    assert cache.maybe_create_session(T0 + 1000, True, False, parts(100)) is None


def test_rule_2_a_session_idle_longer_than_the_eviction_time_goes_first():
    cache, (follower, consumer) = full_cache((True, 100, T0), (False, 1, T0))
    now = T0 + EVICTION_MS + 1
    cache.touch(consumer, now)  # the consumer is active; the follower has idled 120 s
    new = cache.maybe_create_session(now, False, False, parts(1))
    assert new is not None  # even a small consumer session replaces an idle follower
    assert follower.id not in cache and consumer.id in cache


def test_rule_2_needs_strictly_more_than_the_eviction_time():
    cache, (a, b) = full_cache((False, 1, T0), (False, 1, T0))
    assert cache.maybe_create_session(T0 + EVICTION_MS, False, False, parts(1)) is None


def test_rule_2_evicts_the_least_recently_used_session():
    cache, (a, b, c) = full_cache((False, 1, T0), (False, 1, T0), (False, 1, T0))
    cache.touch(b, T0 + 5)
    cache.touch(a, T0 + 10)
    cache.touch(c, T0 + 20)
    assert cache.maybe_create_session(T0 + 5 + EVICTION_MS + 1, False, False, parts(1))
    assert b.id not in cache and a.id in cache and c.id in cache


def test_rule_3_more_partitions_evict_the_smallest_old_session():
    cache, (old_big, old_small, young_tiny) = full_cache(
        (False, 50, T0), (False, 10, T0), (False, 1, T0 + 60_000)
    )
    now = T0 + EVICTION_MS + 1
    for session in (old_big, old_small, young_tiny):
        cache.touch(session, now)  # all active: rule 2 does not apply
    assert cache.maybe_create_session(now, False, False, parts(10)) is None  # not more
    new = cache.maybe_create_session(now, False, False, parts(11))
    assert new is not None
    # The young session is smaller, but has not existed for 120 s.
    assert old_small.id not in cache and young_tiny.id in cache and old_big.id in cache


def test_rule_3_never_lets_a_consumer_evict_a_follower():
    cache, (follower,) = full_cache((True, 1, T0))
    now = T0 + EVICTION_MS + 1
    cache.touch(follower, now)
    assert cache.maybe_create_session(now, False, False, parts(1000)) is None
    # Another follower with more partitions may.
    assert cache.maybe_create_session(now, True, False, parts(2)) is not None
    assert follower.id not in cache


def test_evictions_count_and_slots_of_zero_disable_sessions():
    cache, _ = full_cache((False, 1, T0))
    assert cache.maybe_create_session(T0 + EVICTION_MS + 1, False, False, parts(1))
    assert cache.evictions == 1
    assert FetchSessionCache(0).maybe_create_session(T0, True, False, parts(1)) is None


# -- invariants ----------------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.booleans(), st.integers(0, 6), st.integers(0, 300_000)),
        st.tuples(st.just("update"), st.integers(0, 5), st.sets(st.integers(0, 8), max_size=4)),
        st.tuples(st.just("forget"), st.integers(0, 5), st.sets(st.integers(0, 8), max_size=4)),
        st.tuples(st.just("remove"), st.integers(0, 5)),
        st.tuples(st.just("change"), st.integers(0, 8)),
    ),
    max_size=40,
)


@given(OPS)
def test_counts_and_the_partition_index_stay_consistent(ops):
    cache = FetchSessionCache(3, new_session_id=sequential_ids())
    now = T0
    for op in ops:
        sessions = cache.sessions()
        if op[0] == "create":
            _, privileged, size, elapsed = op
            now += elapsed
            cache.maybe_create_session(now, privileged, False, parts(size))
        elif op[0] in ("update", "forget") and sessions:
            session = sessions[op[1] % len(sessions)]
            if op[0] == "update":
                cache.update(session, [CachedPartition("t", None, p, 0, 1) for p in op[2]], [])
            else:
                cache.update(session, [], [("t", p) for p in op[2]])
            cache.touch(session, now)
        elif op[0] == "remove" and sessions:
            cache.remove(sessions[op[1] % len(sessions)].id)
        elif op[0] == "change":
            cache.partition_changed("t", None, op[1], 1)
        assert len(cache) <= 3
        assert cache.partitions_cached == sum(len(s) for s in cache.sessions())
        for session in cache.sessions():
            assert session.changed <= set(session.partitions)
            for key in session.partitions:
                assert session in cache._interested[key]
        assert all(s.id in cache for ss in cache._interested.values() for s in ss)
