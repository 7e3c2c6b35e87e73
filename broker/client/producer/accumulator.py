"""Records gathered into one batch per partition until the batch is full or has lingered,
as Kafka's RecordAccumulator: a plain object the producer appends to and the sender drains.

Records are encoded as they arrive, so a batch knows its exact size; the records section is
compressed once, when the batch is drained, and framed again (header and CRC only) when a
retry carries a new producer epoch or sequence. Memory is counted per batch against
buffer.memory; the producer waits for room before it opens a batch past the limit."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from broker.client.models import RecordMetadata, TopicPartition
from broker.records import compression as codecs
from broker.records.batch import BATCH_HEADER_SIZE, frame_batch
from broker.records.record import Header, Record, decode_records, encode_record

NO_SEQUENCE = -1


@dataclass(eq=False)
class ProducerBatch:
    """Records for one partition, each with the future its sender awaits."""

    tp: TopicPartition
    created_ms: int
    capacity: int  # what the batch may grow to: batch.size, or one record larger than that
    body: bytearray = field(default_factory=bytearray)
    futures: list[tuple[asyncio.Future, int]] = field(default_factory=list)  # (future, ts)
    base_timestamp: int = 0
    max_timestamp: int = 0
    attempts: int = 0
    last_attempt_ms: int = 0
    # Assigned when first drained, kept across retries (the broker deduplicates by them).
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    payload: bytes | None = None  # the compressed records section, once drained
    compression: int = codecs.NONE

    @property
    def count(self) -> int:
        return len(self.futures)

    @property
    def size(self) -> int:
        return BATCH_HEADER_SIZE + len(self.payload if self.payload is not None else self.body)

    @property
    def is_full(self) -> bool:
        return BATCH_HEADER_SIZE + len(self.body) >= self.capacity

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
        future: asyncio.Future,
    ) -> bool:
        """Add the record if it fits (a first record always does)."""
        if self.closed:
            return False
        if not self.futures:
            self.base_timestamp = self.max_timestamp = timestamp_ms
        mark = len(self.body)
        record = Record(self.count, timestamp_ms - self.base_timestamp, key, value, list(headers))
        encode_record(record, self.body)
        if self.futures and BATCH_HEADER_SIZE + len(self.body) > self.capacity:
            del self.body[mark:]
            return False
        self.futures.append((future, timestamp_ms))
        self.max_timestamp = max(self.max_timestamp, timestamp_ms)
        return True

    def close(self, compression: int) -> None:
        if self.payload is None:
            self.compression = compression
            self.payload = codecs.compress(compression, self.body)

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

    def records(self) -> list[tuple[bytes | None, bytes | None, list[Header], int]]:
        """The batch's records as appended: (key, value, headers, timestamp)."""
        decoded = decode_records(self.body, self.count)
        return [
            (r.key, r.value, r.headers, ts)
            for r, (_, ts) in zip(decoded, self.futures, strict=True)
        ]

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Resolve every record's future; offset -1 when unknown (acks=0, an old duplicate)."""
        topic, partition = self.tp
        for i, (future, ts) in enumerate(self.futures):
            if not future.done():
                offset = base_offset + i if base_offset >= 0 else -1
                stamp = log_append_time_ms if log_append_time_ms >= 0 else ts
                future.set_result(RecordMetadata(topic, partition, offset, stamp))

    def fail(self, error: BaseException) -> None:
        for future, _ in self.futures:
            if not future.done():
                future.set_exception(error)


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        compression: int,
        buffer_memory: int,
        retry_backoff_ms: int,
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = compression
        self.buffer_memory = buffer_memory
        self.retry_backoff_ms = retry_backoff_ms
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.memory_used = 0
        self.flushes_in_progress = 0
        self.closing = False
        self.waiting_for_memory = 0  # producers blocked in send(): drain what lingers

    # -- appending ---------------------------------------------------------------------------

    def try_append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
        future: asyncio.Future,
    ) -> ProducerBatch | None:
        """The open batch of `tp` that took the record, or None when a new batch is needed."""
        queue = self.batches.get(tp)
        if queue and queue[-1].try_append(key, value, headers, timestamp_ms, future):
            return queue[-1]
        return None

    def capacity_for(self, record_size: int) -> int:
        return max(self.batch_size, BATCH_HEADER_SIZE + record_size)

    def has_memory_for(self, capacity: int) -> bool:
        return self.memory_used + capacity <= self.buffer_memory

    def create_batch(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
        future: asyncio.Future,
        now_ms: int,
        capacity: int,
    ) -> ProducerBatch:
        batch = ProducerBatch(tp, now_ms, capacity)
        batch.try_append(key, value, headers, timestamp_ms, future)
        self._add(batch)
        self.batches.setdefault(tp, deque()).append(batch)
        return batch

    def _add(self, batch: ProducerBatch) -> None:
        self.incomplete.add(batch)
        self.memory_used += batch.capacity

    def is_sendable_now(self, batch: ProducerBatch) -> bool:
        """Whether appending `batch` means the sender has work without waiting for linger."""
        queue = self.batches.get(batch.tp)
        return batch.is_full or (queue is not None and len(queue) > 1) or self.linger_ms == 0

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
                wait = head.last_attempt_ms + self.retry_backoff_ms - now_ms
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
            if head.attempts and head.last_attempt_ms + self.retry_backoff_ms > now_ms:
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

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """Put a batch back for a retry, ahead of newer ones and in sequence order among
        other retries."""
        batch.attempts += 1
        batch.last_attempt_ms = now_ms
        self._insert(batch)

    def _insert(self, batch: ProducerBatch) -> None:
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
        records = batch.records()
        half = len(records) // 2
        parts = []
        sequence = batch.base_sequence
        for chunk, futures in (
            (records[:half], batch.futures[:half]),
            (records[half:], batch.futures[half:]),
        ):
            part = ProducerBatch(batch.tp, batch.created_ms, batch.capacity)
            for (key, value, headers, ts), (future, _) in zip(chunk, futures, strict=True):
                part.try_append(key, value, headers, ts, future)
            if batch.has_sequence:
                part.set_producer_state(batch.producer_id, batch.producer_epoch, sequence)
                sequence += part.count
            parts.append(part)
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
        for tp in list(self.batches):
            queue = self.batches[tp]
            kept = deque(b for b in queue if now_ms - b.created_ms < delivery_timeout_ms)
            expired += [b for b in queue if now_ms - b.created_ms >= delivery_timeout_ms]
            if kept:
                self.batches[tp] = kept
            else:
                del self.batches[tp]
        return expired

    def take_all(self) -> list[ProducerBatch]:
        """Every queued batch, taken out (an aborted transaction, a fatal error)."""
        queued = [b for queue in self.batches.values() for b in queue]
        self.batches.clear()
        return queued

    def queued(self) -> Iterable[ProducerBatch]:
        return (b for queue in self.batches.values() for b in queue)
