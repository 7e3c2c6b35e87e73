"""The asyncio producer, shaped as Kafka's and aiokafka's: records are appended to per-partition
batches (accumulator), a background task sends them (sender), the transaction manager keeps
the producer's id, sequences and transaction state, and the partitioner places records.

    async with Producer("host:9092", linger_ms=10) as producer:
        future = await producer.send("topic", b"value", key=b"key")  # queued
        metadata = await future                                      # written

Idempotence is on by default (Kafka 3+); with `transactional_id` the producer writes
transactions (`init_transactions`, `begin_transaction`, `commit_transaction`, ...), and with
`transaction_two_phase_commit_enable` it prepares them for another process to complete
(KIP-939)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, Self

from kio.schema.errors import ErrorCode

from broker.client.errors import IllegalStateError, KafkaAdminError, KafkaTimeoutError
from broker.client.models import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
)
from broker.client.producer.accumulator import RECORD_OVERHEAD, RecordAccumulator, record_size
from broker.client.producer.config import producer_config
from broker.client.producer.coordinator import CoordinatorRequests
from broker.client.producer.partitioner import Partitioner
from broker.client.producer.produce_result import FutureRecordMetadata
from broker.client.producer.sender import Sender, now_ms
from broker.client.producer.transaction_manager import (
    PreparedTxnState,
    TransactionManager,
    TxnState,
)
from broker.client.routing import RoutingClient
from broker.client.session import Security
from broker.records import compression as codecs
from broker.records.record import Header

__all__ = ["FutureRecordMetadata", "PreparedTxnState", "Producer"]

_CODECS = {name: codec for codec, name in codecs.CODEC_NAMES.items()}


_BYTES = (bytes, bytearray, memoryview)


def _checked_record(
    key: Any, value: Any, headers: Any, timestamp_ms: Any
) -> tuple[bytes | None, bytes | None, tuple[Header, ...]]:
    """The record as the batch keeps it until it is encoded (so a caller's buffer that
    changes afterwards does not change it), or TypeError/ValueError for what Kafka's
    serializers and ProducerRecord refuse."""
    if key is not None and not isinstance(key, bytes):
        if not isinstance(key, _BYTES):
            raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
        key = bytes(key)
    if value is not None and not isinstance(value, bytes):
        if not isinstance(value, _BYTES):
            raise TypeError(f"value must be bytes or None, got {type(value).__name__}")
        value = bytes(value)
    if headers is None:
        headers = ()
    elif not isinstance(headers, tuple) or headers:
        headers = tuple(headers)
        for header in headers:
            if not (
                isinstance(header, tuple)
                and len(header) == 2
                and isinstance(header[0], str)
                and (header[1] is None or isinstance(header[1], bytes))
            ):
                raise TypeError(f"a header must be (str, bytes | None), got {header!r}")
    if timestamp_ms is not None and (
        isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0
    ):
        raise ValueError(f"timestamp_ms must be a non-negative integer, got {timestamp_ms!r}")
    return key, value, headers


class Producer:
    """Options are the Java producer's properties with dots as underscores (`linger_ms`,
    `enable_idempotence`, `transactional_id`, ...), checked here; see config.py."""

    DEFAULT_CLIENT_ID = "fjord-producer"

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        security: Security | None = None,
        **options: Any,
    ) -> None:
        config = self.config = producer_config(options)
        self.client = RoutingClient(
            bootstrap_servers,
            security,
            client_id=config.client_id or self.DEFAULT_CLIENT_ID,
            retry_backoff_ms=config.retry_backoff_ms,
            request_timeout_ms=config.request_timeout_ms,
        )
        self._txn = TransactionManager(
            config.transactional_id,
            idempotent=config.enable_idempotence,
            two_phase_commit=config.transaction_two_phase_commit_enable,
        )
        self._accumulator = RecordAccumulator(
            batch_size=config.batch_size,
            linger_ms=config.linger_ms,
            compression=_CODECS[config.compression_type],
            buffer_memory=config.buffer_memory,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
        )
        self._coordinator = CoordinatorRequests(
            self.client,
            self._txn,
            transaction_timeout_ms=config.transaction_timeout_ms,
            max_block_ms=config.max_block_ms,
            retry_backoff_ms=config.retry_backoff_ms,
        )
        self._partitioner = Partitioner(config.partitioner_ignore_keys)
        self._record_size_limit = min(config.max_request_size, config.buffer_memory)
        self._transactional = self._txn.is_transactional
        # The state in which send() has nothing to check.
        self._sending_state = (
            TxnState.IN_TRANSACTION if self._transactional else TxnState.UNINITIALIZED
        )
        self._sender: Sender | None = None
        self._closed = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._sender is not None:
            return
        try:
            await self.client.start()
        except BaseException:
            await self.client.close()
            raise
        self._sender = Sender(
            self.client, self._accumulator, self._txn, self._coordinator, self.config
        )
        self._sender.start()

    async def close(self) -> None:
        """Send what is queued (unless the producer failed fatally), then disconnect."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._sender is not None and self._txn.state is not TxnState.FATAL_ERROR:
                await self._flush(self._sender)
        finally:
            self._accumulator.closing = True
            if self._sender is not None:
                await self._sender.stop()
            closed = IllegalStateError("the producer was closed before the record was sent")
            for batch in self._accumulator.take_all():
                batch.fail(closed)
            await self.client.close()

    def _running_sender(self) -> Sender:
        if self._sender is None or self._closed:
            raise IllegalStateError("the producer is not started, or closed")
        return self._sender

    # -- producing ---------------------------------------------------------------------------

    async def partitions_for(self, topic: str) -> set[int]:
        return set((await self.client.route(topic)).leaders)

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue a record; the answer, awaited, gives its RecordMetadata once written (or
        raises the error it failed with). Waits only for the topic's metadata and, when
        buffer_memory is used up, for room (at most max_block_ms)."""
        # The per-record path: what is checked and done here is kept to the minimum.
        sender = self._sender
        if sender is None or self._closed:
            sender = self._running_sender()  # raises
        txn = self._txn
        if txn.state is not self._sending_state:
            txn.check_send()
        route = self.client.cached_route(topic) or await self.client.route(topic)
        count = len(route.leaders)
        if partition is not None and not 0 <= partition < count:
            raise KafkaAdminError.from_code(
                ErrorCode.unknown_topic_or_partition, None, f"{topic}-{partition}"
            )
        if (
            headers == ()
            and timestamp_ms is None
            and type(value) is bytes
            and (key is None or type(key) is bytes)
        ):
            size = RECORD_OVERHEAD + len(value) + (len(key) if key is not None else 0)
        else:
            key, value, headers = _checked_record(key, value, headers, timestamp_ms)
            size = record_size(key, value, headers)
        limit = self._record_size_limit
        if size > limit:
            raise KafkaAdminError.from_code(
                ErrorCode.message_too_large,
                f"the record is {size} bytes serialized, more than max_request_size or "
                f"buffer_memory ({limit})",
                topic,
            )
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        sticky = partition is None and (key is None or self._partitioner.ignore_keys)
        if partition is None:
            available = route.available_partitions
            partition = self._partitioner.partition(topic, key, count, available)
        accumulator = self._accumulator
        batch = accumulator.try_append((topic, partition), key, value, headers, timestamp_ms, size)
        if batch is None and sticky:
            # KIP-480: the sticky partition's batch is complete; fill another partition's.
            self._partitioner.on_new_batch(topic, partition, count, available)
            partition = self._partitioner.partition(topic, key, count, available)
            batch = accumulator.try_append(
                (topic, partition), key, value, headers, timestamp_ms, size
            )
        if batch is None:
            tp = TopicPartition(topic, partition)
            await self._wait_for_memory(sender, accumulator.capacity_for(size))
            txn.check_send()  # the transaction may have ended while we waited
            batch = accumulator.try_append(tp, key, value, headers, timestamp_ms, size)
            if batch is None:
                batch = accumulator.create_batch(
                    tp, key, value, headers, timestamp_ms, size, now_ms()
                )
                sender.wakeup()  # its linger starts now
                # Once per batch, let the sender put the full ones on the wire: the broker
                # works on them while the caller goes on queueing.
                await asyncio.sleep(0)
        if self._transactional:
            txn.maybe_add_partition(batch.tp)
            sender.wakeup()
        elif batch.estimated_size >= batch.capacity:  # full
            sender.wakeup()
        return batch.last_future()

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and wait until it is written."""
        return await (await self.send(topic, value, key, partition, headers, timestamp_ms))

    async def _wait_for_memory(self, sender: Sender, capacity: int) -> None:
        accumulator = self._accumulator
        if accumulator.has_memory_for(capacity):
            return
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        accumulator.waiting_for_memory += 1
        sender.wakeup()
        try:
            while not accumulator.has_memory_for(capacity):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"no {capacity} bytes of buffer_memory free within max_block_ms "
                        f"({self.config.max_block_ms} ms)"
                    )
                sender.memory_freed.clear()
                try:
                    await asyncio.wait_for(sender.memory_freed.wait(), remaining)
                except TimeoutError:
                    pass
        finally:
            accumulator.waiting_for_memory -= 1

    async def flush(self) -> None:
        """Wait until every record queued so far is written or has failed."""
        await self._flush(self._running_sender())

    async def _flush(self, sender: Sender) -> None:
        accumulator = self._accumulator
        results = [batch.result for batch in accumulator.incomplete]
        if not results:
            return
        accumulator.flushes_in_progress += 1
        sender.wakeup()
        try:
            while results:
                await asyncio.wait([result.settled for result in results])
                # The halves of batches split meanwhile, which now hold their records.
                results = [part for result in results for part in result.parts]
        finally:
            accumulator.flushes_in_progress -= 1

    # -- transactions ------------------------------------------------------------------------

    async def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        """Register the transactional id with its coordinator, fencing earlier producers with
        it and aborting what they left open, or with `keep_prepared_txn` (two-phase commit)
        keeping their prepared transaction for complete_transaction()."""
        self._running_sender()
        self._txn.begin_init(keep_prepared_txn)
        response = await self._coordinator.init_producer_id(keep_prepared_txn=keep_prepared_txn)
        self._txn.complete_init(
            response.producer_id,
            response.producer_epoch,
            getattr(response, "ongoing_txn_producer_id", -1),
            getattr(response, "ongoing_txn_producer_epoch", -1),
        )

    def begin_transaction(self) -> None:
        self._txn.begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit a consumer group's offsets with the transaction. Pass the consumer's
        ConsumerGroupMetadata so that a member fenced out of the group cannot commit."""
        self._running_sender()
        self._txn.check_send()
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        checked = {
            TopicPartition(*tp): o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o)
            for tp, o in offsets.items()
        }
        await self._coordinator.send_offsets(checked, group_metadata)

    async def commit_transaction(self) -> None:
        """Send what is queued, then commit; a TransactionAbortableError means the
        transaction must be aborted instead."""
        self._running_sender()
        self._txn.begin_commit()
        await self.flush()
        if self._txn.state is TxnState.ABORTABLE_ERROR:
            assert self._txn.last_error is not None
            raise self._txn.last_error
        if self._txn.transaction_started:
            await self._coordinator.end_txn(commit=True)
        self._txn.end_transaction()

    async def abort_transaction(self) -> None:
        """Drop what is still queued, wait for what is in flight, abort."""
        sender = self._running_sender()
        self._txn.begin_abort()
        sender.wakeup()
        await self.flush()
        if self._txn.transaction_started:
            await self._coordinator.end_txn(commit=False)
        if self._txn.epoch_bump_required:
            # KIP-360: a sequence left unresolved; the next epoch starts sequences afresh.
            response = await self._coordinator.init_producer_id(bump=True)
            self._txn.set_producer_id(response.producer_id, response.producer_epoch)
        self._txn.end_transaction()

    async def prepare_transaction(self) -> PreparedTxnState:
        """Two-phase commit (KIP-939): send what is queued and hold the transaction open for
        commit or abort by complete_transaction(), here or in another process (which calls
        init_transactions(keep_prepared_txn=True) first)."""
        self._running_sender()
        if self._txn.state is TxnState.IN_TRANSACTION:
            await self.flush()
        return self._txn.prepare()

    @property
    def prepared_transaction(self) -> PreparedTxnState | None:
        """The prepared transaction this producer holds: its own after prepare_transaction(),
        or the one an earlier instance left, kept by init_transactions(keep_prepared_txn=True);
        None once completed, or when there is none."""
        if self._txn.state is not TxnState.PREPARED_TRANSACTION:
            return None
        return self._txn.ongoing_txn

    async def complete_transaction(self, state: PreparedTxnState) -> None:
        """Commit the prepared transaction when `state` is the one prepared (as
        prepare_transaction returned it), abort it otherwise."""
        if self._txn.state is not TxnState.PREPARED_TRANSACTION:
            raise IllegalStateError(
                f"complete_transaction needs a prepared transaction, the state is "
                f"{self._txn.state.value}"
            )
        if state == self._txn.ongoing_txn:
            await self.commit_transaction()
        else:
            await self.abort_transaction()
