"""Followers' fetchers: one per leader broker, fetching every partition this broker follows
from it in one privileged incremental fetch session (KIP-227), as Kafka's ReplicaFetcherThread.

Each fetch states the follower's log end (fetch offset), the epoch of its last batch and the
leader epoch it believes current. The leader answers a diverging epoch when the follower's
log went past the leader's for that epoch, and the follower truncates to it (KIP-320) — never
to its high watermark, which is how KIP-101 lost acknowledged writes. A fetch offset below
the leader's log start starts the follower's log over at that start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from datetime import timedelta

from kio.schema.errors import ErrorCode

from broker.client.consumer.fetcher import FETCH, FetchSessionHandler, FetchTarget, fetch_request
from broker.client.models import TopicPartition
from broker.records.batch import iter_batches
from broker.replication.partition import Partition
from broker.server.inter_broker import open_inter_broker_session

log = logging.getLogger("broker.replica_fetcher")

UNKNOWN_EPOCH_RETRY_S = 0.02
# The errors after which a partition waits for the metadata to name its leader again.
LEADERSHIP_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
    }
)


def fetcher_id(tp: tuple[str, int], fetchers: int) -> int:
    """Which of a leader's `fetchers` fetches `tp` (Kafka's getFetcherId: neighbouring
    partitions of a topic go to different fetchers)."""
    topic, partition = tp
    return (31 * zlib.crc32(topic.encode()) + partition) % fetchers


class Truncations:
    """Follower truncations running (blocking work in a thread). A partition about to be led
    here waits for its own to end, as Kafka's makeLeader waits for the fetcher it removes the
    partition from: else the new epoch would start at a log end the truncation then cuts
    below, or the leader's first appends be cut with it."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._running: dict[tuple[str, int], asyncio.Future] = {}

    def run(self, tp: tuple[str, int], fn, *args) -> asyncio.Future:
        work = self._running[tp] = self.broker.start_blocking(fn, *args)
        work.add_done_callback(
            lambda done: self._running.pop(tp) if self._running.get(tp) is done else None
        )
        return asyncio.shield(work)

    async def finished(self, topic: str) -> None:
        """Once no truncation of `topic`'s partitions runs (checked last with nothing
        awaited after, so the caller may act on it before anything else runs)."""
        while running := [
            work for (t, _), work in self._running.items() if t == topic and not work.done()
        ]:
            await asyncio.wait(running)


class ReplicaFetcher:
    """Fetches from one leader until it has no partition left to follow."""

    def __init__(self, broker, leader_id: int, fetcher_id: int, truncations: Truncations) -> None:
        self.broker = broker
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.truncations = truncations
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._session = None
        self._handler = FetchSessionHandler()
        # Partitions whose logs hold no leader epochs (kept in magic 0/1): nothing to tell
        # a divergence by, so they truncate to the high watermark before fetching, as
        # Kafka's truncateToHighWatermark does for them.
        self._without_epochs: set[tuple[str, int]] = set()

    def add(self, partition: Partition) -> None:
        self.partitions[partition.tp] = partition
        if partition.log.leader_epochs.latest_epoch < 0:
            self._without_epochs.add(partition.tp)
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())

    def remove(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)
        self._changed.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close()

    async def _close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._handler.reset()

    async def _run(self) -> None:
        config = self.broker.config
        while self.partitions:
            try:
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a lost connection or a leader gone: try again later
                log.info("fetching from broker %d failed: %s", self.leader_id, e)
                await self._close()
                await self._pause(config["replica.fetch.backoff.ms"] / 1000)
        await self._close()

    async def _connect(self):
        if self._session is None or self._session.closed:
            try:
                self._session = await open_inter_broker_session(
                    self.broker, self.leader_id, f"fjord-replica-fetcher-{self.fetcher_id}"
                )
            except OSError:
                if self.broker.cluster is not None:
                    self._lost()  # refused, say: nothing listens where the leader was
                raise
            if self.broker.cluster is not None:
                # At once, not once the fetch waiting on it has failed: a client that lost
                # its connection to the same leader is asking for metadata meanwhile.
                self._session.connection.when_lost(self._lost)
            self._handler.reset()
        return self._session

    def _lost(self) -> None:
        self.broker.cluster.connection_lost(self.leader_id)

    async def _fetch_once(self) -> None:
        config = self.broker.config
        while self._without_epochs:
            partition = self.partitions.get(tp := self._without_epochs.pop())
            log_ = partition.log if partition is not None else None
            if log_ is not None and log_.log_end_offset > log_.high_watermark:
                log.info(
                    "%s-%d: no leader epochs to truncate by, truncating to the high watermark %d",
                    *tp,
                    log_.high_watermark,
                )
                await self.truncations.run(
                    tp, self.broker.log_manager.truncate_to, *tp, log_.high_watermark
                )
        session = await self._connect()
        wanted = {}
        for (topic, index), partition in self.partitions.items():
            meta = self.broker.image.topic(topic)
            if meta is None:
                continue
            wanted[TopicPartition(topic, index)] = FetchTarget(
                meta.topic_id,
                partition.log.log_end_offset,
                config["replica.fetch.max.bytes"],
                partition.leader_epoch,
                partition.log.leader_epochs.latest_epoch,
            )
        data = self._handler.build(wanted)
        response = await session.send(self._request(session, data))
        if not self._handler.handle_response(data, response.error_code, response.session_id):
            return
        names = {t.topic_id: tp.topic for tp, t in data.session.items()}
        back_off = 0.0
        for t in response.responses:
            topic = getattr(t, "topic", None) or names.get(getattr(t, "topic_id", None))
            for p in t.partitions:
                partition = self.partitions.get((topic, p.partition_index))
                target = data.session.get(TopicPartition(topic, p.partition_index))
                if partition is None or target is None or partition.is_leader:
                    continue  # no longer fetched from here (led here now, or gone)
                if partition.log.log_end_offset != target.fetch_offset:
                    continue  # truncated or restarted while the fetch was out
                back_off = max(back_off, await self._handle_partition(partition, p))
        if back_off:
            await self._pause(back_off)

    async def _pause(self, seconds: float) -> None:
        """Wait before fetching again, less if the partitions fetched change meanwhile."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), seconds)

    async def _handle_partition(self, partition: Partition, p) -> float:
        """Apply one partition's answer; the pause it calls for, in seconds."""
        backoff_s = self.broker.config["replica.fetch.backoff.ms"] / 1000
        log_ = partition.log
        code = ErrorCode(p.error_code)
        if code == ErrorCode.none:
            diverging = getattr(p, "diverging_epoch", None)
            if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0:
                _, local_end = log_.end_offset_for_epoch(diverging.epoch)
                offset = min(diverging.end_offset, local_end)
                log.info(
                    "%s-%d: truncating to %d (leader's epoch %d ends at %d)",
                    *partition.tp,
                    offset,
                    diverging.epoch,
                    diverging.end_offset,
                )
                await self.truncations.run(
                    partition.tp, self.broker.log_manager.truncate_to, *partition.tp, offset
                )
                return 0.0
            if p.records:
                self._append(partition, p.records)
            partition.follower_high_watermark(p.high_watermark)
            if p.log_start_offset > log_.log_start_offset:
                log_.delete_records_before(min(p.log_start_offset, log_.high_watermark))
            return 0.0
        if code == ErrorCode.offset_out_of_range and p.log_start_offset > log_.log_end_offset:
            # The leader no longer has what we would fetch next (a log emptied, or far
            # behind a leader whose retention moved on): start over at its log start.
            log.info("%s-%d: starting over at offset %d", *partition.tp, p.log_start_offset)
            await self.truncations.run(
                partition.tp,
                self.broker.log_manager.truncate_fully_and_start_at,
                *partition.tp,
                p.log_start_offset,
            )
            return 0.0
        if code == ErrorCode.unknown_leader_epoch:
            # We heard of the new epoch before the leader did; it will in a moment, and its
            # ISR's high watermark waits on this fetch: not a whole backoff.
            return min(backoff_s, UNKNOWN_EPOCH_RETRY_S)
        if code in LEADERSHIP_ERRORS:
            return backoff_s  # the metadata will tell; until then, fetch less eagerly
        log.warning("%s-%d: fetch from leader failed: %s", *partition.tp, code.name)
        return backoff_s

    def _append(self, partition: Partition, records: bytes) -> None:
        log_ = partition.log
        view = memoryview(records)
        now_ms = int(time.time() * 1000)
        appended = 0
        for position, header in iter_batches(view):
            if header.next_offset <= log_.log_end_offset:
                continue  # already have it
            log_.append(
                view[position : position + header.size],
                header,
                now_ms=now_ms,
                assign_offsets=False,
            )
            appended += header.size
        if appended:
            self.broker.replica_manager.appended(partition.tp, appended)

    def _request(self, session, data):
        config = self.broker.config
        return fetch_request(
            session,
            data,
            replica_id=self.broker.node_id,
            replica_state=session.request(
                FETCH,
                "ReplicaState",
                replica_id=self.broker.node_id,
                replica_epoch=self.broker.cluster.broker_epoch,
            ),
            max_wait=timedelta(milliseconds=config["replica.fetch.wait.max.ms"]),
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            isolation_level=0,
            rack_id="",
        )


class ReplicaFetcherManager:
    """The fetchers by leader, num.replica.fetchers of them per leader; a partition is
    fetched by one fetcher of its current leader, always the same one."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._fetcher_of: dict[tuple[str, int], tuple[int, int]] = {}
        self.truncations = Truncations(broker)

    def follow(self, partition: Partition) -> None:
        leader = partition.registration.leader
        self.unfollow(partition.tp)
        if leader < 0 or leader == self.broker.node_id:
            return
        key = (leader, fetcher_id(partition.tp, self.broker.config["num.replica.fetchers"]))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ReplicaFetcher(self.broker, *key, self.truncations)
        fetcher.add(partition)
        self._fetcher_of[partition.tp] = key

    def unfollow(self, tp: tuple[str, int]) -> None:
        key = self._fetcher_of.pop(tp, None)
        if key is not None and key in self.fetchers:
            self.fetchers[key].remove(tp)

    async def stop(self) -> None:
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()))
        self.fetchers.clear()
