"""The transaction coordinator's markers in a cluster (Kafka's TransactionMarkerChannelManager).

Once a transaction's outcome (its Prepare record) is replicated, its COMMIT or ABORT marker
goes to the leader of every partition it touched: written here for the partitions led here,
sent with WriteTxnMarkers to the others' leaders. Each marker carries the coordinator epoch
(the leader epoch of the coordinator's `__transaction_state` partition), so that a partition
refuses the markers of a coordinator that has since lost its partition
(TRANSACTION_COORDINATOR_FENCED). A partition answers once its marker is in every in-sync
replica; one whose leader moved, or whose ISR is short, is retried as the metadata changes.
When every partition has its marker the transaction completes. Should this broker stop leading
the coordinator's partition, its sending stops there: the partition's new leader loads the
prepared transaction and sends the markers again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

from kio.schema.errors import ErrorCode

from broker.coordinator.transaction_coordinator import MarkerJob
from broker.server.coordinator_log import CoordinatorError, replicated_markers
from broker.server.inter_broker import by_topic, partition_answers

log = logging.getLogger("broker.coordinator.transactions")

WRITE_TXN_MARKERS = 27
# Between attempts at partitions whose leader moved or whose ISR is short (Kafka's
# retry.backoff.ms).
RETRY_BACKOFF_S = 0.1
# The answers after which a partition's marker is written, or need not be (Kafka: a partition
# of a message format without transactions never had the producer's data).
_DONE = frozenset(
    {ErrorCode.none, ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version}
)
# A newer producer epoch or coordinator wrote to the partition: this transaction's sending
# stops there, and it stays prepared (see TransactionRuntime._end).
_FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})

TopicPartition = tuple[str, int]


class TxnMarkerChannel:
    def __init__(self, broker, runtime) -> None:
        self.broker = broker
        self.runtime = runtime
        self._sending: dict[int, set[asyncio.Task]] = defaultdict(set)

    def send(self, job: MarkerJob) -> None:
        """End the transaction of `job` in the background."""
        partition = self.runtime.coordinator.partition_for(job.transactional_id)
        task = asyncio.create_task(self._end(job, partition))
        sending = self._sending[partition]
        sending.add(task)
        task.add_done_callback(sending.discard)

    def unload(self, partition: int) -> None:
        for task in self._sending.pop(partition, ()):
            task.cancel()

    async def stop(self) -> None:
        tasks = [t for sending in self._sending.values() for t in sending]
        self._sending.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _end(self, job: MarkerJob, partition: int) -> None:
        try:
            await self._send_markers(job, partition)
        except Exception:
            # The transaction stays prepared: its partition's next load sends them again.
            log.exception("sending the markers of %s failed", job)

    async def _send_markers(self, job: MarkerJob, partition: int) -> None:
        # The markers go out once the outcome is replicated: a coordinator that failed over
        # before that may never have decided it.
        while True:
            try:
                await self.runtime.partitions.replicated(partition)
                break
            except CoordinatorError as e:
                if e.code is ErrorCode.not_coordinator:
                    return
                await self._back_off()
        coordinator_epoch = self.runtime.coordinator_epoch(job.transactional_id)
        pending = set(job.partitions)
        while pending:
            outcomes = await self._send_round(job, coordinator_epoch, pending)
            for tp, code in outcomes.items():
                if code in _DONE:
                    pending.discard(tp)
                elif code in _FENCED:
                    log.error("marker for %s on %s-%d refused: %s", job, *tp, code.name)
                    return
                else:
                    log.info("marker for %s on %s-%d: %s, retrying", job, *tp, code.name)
            if pending:
                await self._back_off()
        self.runtime.complete(job)

    async def _send_round(
        self, job: MarkerJob, coordinator_epoch: int, partitions: set[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """One attempt at every partition still waiting, at its leader of the moment."""
        image = self.broker.image
        outcomes: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in sorted(partitions):
            registration = image.partition(*tp)
            if registration is None:
                outcomes[tp] = ErrorCode.none  # a deleted topic has nothing left to mark
            elif registration.leader < 0:
                outcomes[tp] = ErrorCode.not_leader_or_follower
            else:
                by_leader[registration.leader].append(tp)
        rounds = [
            self._write_here(job, coordinator_epoch, tps)
            if leader == self.broker.node_id
            else self._send_to(leader, job, coordinator_epoch, tps)
            for leader, tps in by_leader.items()
        ]
        for answered in await asyncio.gather(*rounds):
            outcomes.update(answered)
        return outcomes

    async def _write_here(
        self, job: MarkerJob, coordinator_epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        now_ms = int(time.time() * 1000)
        written = [
            (tp, self.runtime.write_job_marker(job, tp, coordinator_epoch, now_ms))
            for tp in partitions
        ]
        return dict(zip(partitions, await replicated_markers(self.broker, written), strict=True))

    async def _send_to(
        self, leader: int, job: MarkerJob, coordinator_epoch: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        response = await self.runtime.sessions.send(
            leader,
            lambda session: self._write_txn_markers(session, job, coordinator_epoch, partitions),
            "WriteTxnMarkers",
        )
        if response is None:
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        return partition_answers(
            partitions,
            (
                (topic.name, p.partition_index, p.error_code)
                for marker in response.markers
                for topic in marker.topics
                for p in topic.partitions
            ),
        )

    @staticmethod
    async def _write_txn_markers(
        session, job: MarkerJob, coordinator_epoch: int, partitions: list[TopicPartition]
    ):
        def entity(class_name: str, **fields):
            return session.request(WRITE_TXN_MARKERS, class_name, **fields)

        marker = entity(
            "WritableTxnMarker",
            producer_id=job.producer_id,
            producer_epoch=job.producer_epoch,
            transaction_result=job.commit,
            topics=tuple(
                entity("WritableTxnMarkerTopic", name=topic, partition_indexes=tuple(indexes))
                for topic, indexes in by_topic(partitions).items()
            ),
            coordinator_epoch=coordinator_epoch,
            transaction_version=job.transaction_version,
        )
        return await session.send(entity("WriteTxnMarkersRequest", markers=(marker,)))

    @staticmethod
    async def _back_off() -> None:
        await asyncio.sleep(RETRY_BACKOFF_S)
