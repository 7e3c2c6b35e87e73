"""Reading and writing the partitions of a coordinator's internal topic (`__consumer_offsets`,
`__transaction_state`): batches of encoded records appended as one write, read back in offset
order when the partition is loaded, and which partitions this broker coordinates.

A coordinator lives on the leaders of its topic's partitions, as Kafka's do: a broker loads a
partition (replays its log) when it becomes its leader and unloads it (forgets its keys) when
it stops being one, in the same turn of the event loop as the leadership change, so no request
ever finds a partition half loaded. Requests for keys of other partitions answer
NOT_COORDINATOR. In a cluster a coordinator's write is acknowledged only once every in-sync
replica has it, as Kafka's coordinators append with acks=all.

Both topics have cleanup.policy=compact, as in Kafka: the log cleaner keeps the last record of
every key (tombstones until delete.retention.ms), drops aborted transactional offset commits
and keeps the COMMIT/ABORT markers until their transaction has no data left, so replaying a
cleaned partition gives the state replaying the whole of it would, and start-up replay stays
proportional to the live state plus the uncleaned head of the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence

from kio.schema.errors import ErrorCode

from broker.records.batch import BatchHeader, build_batch, decode_batch, iter_batches, read_header
from broker.storage import Log

log = logging.getLogger("broker.coordinator")

READ_CHUNK = 1 << 20

EncodedRecord = tuple[bytes, bytes | None]


def append_records(
    replica_manager,
    topic: str,
    partition: int,
    records: Sequence[EncodedRecord],
    now_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    transactional: bool = False,
) -> None:
    """Append `records` as one batch: one write, so all or nothing after a crash. Kafka's
    coordinators write transactional batches without a sequence: a producer numbers only
    what it sends itself. Like a produce, the append wakes the fetches and fetch sessions
    waiting on the partition (an operator reading the topic)."""
    batch = build_batch(
        [(key, value, [], now_ms) for key, value in records],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=transactional,
    )
    header = read_header(batch)
    log_, _ = replica_manager.lookup(topic, partition)
    if log_ is None:
        raise CoordinatorError(ErrorCode.not_coordinator)
    log_.append(
        batch, header, now_ms=now_ms, leader_epoch=replica_manager.leader_epoch_of(topic, partition)
    )
    replica_manager.appended((topic, partition), header.size)


def read_batches(log_: Log) -> Iterator[tuple[BatchHeader, list]]:
    """Every batch of the log with its decoded records, in offset order."""
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        data = log_.read(offset, READ_CHUNK)
        if not data.size:
            break
        buf = b"".join(bytes(c) for c in data.records)
        for pos, header in iter_batches(buf):
            yield decode_batch(buf[pos : pos + header.size])
            offset = header.next_offset


class CoordinatorError(Exception):
    """A coordinator operation this broker cannot serve: the request answers `code`."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


# How Kafka's coordinators answer a write of theirs that failed (CoordinatorRuntime's
# CoordinatorOperationExceptionHelper, TransactionStateManager.appendTransactionToLog): a
# client retries after COORDINATOR_NOT_AVAILABLE and looks the coordinator up again after
# NOT_COORDINATOR.
_WRITE_ERRORS = {
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
}


async def replicated(broker, topic: str, partition: int, timeout_ms: int) -> ErrorCode:
    """Wait until every in-sync replica has what the partition's leader appended so far, as
    an acks=all produce does (NOT_ENOUGH_REPLICAS_AFTER_APPEND under min.insync.replicas,
    REQUEST_TIMED_OUT after `timeout_ms`). Alone, an append is committed at once."""
    if broker.cluster is None:
        return ErrorCode.none
    rm = broker.replica_manager
    hosted = rm.partition(topic, partition)
    meta = broker.image.topic(topic)
    if hosted is None or meta is None or not hosted.is_leader:
        return ErrorCode.not_leader_or_follower
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    return await rm.wait_for_replication(
        (topic, partition),
        hosted.log.log_end_offset,
        rm.topic_config_value(meta, "min.insync.replicas"),
        deadline,
    )


async def replicated_markers(
    broker, written: list[tuple[tuple[str, int], ErrorCode]]
) -> list[ErrorCode]:
    """The outcome of each marker written (and its error) once the ISR has it: a marker's
    partition answers as an acks=all produce does (Kafka appends markers with acks=all)."""
    timeout_ms = broker.config["request.timeout.ms"]

    async def outcome(tp: tuple[str, int], code: ErrorCode) -> ErrorCode:
        if code is not ErrorCode.none:
            return code
        return await replicated(broker, *tp, timeout_ms)

    return list(await asyncio.gather(*(outcome(tp, code) for tp, code in written)))


class CoordinatorPartitions:
    """The partitions of one coordinator's internal topic that this broker leads, loaded into
    the coordinator: `load(partitions)` replays them and returns the records replayed,
    `unload(partitions)` forgets their keys. Both take every partition that changed at
    once: finishing a load looks at every key the coordinator holds."""

    def __init__(
        self,
        broker,
        topic: str,
        partition_for: Callable[[str], int],
        load: Callable[[list[int]], int],
        unload: Callable[[list[int]], None],
        write_timeout_config: str,
    ) -> None:
        self.broker = broker
        self.topic = topic
        self.partition_for = partition_for
        self._load = load
        self._unload = unload
        self._write_timeout_config = write_timeout_config
        self.loaded: set[int] = set()
        self._create_lock = asyncio.Lock()

    def follow_leadership(self) -> int:
        """Load the partitions led here that are not loaded yet, unload the loaded ones led
        elsewhere now; returns the records replayed."""
        rm = self.broker.replica_manager
        meta = self.broker.image.topic(self.topic)
        led = set()
        if meta is not None:
            for index in range(meta.partitions):
                hosted = rm.partition(self.topic, index)
                if hosted is not None and hosted.is_leader:
                    led.add(index)
        lost, gained = sorted(self.loaded - led), sorted(led - self.loaded)
        self.loaded -= set(lost)
        if lost:
            self._unload(lost)
        self.loaded |= set(gained)
        replayed = self._load(gained) if gained else 0
        if self.broker.cluster is not None and (lost or gained):
            log.info(
                "%s: loaded partitions %s (%d record(s)), unloaded %s",
                self.topic,
                gained,
                replayed,
                lost,
            )
        return replayed

    def error(self, key: str) -> ErrorCode:
        """NOT_COORDINATOR for a key of a partition this broker does not lead (a single
        broker coordinates every key, its topic created or not)."""
        if self.broker.cluster is None or self.partition_for(key) in self.loaded:
            return ErrorCode.none
        return ErrorCode.not_coordinator

    def leader(self, key: str) -> int:
        """The broker leading the key's partition of the topic, as the metadata says; -1
        while it has none, or the topic does not exist yet."""
        partition = self.partition_for(key)
        newer = self.broker.replica_manager.superseding((self.topic, partition))
        if newer is not None:  # the store out of reach, the other brokers said so
            return newer.leader
        registration = self.broker.image.partition(self.topic, partition)
        return -1 if registration is None else registration.leader

    def check(self, key: str) -> int:
        """The key's partition; raises CoordinatorError when it is not led here."""
        partition = self.partition_for(key)
        if self.broker.cluster is not None and (
            partition not in self.loaded
            or self.broker.replica_manager.superseding((self.topic, partition)) is not None
        ):
            raise CoordinatorError(ErrorCode.not_coordinator)
        return partition

    async def replicated(self, partition: int) -> None:
        """Once the coordinator's writes to `partition` are in every in-sync replica; raises
        CoordinatorError with Kafka's answer to a write that could not be replicated."""
        code = await replicated(
            self.broker, self.topic, partition, self.broker.config[self._write_timeout_config]
        )
        if code is not ErrorCode.none:
            raise CoordinatorError(_WRITE_ERRORS.get(code, code))

    async def ensure_topic(
        self,
        partitions: int,
        configs: dict[str, str],
        replication_factor_config: str,
        min_isr_config: str | None = None,
    ) -> None:
        """Create the topic on first use. In a cluster it has the configured replication
        factor and needs that many usable brokers, as Kafka (until then FindCoordinator finds
        no leader and answers COORDINATOR_NOT_AVAILABLE); a cluster of one broker caps the
        factor, and the minimum ISR, at 1, so that it serves groups and transactions out of
        the box where Kafka would refuse. A single broker keeps one replica of everything."""
        if self.broker.image.topic(self.topic) is not None:
            return
        async with self._create_lock:
            if self.broker.image.topic(self.topic) is not None:
                return
            replication_factor = 1
            if self.broker.cluster is not None:
                replication_factor = self.broker.config[replication_factor_config]
                if len(self.broker.image.brokers) == 1:
                    replication_factor = 1
                usable = len(self.broker.usable_brokers())
                if usable < replication_factor:
                    log.warning(
                        "%s not created: %s is %d, but only %d broker(s) are usable",
                        self.topic,
                        replication_factor_config,
                        replication_factor,
                        usable,
                    )
                    return
                if min_isr_config is not None:
                    min_isr = min(self.broker.config[min_isr_config], replication_factor)
                    configs = {**configs, "min.insync.replicas": str(min_isr)}
            await self.broker.create_topic(self.topic, partitions, configs, replication_factor)
        self.follow_leadership()
