"""Runs the group coordinator's state machine on the event loop (see coordinator/runtime.py).

An operation's records are appended to the group's partition of `__consumer_offsets` as one
batch (a single write, so an operation is all-or-nothing after a crash), replayed into the
state machine, and only then (in a cluster: once replicated to the ISR) is the operation's
response released. Timers become one loop timer armed at the earliest deadline. The groups
live on the leaders of their partitions (coordinator_log.CoordinatorPartitions): a single
broker replays every partition at start-up, a broker of a cluster those it comes to lead.

Transactional offset commits are written as a transactional batch of the producer and replay
as pending; the transaction coordinator ends them with `complete_transaction`, which writes the
COMMIT or ABORT marker to the group's partition and replays it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.offsets import NO_PRODUCER_ID
from broker.coordinator.records import decode_record, encode_record
from broker.coordinator.runtime import Deferred, Record, Result
from broker.records.batch import Record as BatchRecord
from broker.records.control import COMMIT, parse_marker
from broker.records.errors import InvalidRecordError
from broker.server.coordinator_log import CoordinatorPartitions, append_records, read_batches
from broker.storage.producer_state import ProducerStateError

log = logging.getLogger("broker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


def _now_ms() -> int:
    return int(time.time() * 1000)


class CoordinatorRuntime:
    def __init__(self, broker, coordinator: GroupCoordinator) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self._timer_handle: asyncio.TimerHandle | None = None
        self.partitions = CoordinatorPartitions(
            broker,
            OFFSETS_TOPIC,
            coordinator.partition_for,
            self._load,
            coordinator.unload,
            "offsets.commit.timeout.ms",
        )
        coordinator.timer.on_change = self._arm_timer

    # -- loading -------------------------------------------------------------------------------

    def _load(self, partitions: list[int]) -> int:
        replayed = sum(self._replay_log(p, self._log(p)) for p in partitions)
        self.coordinator.on_loaded(_now_ms(), set(partitions))
        return replayed

    def _replay_log(self, partition: int, log_) -> int:
        """Replay one partition: plain batches are state, transactional ones pending offsets of
        their producer, control batches the end of that producer's transaction. Pending
        offsets without a marker stay pending: the transaction coordinator ends them later."""
        replayed = 0
        for header, records in read_batches(log_):
            if header.is_control:
                marker = _marker_type(records)
                if marker is not None:
                    self.coordinator.replay_end_transaction(
                        partition, header.producer_id, marker == COMMIT
                    )
                continue
            producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
            for r in records:
                self.coordinator.replay(
                    decode_record(r.key, r.value), producer_id, header.producer_epoch
                )
                replayed += 1
        return replayed

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` on first use, with Kafka's configs for it: compacted
        by the log cleaner, never deleted by time or size."""
        await self.partitions.ensure_topic(
            self.coordinator.config.offsets_topic_partitions,
            {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(self.broker.config["offsets.topic.segment.bytes"]),
            },
            "offsets.topic.replication.factor",
        )

    # -- operations ----------------------------------------------------------------------------

    async def run(self, group_id: str, op: Callable[[int], Result]):
        """Run `op` for `group_id`: append and replay its records, then answer once they are
        replicated. Raises CoordinatorError when the group is not coordinated here, or its
        records could not be replicated."""
        await self.ensure_topic()
        partition = self.partitions.check(group_id)
        result = op(_now_ms())
        self.apply(result.records)
        response = result.response
        if isinstance(response, Deferred):
            # Resolved by whichever operation completes the rebalance, whose records the
            # wait below covers too.
            future = asyncio.get_running_loop().create_future()
            response.add_callback(lambda value: future.done() or future.set_result(value))
            response = await future
        elif not result.records:
            return response
        await self.partitions.replicated(partition)
        return response

    async def run_transactional(
        self, group_id: str, producer_id: int, producer_epoch: int, op: Callable[[int], Result]
    ):
        """Run `op` (a TxnOffsetCommit) for `group_id` inside the producer's transaction: its
        records are appended as one transactional batch of the producer and replay as pending
        until `complete_transaction`. Raises ProducerStateError (INVALID_PRODUCER_EPOCH) when
        the partition has seen a newer epoch of the producer: the producer is fenced."""
        await self.ensure_topic()
        partition = self.partitions.check(group_id)
        entry = self._log(partition).producer_state.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            raise ProducerStateError(
                ErrorCode.invalid_producer_epoch,
                f"Epoch of producer {producer_id} is {producer_epoch}, which is smaller than "
                f"the last seen epoch {entry.producer_epoch}",
            )
        result = op(_now_ms())
        self.apply(result.records, producer_id, producer_epoch)
        if result.records:
            await self.partitions.replicated(partition)
        return result.response

    def complete_transaction(
        self,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        transaction_version: int = 0,
    ) -> None:
        """Write the producer's COMMIT or ABORT marker to `partition` of `__consumer_offsets`
        and replay it: the producer's pending offsets of the groups there become committed or
        are dropped (the transaction coordinator's WriteTxnMarkers to this broker). Raises the
        log's ProducerStateError, writing and replaying nothing, for a zombie marker."""
        if self.broker.image.topic(OFFSETS_TOPIC) is None:
            return  # no offsets were ever committed, transactionally or not
        now_ms = _now_ms()
        # Through the replica manager: a read_committed fetch parked on the partition (an
        # operator debugging the topic) is released by the marker like by any append.
        self.broker.replica_manager.append_marker(
            OFFSETS_TOPIC,
            partition,
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            now_ms,
            transaction_version,
        )
        self.coordinator.replay_end_transaction(partition, producer_id, commit)

    def apply(
        self,
        records: list[Record],
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> None:
        """Append `records` (one batch per partition, in order; transactional when a producer
        is given) and replay them."""
        if not records:
            return
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for record in records:
            by_partition[self.coordinator.partition_for(record.key.group_id)].append(record)
        now_ms = _now_ms()
        for partition, group_records in by_partition.items():
            self._append(partition, group_records, now_ms, producer_id, producer_epoch)
        for record in records:
            self.coordinator.replay(record, producer_id, producer_epoch)

    def _log(self, partition: int):
        return self.broker.replica_manager.log(OFFSETS_TOPIC, partition)

    def _append(
        self,
        partition: int,
        records: list[Record],
        now_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> None:
        append_records(
            self.broker.replica_manager,
            OFFSETS_TOPIC,
            partition,
            [encode_record(r) for r in records],
            now_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=producer_id != NO_PRODUCER_ID,
        )

    # -- timers --------------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        deadline = self.coordinator.timer.next_deadline()
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None
        if deadline is None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline - _now_ms()) / 1000)
        self._timer_handle = loop.call_later(delay, self._fire_timers)

    def _fire_timers(self) -> None:
        self._timer_handle = None
        now_ms = _now_ms()
        for key, task in self.coordinator.timer.expire(now_ms):
            try:
                self.apply(task(now_ms))
            except Exception:
                log.exception("coordinator timer %s failed", key)
        self._arm_timer()

    def stop(self) -> None:
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = None


def _marker_type(records: list[BatchRecord]) -> int | None:
    """COMMIT or ABORT for a control batch holding a transaction marker; None for any other
    control record, which Kafka's coordinator loader skips too."""
    if not records:
        return None
    try:
        marker, _coordinator_epoch = parse_marker(records[0].key, records[0].value)
    except InvalidRecordError:
        return None
    return marker
