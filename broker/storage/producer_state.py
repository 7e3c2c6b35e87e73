"""A partition's idempotent-producer state (Kafka's ProducerStateManager), sans-io.

Per producer id the partition remembers the producer epoch and the metadata of the last five
batches appended, which is what a producer with up to five requests in flight may retry.
Produce checks a client batch against it before the append (`check`) and records the batch
with its assigned offsets after (`update`); recovery rebuilds it by `update`-ing the batches
of the log tail after the last snapshot. Everything is O(1) per batch and reads only the
batch header.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

import crc32c
from kio.schema.errors import ErrorCode

from broker.records.batch import BatchHeader

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the producer's default (and maximum)
# max.in.flight.requests.per.connection with idempotence.
NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hI")  # version, CRC32C of everything after the header
_PRODUCER = struct.Struct(">qhb")  # producer id, producer epoch, number of batches
_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp
_COUNT = struct.Struct(">i")


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The batch's last sequence; sequences wrap from INT32_MAX to 0 (Kafka's
    DefaultRecordBatch.incrementSequence)."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


class ProducerStateError(Exception):
    """A client batch the producer state rejects, with the Produce error code to answer."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class CorruptSnapshotError(ValueError):
    pass


@dataclass(slots=True, frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp: expiry measures the producer's age by it


class ProducerStateEntry:
    __slots__ = ("producer_epoch", "batches")

    def __init__(self, producer_epoch: int) -> None:
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1].timestamp


class ProducerStateManager:
    def __init__(self) -> None:
        # Every entry holds at least one batch: entries are created only by `update`.
        self.producers: dict[int, ProducerStateEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a client's idempotent batch before it is appended.

        Returns the metadata of the earlier append when the batch is a retry of one of the
        cached batches: Produce answers DUPLICATE_SEQUENCE_NUMBER with that batch's offsets,
        which producers count as success, and the log holds the records once. Raises ProducerStateError
        for a fenced epoch or a sequence gap.
        """
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # An unknown producer (new, or expired / removed with the log's head) may start at
            # any sequence: since KIP-360 the broker no longer answers UNKNOWN_PRODUCER_ID.
            return None
        epoch, first_seq = header.producer_epoch, header.base_sequence
        if epoch < entry.producer_epoch:
            raise ProducerStateError(
                ErrorCode.invalid_producer_epoch,
                f"Epoch of producer {header.producer_id} is {epoch}, which is smaller than "
                f"the last seen epoch {entry.producer_epoch}",
            )
        if epoch != entry.producer_epoch:
            if first_seq != 0:
                raise ProducerStateError(
                    ErrorCode.out_of_order_sequence_number,
                    f"Invalid sequence number for new epoch of producer {header.producer_id} "
                    f"at epoch {epoch}: {first_seq} (request epoch), 0 (expected)",
                )
            return None
        last_seq = last_sequence(first_seq, header.last_offset_delta)
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        current = entry.batches[-1].last_seq
        if first_seq != current + 1 and not (first_seq == 0 and current == INT32_MAX):
            raise ProducerStateError(
                ErrorCode.out_of_order_sequence_number,
                f"Out of order sequence number for producer {header.producer_id} at epoch "
                f"{epoch}: {first_seq} (incoming seq. number), {current} (current end "
                "sequence number)",
            )
        return None

    def update(self, header: BatchHeader, first_offset: int, last_offset: int, timestamp: int):
        """Record an appended batch of producer `header.producer_id` at its offsets. A new
        epoch forgets the batches of the old one: sequences restart at 0."""
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.producer_epoch != header.producer_epoch:
            entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_epoch)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                last_sequence(header.base_sequence, header.last_offset_delta),
                first_offset,
                last_offset,
                timestamp,
            )
        )

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is `producer.id.expiration.ms` old; returns how
        many went."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # ---- snapshots -----------------------------------------------------------------------

    def encode_snapshot(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for pid, entry in self.producers.items():
            body += _PRODUCER.pack(pid, entry.producer_epoch, len(entry.batches))
            for b in entry.batches:
                body += _BATCH.pack(
                    b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp
                )
        return _SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)

    @classmethod
    def decode_snapshot(cls, data: bytes) -> ProducerStateManager:
        """The state a snapshot holds; CorruptSnapshotError if it is torn or unknown."""
        try:
            version, crc = _SNAPSHOT_HEADER.unpack_from(data)
            body = memoryview(data)[_SNAPSHOT_HEADER.size :]
            if version != SNAPSHOT_VERSION:
                raise CorruptSnapshotError(f"unknown producer snapshot version {version}")
            if crc32c.crc32c(body) != crc:
                raise CorruptSnapshotError("producer snapshot CRC32C mismatch")
            state = cls()
            (count,) = _COUNT.unpack_from(body)
            pos = _COUNT.size
            for _ in range(count):
                pid, epoch, batches = _PRODUCER.unpack_from(body, pos)
                pos += _PRODUCER.size
                entry = state.producers[pid] = ProducerStateEntry(epoch)
                for _ in range(batches):
                    entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                    pos += _BATCH.size
            if pos != len(body):
                raise CorruptSnapshotError("trailing bytes after the producer snapshot")
        except struct.error as e:
            raise CorruptSnapshotError(f"truncated producer snapshot: {e}") from e
        return state
