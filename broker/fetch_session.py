"""Incremental fetch sessions (KIP-227): the fetch session cache, its sessions and their cached
partitions. Plain objects; the caller passes the time in as `now_ms`.

A session remembers, per partition, what its fetcher asked for last (fetch offset, max bytes,
log start offset) and what the broker told it last (high watermark, log start offset, last
stable offset), so an incremental request names only the partitions whose request changed and
an incremental response carries only the partitions whose answer changed.

Kafka re-reads every partition of a session on each incremental fetch and then drops the
unchanged ones from the response; that costs the broker O(partitions) per fetch even when
nothing happened. Here each session also keeps the set of its partitions that may have
something new to say: the replica manager reports appends, transaction markers, log start
moves and topic deletions through `FetchSessionCache.partition_changed`, which finds the
interested sessions through an index by partition. An incremental fetch reads only that set,
so one in which nothing changed costs O(1), however many partitions the session holds.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

INVALID_SESSION_ID = 0
# A full request that creates a session when it can, and the one that never does.
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
# The seed's constant: how long a session is safe from eviction after its creation (rule 3)
# and how long it may stay idle before any newcomer may evict it (rule 2). Kafka later made it
# min.incremental.fetch.session.eviction.ms; the seed keeps it fixed.
EVICTION_MS = 120_000
# What a partition's cached high watermark is until a response has reported one (and again
# after an error), so that the next response includes it whatever its value.
INVALID_HIGH_WATERMARK = -1

# (topic id, partition) in sessions of Fetch v13+, (topic name, partition) before.
PartitionKey = tuple[uuid.UUID | str | None, int]


def next_epoch(epoch: int) -> int:
    """The epoch a fetcher sends after `epoch`: always positive, wrapping to 1 after MAX_INT."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= MAX_EPOCH else epoch + 1


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(eq=False, slots=True)
class CachedPartition:
    """One partition of a session: the request parameters from the last request that named it,
    the answer the fetcher last received, and the partition's place in the response order."""

    topic: str | None  # None: a topic id this broker did not know when it was added
    topic_id: uuid.UUID | None  # None in sessions of Fetch v7-v12, which name topics
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    fetcher_log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = INVALID_HIGH_WATERMARK
    leader_log_start_offset: int = -1
    last_stable_offset: int = -1
    position: int = 0  # ascending in response order; returning data moves a partition last
    key: PartitionKey = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.topic_id if self.topic_id is not None else self.topic, self.partition)

    def update_request_params(self, requested: CachedPartition) -> None:
        self.fetch_offset = requested.fetch_offset
        self.partition_max_bytes = requested.partition_max_bytes
        self.fetcher_log_start_offset = requested.fetcher_log_start_offset
        self.current_leader_epoch = requested.current_leader_epoch
        self.last_fetched_epoch = requested.last_fetched_epoch


class FetchSession:
    """One fetcher's session: id, epoch, cached partitions, privileged bit, last-used time."""

    def __init__(
        self, session_id: int, privileged: bool, uses_topic_ids: bool, creation_ms: int
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = creation_ms
        self.last_used_ms = creation_ms
        # The epoch the next incremental request must carry; the full request that created
        # the session was epoch 0.
        self.epoch = next_epoch(INITIAL_EPOCH)
        # In response order (dict order and `position` agree).
        self.partitions: dict[PartitionKey, CachedPartition] = {}
        # Partitions the next fetch must read: something happened to them since they were
        # last answered, they still have data to return, or they are failing.
        self._changed: set[PartitionKey] = set()
        # The most keys `_changed` has held since it was last rebuilt; see changed_partitions.
        self._changed_peak = 0
        self._next_position = 0
        # Called with the bytes appended (0 for other changes) when a partition changes: how
        # a fetch parked on the session learns that it may have enough to answer.
        self.listeners: set[Callable[[int], None]] = set()

    def __len__(self) -> int:
        return len(self.partitions)

    def __repr__(self) -> str:
        return (
            f"FetchSession(id={self.id}, epoch={self.epoch}, privileged={self.privileged}, "
            f"partitions={len(self.partitions)}, changed={len(self._changed)})"
        )

    @property
    def changed(self) -> frozenset[PartitionKey]:
        return frozenset(self._changed)

    def changed_partitions(self) -> list[CachedPartition]:
        """What the next response may have to include, in response order: O(changed)."""
        changed = self._changed
        if self._changed_peak > 2 * len(changed) + 16:
            # A set never shrinks, and iterating it costs the most it ever held: once filled
            # (say by the full fetch that created the session) and emptied, it would make
            # every idle fetch O(partitions). Rebuilt here, paid for by the adds that grew it.
            changed = self._changed = set(changed)
            self._changed_peak = len(changed)
        partitions = self.partitions
        pending = [partitions[key] for key in changed]
        pending.sort(key=_position)
        return pending

    def partitions_in_order(self) -> list[CachedPartition]:
        """Every partition of the session, in response order: what a follower's fetch reads,
        since each of its fetches tells the leader where the follower stands (O(partitions),
        as in Kafka). The dict is kept in that order."""
        return list(self.partitions.values())

    def mark_changed(self, key: PartitionKey, appended_bytes: int = 0) -> None:
        self._mark(key)
        if self.listeners:
            for listener in tuple(self.listeners):
                listener(appended_bytes)

    def mark_all_changed(self) -> None:
        for key in self.partitions:
            self._mark(key)
        for listener in tuple(self.listeners):
            listener(0)

    def record_response(
        self,
        cached: CachedPartition,
        *,
        error_code: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        records_size: int,
        read_committed: bool,
        rotate: bool = True,
    ) -> bool:
        """Whether `cached`'s freshly read state belongs in the response; remembers it as what
        the fetcher now knows. Data moves the partition to the end of the response order
        (`rotate`), so partitions later in the order are not starved under max_bytes."""
        must_respond = records_size > 0
        if cached.high_watermark != high_watermark:
            must_respond = True
            cached.high_watermark = high_watermark
        if cached.leader_log_start_offset != log_start_offset:
            must_respond = True
            cached.leader_log_start_offset = log_start_offset
        if read_committed and cached.last_stable_offset != last_stable_offset:
            must_respond = True
        cached.last_stable_offset = last_stable_offset
        if error_code:
            # As Kafka: failing partitions are in every response, and the invalid high
            # watermark makes sure the first answer after the error clears is too.
            cached.high_watermark = INVALID_HIGH_WATERMARK
            must_respond = True
        if records_size > 0 and rotate:
            self._move_to_end(cached)
        # A fetcher that has not caught up gets data again at the next fetch, as from Kafka,
        # which re-reads from the cached fetch offset until the fetcher reports a new one.
        upper = last_stable_offset if read_committed else high_watermark
        if error_code or cached.fetch_offset < upper:
            self._mark(cached.key)
        else:
            self._changed.discard(cached.key)
        return must_respond

    def _mark(self, key: PartitionKey) -> None:
        changed = self._changed
        changed.add(key)
        if len(changed) > self._changed_peak:
            self._changed_peak = len(changed)

    # -- changes made through the cache, which keeps its partition index in step ----------

    def _add(self, cached: CachedPartition) -> None:
        cached.position = self._next_position
        self._next_position += 1
        self.partitions[cached.key] = cached
        self._mark(cached.key)

    def _remove(self, key: PartitionKey) -> CachedPartition | None:
        self._changed.discard(key)
        return self.partitions.pop(key, None)

    def _move_to_end(self, cached: CachedPartition) -> None:
        del self.partitions[cached.key]
        self._add(cached)


def _position(cached: CachedPartition) -> int:
    return cached.position


class FetchSessionCache:
    """The broker's sessions, at most `max_slots` of them (max.incremental.fetch.session.cache.
    slots), with the seed's eviction rules, and the index from partitions to the sessions
    that hold them."""

    def __init__(
        self,
        max_slots: int,
        *,
        eviction_ms: int = EVICTION_MS,
        new_session_id: Callable[[], int] | None = None,
    ) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._new_session_id = new_session_id or _random_session_id
        # The server layer reads the time here; tests of the request path advance it to age
        # sessions without waiting two minutes.
        self.clock_ms: Callable[[], int] = wall_clock_ms
        self._sessions: dict[int, FetchSession] = {}
        # Least recently used first: touch() moves a session last.
        self._by_last_used: dict[int, FetchSession] = {}
        self._interested: dict[PartitionKey, set[FetchSession]] = {}
        self.partitions_cached = 0
        self.evictions = 0  # not counting sessions their fetchers closed

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: int) -> bool:
        return session_id in self._sessions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[FetchSession]:
        return list(self._sessions.values())

    # -- creation and eviction -------------------------------------------------------------

    def maybe_create_session(
        self,
        now_ms: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: Sequence[CachedPartition],
    ) -> FetchSession | None:
        """A new session holding `partitions`, if there is a free slot or one may be freed by
        eviction; None otherwise (the fetcher keeps making full fetches)."""
        size = len({cached.key for cached in partitions})
        if len(self._sessions) >= self.max_slots and not self._try_evict(privileged, size, now_ms):
            return None
        session_id = self._new_session_id()
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._new_session_id()
        session = FetchSession(session_id, privileged, uses_topic_ids, now_ms)
        self._sessions[session_id] = session
        self._by_last_used[session_id] = session
        for cached in partitions:
            self._add_partition(session, cached)
        return session

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Make room for a new session of `size` partitions, following the seed: evict an
        existing session if it has been idle longer than eviction_ms; else if the newcomer is
        a follower and it is a consumer's; else if it has existed longer than eviction_ms and
        the newcomer has more partitions. As in Kafka, the size rule never lets a consumer
        evict a follower (followers have priority), and the victim is the least valuable
        candidate: consumers before followers, then the fewest partitions."""
        if not self._by_last_used:
            return False
        least_recently_used = next(iter(self._by_last_used.values()))
        if now_ms - least_recently_used.last_used_ms > self.eviction_ms:
            self._evict(least_recently_used)
            return True
        # A scan of at most max_slots sessions, only when the cache is full and a full fetch
        # (itself O(its partitions)) asks for a session.
        victim = None
        for session in self._sessions.values():
            settled = now_ms - session.creation_ms > self.eviction_ms
            if not (settled or (privileged and not session.privileged)):
                continue
            if victim is None or _value(session) < _value(victim):
                victim = session
        if victim is None or (privileged, size) <= (victim.privileged, len(victim)):
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self._drop(session)
        self.evictions += 1

    # -- use -------------------------------------------------------------------------------

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        by_last_used = self._by_last_used
        if by_last_used.pop(session.id, None) is not None:
            by_last_used[session.id] = session

    def update(
        self,
        session: FetchSession,
        requested: Iterable[CachedPartition],
        forgotten: Iterable[PartitionKey],
    ) -> tuple[list[PartitionKey], list[PartitionKey], list[PartitionKey]]:
        """Apply an incremental request: partitions it names are added, or have their request
        parameters updated; forgotten ones are removed. Returns (added, updated, removed)."""
        added, updated, removed = [], [], []
        for cached in requested:
            existing = session.partitions.get(cached.key)
            if existing is None:
                self._add_partition(session, cached)
                added.append(cached.key)
            else:
                existing.update_request_params(cached)
                # The fetcher moved: what it should get now is not what it was told.
                session._mark(cached.key)
                updated.append(cached.key)
        for key in forgotten:
            if self._remove_partition(session, key):
                removed.append(key)
        return added, updated, removed

    def remove(self, session_id: int) -> FetchSession | None:
        """Close a session at its fetcher's request (not an eviction)."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._drop(session)
        return session

    def partition_changed(
        self, topic: str, topic_id: uuid.UUID | None, partition: int, appended_bytes: int = 0
    ) -> None:
        """Something a fetcher may need to hear about happened to a partition: records or a
        transaction marker were appended (`appended_bytes`), its log start offset moved, or
        its topic went away. Costs O(sessions holding the partition)."""
        interested = self._interested
        sessions = interested.get((topic, partition))
        if sessions:
            for session in sessions:
                session.mark_changed((topic, partition), appended_bytes)
        if topic_id is not None:
            sessions = interested.get((topic_id, partition))
            if sessions:
                for session in sessions:
                    session.mark_changed((topic_id, partition), appended_bytes)

    def all_partitions_changed(self) -> None:
        """Every partition of every session is read again at its session's next fetch: what
        fetchers may read changed (ACLs were created or deleted). O(cached partitions), paid
        on the rare ACL change so that fetches never check partitions that did not change."""
        for session in self._sessions.values():
            session.mark_all_changed()

    # -- bookkeeping -----------------------------------------------------------------------

    def _add_partition(self, session: FetchSession, cached: CachedPartition) -> None:
        if cached.key in session.partitions:  # named twice in one request: the last wins
            session.partitions[cached.key].update_request_params(cached)
            return
        session._add(cached)
        self._interested.setdefault(cached.key, set()).add(session)
        self.partitions_cached += 1

    def _remove_partition(self, session: FetchSession, key: PartitionKey) -> bool:
        if session._remove(key) is None:
            return False
        sessions = self._interested.get(key)
        if sessions is not None:
            sessions.discard(session)
            if not sessions:
                del self._interested[key]
        self.partitions_cached -= 1
        return True

    def _drop(self, session: FetchSession) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        self._by_last_used.pop(session.id, None)
        for key in list(session.partitions):
            self._remove_partition(session, key)
        # A fetch parked on it answers at its deadline; its fetcher then learns the session
        # is gone from its next request.


def _value(session: FetchSession) -> tuple[bool, int, int]:
    """Kafka's EvictableKey: consumers before followers, then fewer partitions, then id."""
    return (session.privileged, len(session), session.id)


def _random_session_id() -> int:
    # Random, so that an unprivileged fetcher can neither learn from nor guess another's id.
    return 1 + secrets.randbelow(MAX_EPOCH)
