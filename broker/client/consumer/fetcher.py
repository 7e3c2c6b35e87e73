"""The consumer's fetcher: KIP-227 incremental fetch sessions, one per broker node, prefetching
while the application processes what it was handed.

`FetchSessionHandler` is the sans-io half (Kafka's FetchSessionHandler): given the partitions to
fetch from a node, it builds a full request (a new session) or an incremental one (only what was
added or changed, and what to forget), and follows the broker's answers: a session the broker no
longer knows (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) or any failure falls back
to a full fetch.

`Fetcher` is the asyncio half: one fetch in flight per node for the partitions that have a
position and are not paused, as Kafka's consumer does, and one fetch ahead, as librdkafka
prefetches: a partition whose fetched records are being handed out is fetched again from where
they end, so that the next ones are there when they run out (at most two fetches buffered a
partition; none ahead of a caught-up partition, whose fetch would wait on the broker for new
data). Records are handed out once and in order. Positions live in the `SubscriptionState`;
a fetcher of its own (own client, own connections and sessions) over a state holding explicit
[start, stop) ranges reads just those, and several fetchers may share one `records_ready` event
to feed one iteration.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client.connection import ConnectionClosed
from broker.client.consumer.subscription_state import EARLIEST, NONE, SubscriptionState
from broker.client.errors import KafkaAdminError, OffsetOutOfRangeError
from broker.client.models import ConsumerRecord, TopicPartition
from broker.client.record_decoder import ISOLATION_LEVELS, CompletedFetch
from broker.client.routing import RoutingClient

FETCH = 1
INVALID_SESSION_ID = 0
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
INT32_MAX = (1 << 31) - 1
LIST_OFFSETS_EARLIEST, LIST_OFFSETS_LATEST = -2, -1

SESSION_ERRORS = frozenset(
    {ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch}
)
# Partition errors after which the leader is looked up again; the fetch is retried.
ROUTING_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.kafka_storage_error,
        ErrorCode.offset_not_available,
    }
)


@dataclass(frozen=True)
class FetchTarget:
    """What a fetch asks of one partition; the session compares these to send only changes."""

    topic_id: uuid.UUID | None
    fetch_offset: int
    max_bytes: int
    # A follower's (the replica fetcher's); a consumer sends -1.
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(frozen=True)
class FetchRequestData:
    session_id: int
    epoch: int
    to_send: dict[TopicPartition, FetchTarget]
    to_forget: dict[TopicPartition, FetchTarget]
    # Every partition the response may answer for, with the offset it was fetched from.
    session: dict[TopicPartition, FetchTarget]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


def fetch_request(session: Any, request: FetchRequestData, **fields: Any) -> Any:
    """The Fetch request for `request`'s partitions and session, at the session's version;
    `fields` are the request's own (replica, waits, sizes, isolation, rack)."""

    def topics(partitions: dict[TopicPartition, FetchTarget]) -> dict[str, list]:
        by_topic: dict[str, list] = defaultdict(list)
        for tp, target in partitions.items():
            by_topic[tp.topic].append((tp.partition, target))
        return by_topic

    fetch_topics = tuple(
        session.request(
            FETCH,
            "FetchTopic",
            topic=topic,
            topic_id=ps[0][1].topic_id,
            partitions=tuple(
                session.request(
                    FETCH,
                    "FetchPartition",
                    partition=p,
                    current_leader_epoch=target.current_leader_epoch,
                    fetch_offset=target.fetch_offset,
                    last_fetched_epoch=target.last_fetched_epoch,
                    log_start_offset=-1,
                    partition_max_bytes=target.max_bytes,
                )
                for p, target in ps
            ),
        )
        for topic, ps in topics(request.to_send).items()
    )
    forgotten = tuple(
        session.request(
            FETCH,
            "ForgottenTopic",
            topic=topic,
            topic_id=ps[0][1].topic_id,
            partitions=tuple(p for p, _ in ps),
        )
        for topic, ps in topics(request.to_forget).items()
    )
    return session.request(
        FETCH,
        "FetchRequest",
        session_id=request.session_id,
        session_epoch=request.epoch,
        topics=fetch_topics,
        forgotten_topics_data=forgotten,
        **fields,
    )


class FetchSessionHandler:
    """The client's side of one node's fetch session."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[TopicPartition, FetchTarget] = {}

    def build(self, wanted: Mapping[TopicPartition, FetchTarget]) -> FetchRequestData:
        wanted = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return FetchRequestData(self.session_id, INITIAL_EPOCH, wanted, {}, wanted)
        to_send = {tp: t for tp, t in wanted.items() if self.partitions.get(tp) != t}
        to_forget = {tp: t for tp, t in self.partitions.items() if tp not in wanted}
        return FetchRequestData(self.session_id, self.epoch, to_send, to_forget, wanted)

    def handle_response(self, request: FetchRequestData, error_code: int, session_id: int) -> bool:
        """Follow the broker's answer; False when the response carries no partition data."""
        if error_code != ErrorCode.none:
            self.reset()
            return False
        if session_id == INVALID_SESSION_ID:
            # The broker keeps no session (cache full, or the session emptied): the next
            # request is full again.
            self.reset()
            return True
        if request.full:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = next_epoch(self.epoch)
        self.partitions = dict(request.session)
        return True

    def reset(self) -> None:
        """Start over with a full fetch (a lost connection, or a session the broker dropped)."""
        self.session_id, self.epoch, self.partitions = INVALID_SESSION_ID, INITIAL_EPOCH, {}


@dataclass
class BufferedFetch:
    """One partition's fetched records, decoded as they are handed out, in order."""

    position: int  # the offset the next record handed out must continue from
    records: CompletedFetch
    node: int  # the broker it came from


@dataclass
class _Plan:
    by_node: dict[int, dict[TopicPartition, FetchTarget]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    unroutable: bool = False
    # When a caught-up partition held back (see _plan) is to be fetched anyway.
    held_until: float | None = None


class Fetcher:
    """Fetches the fetchable partitions of `subscriptions` through `client`'s connections."""

    def __init__(
        self,
        client: RoutingClient,
        subscriptions: SubscriptionState,
        *,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        isolation_level: str = "read_uncommitted",
        client_rack: str = "",
        records_ready: asyncio.Event | None = None,
    ) -> None:
        self.client = client
        self.subscriptions = subscriptions
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation = ISOLATION_LEVELS[isolation_level]
        self.client_rack = client_rack  # KIP-392: lets a cluster answer from a nearby replica
        self.records_ready = records_ready or asyncio.Event()
        self.sessions: dict[int, FetchSessionHandler] = {}
        self._completed: dict[TopicPartition, BufferedFetch] = {}
        # The fetch after each partition's buffered one, from where that one ends.
        self._ahead: dict[TopicPartition, BufferedFetch] = {}
        self._in_flight: dict[int, set[TopicPartition]] = {}
        # Where each partition's readable log ended at its last fetch, and since when a
        # caught-up partition is held back.
        self._log_end: dict[TopicPartition, int] = {}
        self._held_since: dict[TopicPartition, float] = {}
        self._error: Exception | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._node_tasks: set[asyncio.Task] = set()
        subscriptions.add_listener(self._wake.set)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="fetcher")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def close(self, spare: RoutingClient | None = None) -> None:
        """Stop fetching and close the fetch sessions. A node's connection that carries a fetch
        still in flight answers a close only after that fetch's long poll (fetch_max_wait_ms):
        its session is closed through `spare`'s connection instead, if given (a session is
        not bound to a connection)."""
        busy = {node for node, targets in self._in_flight.items() if targets}
        tasks = [t for t in [self._task, *self._node_tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        # As Kafka's consumer does: each fetch session closed (epoch -1), so that the broker
        # frees its cache slot now rather than when the session would be evicted.
        closing = [
            self._close_session(node, handler, spare if node in busy else None)
            for node, handler in self.sessions.items()
            if handler.session_id != INVALID_SESSION_ID
        ]
        await asyncio.gather(*closing, return_exceptions=True)
        self.sessions.clear()

    async def _close_session(
        self, node: int, handler: FetchSessionHandler, via: RoutingClient | None
    ) -> None:
        async def close() -> None:
            session = await via.session(node) if via is not None else self.client.open_session(node)
            if session is None:
                return  # the connection is gone, and the broker forgets the session in time
            closing = FetchRequestData(handler.session_id, FINAL_EPOCH, {}, {}, {})
            await session.send(self._request(session, closing))

        # Answered after any long poll it follows on the connection (fetch_max_wait_ms at
        # most), or after `via` connects: a broker that does not answer by then does not hold
        # close() up any longer.
        timeout_ms = min(self.client.request_timeout_ms, self.fetch_max_wait_ms + 1000)
        await asyncio.wait_for(close(), timeout_ms / 1000)

    # -- handing records out ----------------------------------------------------------------

    def drain(
        self, max_records: int, only: set[TopicPartition] | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to `max_records` buffered records (of the `only` partitions, if given), moving
        the positions past them. Raises the error a fetch met (offset out of range with
        auto_offset_reset=none, authorization)."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        taken = 0
        for tp in list(self._completed):
            if taken >= max_records:
                break
            fetch = self._completed[tp]
            state = self.subscriptions.partitions.get(tp)
            if state is None or state.position != fetch.position:
                self.forget_buffered(tp)  # revoked, or sought elsewhere since it was fetched
                self._wake.set()
                continue
            if state.paused or (only is not None and tp not in only):
                continue
            # A buffered fetch has records to take; one that ends at a corrupt entry is done
            # there, and fetching from the entry again raises its error.
            records = fetch.records.take(max_records - taken)
            stop = state.stop_offset
            past_stop = stop is not None and bool(records) and records[-1].offset >= stop
            if past_stop:
                records = [r for r in records if r.offset < stop]
            if records:
                out[tp] = records
                taken += len(records)
                fetch.position = records[-1].offset + 1
            if past_stop:
                # The range is read to its stop, and the records past it are taken out of the
                # buffer: what is left there must not serve a range that starts at the stop
                # (it would skip them), so it is dropped and fetched again.
                assert stop is not None
                self.forget_buffered(tp)
                fetch.position = stop
                self._wake.set()
            elif fetch.records.done:
                fetch.position = max(fetch.position, fetch.records.next_offset)
                del self._completed[tp]
                self._promote_ahead(tp, fetch)
                fetch.position = state.within_range(fetch.position)
                self._wake.set()
            else:
                # Round robin: a partition handed out goes to the back of the line.
                self._completed[tp] = self._completed.pop(tp)
            last_epoch = records[-1].leader_epoch if records else -1
            self.subscriptions.advance(tp, fetch.position, last_epoch)
        return out

    def _promote_ahead(self, tp: TopicPartition, done: BufferedFetch) -> None:
        """`tp`'s buffered records are all handed out: the fetch ahead takes their place, unless
        they ended short of it (at a corrupt entry, or at the range's stop). One that came
        with nothing to hand out moves the position past what it skipped (control batches,
        aborted data); one that failed is fetched again, and meets its error, as any fetch."""
        ahead = self._ahead.pop(tp, None)
        if ahead is None or ahead.position != done.position:
            return
        if not ahead.records.done:
            self._completed[tp] = ahead
            self.records_ready.set()
        elif ahead.records.error is None:
            done.position = max(done.position, ahead.records.next_offset)

    def has_buffered(self) -> bool:
        paused = self.subscriptions.paused()
        return self._error is not None or any(tp not in paused for tp in self._completed)

    def forget_buffered(self, tp: TopicPartition) -> None:
        self._completed.pop(tp, None)
        self._ahead.pop(tp, None)

    # -- the fetch loop ---------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            backoff = False
            try:
                await self.reset_positions()
                plan = await self._plan()
            except (KafkaAdminError, ConnectionClosed, OSError) as e:
                if isinstance(e, KafkaAdminError) and not _transient(e):
                    self._fail(e)
                plan, backoff = _Plan(), True
            for node, targets in plan.by_node.items():
                self._in_flight[node] = set(targets)
                task = asyncio.create_task(self._fetch_from(node, targets))
                self._node_tasks.add(task)
                task.add_done_callback(self._node_tasks.discard)
            if backoff or plan.unroutable:
                await self._sleep_unless_woken(self.client.retry_backoff_ms / 1000)
            elif plan.held_until is not None:
                # Not wait_for: on Python 3.11 it can swallow a cancellation that comes as the
                # event is set, and close() would wait for this task forever.
                timer = asyncio.get_running_loop().call_at(plan.held_until, self._wake.set)
                try:
                    await self._wake.wait()
                finally:
                    timer.cancel()
            else:
                await self._wake.wait()

    async def _sleep_unless_woken(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except TimeoutError:
            pass

    def _fail(self, error: Exception) -> None:
        self._error = error
        self.records_ready.set()

    async def _plan(self) -> _Plan:
        plan = _Plan()
        busy = set().union(*self._in_flight.values()) if self._in_flight else set()
        # A caught-up partition (nothing past its position at its last fetch) fetched alone
        # makes the broker wait up to fetch_max_wait_ms for data, and the node's next fetch for
        # partitions whose records are being handed out waits behind it: it is held back to go
        # with them once they drain, fetch_max_wait_ms at the most.
        draining = {
            fetch.node
            for tp, fetch in self._completed.items()
            if tp in self.subscriptions.partitions and not self.subscriptions.partitions[tp].paused
        }
        now = asyncio.get_running_loop().time()
        max_wait = self.fetch_max_wait_ms / 1000
        held: dict[int, dict[TopicPartition, FetchTarget]] = defaultdict(dict)
        for tp in self.subscriptions.fetchable():
            if tp in busy or tp in self._ahead:
                continue
            position = self.subscriptions.partitions[tp].position
            buffered = self._completed.get(tp)
            if buffered is not None:
                position = self._fetch_ahead_offset(tp, buffered, position)
                if position is None:
                    continue
            try:
                route, leader = await self.client.leader(*tp)
            except KafkaAdminError as e:
                if not _transient(e):
                    raise
                plan.unroutable = True
                continue
            if leader in self._in_flight:
                continue
            target = FetchTarget(route.topic_id, position, self.max_partition_fetch_bytes)
            if leader in draining and position >= self._log_end.get(tp, position + 1):
                if now < self._held_since.setdefault(tp, now) + max_wait:
                    held[leader][tp] = target
                    continue
            self._held_since.pop(tp, None)
            plan.by_node[leader][tp] = target
        # A held partition goes along with any fetch its node gets now (answered at once for
        # the others' data: records being fetched ahead never end at the log end).
        for leader, targets in held.items():
            if leader in plan.by_node:
                plan.by_node[leader].update(targets)
                for tp in targets:
                    self._held_since.pop(tp, None)
                continue
            for tp in targets:
                held_until = self._held_since[tp] + max_wait
                plan.held_until = min(plan.held_until or held_until, held_until)
        return plan

    def _fetch_ahead_offset(
        self, tp: TopicPartition, buffered: BufferedFetch, position: int
    ) -> int | None:
        """Where the fetch ahead of `tp`'s buffered records starts; None for no fetch ahead: the
        records are stale (dropped at the next drain), they reached the log end or the range's
        stop as of their fetch."""
        if buffered.position != position:
            return None
        end = buffered.records.end_offset
        stop = self.subscriptions.partitions[tp].stop_offset
        if end >= self._log_end.get(tp, end) or (stop is not None and end >= stop):
            return None
        return end

    async def _fetch_from(self, node: int, targets: dict[TopicPartition, FetchTarget]) -> None:
        handler = self.sessions.setdefault(node, FetchSessionHandler())
        request = handler.build(targets)
        try:
            try:
                session = await self.client.session(node)
                response = await session.send(self._request(session, request))
            except (ConnectionClosed, OSError, KafkaAdminError):
                handler.reset()
                for topic in {tp.topic for tp in targets}:
                    self.client.forget_route(topic, ConnectionClosed())
                await asyncio.sleep(self.client.retry_backoff_ms / 1000)
                return
            if not handler.handle_response(request, response.error_code, response.session_id):
                if response.error_code not in SESSION_ERRORS:
                    await asyncio.sleep(self.client.retry_backoff_ms / 1000)
                return
            if self._handle_partitions(node, request, response):
                await asyncio.sleep(self.client.retry_backoff_ms / 1000)
        finally:
            self._in_flight.pop(node, None)
            self._wake.set()

    def _request(self, session: Any, request: FetchRequestData) -> Any:
        return fetch_request(
            session,
            request,
            replica_id=-1,
            max_wait=timedelta(milliseconds=self.fetch_max_wait_ms),
            min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes,
            isolation_level=self.isolation,
            rack_id=self.client_rack,
        )

    def _handle_partitions(self, node: int, request: FetchRequestData, response: Any) -> bool:
        """Buffer what came; True when an error calls for a pause before the next fetch."""
        names = {t.topic_id: tp.topic for tp, t in request.session.items()}
        back_off = False
        for t in response.responses:
            topic = getattr(t, "topic", None) or names.get(getattr(t, "topic_id", None))
            for p in t.partitions:
                tp = TopicPartition(topic, p.partition_index)
                target = request.session.get(tp)
                state = self.subscriptions.partitions.get(tp)
                if target is None or state is None:
                    continue  # revoked while the fetch was out
                buffered = self._completed.get(tp)
                ahead = (
                    buffered is not None
                    and buffered.position == state.position
                    and buffered.records.end_offset == target.fetch_offset
                )
                if not ahead and state.position != target.fetch_offset:
                    continue  # sought elsewhere while the fetch was out
                if p.error_code == ErrorCode.none:
                    stable = self.isolation and p.last_stable_offset >= 0
                    self._log_end[tp] = p.last_stable_offset if stable else p.high_watermark
                    self._buffer(node, tp, target.fetch_offset, p, ahead)
                elif p.error_code in ROUTING_ERRORS:
                    self.client.forget_route(tp.topic, KafkaAdminError.from_code(p.error_code))
                    back_off = True
                elif ahead:
                    # Not fetched ahead again: fetched, and the error met and handled, once the
                    # buffered records are handed out.
                    nothing = CompletedFetch(*tp, target.fetch_offset, b"", None, self.isolation)
                    self._ahead[tp] = BufferedFetch(target.fetch_offset, nothing, node)
                elif p.error_code == ErrorCode.offset_out_of_range:
                    if self.subscriptions.default_reset_strategy == NONE:
                        self._fail(OffsetOutOfRangeError(tp, target.fetch_offset))
                    else:
                        self.subscriptions.request_reset(tp)
                else:
                    self._fail(KafkaAdminError.from_code(p.error_code, None, f"{tp[0]}-{tp[1]}"))
        return back_off

    def _buffer(
        self, node: int, tp: TopicPartition, fetch_offset: int, data: Any, ahead: bool
    ) -> None:
        records = CompletedFetch(
            tp.topic,
            tp.partition,
            fetch_offset,
            data.records or b"",
            data.aborted_transactions,
            self.isolation,
        )
        if ahead:
            self._ahead[tp] = BufferedFetch(fetch_offset, records, node)
        elif not records.done:
            self._completed[tp] = BufferedFetch(fetch_offset, records, node)
            self.records_ready.set()
        elif records.error is not None:
            self._fail(records.error)
        elif records.next_offset > fetch_offset:
            # Only control or aborted batches: nothing to hand out, but the position moves on.
            state = self.subscriptions.partitions[tp]
            self.subscriptions.advance(tp, state.within_range(records.next_offset))

    async def reset_positions(self) -> None:
        """ListOffsets for partitions whose position is to be reset, by leader."""
        pending = self.subscriptions.needs_reset()
        groups: dict[tuple[int, str], list[TopicPartition]] = defaultdict(list)
        for tp, strategy in pending.items():
            _, leader = await self.client.leader(*tp)
            groups[(leader, strategy)].append(tp)
        for (leader, strategy), tps in groups.items():
            timestamp = LIST_OFFSETS_EARLIEST if strategy == EARLIEST else LIST_OFFSETS_LATEST
            offsets = await self.client.list_offsets_at(leader, tps, timestamp, self.isolation)
            for tp in tps:
                state = self.subscriptions.partitions.get(tp)
                if state is not None and state.reset_strategy == strategy:
                    self.subscriptions.seek(tp, offsets[tp])


def _transient(error: KafkaAdminError) -> bool:
    return error.code in ROUTING_ERRORS or error.retriable
