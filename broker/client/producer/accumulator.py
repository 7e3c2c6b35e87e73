"""Records gathered into one batch per partition until the batch is full or has lingered,
as Kafka's RecordAccumulator: a plain object the producer appends to and the sender drains.

A batch keeps its records as given (with their offset and timestamp deltas, as encode_records
takes them) and counts an upper bound of their encoded size; they are encoded and compressed
once, when the batch is drained, and framed again (header and CRC only) when a retry carries
a new producer epoch or sequence. Memory is counted per batch against buffer.memory; the
producer waits for room before it opens a batch past the limit."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from broker.client.models import TopicPartition
from broker.client.producer.produce_result import FutureRecordMetadata, ProduceRequestResult
from broker.records import compression as codecs
from broker.records.batch import BATCH_HEADER_SIZE, frame_batch
from broker.records.record import Header, RecordFields, encode_records

NO_SEQUENCE = -1
_NEVER = 2**63  # a creation time later than any
# An upper bound of a record's framing in a v2 batch: varints for its length, deltas, key and
# value lengths, header count; attributes; and per header its two length varints.
RECORD_OVERHEAD = 36
_HEADER_OVERHEAD = 10


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """At least what the record takes in a batch, before compression."""
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for name, data in headers:
        size += _HEADER_OVERHEAD + len(name.encode()) + len(data or b"")
    return size


@dataclass(eq=False)
class ProducerBatch:
    """Records for one partition, and the result they are all settled by."""

    tp: TopicPartition
    created_ms: int
    capacity: int  # what the batch may grow to: batch.size, or one record larger than that
    records: list[RecordFields] = field(default_factory=list)
    base_timestamp: int = 0  # the first record's
    result: ProduceRequestResult = field(init=False)
    estimated_size: int = BATCH_HEADER_SIZE
    max_timestamp: int = 0
    attempts: int = 0
    last_attempt_ms: int = 0
    # Assigned when first drained, kept across retries (the broker deduplicates by them).
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    payload: bytes | None = None  # the encoded, compressed records section, once drained
    compression: int = codecs.NONE

    def __post_init__(self) -> None:
        self.result = ProduceRequestResult(*self.tp, asyncio.get_running_loop())

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def size(self) -> int:
        if self.payload is not None:
            return BATCH_HEADER_SIZE + len(self.payload)
        return self.estimated_size

    @property
    def is_full(self) -> bool:
        return self.estimated_size >= self.capacity

    @property
    def closed(self) -> bool:
        return self.payload is not None

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.count - 1

    def try_append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
        size: int,
    ) -> bool:
        """Add the record (of `size`, see record_size) if it fits; a first one always does."""
        records = self.records
        if self.payload is not None or (records and self.estimated_size + size > self.capacity):
            return False
        if not records:
            self.base_timestamp = timestamp_ms
        # Kept as encode_records takes them: no second tuple per record when encoding.
        records.append((len(records), timestamp_ms - self.base_timestamp, key, value, headers, 0))
        self.estimated_size += size
        if timestamp_ms > self.max_timestamp:
            self.max_timestamp = timestamp_ms
        return True

    def close(self, compression: int) -> None:
        if self.payload is None:
            body = bytearray()
            encode_records(body, self.records)
            self.compression = compression
            self.payload = codecs.compress(compression, body)

    def set_producer_state(self, producer_id: int, producer_epoch: int, sequence: int) -> None:
        self.producer_id, self.producer_epoch, self.base_sequence = (
            producer_id,
            producer_epoch,
            sequence,
        )

    def frame(self, transactional: bool) -> bytes:
        assert self.payload is not None, "drain closes a batch before it is framed"
        return frame_batch(
            self.payload,
            records_count=self.count,
            base_offset=0,
            base_timestamp=self.base_timestamp,
            max_timestamp=self.max_timestamp,
            last_offset_delta=self.count - 1,
            compression=self.compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            transactional=transactional,
        )

    def last_future(self) -> FutureRecordMetadata:
        """What send() answers for the record appended last."""
        record = self.records[-1]
        return FutureRecordMetadata(self.result, record[0], self.base_timestamp + record[1])

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Settle every record as written; offset -1 when unknown (acks=0, an old duplicate)."""
        self.result.complete(base_offset, log_append_time_ms)

    def fail(self, error: BaseException) -> None:
        self.result.fail(error)


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        compression: int,
        buffer_memory: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = compression
        self.buffer_memory = buffer_memory
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms or 0, retry_backoff_ms)
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.memory_used = 0
        self.flushes_in_progress = 0
        self.closing = False
        self.waiting_for_memory = 0  # producers blocked in send(): drain what lingers
        # At most the creation time of every queued batch: expire() looks through the queues
        # (thousands of batches when the broker falls behind) only once one may be due.
        self._oldest_created_ms = _NEVER

    # -- appending ---------------------------------------------------------------------------

    def try_append(
        self,
        tp: tuple[str, int],
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
        size: int,
    ) -> ProducerBatch | None:
        """The open batch of `tp` that took the record, or None when a new batch is needed."""
        queue = self.batches.get(tp)
        if queue and queue[-1].try_append(key, value, headers, timestamp_ms, size):
            return queue[-1]
        return None

    def capacity_for(self, size: int) -> int:
        return max(self.batch_size, BATCH_HEADER_SIZE + size)

    def has_memory_for(self, capacity: int) -> bool:
        return self.memory_used + capacity <= self.buffer_memory

    def create_batch(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
        size: int,
        now_ms: int,
    ) -> ProducerBatch:
        batch = ProducerBatch(tp, now_ms, self.capacity_for(size))
        batch.try_append(key, value, headers, timestamp_ms, size)
        self._add(batch)
        self.batches.setdefault(tp, deque()).append(batch)
        self._oldest_created_ms = min(self._oldest_created_ms, now_ms)
        return batch

    def _add(self, batch: ProducerBatch) -> None:
        self.incomplete.add(batch)
        self.memory_used += batch.capacity

    # -- draining ----------------------------------------------------------------------------

    def ready(self, now_ms: int) -> tuple[list[TopicPartition], int]:
        """Partitions whose first batch may be sent now, and how long until another may
        (milliseconds; -1 when nothing waits)."""
        ready: list[TopicPartition] = []
        next_ms = -1
        hurry = self.closing or self.flushes_in_progress > 0 or self.waiting_for_memory > 0
        for tp, queue in self.batches.items():
            head = queue[0]
            if head.attempts:
                wait = self.retry_due_ms(head) - now_ms
            elif hurry or len(queue) > 1 or head.is_full:
                wait = 0
            else:
                wait = head.created_ms + self.linger_ms - now_ms
            if wait <= 0:
                ready.append(tp)
            elif next_ms < 0 or wait < next_ms:
                next_ms = wait
        return ready, next_ms

    def drain(
        self,
        tps: Iterable[TopicPartition],
        max_size: int,
        now_ms: int,
        may_send: Callable[[ProducerBatch], bool],
    ) -> list[ProducerBatch]:
        """At most one batch per partition, together at most `max_size` bytes (a first batch
        always goes), closed for appends; `may_send` holds back a batch whose turn has not
        come (ordering across retries)."""
        drained: list[ProducerBatch] = []
        size = 0
        for tp in tps:
            queue = self.batches.get(tp)
            if not queue:
                continue
            head = queue[0]
            if head.attempts and self.retry_due_ms(head) > now_ms:
                continue
            if not may_send(head):
                continue
            head.close(self.compression)
            if drained and size + head.size > max_size:
                break
            queue.popleft()
            if not queue:
                del self.batches[tp]
            size += head.size
            drained.append(head)
        return drained

    def retry_due_ms(self, batch: ProducerBatch) -> int:
        """When a retried batch may go again: the backoff doubles with each attempt up to
        retry.backoff.max.ms (KIP-580, without the jitter)."""
        backoff = self.retry_backoff_ms * 2 ** min(batch.attempts - 1, 30)
        return batch.last_attempt_ms + min(backoff, self.retry_backoff_max_ms)

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """Put a batch back for a retry, ahead of newer ones and in sequence order among
        other retries."""
        batch.attempts += 1
        batch.last_attempt_ms = now_ms
        self._insert(batch)

    def _insert(self, batch: ProducerBatch) -> None:
        self._oldest_created_ms = min(self._oldest_created_ms, batch.created_ms)
        queue = self.batches.setdefault(batch.tp, deque())
        position = 0
        if batch.has_sequence:
            while position < len(queue) and (
                queue[position].has_sequence and queue[position].base_sequence < batch.base_sequence
            ):
                position += 1
        queue.insert(position, batch)

    def split_and_reenqueue(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """A batch the broker found too large, as two halves with the same sequences between
        them (Kafka's splitAndReenqueue, for MESSAGE_TOO_LARGE)."""
        half = batch.count // 2
        parts = []
        sequence = batch.base_sequence
        for records in (batch.records[:half], batch.records[half:]):
            part = ProducerBatch(batch.tp, batch.created_ms, batch.capacity)
            for _, timestamp_delta, key, value, headers, _ in records:
                part.try_append(key, value, headers, batch.base_timestamp + timestamp_delta, 0)
            if batch.has_sequence:
                part.set_producer_state(batch.producer_id, batch.producer_epoch, sequence)
                sequence += part.count
            parts.append(part)
        # The records' futures follow their records into the halves.
        batch.result.split(parts[0].result, parts[1].result, half)
        self.deallocate(batch)
        # As if never tried: no backoff, and the retries count starts afresh.
        for part in reversed(parts):
            self._add(part)
            self._insert(part)
        return parts

    def deallocate(self, batch: ProducerBatch) -> None:
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            self.memory_used -= batch.capacity

    # -- giving up ---------------------------------------------------------------------------

    def expire(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch]:
        """Queued batches older than delivery.timeout.ms, taken out."""
        expired: list[ProducerBatch] = []
        if now_ms - self._oldest_created_ms < delivery_timeout_ms:
            return expired
        for tp in list(self.batches):
            queue = self.batches[tp]
            kept = deque(b for b in queue if now_ms - b.created_ms < delivery_timeout_ms)
            expired += [b for b in queue if now_ms - b.created_ms >= delivery_timeout_ms]
            if kept:
                self.batches[tp] = kept
            else:
                del self.batches[tp]
        self._oldest_created_ms = min((b.created_ms for b in self.queued()), default=_NEVER)
        return expired

    def take_all(self) -> list[ProducerBatch]:
        """Every queued batch, taken out (an aborted transaction, a fatal error)."""
        queued = [b for queue in self.batches.values() for b in queue]
        self.batches.clear()
        return queued

    def queued(self) -> Iterable[ProducerBatch]:
        return (b for queue in self.batches.values() for b in queue)
