"""A partition's producer state (Kafka's ProducerStateManager), sans-io.

Per producer id the partition remembers the producer epoch and the metadata of the last five
batches appended, which is what a producer with up to five requests in flight may retry, plus
its transaction on this partition (KIP-98): the first offset of the ongoing one, and the
coordinator epoch of the last marker. Produce checks a client batch against it before the
append (`check`) and records the batch with its assigned offsets after (`update`); markers go
through `check_end_txn_marker` and `append_end_txn_marker`. Recovery rebuilds it by replaying
the batches and markers of the log tail after the last snapshot through the same methods.
Everything is O(1) per batch and reads only the batch header.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

import crc32c
from kio.schema.errors import ErrorCode

from broker.records.batch import BatchHeader
from broker.records.control import ABORT

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the producer's default (and maximum)
# max.in.flight.requests.per.connection with idempotence.
NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 2
_SNAPSHOT_HEADER = struct.Struct(">hI")  # version, CRC32C of everything after the header
# producer id, producer epoch, coordinator epoch, current txn first offset (-1: none), last
# timestamp, number of batches
_PRODUCER = struct.Struct(">qhiqqb")
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


def _last_seq(entry: ProducerStateEntry) -> int:
    """The last sequence the producer wrote at its current epoch; -1 before its first batch."""
    return entry.batches[-1].last_seq if entry.batches else -1


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


@dataclass(slots=True, frozen=True)
class CompletedTxn:
    """A transaction ended by a marker on this partition: data from `first_offset`, the
    marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True, frozen=True)
class ProducerSnapshot:
    """One producer as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1 when no batch with a sequence is remembered
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 when no transaction is ongoing


class ProducerStateEntry:
    __slots__ = (
        "producer_epoch",
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
    )

    def __init__(
        self,
        producer_epoch: int,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int | None = None,
        last_timestamp: int = -1,
    ) -> None:
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset
        # Markers refresh it too: expiry measures a producer's age by its last write.
        self.last_timestamp = last_timestamp

    def set_epoch(self, producer_epoch: int) -> None:
        """A new epoch forgets the old one's batches (its sequences restart at 0); the
        transaction and the coordinator epoch carry over, as in Kafka."""
        if producer_epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = producer_epoch


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id of every ongoing transaction. Transactions start in
        # offset order, so insertion order is offset order: the first key is the first
        # unstable offset, found in O(1) (Kafka keeps a TreeMap).
        self._ongoing: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.producers)

    # ---- data batches --------------------------------------------------------------------

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a client's idempotent batch before it is appended.

        Returns the metadata of the earlier append when the batch is a retry of one of the
        cached batches: Produce answers DUPLICATE_SEQUENCE_NUMBER with that batch's offsets,
        which producers count as success, and the log holds the records once. Raises
        ProducerStateError for a fenced epoch, a sequence gap, or a non-transactional batch
        while the producer's transaction is ongoing. A batch without a sequence (written by
        a coordinator) has its epoch checked only.
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
        if first_seq >= 0:
            duplicate = self._check_sequence(entry, header)
            if duplicate is not None:
                return duplicate
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            raise ProducerStateError(
                ErrorCode.invalid_txn_state,
                f"Expected transactional write from producer {header.producer_id}: its "
                f"transaction started at offset {entry.current_txn_first_offset} is ongoing",
            )
        return None

    def next_sequence(self, producer_id: int, producer_epoch: int) -> int | None:
        """The sequence `check` expects the producer's next batch at `producer_epoch` to start
        with; None when this log knows no batch of the producer: any sequence would do. Not
        for a fenced epoch (below the producer's), which `check` refuses whatever its
        sequence."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if producer_epoch != entry.producer_epoch:
            return 0
        return last_sequence(_last_seq(entry), 1)

    @staticmethod
    def _check_sequence(entry: ProducerStateEntry, header: BatchHeader) -> BatchMetadata | None:
        epoch, first_seq = header.producer_epoch, header.base_sequence
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
        # Only a marker (or a coordinator's unsequenced batch) at this epoch: the producer
        # numbers from 0, as Kafka 4's checkSequence expects.
        current = _last_seq(entry)
        if first_seq != last_sequence(current, 1):
            raise ProducerStateError(
                ErrorCode.out_of_order_sequence_number,
                f"Out of order sequence number for producer {header.producer_id} at epoch "
                f"{epoch}: {first_seq} (incoming seq. number), {current} (current end "
                "sequence number)",
            )
        return None

    def update(
        self, header: BatchHeader, first_offset: int, last_offset: int, timestamp: int
    ) -> bool:
        """Record an appended data batch of producer `header.producer_id` at its offsets.
        Returns True when the batch began a transaction on this partition."""
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(header.producer_epoch)
        else:
            entry.set_epoch(header.producer_epoch)
        if header.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(
                    header.base_sequence,
                    last_sequence(header.base_sequence, header.last_offset_delta),
                    first_offset,
                    last_offset,
                    timestamp,
                )
            )
        entry.last_timestamp = timestamp
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self._ongoing[first_offset] = pid
            return True
        return False

    # ---- transaction markers -------------------------------------------------------------

    def check_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        transaction_version: int = 0,
    ) -> None:
        """Refuse a marker from a zombie: an older producer epoch than the partition knows
        (INVALID_PRODUCER_EPOCH) or an older coordinator epoch than the last marker's
        (TRANSACTION_COORDINATOR_FENCED). Replayed markers are not checked.

        A marker of transaction version 2 (KIP-890) must be above the known epoch, as Kafka's
        ProducerAppendInfo checks: that version bumps the epoch when it ends a transaction, so
        a marker at the known epoch is a late or duplicate one (KIP-1228). Older versions end
        a transaction under its records' epoch."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        strict = transaction_version >= 2
        if producer_epoch < entry.producer_epoch or (
            strict and producer_epoch == entry.producer_epoch
        ):
            raise ProducerStateError(
                ErrorCode.invalid_producer_epoch,
                f"Epoch of producer {producer_id} in the transaction marker is "
                f"{producer_epoch}, which is {'<=' if strict else '<'} the last seen epoch "
                f"{entry.producer_epoch} (TV{transaction_version})",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                ErrorCode.transaction_coordinator_fenced,
                f"Invalid coordinator epoch for producer {producer_id}: {coordinator_epoch} "
                f"(zombie), {entry.coordinator_epoch} (current)",
            )

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        control_type: int,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
    ) -> CompletedTxn | None:
        """Record a COMMIT/ABORT marker appended at `offset`; it ends the producer's ongoing
        transaction, which is returned. A marker without an ongoing transaction (retried, or
        for a partition the transaction wrote nothing to) ends nothing. Sequences are left
        alone; an epoch bump forgets the old epoch's batches."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_epoch)
        else:
            entry.set_epoch(producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        first = entry.current_txn_first_offset
        if first is None:
            return None
        entry.current_txn_first_offset = None
        del self._ongoing[first]
        return CompletedTxn(producer_id, first, offset, control_type == ABORT)

    # ---- transactions --------------------------------------------------------------------

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """Kafka's lastStableOffset(completedTxn), once `completed` is recorded: the first
        offset of the earliest transaction still ongoing, else just past the marker. The
        txn index stores it with an aborted transaction."""
        first = self.first_unstable_offset
        return completed.last_offset + 1 if first is None else first

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest ongoing transaction, None when there is none."""
        return next(iter(self._ongoing), None)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its ongoing transaction, earliest first."""
        return {pid: first for first, pid in self._ongoing.items()}

    def active_producers(self) -> list[ProducerSnapshot]:
        return [
            ProducerSnapshot(
                pid,
                entry.producer_epoch,
                entry.batches[-1].last_seq if entry.batches else -1,
                entry.last_timestamp,
                entry.coordinator_epoch,
                -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
            )
            for pid, entry in self.producers.items()
        ]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last write is `producer.id.expiration.ms` old; returns how
        many went. A producer in the middle of a transaction is kept (as in Kafka): its
        marker is still to come and the LSO waits for it."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # ---- snapshots -----------------------------------------------------------------------

    def encode_snapshot(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for pid, entry in self.producers.items():
            txn_first = entry.current_txn_first_offset
            body += _PRODUCER.pack(
                pid,
                entry.producer_epoch,
                entry.coordinator_epoch,
                -1 if txn_first is None else txn_first,
                entry.last_timestamp,
                len(entry.batches),
            )
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
            ongoing = []
            for _ in range(count):
                pid, epoch, coordinator_epoch, txn_first, last_ts, batches = _PRODUCER.unpack_from(
                    body, pos
                )
                pos += _PRODUCER.size
                entry = state.producers[pid] = ProducerStateEntry(
                    epoch, coordinator_epoch, None if txn_first < 0 else txn_first, last_ts
                )
                if txn_first >= 0:
                    ongoing.append((txn_first, pid))
                for _ in range(batches):
                    entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                    pos += _BATCH.size
            if pos != len(body):
                raise CorruptSnapshotError("trailing bytes after the producer snapshot")
            state._ongoing = dict(sorted(ongoing))
        except struct.error as e:
            raise CorruptSnapshotError(f"truncated producer snapshot: {e}") from e
        return state
