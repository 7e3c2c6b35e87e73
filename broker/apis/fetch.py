"""Fetch: sessionless, full and incremental fetches (KIP-227), long-polled until min_bytes.

The request's session id and epoch decide what it means (Kafka's FetchManager.newContext):

| session id | epoch | meaning                                                               |
|------------|-------|-----------------------------------------------------------------------|
| 0          | -1    | full fetch, no session (what v4-v6 always are)                        |
| 0          | 0     | full fetch, create a session if the cache has (or can free) a slot    |
| $ID        | -1    | close session $ID, full fetch without a session                       |
| $ID        | 0     | close session $ID, full fetch, create a new session if possible       |
| $ID        | $N    | incremental fetch: FETCH_SESSION_ID_NOT_FOUND for an unknown $ID,     |
|            |       | INVALID_FETCH_SESSION_EPOCH unless $N is the epoch the session awaits |

An incremental request names only partitions to add or whose fetch parameters changed, and
lists those to remove in forgotten_topics_data; its response carries only partitions with
data, errors, or a high watermark, log start offset or (read_committed) last stable offset
the fetcher has not been told. Only the session's changed partitions are read, so an
incremental fetch in which nothing happened costs O(1) whatever the session's size.

read_uncommitted reads up to the high watermark; read_committed (KIP-98) up to the last
stable offset, with the aborted transactions of the range read so the consumer can drop
their records.

v18 adds each partition's `high_watermark`, the one the fetching replica knows (KIP-1166).
Only Kafka's KRaft quorum reads it, to answer a follower at once when the leader's high
watermark is ahead; a broker's fetch path ignores it, for consumers and followers alike, and so
does this one.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster, filter_authorized
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.coordinator.records import ZERO_UUID
from broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    next_epoch,
)
from broker.security.operations import AclOperation, ResourceType
from broker.server.replica_manager import FetchWaiter
from broker.storage import OffsetOutOfRangeError

READ_COMMITTED = 1
TOPIC_IDS_VERSION = 13  # Fetch v13+ name topics by id, and so do their sessions


async def handle_fetch(broker, ctx: RequestContext, request) -> object:
    # v4-v6 predate fetch sessions: without the fields they are sessionless full fetches.
    session_id = getattr(request, "session_id", INVALID_SESSION_ID)
    epoch = getattr(request, "session_epoch", FINAL_EPOCH)
    cache = broker.fetch_sessions
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)  # a full request closes the session it names
        return await _full_fetch(broker, ctx, request, create_session=epoch == INITIAL_EPOCH)
    session = cache.get(session_id)
    if session is None:
        return _session_error(ctx, ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return _session_error(ctx, ErrorCode.invalid_fetch_session_epoch)
    uses_topic_ids = ctx.api_version >= TOPIC_IDS_VERSION
    if session.uses_topic_ids != uses_topic_ids:
        # Partitions known by name cannot be matched with partitions known by id.
        return _session_error(ctx, ErrorCode.fetch_session_topic_id_error)
    cache.update(
        session,
        [_cached_partition(name, topic_id, p) for name, topic_id, p in _resolve(broker, request)],
        _forgotten(request, uses_topic_ids),
    )
    if not session.partitions:
        # As Kafka: a session left empty is closed, and the request answered without one.
        cache.remove(session.id)
        return await _full_fetch(broker, ctx, request, create_session=False)
    cache.touch(session, cache.clock_ms())
    session.epoch = next_epoch(session.epoch)
    return await _incremental_fetch(broker, ctx, request, session)


def _session_error(ctx: RequestContext, code: ErrorCode, session_id: int = INVALID_SESSION_ID):
    return ctx.response(
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        session_id=session_id,
        responses=(),
    )


async def _full_fetch(broker, ctx: RequestContext, request, *, create_session: bool) -> object:
    wanted = _resolve(broker, request)
    read_committed = request.isolation_level == READ_COMMITTED
    reads, size, failed = _read(broker, ctx, request, wanted, read_committed)
    wait_s = request.max_wait.total_seconds()
    if size < request.min_bytes and wait_s > 0 and not failed and wanted:
        waiter = FetchWaiter(
            needed=request.min_bytes - size,
            partitions=[(name, p.partition) for name, _, p in wanted],
            read_committed=read_committed,
            replica=ctx.replication,
        )
        broker.replica_manager.park(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), wait_s)
        except TimeoutError:
            pass
        finally:
            broker.replica_manager.unpark(waiter)
        reads, size, failed = _read(broker, ctx, request, wanted, read_committed)
    session_id = INVALID_SESSION_ID
    if create_session:
        session = _create_session(broker, ctx, request, wanted, reads, read_committed)
        if session is not None:
            session_id = session.id
    return ctx.response(
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=session_id,
        responses=_topic_responses(ctx, reads),
    )


def _create_session(broker, ctx, request, wanted, reads, read_committed) -> FetchSession | None:
    cache = broker.fetch_sessions
    cached = [_cached_partition(name, topic_id, p) for name, topic_id, p in wanted]
    session = cache.maybe_create_session(
        cache.clock_ms(),
        ctx.replication,  # the privileged bit: follower fetchers
        ctx.api_version >= TOPIC_IDS_VERSION,
        cached,
    )
    if session is not None:
        # The session starts from what this full response told the fetcher.
        for partition, (_, _, data) in zip(cached, reads, strict=True):
            _record(session, session.partitions[partition.key], data, read_committed, False)
    return session


async def _incremental_fetch(broker, ctx: RequestContext, request, session: FetchSession):
    expected_epoch = session.epoch
    read_committed = request.isolation_level == READ_COMMITTED
    pending = _pending(ctx, session)
    reads, size, failed = _read(
        broker, ctx, request, _session_wanted(broker, pending), read_committed
    )
    wait_s = request.max_wait.total_seconds()
    if size < request.min_bytes and wait_s > 0 and not failed:
        # Parked on the session, not on each of its partitions: parking costs O(1) however
        # many partitions the session holds; the cache reports their changes to it.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            waiter = _SessionWaiter(request.min_bytes - size, read_committed)
            session.listeners.add(waiter.on_change)
            try:
                await asyncio.wait_for(asyncio.shield(waiter.future), deadline - loop.time())
                timed_out = False
            except TimeoutError:
                timed_out = True
            finally:
                session.listeners.discard(waiter.on_change)
            pending = _pending(ctx, session)
            reads, size, failed = _read(
                broker, ctx, request, _session_wanted(broker, pending), read_committed
            )
            # A change that brought too little (read_committed: data still above the LSO)
            # parks the fetch again for the rest of its wait.
            done = size >= request.min_bytes or failed or session.epoch != expected_epoch
            if done or timed_out or loop.time() >= deadline:
                break
    if session.epoch != expected_epoch:
        # Another request of the session was answered while this one waited.
        return _session_error(ctx, ErrorCode.invalid_fetch_session_epoch, session.id)
    included = [
        read
        for cached, read in zip(pending, reads, strict=True)
        if _record(session, cached, read[2], read_committed, True)
    ]
    return ctx.response(
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=session.id,
        responses=_topic_responses(ctx, included),
    )


def _pending(ctx: RequestContext, session: FetchSession) -> list[CachedPartition]:
    """The partitions an incremental fetch reads: a consumer's changed ones only; all of a
    follower's, whose every fetch reports its position on each (checked like a full fetch:
    leader epoch, diverging epoch)."""
    return session.partitions_in_order() if ctx.replication else session.changed_partitions()


class _SessionWaiter:
    """A fetch parked on its session until `needed` bytes are appended to its partitions; a
    read_committed fetch, and any change other than an append, re-checks instead of counting
    (what counts for read_committed is data below the LSO, which only a read can tell)."""

    __slots__ = ("needed", "read_committed", "future")

    def __init__(self, needed: int, read_committed: bool) -> None:
        self.needed = needed
        self.read_committed = read_committed
        self.future = asyncio.get_running_loop().create_future()

    def on_change(self, appended_bytes: int) -> None:
        self.needed -= appended_bytes
        if self.future.done():
            return
        if self.read_committed or appended_bytes == 0 or self.needed <= 0:
            self.future.set_result(None)


def _record(session: FetchSession, cached: CachedPartition, data, read_committed, rotate) -> bool:
    return session.record_response(
        cached,
        error_code=data.error_code,
        high_watermark=data.high_watermark,
        last_stable_offset=data.last_stable_offset,
        log_start_offset=data.log_start_offset,
        records_size=len(data.records) if data.records else 0,
        read_committed=read_committed,
        rotate=rotate,
    )


def replica_id(request) -> int:
    """The fetching follower's id; -1 for a consumer (what RequestContext.replication says)."""
    return _replica(request)[0]


def _cached_partition(name, topic_id, p) -> CachedPartition:
    return CachedPartition(
        topic=name,
        topic_id=topic_id,
        partition=p.partition,
        fetch_offset=p.fetch_offset,
        partition_max_bytes=p.partition_max_bytes,
        fetcher_log_start_offset=getattr(p, "log_start_offset", -1),
        current_leader_epoch=getattr(p, "current_leader_epoch", -1),
        last_fetched_epoch=getattr(p, "last_fetched_epoch", -1),
    )


def _forgotten(request, uses_topic_ids: bool) -> list:
    return [
        (topic.topic_id if uses_topic_ids else topic.topic, partition)
        for topic in getattr(request, "forgotten_topics_data", ())
        for partition in topic.partitions
    ]


def _resolve(broker, request) -> list:
    """(topic name or None, topic id or None, partition request) in request order."""
    wanted = []
    for topic in request.topics:
        topic_id = getattr(topic, "topic_id", None)
        if topic_id is None and not hasattr(topic, "topic"):
            topic_id = ZERO_UUID  # v13+ sent the zero id (kio reads it as None): unknown
        if topic_id is not None:
            meta = broker.image.topic_by_id(topic_id)
            name = meta.name if meta else None
        else:
            name = topic.topic
        for p in topic.partitions:
            wanted.append((name, topic_id, p))
    return wanted


def _session_wanted(broker, pending: list[CachedPartition]) -> list:
    """The session's partitions to read, with their topics' current names: a topic id may have
    become known, or its topic been deleted, since the partition joined the session."""
    image = broker.image
    wanted = []
    for cached in pending:
        if cached.topic_id is not None:
            meta = image.topic_by_id(cached.topic_id)
            wanted.append((meta.name if meta else None, cached.topic_id, cached))
        else:
            wanted.append((cached.topic, None, cached))
    return wanted


def _read(broker, ctx: RequestContext, request, wanted, read_committed: bool):
    """Per partition of `wanted`, in order: (name, topic id, PartitionData); the bytes read and
    whether any partition failed."""
    rm = broker.replica_manager
    follower = ctx.replication
    replica = _replica(request) if follower else None
    quota_bytes = None if follower else broker.quotas.fetch_max_bytes(ctx.user, ctx.client_id or "")
    budget = FetchBudget(
        request.max_bytes if quota_bytes is None else min(request.max_bytes, quota_bytes)
    )
    failed = False
    reads = []
    readable = readable_topics(broker, ctx, request, {name for name, _, _ in wanted})
    for name, topic_id, p in wanted:
        if name is not None and name not in readable:
            log, code = None, ErrorCode.topic_authorization_failed
        else:
            log, code = rm.lookup(name, p.partition, getattr(p, "current_leader_epoch", -1))
        if log is None and topic_id is not None and name is None:
            code = ErrorCode.unknown_topic_id
        records = b""
        aborted = None
        diverging = None
        if code == ErrorCode.none and follower:
            diverging = _diverging_epoch(ctx, log, p)
        if code == ErrorCode.none and diverging is None:
            if follower:
                max_offset = log.log_end_offset
            elif read_committed:
                max_offset = log.last_stable_offset
            else:
                max_offset = log.high_watermark
            try:
                data, _ = budget.read(
                    log, p.fetch_offset, p.partition_max_bytes, max_offset, ctx.zero_copy
                )
            except OffsetOutOfRangeError:
                code = ErrorCode.offset_out_of_range
            else:
                if follower:
                    # Only a read that succeeded says the follower has what precedes its
                    # offset: one past this log's end (Kafka's rule too) is no such proof.
                    rm.follower_fetched((name, p.partition), *replica, p.fetch_offset)
                if data.size:
                    # One slice (the usual case) goes out as read; only a few join.
                    records = data.records[0] if len(data.records) == 1 else b"".join(data.records)
                if read_committed:
                    # Kafka bounds the search by the end of what was read; an empty read has
                    # none to report.
                    aborted = tuple(
                        ctx.response("AbortedTransaction", producer_id=pid, first_offset=first)
                        for pid, first in (
                            log.aborted_transactions(p.fetch_offset, data.next_offset)
                            if data.size
                            else ()
                        )
                    )
        failed = failed or code != ErrorCode.none
        partition = ctx.response(
            "PartitionData",
            partition_index=p.partition,
            error_code=code,
            high_watermark=log.high_watermark if log else -1,
            last_stable_offset=log.last_stable_offset if log else -1,
            log_start_offset=log.log_start_offset if log else -1,
            aborted_transactions=aborted,
            preferred_read_replica=-1,
            records=records,
            **({"diverging_epoch": diverging} if diverging is not None else {}),
        )
        reads.append((name, topic_id, partition))
    return reads, budget.total, failed


def _diverging_epoch(ctx: RequestContext, log, p):
    """KIP-320: a follower whose last fetched epoch ends earlier here than where it fetches
    from (or that this log does not have) diverged; it is told where the leader's log for that
    epoch ends, and truncates there."""
    last_fetched_epoch = getattr(p, "last_fetched_epoch", -1)
    if last_fetched_epoch < 0 or log.leader_epochs.latest_epoch < 0:
        # A log without epochs (entries in magic 0/1 since) cannot tell; a follower
        # without epochs of its own truncated to its high watermark instead.
        return None
    epoch, end_offset = log.end_offset_for_epoch(last_fetched_epoch)
    if epoch < last_fetched_epoch or end_offset < p.fetch_offset:
        return ctx.response("EpochEndOffset", epoch=epoch, end_offset=end_offset)
    return None


def _replica(request) -> tuple[int, int]:
    """The fetching follower's id and broker epoch (-1 before v15, which does not send it)."""
    state = getattr(request, "replica_state", None)  # v15+
    if state is not None:
        return state.replica_id, state.replica_epoch
    return getattr(request, "replica_id", -1), -1


def readable_topics(broker, ctx: RequestContext, request, names: set) -> set:
    """Consumers need READ on each topic, followers CLUSTER_ACTION on the cluster. Checked on
    every request, so a session's partitions lose access as soon as an ACL goes."""
    names.discard(None)
    if ctx.replication:
        return names if authorize_cluster(broker, ctx, AclOperation.CLUSTER_ACTION) else set()
    return filter_authorized(broker, ctx, AclOperation.READ, ResourceType.TOPIC, names)


class FetchBudget:
    """A fetch's max_bytes, shared by its partitions in request order. As in Kafka, the first
    batch read goes out whole even beyond the limits, so a consumer always makes progress."""

    __slots__ = ("remaining", "first", "total")

    def __init__(self, max_bytes: int) -> None:
        self.remaining, self.first, self.total = max_bytes, True, 0

    def read(
        self, log, offset: int, partition_max_bytes: int, max_offset: int, as_slice: bool = False
    ):
        """The partition's read (raises OffsetOutOfRangeError) and the byte limit it had."""
        limit = min(partition_max_bytes, self.remaining)
        data = log.read(
            offset, limit, max_offset=max_offset, min_one_batch=self.first, as_slice=as_slice
        )
        if data.size:
            self.remaining = max(0, self.remaining - data.size)
            self.total += data.size
            self.first = False
        return data, limit


def _topic_responses(ctx: RequestContext, reads) -> tuple:
    """Consecutive partitions of one topic share a topic entry, as in Kafka's FetchResponse:
    the response keeps the order partitions were read in (the session's rotation order)."""
    topics: list[tuple[object, object, list]] = []
    for name, topic_id, partition in reads:
        if topics and topics[-1][0] == name and topics[-1][1] == topic_id:
            topics[-1][2].append(partition)
        else:
            topics.append((name, topic_id, [partition]))
    return tuple(
        ctx.response(
            "FetchableTopicResponse", topic=name, topic_id=topic_id, partitions=tuple(parts)
        )
        for name, topic_id, parts in topics
    )
