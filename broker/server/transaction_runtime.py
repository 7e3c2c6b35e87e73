"""Runs the transaction coordinator on the event loop (see coordinator/transaction_coordinator.py).

An operation's record is appended to the transactional id's partition of `__transaction_state`
and replayed before the response leaves. When a transaction ends, its markers are written to
every partition it touched — data partitions through the replica manager, a group's
`__consumer_offsets` partition through the group coordinator's runtime, which turns pending
transactional offsets into commits — and then the completion record is appended. Everything
happens in one turn of the loop, so no other request sees a half-ended transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

from kio.schema.errors import ErrorCode

from broker.coordinator.runtime import Record
from broker.coordinator.transaction_coordinator import (
    NO_PRODUCER_ID,
    MarkerJob,
    TransactionCoordinator,
    TxnResult,
)
from broker.coordinator.transaction_records import (
    TRANSACTION_STATE_TOPIC,
    decode_transaction_record,
    encode_transaction_record,
)
from broker.metadata.features import TRANSACTION_VERSION
from broker.server.coordinator_log import append_records, read_batches
from broker.storage.producer_state import ProducerStateError

log = logging.getLogger("broker.coordinator.transactions")

OFFSETS_TOPIC = "__consumer_offsets"


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionRuntime:
    def __init__(self, broker, coordinator: TransactionCoordinator) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self._create_lock = asyncio.Lock()

    # -- start-up ------------------------------------------------------------------------------

    def load(self) -> int:
        """Replay `__transaction_state`, then finish the transactions a crash left between
        their Prepare record and their markers; returns the records replayed."""
        replayed = 0
        topic = self.broker.image.topic(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            for partition in range(topic.partitions):
                log_ = self.broker.replica_manager.log(TRANSACTION_STATE_TOPIC, partition)
                for _, records in read_batches(log_):
                    for r in records:
                        self.coordinator.replay(decode_transaction_record(r.key, r.value))
                        replayed += 1
        now_ms = _now_ms()
        for job in self.coordinator.pending_markers():
            self._end(job, now_ms)
        return replayed

    async def ensure_state_topic(self) -> None:
        """Create `__transaction_state` on first use, with Kafka's configs for it: compacted
        by the log cleaner, never deleted by time or size."""
        if self.broker.image.topic(TRANSACTION_STATE_TOPIC) is not None:
            return
        async with self._create_lock:
            await self.broker.create_topic(
                TRANSACTION_STATE_TOPIC,
                self.coordinator.config.state_log_partitions,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(self.broker.config["transaction.state.log.segment.bytes"]),
                },
            )

    @property
    def transaction_version(self) -> int:
        """The cluster's finalized transaction.version: which protocol clients may use, and
        how the coordinator ends the transactions it aborts itself."""
        return self.broker.features.level(TRANSACTION_VERSION)

    # -- operations ----------------------------------------------------------------------------

    async def run(self, op):
        """Run `op(now_ms) -> TxnResult`: append and replay its records, write the markers of
        any transaction it ended, then answer."""
        await self.ensure_state_topic()
        return self.apply(op(_now_ms()))

    async def run_with_producer_id(self, op):
        """`run` for an operation that may move a producer to a new producer id:
        `op(now_ms, fresh_producer_id)` runs without one first, and again with a newly
        allocated one as long as the coordinator asks for one (`needs_producer_id`), so that
        an id is used up only where one is needed (not by a zombie's or a retried request)."""
        await self.ensure_state_topic()
        fresh = NO_PRODUCER_ID
        while True:
            result = op(_now_ms(), fresh)
            response = self.apply(result)
            if not result.needs_producer_id:
                return response
            fresh = await self.broker.generate_producer_id()

    def run_sync(self, op):
        """`run` for a caller on a path that must not wait: the transactional id it names
        has state, so `__transaction_state` exists already."""
        return self.apply(op(_now_ms()))

    def apply(self, result: TxnResult):
        now_ms = _now_ms()
        self._append(result.records, now_ms)
        for job in result.markers:
            self._end(job, now_ms)
        return result.response

    async def abort_timed_out(self, now_ms: int) -> None:
        """The transactions open longer than their timeout, as of `now_ms` (a transaction whose
        abort moves it to a new producer id waits for the id's allocation)."""
        if self.broker.image.topic(TRANSACTION_STATE_TOPIC) is not None:
            await self.run_with_producer_id(
                lambda _, fresh: self.coordinator.abort_timed_out(
                    now_ms, self.transaction_version, fresh
                )
            )

    def expire_transactional_ids(self, now_ms: int) -> None:
        if self.broker.image.topic(TRANSACTION_STATE_TOPIC) is not None:
            self._append(self.coordinator.expire_transactional_ids(now_ms), now_ms)

    def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
        transaction_version: int = 0,
    ) -> ErrorCode:
        """Write one COMMIT/ABORT marker: to a data partition, or to a group's partition of
        `__consumer_offsets`, where the group coordinator also settles the pending offsets.
        `transaction_version` decides how the partition checks the marker's producer epoch
        (ProducerStateManager.check_end_txn_marker)."""
        rm = self.broker.replica_manager
        if rm.log(topic, partition) is None:
            return ErrorCode.unknown_topic_or_partition
        marker = {
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "commit": commit,
            "coordinator_epoch": coordinator_epoch,
            "transaction_version": transaction_version,
        }
        try:
            if topic == OFFSETS_TOPIC:
                self.broker.coordinator_runtime.complete_transaction(partition, **marker)
            else:
                rm.append_marker(topic, partition, now_ms=now_ms, **marker)
        except ProducerStateError as e:
            # The partition knows a newer epoch of this producer: the marker is stale.
            return e.error_code
        return ErrorCode.none

    # -- internals -----------------------------------------------------------------------------

    def _end(self, job: MarkerJob, now_ms: int) -> None:
        """Write the markers, then complete the transaction. A marker a partition refuses (a
        newer epoch of the producer, or coordinator, wrote there) leaves the transaction
        prepared, as Kafka stops sending a transaction's markers then: completing it would
        leave that partition's transaction open with nothing left to close it. A restart
        writes the markers of a prepared transaction again."""
        coordinator_epoch = self.broker.replica_manager.leader_epoch
        refused = False
        for topic, partition in sorted(job.partitions):
            # A deleted topic has nothing left to mark.
            error = self.write_marker(
                topic,
                partition,
                job.producer_id,
                job.producer_epoch,
                job.commit,
                coordinator_epoch,
                now_ms,
                job.transaction_version,
            )
            if error not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
                log.error("marker for %s on %s-%d refused: %s", job, topic, partition, error)
                refused = True
        if not refused:
            self._append(self.coordinator.complete(job.transactional_id, now_ms), now_ms)

    def _append(self, records: list[Record], now_ms: int) -> None:
        if not records:
            return
        rm = self.broker.replica_manager
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for record in records:
            by_partition[self.coordinator.partition_for(record.key.transactional_id)].append(record)
        for partition, partition_records in by_partition.items():
            append_records(
                rm,
                TRANSACTION_STATE_TOPIC,
                partition,
                [encode_transaction_record(r) for r in partition_records],
                now_ms,
            )
        for record in records:
            self.coordinator.replay(record)
