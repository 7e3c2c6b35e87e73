"""Consumer: group membership under either protocol, fetch sessions and committed offsets.

    async with Consumer("host:9092", group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["orders"], listener=MyListener())
        async for record in consumer:
            ...

The parts, as in aiokafka and Kafka's Java client: `subscription_state` (what is read and where
each partition stands), `fetcher` (KIP-227 sessions per broker), `classic_coordinator` and
`consumer_coordinator` (one per group protocol, over `group_member`), `assignors` (client-side,
classic), `rebalance` (listeners). The consumer holds two clients: one for metadata, offsets
and the group coordinator, one for fetches, so a long-polling fetch never delays a heartbeat.

Positions follow Kafka's rules: `position()` is the next record handed out; `commit()` without
offsets commits every position; auto-commit commits, every auto_commit_interval_ms and before
partitions are revoked, what was handed out before the latest poll (records returned by a poll
count as processed when the application polls again).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from kio.schema.errors import ErrorCode

from broker.client.cluster import GROUP_KEY
from broker.client.consumer.classic_coordinator import ClassicCoordinator
from broker.client.consumer.config import (
    CLASSIC,
    CLASSIC_ONLY_OPTIONS,
    CONSUMER,
    CONSUMER_OPTIONS,
)
from broker.client.consumer.consumer_coordinator import (
    CONSUMER_GROUP_HEARTBEAT,
    ConsumerCoordinator,
)
from broker.client.consumer.fetcher import (
    LIST_OFFSETS_EARLIEST,
    LIST_OFFSETS_LATEST,
    Fetcher,
)
from broker.client.consumer.group_member import GroupMember
from broker.client.consumer.parallel_rebalance import ParallelRebalance
from broker.client.consumer.rebalance import (
    ConsumerRebalanceListener,
    Partitions,
    RebalanceInvoker,
)
from broker.client.consumer.subscription_state import EARLIEST, LATEST, NONE, SubscriptionState
from broker.client.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaAdminError,
    NoOffsetForPartitionError,
    check,
)
from broker.client.group_offsets import (
    committed_offsets,
    offset_commit_request,
    offset_fetch_request,
)
from broker.client.models import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from broker.client.options import COMMON_OPTIONS, ConfigError, parse_options
from broker.client.record_decoder import ISOLATION_LEVELS
from broker.client.routing import RoutingClient
from broker.client.session import Security

__all__ = ["Consumer", "ConsumerRebalanceListener"]

log = logging.getLogger(__name__)

# OffsetCommit answers meaning the member is no longer who handed the records out.
FENCED_COMMIT = frozenset(
    {
        ErrorCode.illegal_generation,
        ErrorCode.stale_member_epoch,
        ErrorCode.unknown_member_id,
        ErrorCode.fenced_instance_id,
        ErrorCode.rebalance_in_progress,
    }
)
# The longest a poll waits at a time, so that the poll timer and errors are looked at.
_POLL_SLICE_S = 1.0

Offsets = Mapping[TopicPartition, OffsetAndMetadata | int]


class Consumer:
    DEFAULT_CLIENT_ID = "fjord-consumer"

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        security: Security | None = None,
        **options: Any,
    ) -> None:
        """Options are the Java consumer's properties with dots as underscores (see
        config.py); an unknown one or a bad value raises ConfigError."""
        self.config = parse_options(CONSUMER_OPTIONS, options)
        if self.config.group_protocol == CONSUMER:
            # As Kafka 4's ConsumerConfig: under KIP-848 the broker decides these (the group's
            # group.consumer.* configs), so a value given here would be silently ignored.
            for name in CLASSIC_ONLY_OPTIONS:
                if name in options:
                    raise ConfigError(name, "cannot be set when group.protocol=consumer")
        common = {name: getattr(self.config, name) for name in COMMON_OPTIONS}
        common["client_id"] = self.config.client_id or self.DEFAULT_CLIENT_ID
        if self.config.enable_parallel_rebalance and self.config.group_id is None:
            raise ConfigError("enable_parallel_rebalance", "needs a group_id to commit to")
        self._client_args = (bootstrap_servers, security, common)
        self.client = RoutingClient(bootstrap_servers, security, **common)
        self.subscriptions = SubscriptionState(self.config.auto_offset_reset)
        self.records_ready = asyncio.Event()
        self._fetchers: list[Fetcher] = []
        self._fetch_clients: list[RoutingClient] = []
        self.fetcher = self.make_fetcher(self.subscriptions)
        self._fetchers.append(self.fetcher)
        self._rebalance = RebalanceInvoker(
            self.subscriptions,
            before_revoke=self._before_revoke,
            after_assign=self._after_assign,
            after_remove=self._after_remove,
        )
        self.parallel = ParallelRebalance(self) if self.config.enable_parallel_rebalance else None
        self.coordinator: GroupMember | None = None
        self.group_protocol: str | None = None
        self._processed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._auto_commit: asyncio.Task | None = None
        self._started = False
        self._closed = False
        self._handed_out = 0  # records handed out since the event loop last turned in a poll

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def make_fetcher(self, subscriptions: SubscriptionState) -> Fetcher:
        """A fetcher over `subscriptions` with a client (connections, fetch sessions) of its
        own, feeding this consumer's polls once added with `add_fetcher`; closed with it."""
        bootstrap_servers, security, common = self._client_args
        client = RoutingClient(bootstrap_servers, security, **common)
        self._fetch_clients.append(client)
        return Fetcher(
            client,
            subscriptions,
            fetch_min_bytes=self.config.fetch_min_bytes,
            fetch_max_wait_ms=self.config.fetch_max_wait_ms,
            fetch_max_bytes=self.config.fetch_max_bytes,
            max_partition_fetch_bytes=self.config.max_partition_fetch_bytes,
            isolation_level=self.config.isolation_level,
            client_rack=self.config.client_rack,
            records_ready=self.records_ready,
        )

    async def start(self) -> None:
        await self.client.start()
        await self._fetch_clients[0].start()
        if self.config.group_id is not None:
            self.coordinator = await self._make_coordinator()
            if self.config.enable_auto_commit:
                self._auto_commit = asyncio.create_task(self._auto_commit_loop())
        self.fetcher.start()
        self._started = True

    async def _make_coordinator(self) -> GroupMember:
        protocol = self.config.group_protocol
        if protocol is None:
            session = await self.client.any_session()
            offered = CONSUMER_GROUP_HEARTBEAT in session.broker_versions
            protocol = CONSUMER if offered else CLASSIC
        self.group_protocol = protocol
        c = self.config
        common: dict[str, Any] = dict(
            group_instance_id=c.group_instance_id,
            max_poll_interval_ms=c.max_poll_interval_ms,
            metadata_max_age_ms=c.metadata_max_age_ms,
            client_rack=c.client_rack,
        )
        args = (self.client, c.group_id, self.subscriptions, self._rebalance)
        if protocol == CONSUMER:
            return ConsumerCoordinator(
                *args, group_remote_assignor=c.group_remote_assignor, **common
            )
        return ClassicCoordinator(
            *args,
            assignors=c.partition_assignment_strategy,
            session_timeout_ms=c.session_timeout_ms,
            heartbeat_interval_ms=c.heartbeat_interval_ms,
            **common,
        )

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group, close the connections."""
        if self._closed:
            return
        self._closed = True
        if self._auto_commit is not None:
            self._auto_commit.cancel()
            await asyncio.gather(self._auto_commit, return_exceptions=True)
        try:
            if self.coordinator is not None:
                await self.coordinator.close()  # revokes first: auto-commit commits there
        finally:
            # At once: each waits for its fetch sessions to close, those with a fetch in
            # flight through this consumer's own connections.
            await asyncio.gather(*(fetcher.close(self.client) for fetcher in self._fetchers))
            for client in self._fetch_clients:
                await client.close()
            await self.client.close()

    # -- subscribing ------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | re.Pattern[str] | str,
        listener: ConsumerRebalanceListener | Any = None,
    ) -> None:
        """Join the group for these topics, or for every topic a pattern matches (a
        `re.Pattern`, or a string starting with `^`)."""
        coordinator = self._require_group()
        self.subscriptions.subscribe(topics)
        self._rebalance.listener = listener
        coordinator.topics_may_have_changed()
        if self._started:
            coordinator.start()
        coordinator.wake()

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read these partitions without group membership (offsets may still be committed to
        the group_id, if any)."""
        self.subscriptions.assign_from_user(partitions)

    def unsubscribe(self) -> None:
        """Drop the subscription or the assignment; a group member leaves (in the background,
        its listener told of the revocation first)."""
        self.subscriptions.unsubscribe()
        if self.coordinator is not None:
            self.coordinator.wake()

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern, those it matches in what is assigned)."""
        if self.subscriptions.pattern is not None:
            return {tp.topic for tp in self.subscriptions.partitions}
        return set(self.subscriptions.topics)

    def assignment(self) -> set[TopicPartition]:
        return self.subscriptions.assignment()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """For a transactional producer's send_offsets_to_transaction: fenced like commits."""
        if self.coordinator is None:
            return ConsumerGroupMetadata(self.config.group_id or "")
        return self.coordinator.group_metadata()

    # -- records ----------------------------------------------------------------------------

    def add_fetcher(self, fetcher: Fetcher) -> None:
        """Feed another fetcher's records into this consumer's polls (it must have been made
        with this consumer's `records_ready` event); closed with the consumer."""
        self._fetchers.append(fetcher)

    def remove_fetcher(self, fetcher: Fetcher) -> None:
        self._fetchers.remove(fetcher)

    async def getmany(
        self,
        *partitions: TopicPartition,
        timeout_ms: int = 0,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """What is fetched, up to `max_records` (max_poll_records), waiting up to `timeout_ms`
        for something to come; only from `partitions` if given."""
        self._check_open()
        limit = max_records or self.config.max_poll_records
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        only = {TopicPartition(*tp) for tp in partitions} or None
        self._processed = self.subscriptions.consumed_offsets()
        if self.parallel is not None:
            self.parallel.before_poll()
        # A turn of the event loop for every max_poll_records records handed out: while
        # records are buffered nothing below waits, and the fetcher would send the next fetch
        # (and the connections read its response, a turn per chunk) only once every buffer ran
        # dry, leaving the application idle while the broker works. Not every poll: getone()
        # is one per record.
        if self._handed_out >= self.config.max_poll_records:
            self._handed_out = 0
            await asyncio.sleep(0)
        while True:
            if self.coordinator is not None:
                self.coordinator.poll()
            await self._update_positions()
            self.records_ready.clear()
            records = self._drain(limit, only)
            if self.parallel is not None:
                self.parallel.after_drain(records)
            if records:
                self._handed_out += sum(map(len, records.values()))
                return records
            remaining = deadline - loop.time()
            if remaining <= 0:
                return {}
            try:
                await asyncio.wait_for(self.records_ready.wait(), min(remaining, _POLL_SLICE_S))
            except TimeoutError:
                pass

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record, waiting as long as it takes."""
        while True:
            records = await self.getmany(
                *partitions, timeout_ms=int(_POLL_SLICE_S * 1000), max_records=1
            )
            for batch in records.values():
                return batch[0]

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ConsumerRecord:
        if self._closed:
            raise StopAsyncIteration
        return await self.getone()

    def _drain(
        self, limit: int, only: set[TopicPartition] | None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for fetcher in self._fetchers:
            remaining = limit - sum(map(len, out.values()))
            if remaining <= 0:
                break
            for tp, records in fetcher.drain(remaining, only).items():
                out.setdefault(tp, []).extend(records)
        return out

    # -- positions --------------------------------------------------------------------------

    async def _update_positions(self) -> None:
        """Partitions without a position start at their committed offset, or else where
        auto_offset_reset says (NoOffsetForPartitionError for "none")."""
        missing = self.subscriptions.missing_positions()
        if not missing:
            return
        committed = await self._fetch_committed(missing) if self.config.group_id else {}
        for tp in missing:
            if not self.subscriptions.is_assigned(tp):
                continue
            state = self.subscriptions.state(tp)
            if state.position is not None or state.reset_strategy is not None:
                continue  # sought meanwhile
            found = committed.get(tp)
            if found is not None:
                self.subscriptions.seek(tp, found.offset, found.leader_epoch)
            elif self.config.auto_offset_reset == NONE:
                raise NoOffsetForPartitionError(tp)
            else:
                self.subscriptions.request_reset(tp)

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record handed out for `tp`."""
        self._check_open()
        tp = TopicPartition(*tp)
        state = self.subscriptions.state(tp)
        if state.position is None:
            await self._update_positions()
            await self.fetcher.reset_positions()
        if state.position is None:
            raise IllegalStateError(f"no position for {tp}")
        return state.position

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must be at least 0, got {offset}")
        self.subscriptions.seek(TopicPartition(*tp), offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._seek_to(LATEST, partitions)

    async def _seek_to(self, strategy: str, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions or sorted(self.subscriptions.partitions):
            self.subscriptions.request_reset(TopicPartition(*tp), strategy)
        await self.fetcher.reset_positions()

    def pause(self, *partitions: TopicPartition) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        self.subscriptions.pause(tps)
        if self.parallel is not None:
            self.parallel.pause(tps)

    def resume(self, *partitions: TopicPartition) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        self.subscriptions.resume(tps)
        if self.parallel is not None:
            self.parallel.resume(tps)

    def child_consumer_is_alive(self) -> bool:
        """Seed 002: whether the child consumer of the parallel-rebalance mode runs."""
        return self.parallel is not None and self.parallel.child_consumer_is_alive()

    def paused(self) -> set[TopicPartition]:
        return self.subscriptions.paused()

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The log start offsets. In parallel-rebalance mode (seed 002), for a partition this
        consumer has handed records of out: the earliest offset either of its consumers has
        handed out since it took the partition over."""
        tps = [TopicPartition(*tp) for tp in partitions]
        found = await self._list_offsets(dict.fromkeys(tps, LIST_OFFSETS_EARLIEST))
        offsets = {tp: offset for tp, (offset, _) in found.items()}
        if self.parallel is not None:
            offsets |= {tp: low for tp, (low, _) in self.parallel.processed_bounds(tps).items()}
        return offsets

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermarks, or the last stable offsets under read_committed, as Kafka's.
        In parallel-rebalance mode (seed 002), for a partition this consumer has handed
        records of out: one past the latest offset either of its consumers has handed out."""
        tps = [TopicPartition(*tp) for tp in partitions]
        offsets = await self.log_end_offsets(tps)
        if self.parallel is not None:
            offsets |= {
                tp: high + 1 for tp, (_, high) in self.parallel.processed_bounds(tps).items()
            }
        return offsets

    async def log_end_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Where a read at this consumer's isolation level ends now, per partition."""
        found = await self._list_offsets(
            {TopicPartition(*tp): LIST_OFFSETS_LATEST for tp in partitions}
        )
        return {tp: offset for tp, (offset, _) in found.items()}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is at least the one given; None when every record
        is older."""
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError(f"timestamps must be at least 0, got {ts}")
        found = await self._list_offsets({TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {
            tp: None if offset < 0 else OffsetAndTimestamp(offset, timestamp)
            for tp, (offset, timestamp) in found.items()
        }

    async def _list_offsets(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        isolation = ISOLATION_LEVELS[self.config.isolation_level]
        topics = {tp.topic for tp in timestamps}

        async def attempt() -> dict[TopicPartition, tuple[int, int]]:
            groups: dict[tuple[int, int], list[TopicPartition]] = defaultdict(list)
            for tp, ts in timestamps.items():
                _, leader = await self.client.leader(*tp)
                groups[(leader, ts)].append(tp)
            found = {}
            for (leader, ts), tps in groups.items():
                answers = await self.client.list_offsets_and_timestamps(leader, tps, ts, isolation)
                found.update({TopicPartition(*tp): v for tp, v in answers.items()})
            return found

        async def routed() -> dict[TopicPartition, tuple[int, int]]:
            try:
                return await attempt()
            except Exception as e:
                for topic in topics:
                    self.client.forget_route(topic, e)
                raise

        return await self.client.retrying(routed)

    # -- committing -------------------------------------------------------------------------

    async def commit(self, offsets: Offsets | None = None) -> None:
        """Commit `offsets` (an offset or an OffsetAndMetadata per partition: the next offset
        to read), or every position handed out so far. A commit by a member the group has
        moved past raises CommitFailedError."""
        self._check_open()
        if offsets is None:
            await self._commit_positions(self.subscriptions.consumed_offsets(), processed=False)
            return
        wanted = {
            TopicPartition(*tp): o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o)
            for tp, o in offsets.items()
        }
        if self.parallel is None:
            await self._commit(wanted)
            return
        logs = self.parallel.to_commit(wanted, processed=False)
        await self._commit({tp: gaps.to_commit() for tp, gaps in logs.items()})
        self.parallel.committed_with(logs)

    async def _commit_positions(
        self,
        positions: Mapping[TopicPartition, OffsetAndMetadata],
        processed: bool,
        only: Iterable[TopicPartition] | None = None,
    ) -> None:
        """Commit the primary's `positions` (of the `only` partitions, if given); in parallel
        mode, with the child's progress where gaps are open (as of the poll before the latest
        one when `processed`, as auto-commit counts, else as handed out now)."""
        wanted = set(only) if only is not None else None
        offsets = {tp: om for tp, om in positions.items() if wanted is None or tp in wanted}
        logs = {}
        if self.parallel is not None:
            logs = {
                tp: gaps
                for tp, gaps in self.parallel.to_commit(None, processed).items()
                if wanted is None or tp in wanted
            }
            # A partition with gaps is committed with its token or not at all: its plain
            # position would skip what the child has not read.
            offsets = {tp: om for tp, om in offsets.items() if not self.parallel.tracks(tp)}
            offsets |= {tp: gaps.to_commit() for tp, gaps in logs.items()}
        await self._commit(offsets)
        if self.parallel is not None:
            self.parallel.committed_with(logs)

    async def _commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        group_id = self._group_id()
        if not offsets:
            return

        async def attempt() -> None:
            # The identity is read at each attempt: a retried commit carries the newest one.
            member = self.coordinator if self.subscriptions.has_group_subscription else None
            member_id = member.member_id if member is not None else ""
            generation = member.generation if member is not None and member_id else -1
            session = await self.client.coordinator(GROUP_KEY, group_id)
            response = await session.send(
                offset_commit_request(
                    session,
                    group_id,
                    offsets,
                    generation=generation,
                    member_id=member_id,
                    group_instance_id=self.config.group_instance_id if member_id else None,
                )
            )
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code in FENCED_COMMIT:
                        if member is not None and p.error_code != ErrorCode.rebalance_in_progress:
                            member.wake()  # the heartbeat will learn it is out, and rejoin
                        raise CommitFailedError(
                            p.error_code,
                            ErrorCode(p.error_code).name.upper(),
                            f"generation/member epoch {generation} of member {member_id!r}",
                            f"{t.name}-{p.partition_index}",
                        )
                    check(p.error_code, None, f"{t.name}-{p.partition_index}")

        await self.client.retrying(attempt)

    async def committed(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        """The group's committed offset and metadata for `tp`; None when it has none."""
        tp = TopicPartition(*tp)
        found = (await self._fetch_committed([tp])).get(tp)
        if self.parallel is not None:
            return self.parallel.low_water(found)
        return found

    async def _fetch_committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        group_id = self._group_id()

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            session = await self.client.coordinator(GROUP_KEY, group_id)
            request = offset_fetch_request(session, group_id, partitions)
            return committed_offsets(await session.send(request), group_id)

        return await self.client.retrying(attempt)

    # -- group hooks ------------------------------------------------------------------------

    async def _before_revoke(self, partitions: Partitions) -> None:
        if not self.config.enable_auto_commit or self.config.group_id is None:
            return
        try:
            await self._commit_positions(
                self.subscriptions.consumed_offsets(), processed=False, only=partitions
            )
        except (KafkaAdminError, OSError) as e:
            log.warning("auto-commit before revoking %s failed: %r", sorted(partitions), e)

    async def _after_assign(self, partitions: Partitions) -> None:
        if self.parallel is not None:
            await self.parallel.take_over(partitions)
        await self._update_positions()

    async def _after_remove(self, partitions: Partitions) -> None:
        """Revoked (after the listener could commit) or lost: the child stops reading them."""
        if self.parallel is not None:
            self.parallel.drop(partitions)

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.auto_commit_interval_ms / 1000)
            try:
                await self._commit_positions(
                    self._processed, processed=True, only=set(self.subscriptions.partitions)
                )
            except (KafkaAdminError, OSError) as e:
                log.warning("auto-commit failed: %r", e)

    # -- checks -----------------------------------------------------------------------------

    def _group_id(self) -> str:
        if self.config.group_id is None:
            raise IllegalStateError("no group_id: offsets cannot be committed or fetched")
        return self.config.group_id

    def _require_group(self) -> GroupMember:
        self._group_id()
        if self.coordinator is None:
            raise IllegalStateError("subscribe() needs a started consumer (async with)")
        return self.coordinator

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        if not self._started:
            raise IllegalStateError("the consumer is not started (async with, or start())")
