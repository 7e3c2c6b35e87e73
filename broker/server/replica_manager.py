"""Partitions hosted by this broker: their logs, leader epochs and the fetches parked on them.

Kafka's ReplicaManager plus its fetch purgatory. A parked fetch is woken by the appends that give
it enough bytes, never by a polling loop: read_uncommitted fetches count the bytes appended,
read_committed ones the bytes that fell below the last stable offset (a marker can release a
whole transaction at once).

Every change a fetcher may need to hear about (appends, markers, log start offsets moved by
retention or DeleteRecords, deleted topics) is also reported to the fetch session cache, so an
incremental fetch reads only the partitions that changed (KIP-227).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.fetch_session import FetchSessionCache
from broker.metadata.image import MetadataImage, TopicMetadata
from broker.storage import AppendResult, Log, LogConfig, LogManager
from broker.storage.manager import parse_log_dir_name
from broker.storage.producer_state import ProducerStateError

TopicPartition = tuple[str, int]


@dataclass(eq=False)
class FetchWaiter:
    """A fetch waiting for `needed` more bytes to arrive on any of `partitions` (to fall below
    their LSOs, for read_committed)."""

    needed: int
    partitions: list[TopicPartition]
    future: asyncio.Future = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    read_committed: bool = False
    # read_committed: each partition's Log.stable_bytes when last seen, and the bytes that
    # fell below the LSOs since parking.
    _stable_seen: dict[TopicPartition, int] = field(default_factory=dict)
    _stable_gained: int = 0

    def on_append(self, size: int) -> None:
        self.needed -= size
        if self.needed <= 0 and not self.future.done():
            self.future.set_result(None)

    def on_stable(self, tp: TopicPartition, stable_bytes: int) -> None:
        seen = self._stable_seen.get(tp)
        self._stable_seen[tp] = stable_bytes
        if seen is None:
            return  # the baseline, taken when parked
        self._stable_gained += stable_bytes - seen
        if self._stable_gained >= self.needed and not self.future.done():
            self.future.set_result(None)


class ReplicaManager:
    def __init__(
        self,
        config: BrokerConfig,
        log_manager: LogManager,
        image: MetadataImage,
        fetch_sessions: FetchSessionCache | None = None,
    ) -> None:
        self.config = config
        self.log_manager = log_manager
        self.image = image
        self.fetch_sessions = fetch_sessions
        # Single node: every partition's leader is this broker, epoch 0 since creation.
        self.leader_epoch = 0
        self._waiters: dict[TopicPartition, set[FetchWaiter]] = defaultdict(set)

    # -- configuration ---------------------------------------------------------------------

    def log_config(self, topic: TopicMetadata | None) -> LogConfig:
        """Broker defaults overlaid with the topic's overrides, as typed values."""
        from broker.config import TOPIC_CONFIGS

        values = self.config.topic_defaults()
        if topic is not None:
            for name, raw in topic.configs.items():
                values[name] = TOPIC_CONFIGS[name].parse(raw)
        return LogConfig(
            segment_bytes=values["segment.bytes"],
            segment_ms=values["segment.ms"],
            retention_ms=values["retention.ms"],
            retention_bytes=values["retention.bytes"],
            index_interval_bytes=values["index.interval.bytes"],
            segment_index_bytes=values["segment.index.bytes"],
            flush_interval_messages=values["flush.messages"],
            flush_interval_ms=values["flush.ms"],
            message_timestamp_type=values["message.timestamp.type"],
            cleanup_policy=",".join(values["cleanup.policy"]),
            file_delete_delay_ms=values["file.delete.delay.ms"],
            delete_retention_ms=values["delete.retention.ms"],
            min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
            min_compaction_lag_ms=values["min.compaction.lag.ms"],
            max_compaction_lag_ms=values["max.compaction.lag.ms"],
            message_format_version=values["message.format.version"],
        )

    def topic_config_value(self, topic: TopicMetadata, name: str) -> object:
        from broker.config import TOPIC_CONFIGS, TOPIC_TO_BROKER

        if name in topic.configs:
            return TOPIC_CONFIGS[name].parse(topic.configs[name])
        return self.config[TOPIC_TO_BROKER[name]]

    def reconfigure(self, topics: Iterable[TopicMetadata] | None = None) -> None:
        """Push changed configs into the open logs (after AlterConfigs)."""
        for topic in topics if topics is not None else self.image.topics():
            config = self.log_config(topic)
            for partition in range(topic.partitions):
                log = self.log_manager.get(topic.name, partition)
                if log is not None:
                    log.update_config(config)

    # -- partitions --------------------------------------------------------------------------

    def open_partitions(self, topic: TopicMetadata) -> None:
        """Create the logs of every partition of `topic` that has none yet, and lead them
        all: each log's epoch cache learns the leader epoch (a no-op once it has it)."""
        config = self.log_config(topic)
        for partition in range(topic.partitions):
            log = self.log_manager.get(topic.name, partition)
            if log is None:
                log = self.log_manager.create(topic.name, partition, config)
            log.assign_epoch_start_offset(self.leader_epoch)

    def release_waiters(self, topic: TopicMetadata) -> None:
        """Answer the fetches parked on a deleted topic now (they find it gone)."""
        for partition in range(topic.partitions):
            for waiter in self._waiters.pop((topic.name, partition), ()):
                if not waiter.future.done():
                    waiter.future.set_result(None)
            if self.fetch_sessions is not None:
                self.fetch_sessions.partition_changed(topic.name, topic.topic_id, partition)

    def delete_logs(self, topic: TopicMetadata) -> None:
        """Blocking (renames, unlinks, fsyncs): run in a thread once the topic is unreachable."""
        for partition in range(topic.partitions):
            self.log_manager.delete(topic.name, partition)

    def log(self, topic: str, partition: int) -> Log | None:
        return self.log_manager.get(topic, partition)

    # -- appends and parked fetches ----------------------------------------------------------

    def appended(self, tp: TopicPartition, size: int) -> None:
        if self.fetch_sessions is not None:
            self._session_partition_changed(tp, size)
        waiters = self._waiters.get(tp)
        if waiters:
            log = None
            for waiter in list(waiters):
                if not waiter.read_committed:
                    waiter.on_append(size)
                    continue
                if log is None:
                    log = self.log_manager.get(*tp)
                if log is not None:
                    waiter.on_stable(tp, log.stable_bytes)

    def append_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
        transaction_version: int = 0,
    ) -> AppendResult:
        """Write a COMMIT or ABORT marker (WriteTxnMarkers) and wake the fetches parked on the
        partition: the LSO moved. Raises ProducerStateError with the partition's error code:
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED.
        The caller flushes first when `flush_due` is set, as Produce does."""
        log = self.log_manager.get(topic, partition)
        if log is None:
            raise ProducerStateError(
                ErrorCode.unknown_topic_or_partition,
                f"No log for {topic}-{partition} to write the transaction marker to",
            )
        result = log.append_marker(
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            now_ms=now_ms,
            leader_epoch=self.leader_epoch,
            transaction_version=transaction_version,
        )
        self.appended((topic, partition), result.size)
        return result

    def log_start_moved(self, log: Log) -> None:
        """DeleteRecords moved `log`'s start offset: incremental fetches report it."""
        tp = parse_log_dir_name(log.directory.name)
        if tp is not None and self.fetch_sessions is not None:
            self._session_partition_changed(tp, 0)

    def enforce_retention(self, now_ms: int) -> int:
        """LogManager.enforce_retention, reporting the log start offsets it moved. Retention
        visits every log anyway; comparing their start offsets adds O(logs) per run."""
        before = {tp: log.log_start_offset for tp, log in self.log_manager.logs()}
        deleted = self.log_manager.enforce_retention(now_ms)
        if deleted and self.fetch_sessions is not None:
            for tp, log in self.log_manager.logs():
                if before.get(tp) != log.log_start_offset:
                    self._session_partition_changed(tp, 0)
        return deleted

    def _session_partition_changed(self, tp: TopicPartition, size: int) -> None:
        if not self.fetch_sessions.partitions_cached:
            return  # the produce path pays nothing while no session exists
        # Sessions of Fetch v13+ know the partition by topic id, older ones by name.
        meta = self.image.topic(tp[0])
        self.fetch_sessions.partition_changed(
            tp[0], meta.topic_id if meta is not None else None, tp[1], size
        )

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The partition's LSO (-1 without a log), as reported with its high watermark."""
        log = self.log_manager.get(topic, partition)
        return -1 if log is None else log.last_stable_offset

    def parked(self, tp: TopicPartition) -> int:
        """How many fetches are waiting for data on `tp`; one already woken is not (it is
        only waiting for its turn on the event loop to answer)."""
        return sum(not w.future.done() for w in self._waiters.get(tp, ()))

    def park(self, waiter: FetchWaiter) -> None:
        for tp in waiter.partitions:
            if waiter.read_committed:
                log = self.log_manager.get(*tp)
                if log is not None:
                    waiter.on_stable(tp, log.stable_bytes)
            self._waiters[tp].add(waiter)

    def unpark(self, waiter: FetchWaiter) -> None:
        for tp in waiter.partitions:
            waiters = self._waiters.get(tp)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[tp]

    # -- lookups shared by the partition APIs ------------------------------------------------

    def lookup(self, topic: str | None, partition: int) -> tuple[Log | None, ErrorCode]:
        meta = self.image.topic(topic) if topic is not None else None
        if meta is None or not 0 <= partition < meta.partitions:
            return None, ErrorCode.unknown_topic_or_partition
        log = self.log_manager.get(topic, partition)
        if log is None:
            return None, ErrorCode.unknown_topic_or_partition
        return log, ErrorCode.none

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Kafka's fencing of requests made with a stale (or future) view of the leader."""
        if current_leader_epoch == -1 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.none
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.unknown_leader_epoch
        return ErrorCode.fenced_leader_epoch
