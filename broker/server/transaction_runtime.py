"""Runs the transaction coordinator on the event loop (see coordinator/transaction_coordinator.py).

An operation's record is appended to the transactional id's partition of `__transaction_state`
and replayed before the response leaves (in a cluster: once replicated to the ISR). The
transactional ids live on the leaders of their partitions (coordinator_log.CoordinatorPartitions).

When a transaction ends, its markers are written to every partition it touched — data
partitions through the replica manager, a group's `__consumer_offsets` partition through the
group coordinator's runtime, which turns pending transactional offsets into commits — and then
the completion record is appended. A single broker does it all in one turn of the loop, so no
other request sees a half-ended transaction; a cluster sends the markers to the partitions'
leaders once the decision is replicated (txn_marker_channel.py), and meanwhile the id answers
CONCURRENT_TRANSACTIONS, as Kafka's does.
"""

from __future__ import annotations

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
from broker.server.coordinator_log import CoordinatorPartitions, append_records, read_batches
from broker.server.inter_broker import InterBrokerSessions
from broker.server.txn_marker_channel import TxnMarkerChannel
from broker.storage.producer_state import ProducerStateError

log = logging.getLogger("broker.coordinator.transactions")

OFFSETS_TOPIC = "__consumer_offsets"


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionRuntime:
    def __init__(self, broker, coordinator: TransactionCoordinator) -> None:
        self.broker = broker
        self.coordinator = coordinator
        # To the other brokers: WriteTxnMarkers, and AddPartitionsToTxn to verify a
        # transaction with its coordinator (transaction_verification.py).
        self.sessions = InterBrokerSessions(broker, "fjord-transactions", log)
        self.markers = TxnMarkerChannel(broker, self)
        self.partitions = CoordinatorPartitions(
            broker,
            TRANSACTION_STATE_TOPIC,
            coordinator.partition_for,
            self._load,
            self._unload,
            "request.timeout.ms",
        )

    # -- loading -------------------------------------------------------------------------------

    def _load(self, partitions: list[int]) -> int:
        """Replay the partitions, then finish the transactions a crash or a failover left
        between their Prepare record and their markers."""
        replayed = 0
        for partition in partitions:
            log_ = self.broker.replica_manager.log(TRANSACTION_STATE_TOPIC, partition)
            for _, records in read_batches(log_):
                for r in records:
                    self.coordinator.replay(decode_transaction_record(r.key, r.value))
                    replayed += 1
        now_ms = _now_ms()
        for partition in partitions:
            for job in self.coordinator.pending_markers(partition):
                self._end(job, now_ms)
        return replayed

    def _unload(self, partitions: list[int]) -> None:
        # The partitions' new coordinators send the markers still due.
        for partition in partitions:
            self.markers.unload(partition)
            self.coordinator.unload(partition)

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` on first use, with Kafka's configs for it: compacted
        by the log cleaner, never deleted by time or size."""
        await self.partitions.ensure_topic(
            self.coordinator.config.state_log_partitions,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.broker.config["transaction.state.log.segment.bytes"]),
            },
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
        )

    async def stop(self) -> None:
        await self.markers.stop()
        await self.sessions.close()

    @property
    def transaction_version(self) -> int:
        """The cluster's finalized transaction.version: which protocol clients may use, and
        how the coordinator ends the transactions it aborts itself."""
        return self.broker.features.level(TRANSACTION_VERSION)

    # -- operations ----------------------------------------------------------------------------

    async def run(self, transactional_id: str, op):
        """Run `op(now_ms) -> TxnResult` for `transactional_id`: append and replay its
        records, end any transaction it ended, then answer once the records are replicated.
        Raises CoordinatorError when the id is not coordinated here, or its records could not
        be replicated."""
        return await self.run_with_producer_id(transactional_id, lambda now_ms, _: op(now_ms))

    async def run_with_producer_id(self, transactional_id: str, op):
        """`run` for an operation that may move a producer to a new producer id:
        `op(now_ms, fresh_producer_id)` runs without one first, and again with a newly
        allocated one as long as the coordinator asks for one (`needs_producer_id`), so that
        an id is used up only where one is needed (not by a zombie's or a retried request)."""
        await self.ensure_topic()
        partition = self.partitions.check(transactional_id)
        response, wrote = await self._with_producer_id(op)
        if wrote:
            await self.partitions.replicated(partition)
        return response

    async def _with_producer_id(self, op) -> tuple[object, bool]:
        """The response, and whether records were written."""
        fresh = NO_PRODUCER_ID
        wrote = False
        while True:
            result = op(_now_ms(), fresh)
            response = self.apply(result)
            wrote = wrote or bool(result.records)
            if not result.needs_producer_id:
                return response, wrote
            # Should leadership move meanwhile, the next append finds the partition gone.
            fresh = await self.broker.generate_producer_id()

    def run_sync(self, transactional_id: str, op):
        """`run` for a caller on a path that must not wait (a Produce adding its partition):
        the transactional id it names has state, so `__transaction_state` exists already.
        Its record is not waited for: the producer's EndTxn is, and comes after."""
        self.partitions.check(transactional_id)
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
            await self._with_producer_id(
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

    def write_job_marker(
        self, job: MarkerJob, tp: tuple[str, int], coordinator_epoch: int, now_ms: int
    ) -> ErrorCode:
        return self.write_marker(
            *tp,
            job.producer_id,
            job.producer_epoch,
            job.commit,
            coordinator_epoch,
            now_ms,
            job.transaction_version,
        )

    # -- internals -----------------------------------------------------------------------------

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The coordinator's epoch is its partition's leader epoch: a coordinator that lost
        the partition writes markers with an older one, and partitions refuse them."""
        return self.broker.replica_manager.leader_epoch_of(
            TRANSACTION_STATE_TOPIC, self.coordinator.partition_for(transactional_id)
        )

    def complete(self, job: MarkerJob) -> None:
        """Every marker of `job` is written: its transaction completes."""
        now_ms = _now_ms()
        self._append(self.coordinator.complete(job.transactional_id, now_ms), now_ms)

    def _end(self, job: MarkerJob, now_ms: int) -> None:
        """Write the markers, then complete the transaction. A marker a partition refuses (a
        newer epoch of the producer, or coordinator, wrote there) leaves the transaction
        prepared, as Kafka stops sending a transaction's markers then: completing it would
        leave that partition's transaction open with nothing left to close it. A restart
        writes the markers of a prepared transaction again."""
        if self.broker.cluster is not None:
            self.markers.send(job)
            return
        coordinator_epoch = self.coordinator_epoch(job.transactional_id)
        refused = False
        for tp in sorted(job.partitions):
            # A deleted topic has nothing left to mark.
            error = self.write_job_marker(job, tp, coordinator_epoch, now_ms)
            if error not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
                log.error("marker for %s on %s-%d refused: %s", job, *tp, error)
                refused = True
        if not refused:
            self.complete(job)

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
