"""The producer's requests to its transaction coordinator (and, for offsets, to its group's
coordinator): InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn.

Each is sent again on the coordinator's retriable answers (a moved or loading coordinator,
CONCURRENT_TRANSACTIONS while the previous transaction's markers are written) until
max.block.ms has passed; any other answer goes to the TransactionManager, which says whether
it is fatal or makes the transaction abortable."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client.cluster import GROUP_KEY, TRANSACTION_KEY
from broker.client.connection import ConnectionClosed
from broker.client.errors import KafkaAdminError, KafkaTimeoutError
from broker.client.group_offsets import by_topic, committed_topics
from broker.client.models import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from broker.client.producer.transaction_manager import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    RETRIABLE_TXN_CODES,
    TransactionManager,
    kafka_error,
)
from broker.client.routing import RoutingClient

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = (
    22,
    24,
    25,
    26,
    28,
)
TWO_PHASE_COMMIT_VERSION = 6  # InitProducerId v6: enable_2pc, keep_prepared_txn (KIP-939)
# Kafka retries AddPartitionsToTxn quickly while the previous transaction completes.
CONCURRENT_TRANSACTIONS_BACKOFF_MS = 20
_MOVED = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.network_exception}
)


# How to read one answer: its error code and message (NONE when it is a success).
Outcome = Callable[[Any], tuple[int, str | None]]


def _single(response: Any) -> tuple[int, str | None]:
    return response.error_code, getattr(response, "error_message", None)


def _first_partition_error(topics: Iterable[Any], partitions: str, code: str) -> Outcome:
    """How to read an answer over several partitions: its first error worth reporting
    (OPERATION_NOT_ATTEMPTED only says another partition failed), with the partitions that
    had it."""

    def outcome(response: Any) -> tuple[int, str | None]:
        results = [
            (f"{t.name}-{p.partition_index}", getattr(p, code))
            for t in getattr(response, topics)
            for p in getattr(t, partitions)
        ]
        codes = [c for _, c in results if c != ErrorCode.none]
        real = [c for c in codes if c != ErrorCode.operation_not_attempted]
        first = (real or codes or [ErrorCode.none])[0]
        failed = [tp for tp, c in results if c == first and c != ErrorCode.none]
        return first, ", ".join(failed) or None

    return outcome


class CoordinatorRequests:
    def __init__(
        self,
        client: RoutingClient,
        txn: TransactionManager,
        *,
        transaction_timeout_ms: int,
        max_block_ms: int,
        retry_backoff_ms: int,
    ) -> None:
        self.client = client
        self.txn = txn
        self.transaction_timeout_ms = transaction_timeout_ms
        self.max_block_ms = max_block_ms
        self.retry_backoff_ms = retry_backoff_ms

    async def _call(
        self, key_type: int | None, key: str | None, build: Callable[[Any], Any], outcome: Outcome
    ) -> Any:
        """Send `build(session)` to the coordinator of `key` (any broker when key_type is
        None) until it is answered with something other than a retriable error."""
        deadline = time.monotonic() + self.max_block_ms / 1000
        while True:
            message = None
            try:
                if key_type is None:
                    session = await self.client.any_session()
                else:
                    session = await self.client.coordinator(key_type, key)
                response = await session.send(build(session))
                code, message = outcome(response)
            except (ConnectionClosed, OSError) as e:
                code, message = ErrorCode.network_exception, str(e)
            except KafkaAdminError as e:  # FindCoordinator's own answer, or no common version
                if e.code not in RETRIABLE_TXN_CODES:
                    raise
                code, message = e.code, e.message
            if code == ErrorCode.none:
                return response
            if code not in RETRIABLE_TXN_CODES:
                raise self.txn.transaction_error(code, message, key)
            if code in _MOVED and key_type is not None:
                self.client.forget_coordinator(key_type, key)
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"no answer but {kafka_error(code).name} within max_block_ms "
                    f"({self.max_block_ms} ms)",
                    key,
                )
            backoff = self.retry_backoff_ms
            if code == ErrorCode.concurrent_transactions:
                backoff = min(backoff, CONCURRENT_TRANSACTIONS_BACKOFF_MS)
            await asyncio.sleep(backoff / 1000)

    async def init_producer_id(self, *, bump: bool = False, keep_prepared_txn: bool = False) -> Any:
        """A producer id and epoch; with `bump`, the next epoch of the current id (KIP-360),
        which also aborts whatever transaction that id left open."""
        txn = self.txn
        tid = txn.transactional_id
        two_phase = txn.two_phase_commit

        def build(session: Any) -> Any:
            if two_phase and session.version(INIT_PRODUCER_ID) < TWO_PHASE_COMMIT_VERSION:
                raise KafkaAdminError.from_code(
                    ErrorCode.unsupported_version,
                    "the broker serves no InitProducerId v6: no two-phase commit (KIP-939)",
                    tid,
                )
            return session.request(
                INIT_PRODUCER_ID,
                "InitProducerIdRequest",
                transactional_id=tid,
                transaction_timeout=timedelta(milliseconds=self.transaction_timeout_ms),
                producer_id=txn.producer_id if bump else NO_PRODUCER_ID,
                producer_epoch=txn.producer_epoch if bump else NO_PRODUCER_EPOCH,
                enable2_pc=two_phase,
                keep_prepared_txn=keep_prepared_txn,
            )

        key_type = TRANSACTION_KEY if tid is not None else None
        return await self._call(key_type, tid, build, _single)

    async def add_partitions(self, tps: set[TopicPartition]) -> None:
        txn = self.txn
        grouped = by_topic((tp, None) for tp in tps)

        def build(session: Any) -> Any:
            return session.request(
                ADD_PARTITIONS_TO_TXN,
                "AddPartitionsToTxnRequest",
                v3_and_below_transactional_id=txn.transactional_id,
                v3_and_below_producer_id=txn.producer_id,
                v3_and_below_producer_epoch=txn.producer_epoch,
                v3_and_below_topics=tuple(
                    session.request(
                        ADD_PARTITIONS_TO_TXN,
                        "AddPartitionsToTxnTopic",
                        name=topic,
                        partitions=tuple(p for p, _ in ps),
                    )
                    for topic, ps in grouped.items()
                ),
            )

        outcome = _first_partition_error(
            "results_by_topic_v3_and_below", "results_by_partition", "partition_error_code"
        )
        await self._call(TRANSACTION_KEY, txn.transactional_id, build, outcome)
        txn.partitions_added(tps)

    async def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
    ) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator with the member's
        generation and ids, so that a member fenced out of the group cannot commit (KIP-447)."""
        txn = self.txn
        await self._transaction_request(
            ADD_OFFSETS_TO_TXN, "AddOffsetsToTxnRequest", group_id=group.group_id
        )
        txn.transaction_started = True

        def build(session: Any) -> Any:
            return session.request(
                TXN_OFFSET_COMMIT,
                "TxnOffsetCommitRequest",
                transactional_id=txn.transactional_id,
                group_id=group.group_id,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=committed_topics(
                    session, TXN_OFFSET_COMMIT, "TxnOffsetCommitRequest", offsets
                ),
            )

        outcome = _first_partition_error("topics", "partitions", "error_code")
        await self._call(GROUP_KEY, group.group_id, build, outcome)

    async def end_txn(self, commit: bool) -> None:
        await self._transaction_request(END_TXN, "EndTxnRequest", committed=commit)

    async def _transaction_request(self, api_key: int, name: str, **fields: Any) -> None:
        """A request naming the transaction and the producer, with a single error code."""
        txn = self.txn
        await self._call(
            TRANSACTION_KEY,
            txn.transactional_id,
            lambda session: session.request(
                api_key,
                name,
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                **fields,
            ),
            _single,
        )
