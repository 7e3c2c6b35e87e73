"""Transactions and producers, as kafka-transactions lists, describes and aborts them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from kio.schema.errors import ErrorCode

from broker.client.admin_groups import GroupOperations
from broker.client.cluster import TRANSACTION_KEY
from broker.client.errors import KafkaAdminError, check
from broker.client.models import ProducerState, TransactionDescription, TransactionListing

WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS = 27, 61
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


class TransactionOperations(GroupOperations):
    async def list_transactions(
        self,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        min_duration_ms: int = -1,
    ) -> list[TransactionListing]:
        """Transactional ids of every coordinator, filtered by state (Ongoing, PrepareCommit,
        ...), producer id and, from v1, running longer than min_duration_ms."""

        async def attempt() -> list[TransactionListing]:
            responses = await self.send_to_every_node(
                LIST_TRANSACTIONS,
                "ListTransactionsRequest",
                state_filters=tuple(states),
                producer_id_filters=tuple(producer_ids),
                duration_filter=min_duration_ms,
            )
            return sorted(
                (
                    TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                    for response in responses.values()
                    for t in response.transaction_states
                ),
                key=lambda t: t.transactional_id,
            )

        return await self.retrying(attempt)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not know."""

        async def attempt() -> TransactionDescription:
            session = await self.coordinator(TRANSACTION_KEY, transactional_id)
            response = await session.send(
                session.request(
                    DESCRIBE_TRANSACTIONS,
                    "DescribeTransactionsRequest",
                    transactional_ids=(transactional_id,),
                )
            )
            t = response.transaction_states[0]
            check(t.error_code, None, transactional_id)
            return TransactionDescription(
                transactional_id=t.transactional_id,
                coordinator_id=self._coordinators[(TRANSACTION_KEY, transactional_id)],
                state=t.transaction_state,
                producer_id=t.producer_id,
                producer_epoch=t.producer_epoch,
                transaction_timeout_ms=int(t.transaction_timeout.total_seconds() * 1000),
                transaction_start_time_ms=_epoch_ms(t.transaction_start_time),
                partitions=sorted((d.topic, p) for d in t.topics for p in d.partitions),
            )

        return await self.retrying(attempt)

    async def describe_producers(self, topic: str, partition: int) -> list[ProducerState]:
        """The producers with state on a partition, from its leader."""

        async def attempt() -> list[ProducerState]:
            leaders = await self._leaders([(topic, partition)])
            session = await self.session(leaders[(topic, partition)])
            response = await session.send(
                session.request(
                    DESCRIBE_PRODUCERS,
                    "DescribeProducersRequest",
                    topics=(
                        session.request(
                            DESCRIBE_PRODUCERS,
                            "TopicRequest",
                            name=topic,
                            partition_indexes=(partition,),
                        ),
                    ),
                )
            )
            p = response.topics[0].partitions[0]
            check(p.error_code, p.error_message, f"{topic}-{partition}")
            return [
                ProducerState(
                    producer_id=s.producer_id,
                    producer_epoch=s.producer_epoch,
                    last_sequence=s.last_sequence,
                    last_timestamp_ms=s.last_timestamp,
                    coordinator_epoch=s.coordinator_epoch,
                    current_transaction_start_offset=s.current_txn_start_offset,
                )
                for s in p.active_producers
            ]

        return await self.retrying(attempt)

    async def abort_transaction(self, topic: str, partition: int, producer_id: int) -> None:
        """Write an ABORT marker for the producer's open transaction on one partition, as
        `kafka-transactions.sh abort` does for a hanging transaction: epochs come from
        DescribeProducers, the marker goes straight to the leader with WriteTxnMarkers.
        INVALID_TXN_STATE when the producer has no transaction open there."""
        producer = next(
            (
                p
                for p in await self.describe_producers(topic, partition)
                if p.producer_id == producer_id
            ),
            None,
        )
        if producer is None or producer.current_transaction_start_offset < 0:
            raise KafkaAdminError.from_code(
                ErrorCode.invalid_txn_state,
                f"producer {producer_id} has no open transaction on {topic}-{partition}",
                f"{topic}-{partition}",
            )

        async def attempt() -> None:
            leaders = await self._leaders([(topic, partition)])
            session = await self.session(leaders[(topic, partition)])
            response = await session.send(
                session.request(
                    WRITE_TXN_MARKERS,
                    "WriteTxnMarkersRequest",
                    markers=(
                        session.request(
                            WRITE_TXN_MARKERS,
                            "WritableTxnMarker",
                            producer_id=producer_id,
                            producer_epoch=producer.producer_epoch,
                            transaction_result=False,  # ABORT
                            topics=(
                                session.request(
                                    WRITE_TXN_MARKERS,
                                    "WritableTxnMarkerTopic",
                                    name=topic,
                                    partition_indexes=(partition,),
                                ),
                            ),
                            coordinator_epoch=producer.coordinator_epoch,
                        ),
                    ),
                )
            )
            for marker in response.markers:
                for t in marker.topics:
                    for p in t.partitions:
                        check(p.error_code, None, f"{t.name}-{p.partition_index}")

        await self.retrying(attempt)


def _epoch_ms(value: datetime) -> int:
    # -1 ("no transaction open") decodes to a millisecond before the epoch.
    return round(value.timestamp() * 1000)
