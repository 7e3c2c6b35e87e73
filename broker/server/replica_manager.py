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
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from broker.config import TOPIC_CONFIGS, TOPIC_TO_BROKER, BrokerConfig
from broker.fetch_session import FetchSessionCache
from broker.metadata.cluster import NO_LEADER, PartitionRegistration
from broker.metadata.image import MetadataImage, TopicMetadata
from broker.replication.partition import Partition
from broker.replication.refused_batches import RefusedBatches
from broker.replication.superseded import PeerLeadership, SupersededLeadership
from broker.storage import AppendResult, Log, LogConfig, LogManager
from broker.storage.manager import parse_log_dir_name
from broker.storage.producer_state import ProducerStateError

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return int(time.time() * 1000)


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
    # A follower's fetch: woken by appends, where a consumer's waits for the high watermark.
    replica: bool = False
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
        self.node_id = config.node_id
        self.broker_epoch: int | None = None  # this process' registration, in a cluster
        # In a cluster the high watermark waits for the ISR; alone, every write is committed.
        self.clustered = not image.single_node
        self.partitions: dict[TopicPartition, Partition] = {}
        self._waiters: dict[TopicPartition, set[FetchWaiter]] = defaultdict(set)
        # acks=all produces waiting for their partition's high watermark or ISR to change.
        self._replication_waiters: dict[TopicPartition, set[asyncio.Future]] = defaultdict(set)
        # Batches refused before their sequence was checked: the ones behind them are refused
        # alike rather than as out of order (see the module).
        self.refused_batches = RefusedBatches()
        self.superseded = SupersededLeadership()
        # Set in a cluster: writes a leader's ISR change to the metadata store.
        self.on_isr_change: Callable[[Partition, tuple[int, ...]], None] | None = None

    # -- configuration ---------------------------------------------------------------------

    def log_config(self, topic: TopicMetadata | None) -> LogConfig:
        """Broker defaults overlaid with the topic's overrides, as typed values."""
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
        raw = topic.configs.get(name)
        if raw is None:
            return self.config[TOPIC_TO_BROKER[name]]
        return _parsed_topic_config(name, raw)

    def reconfigure(self, topics: Iterable[TopicMetadata] | None = None) -> None:
        """Push changed configs into the open logs (after AlterConfigs)."""
        for topic in topics if topics is not None else self.image.topics():
            config = self.log_config(topic)
            for partition in range(topic.partitions):
                log = self.log_manager.get(topic.name, partition)
                if log is not None:
                    log.update_config(config)

    # -- partitions --------------------------------------------------------------------------

    def logs_missing(self, topic: TopicMetadata) -> bool:
        """Whether a partition of `topic` hosted here has no log yet (open_partitions'
        work, which blocks: asked first on the loop)."""
        return any(
            self.node_id in reg.replicas and self.log_manager.get(topic.name, partition) is None
            for partition, reg in self.image_registrations(topic).items()
        )

    def open_partitions(self, topic: TopicMetadata) -> None:
        """Blocking (file creation): create the logs this broker hosts of `topic` that have
        none yet. A single broker then leads them all at once; in a cluster leadership comes
        with the registrations (`apply_registrations`)."""
        config = None  # parsed once a log is to be made: in a cluster most calls make none
        for partition, reg in self.image_registrations(topic).items():
            if self.node_id not in reg.replicas:
                continue
            log = self.log_manager.get(topic.name, partition)
            if log is None:
                config = config or self.log_config(topic)
                log = self.log_manager.create(topic.name, partition, config)
            if not self.clustered and (topic.name, partition) not in self.partitions:
                self.partitions[(topic.name, partition)] = Partition(
                    topic.name, partition, log, self.node_id, reg
                )
                log.assign_epoch_start_offset(reg.leader_epoch)

    def image_registrations(self, topic: TopicMetadata) -> dict[int, PartitionRegistration]:
        """The registrations of `topic`'s partitions; a single broker's topic may not be in
        the image yet (its logs open before it becomes visible)."""
        if not self.clustered:
            return dict.fromkeys(range(topic.partitions), self.image.partition_single)
        return self.image.registrations(topic.name)

    def apply_registrations(
        self, topic: TopicMetadata, now_ms: int
    ) -> tuple[list[Partition], list[Partition], list[Partition]]:
        """Follow the image's registrations of `topic` (logs already open): the partitions
        this broker now leads afresh, those it now follows (new leader or new epoch), and
        those it no longer hosts (a reassignment moved them away: the caller deletes them)."""
        led, followed, removed = [], [], []
        may_lead = self.may_lead()
        for index, reg in self.image_registrations(topic).items():
            tp = (topic.name, index)
            if reg.leader == self.node_id and not may_lead:
                # Named leader by a registration from before this broker was fenced (or
                # restarted): it leads nothing until the controller says so again, lest
                # followers with more data truncate to what survived here.
                reg = replace(reg, leader=NO_LEADER)
            if self.node_id not in reg.replicas:
                gone = self.partitions.pop(tp, None)
                if gone is not None:
                    removed.append(gone)
                    self._replication_changed(tp)
                continue
            partition = self.partitions.get(tp)
            log = self.log_manager.get(*tp)
            if log is None:
                continue
            if partition is None or partition.log is not log:
                partition = Partition(topic.name, index, log, self.node_id, reg)
                self.partitions[tp] = partition
                if reg.leader == self.node_id:
                    partition.become_leader(now_ms)
                    self.maybe_increment_high_watermark(partition)
                    led.append(partition)
                else:
                    followed.append(partition)
                continue
            old = partition.registration
            if partition.update(reg, now_ms):
                led.append(partition)
            elif reg.leader != self.node_id and (
                old.leader != reg.leader or old.leader_epoch != reg.leader_epoch
            ):
                followed.append(partition)
            if partition.is_leader:
                # The controller may have shrunk the ISR (a follower fenced): what the rest
                # of it has is committed now.
                self.maybe_increment_high_watermark(partition)
            self._replication_changed(tp)
        return led, followed, removed

    def may_lead(self) -> bool:
        """Whether this broker, as registered now (this process' broker epoch), is unfenced."""
        me = self.image.brokers.get(self.node_id)
        return (
            me is not None
            and not me.fenced
            and (self.broker_epoch is None or me.broker_epoch == self.broker_epoch)
        )

    def enough_replicas(self, topic: str, index: int, min_isr: int) -> bool:
        """Whether an acks=all produce may be written: the ISR is at least min.insync.replicas
        (alone, only a minimum of 1 can be met)."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            return min_isr <= 1
        return partition.enough_replicas(min_isr)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def leader_epoch_of(self, topic: str, index: int) -> int:
        partition = self.partitions.get((topic, index))
        return partition.leader_epoch if partition is not None else 0

    def release_waiters(self, topic: TopicMetadata) -> None:
        """Answer the fetches parked on a deleted topic now (they find it gone)."""
        for partition in range(topic.partitions):
            self.partitions.pop((topic.name, partition), None)
            self._replication_changed((topic.name, partition))
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
        """A batch was appended to `tp`'s log. Alone, it is committed at once; in a cluster
        the followers' fetches hear of it now and the consumers' once the ISR has it."""
        if not self.clustered:
            self._visible(tp, size)
            return
        if self.fetch_sessions is not None:
            self._session_partition_changed(tp, size)
        for waiter in list(self._waiters.get(tp, ())):
            if waiter.replica:
                waiter.on_append(size)
        partition = self.partitions.get(tp)
        if partition is not None and partition.is_leader:
            self.maybe_increment_high_watermark(partition)

    def follower_fetched(
        self, tp: TopicPartition, replica_id: int, broker_epoch: int, fetch_offset: int
    ) -> None:
        """A follower fetched `tp` from `fetch_offset`: it has everything before it."""
        partition = self.partitions.get(tp)
        if partition is None or not partition.is_leader:
            return
        registered = self.image.brokers.get(replica_id)
        if broker_epoch >= 0 and (registered is None or broker_epoch != registered.broker_epoch):
            # An earlier process of that broker (or one the metadata has not shown us yet):
            # its log end says nothing of the replica the ISR counts on (KIP-903).
            return
        partition.record_follower_fetch(replica_id, broker_epoch, fetch_offset, _now_ms())
        expanded = partition.isr_expansion(self._eligible_for_isr)
        if expanded is not None and self.on_isr_change is not None:
            self.on_isr_change(partition, expanded)
        self.maybe_increment_high_watermark(partition)

    def _eligible_for_isr(self, replica_id: int, broker_epoch: int) -> bool:
        broker = self.image.brokers.get(replica_id)
        return (
            broker is not None
            and broker.usable
            and broker_epoch in (-1, broker.broker_epoch)  # -1: a fetch older than v15
        )

    def maybe_increment_high_watermark(self, partition: Partition) -> None:
        gained = partition.maybe_increment_high_watermark()
        if gained is not None:
            self._visible(partition.tp, gained)
            self._replication_changed(partition.tp)

    def _replication_changed(self, tp: TopicPartition) -> None:
        for future in self._replication_waiters.pop(tp, ()):
            if not future.done():
                future.set_result(None)

    async def wait_for_replication(
        self, tp: TopicPartition, required_offset: int, min_isr: int, deadline: float
    ) -> ErrorCode:
        """An acks=all produce's outcome once its records (ending before `required_offset`)
        are in every in-sync replica; REQUEST_TIMED_OUT at the loop time `deadline`."""
        loop = asyncio.get_running_loop()
        while True:
            partition = self.partitions.get(tp)
            if partition is None or self.superseding(tp) is not None:
                return ErrorCode.not_leader_or_follower
            code = partition.acks_all_error(required_offset, min_isr)
            if code is not None:
                return code
            future = loop.create_future()
            self._replication_waiters[tp].add(future)
            try:
                await asyncio.wait_for(future, max(0.0, deadline - loop.time()))
            except TimeoutError:
                return ErrorCode.request_timed_out
            finally:
                waiting = self._replication_waiters.get(tp)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._replication_waiters[tp]

    def _visible(self, tp: TopicPartition, size: int) -> None:
        """`size` more bytes of `tp` became readable by consumers."""
        if self.fetch_sessions is not None:
            # In a cluster the sessions counted these bytes when they were appended.
            self._session_partition_changed(tp, 0 if self.clustered else size)
        waiters = self._waiters.get(tp)
        if waiters:
            log = None
            for waiter in list(waiters):
                if waiter.replica and self.clustered:
                    continue  # woken by the append itself (appended)
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
        log, code = self.lookup(topic, partition)
        if log is None:
            raise ProducerStateError(
                code, f"{topic}-{partition} is not led here to write the transaction marker to"
            )
        result = log.append_marker(
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            now_ms=now_ms,
            leader_epoch=self.leader_epoch_of(topic, partition),
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

    def lookup(
        self, topic: str | None, partition: int, current_leader_epoch: int = -1
    ) -> tuple[Log | None, ErrorCode]:
        """The log of a partition this broker leads; NOT_LEADER_OR_FOLLOWER for one it does
        not (Kafka's getPartitionOrError). A request made with a view of the leader
        (`current_leader_epoch`) is checked against it first, as Kafka's getLocalLog does:
        one from a newer epoch than this replica has heard of answers UNKNOWN_LEADER_EPOCH,
        not NOT_LEADER_OR_FOLLOWER, even here before this broker learns it leads, so that a
        follower tries again in a moment rather than after a whole fetch backoff."""
        meta = self.image.topic(topic) if topic is not None else None
        if meta is None or not 0 <= partition < meta.partitions:
            return None, ErrorCode.unknown_topic_or_partition
        hosted = self.partitions.get((topic, partition))
        if hosted is not None and current_leader_epoch != -1:
            if current_leader_epoch > hosted.leader_epoch:
                return None, ErrorCode.unknown_leader_epoch
            if current_leader_epoch < hosted.leader_epoch:
                return None, ErrorCode.fenced_leader_epoch
        if hosted is None or not hosted.is_leader:
            if self.clustered:
                return None, ErrorCode.not_leader_or_follower
            return None, ErrorCode.unknown_topic_or_partition
        if self.superseded.newer_than((topic, partition), hosted.leader_epoch) is not None:
            return None, ErrorCode.not_leader_or_follower
        return hosted.log, ErrorCode.none

    def supersede(self, tp: TopicPartition, newer: PeerLeadership) -> bool:
        """Another broker named `newer` for `tp`, the store out of this one's reach: the
        partition is given up here if led here at an older epoch, and not for an epoch that
        elects this broker again (its acks=all waits end). True when that is news."""
        hosted = self.partitions.get(tp)
        if (
            hosted is None
            or not hosted.is_leader
            or newer.leader == self.node_id
            or newer.leader_epoch <= hosted.leader_epoch
        ):
            return False
        if not self.superseded.learn(tp, newer):
            return False
        self._replication_changed(tp)
        return True

    def superseding(self, tp: TopicPartition) -> PeerLeadership | None:
        """The newer leadership other brokers named for a partition this broker leads, while
        the metadata store does not answer it (broker.replication.superseded); None while it
        leads as far as any broker knows."""
        if not self.superseded:
            return None
        hosted = self.partitions.get(tp)
        if hosted is None or not hosted.is_leader:
            return None
        return self.superseded.newer_than(tp, hosted.leader_epoch)


_PARSED: dict[tuple[str, str], object] = {}


def _parsed_topic_config(name: str, raw: str) -> object:
    """A topic override's value, parsed once: Produce reads several per request. Lists
    (cleanup.policy) are parsed each time, so no caller can change another's."""
    key = (name, raw)
    value = _PARSED.get(key)
    if value is None:
        value = TOPIC_CONFIGS[name].parse(raw)
        if isinstance(value, list | dict | set):
            return value
        if len(_PARSED) < 10_000:  # bounded: overrides are few, but each distinct value counts
            _PARSED[key] = value
    return value
