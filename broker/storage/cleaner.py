"""Log compaction for cleanup.policy=compact (Kafka's LogCleaner, LogCleanerManager, Cleaner,
OffsetMap and CleanedTransactionMetadata).

A round cleans one log, the filthiest: the one whose dirty section (from the checkpointed first
dirty offset up to the first uncleanable offset) is the largest share of its bytes, once that
share passes min.cleanable.dirty.ratio or max.compaction.lag.ms forces it. The round maps each
key of the dirty section to its last offset, then rewrites every segment below the uncleanable
offset, in groups of consecutive segments that fit one segment, keeping a record only if no
later record has its key. Offsets never change: cleaned batches keep their base and last
offsets (holes are allowed) and their producer id, epoch and sequence range.

What is never cleaned: the active segment, anything at or past the last stable offset, and
segments newer than min.compaction.lag.ms.

Tombstones and transaction markers go in two passes, as in Kafka (KIP-534): the pass that
first sees a tombstone, or a marker whose transaction has no data left, rewrites its batch
with a delete horizon (now + delete.retention.ms, stored as the batch's base timestamp with
attribute bit 6); a later pass past the horizon drops it. Data of aborted transactions is
dropped on sight, and its ABORT marker stays, with its txn index entry, until a pass finds
no batch of the transaction left. A COMMIT marker stays while its transaction has batches.
Each active producer's last data batch (or last marker) stays, as an empty header if its
records go: that is what a reload rebuilds its sequence numbers and epoch from.

Entries of the old formats (a topic kept in magic 0/1, seed 004) are cleaned as Kafka cleans
them: a wrapper keeps its surviving messages, holes between their offsets allowed (KIP-31),
and their tombstones, which have no batch to carry a delete horizon, go once their segment was
last modified more than delete.retention.ms ago. (Kafka's legacy horizon counts from the
newest already-clean segment's modification time instead of the clock, which keeps them
longer on an idle log.) A group's last entry stays whole, so the cleaned segment ends where
the group did.

Everything here runs in one worker thread; only the swap of a cleaned segment takes the
log's lock (Log.replace_segments).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.records.batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    Record,
    decode_batch,
    encode_batch,
    read_entry_header,
    read_header,
)
from broker.records.control import ABORT, COMMIT, parse_marker
from broker.records.entries import EntryRecord, entry_records
from broker.records.errors import InvalidRecordError
from broker.records.legacy import build_message_set
from broker.storage.log import Log
from broker.storage.segment import LogSegment
from broker.storage.transaction_index import AbortedTxn, TransactionIndex

logger = logging.getLogger("broker.storage.cleaner")

TopicPartition = tuple[str, int]

# Kafka's SkimpyOffsetMap charges 24 bytes a key (a 16-byte digest and an offset); a CPython
# dict entry with its digest and int objects costs about this much, so that
# log.cleaner.dedupe.buffer.size still bounds the memory a round uses.
BYTES_PER_MAP_ENTRY = 128
_DIGEST_BYTES = 16
_NO_TIMESTAMP = -1
INT32_MAX = (1 << 31) - 1

# Kafka's BatchRetention.
_DELETE, _DELETE_EMPTY, _RETAIN_EMPTY = range(3)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The log.cleaner.* settings a round reads."""

    dedupe_buffer_size: int = 128 << 20
    dedupe_buffer_load_factor: float = 0.9

    @property
    def offset_map_slots(self) -> int:
        return max(2, self.dedupe_buffer_size // BYTES_PER_MAP_ENTRY)


class CleaningAborted(Exception):
    """The log is being deleted or the broker is stopping: the round stops where it is and
    leaves the log as it was (a cleaned segment not yet swapped in is dropped)."""


class OffsetMap:
    """Key digest -> offset of its last occurrence in the dirty section (Kafka's OffsetMap).
    Keys are hashed so a round's memory does not grow with key sizes; `latest_offset` is the
    last offset the map accounts for, past which the cleaner keeps everything."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[hashlib.blake2b(key, digest_size=_DIGEST_BYTES).digest()] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self._offsets.get(hashlib.blake2b(key, digest_size=_DIGEST_BYTES).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots


@dataclass(slots=True)
class CleanerStats:
    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    buffer_utilization: float = 0.0


@dataclass(slots=True)
class CleanerTotals:
    """What the cleaner has done since the broker started, for its metrics (Kafka's
    LogCleaner and LogCleanerManager gauges: recopy share, clean time, buffer use)."""

    rounds: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    last_round_seconds: float = 0.0
    last_buffer_utilization: float = 0.0
    last_run_ms: int | None = None  # when clean_logs last finished, busy or idle

    def add(self, stats: CleanerStats, seconds: float) -> None:
        self.rounds += 1
        self.bytes_read += stats.bytes_read
        self.bytes_written += stats.bytes_written
        self.last_round_seconds = seconds
        self.last_buffer_utilization = stats.buffer_utilization


@dataclass(slots=True)
class _AbortedTxnSeen:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """The transactions a pass walks through, in offset order (Kafka's class of this name):
    which batches belong to aborted transactions, and which markers may go. It also fills
    the cleaned segment's txn index with the aborted transactions whose marker stays."""

    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnSeen] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seq = 0
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnSeen(txn))

    def on_batch_read(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (it may go)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        seen = self._ongoing_aborted.get(header.producer_id)
        if seen is not None:
            seen.last_observed_batch_offset = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: BatchHeader, records: list[Record]) -> bool:
        """A control batch: True when it may go, because no batch of its transaction was
        seen in this pass (the data went in an earlier one)."""
        self._consume_aborted_up_to(header.last_offset)
        if not records:
            return True  # emptied by an earlier pass
        try:
            control_type, _ = parse_marker(records[0].key, records[0].value)
        except InvalidRecordError:
            return False  # not a transaction marker: kept, as Kafka keeps unknown types
        producer_id = header.producer_id
        if control_type == ABORT:
            seen = self._ongoing_aborted.pop(producer_id, None)
            if seen is not None and seen.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    t = seen.txn
                    self.cleaned_index.append(
                        t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset
                    )
                return False
            return True
        if control_type == COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False


# ---- choosing what to clean (Kafka's LogCleanerManager) -----------------------------------


def segments_between(segments: list[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's logSegments(from, to): the segments holding offsets in [start, end), the one
    `start` falls in included."""
    out = []
    for i, segment in enumerate(segments):
        if segment.base_offset >= end:
            break
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if nxt is None or nxt > start:
            out.append(segment)
    return out


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


def cleanable_offsets(log: Log, last_clean_offset: int | None, now_ms: int) -> OffsetsToClean:
    """Kafka's cleanableOffsets: where the dirty section starts (the checkpoint, reset to
    the log start when it is out of range) and the first offset that may not be cleaned:
    the last stable offset, the active segment, and the first segment newer than
    min.compaction.lag.ms, whichever comes first."""
    start, end = log.log_start_offset, log.log_end_offset
    checkpoint = start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < start:
        if not log.config.delete:
            logger.warning(
                "resetting the first dirty offset of %s to the log start %d: checkpoint %d "
                "is before it",
                log.directory.name,
                start,
                checkpoint,
            )
        first_dirty, force = start, True
    elif checkpoint > end:
        logger.warning(
            "resetting the first dirty offset of %s to the log start %d: checkpoint %d is "
            "past the log end %d",
            log.directory.name,
            start,
            checkpoint,
            end,
        )
        first_dirty, force = start, True
    else:
        first_dirty = checkpoint
    segments = log.segments
    active_base = segments[-1].base_offset
    uncleanable = min(log.last_stable_offset, active_base)
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in segments_between(segments, first_dirty, active_base):
            if segment.largest_timestamp() > now_ms - lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, uncleanable), force)


def max_compaction_delay(log: Log, first_dirty_offset: int, now_ms: int) -> int:
    """How long past max.compaction.lag.ms the oldest dirty record is (0: not overdue);
    records are dated by the first batch of their segment."""
    segments = log.segments
    dirty = segments_between(segments, first_dirty_offset, segments[-1].base_offset)
    stamps = [ts for s in dirty if (ts := s.rolling_based_timestamp) is not None and ts > 0]
    earliest = min(stamps, default=None)
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    if earliest is not None and earliest < clean_until:
        return clean_until - earliest
    return 0


@dataclass(slots=True)
class LogToClean:
    """A log with its clean and cleanable byte counts (Kafka's LogToClean).
    `first_uncleanable_offset` is rounded down to a segment's base offset: only whole
    segments are cleaned."""

    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False

    @classmethod
    def of(
        cls,
        tp: TopicPartition,
        log: Log,
        first_dirty_offset: int,
        uncleanable_offset: int,
        need_compaction_now: bool = False,
    ) -> LogToClean:
        segments = log.segments
        clean_bytes = sum(s.size for s in segments_between(segments, -1, first_dirty_offset))
        non_active = segments_between(segments, uncleanable_offset, segments[-1].base_offset)
        first_uncleanable = (non_active[0] if non_active else segments[-1]).base_offset
        cleanable_bytes = sum(
            s.size
            for s in segments_between(
                segments, min(first_dirty_offset, first_uncleanable), first_uncleanable
            )
        )
        return cls(
            tp,
            log,
            first_dirty_offset,
            first_uncleanable,
            clean_bytes,
            cleanable_bytes,
            need_compaction_now,
        )

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def should_clean(self) -> bool:
        """The dirty-ratio gate: past min.cleanable.dirty.ratio, or overdue by
        max.compaction.lag.ms with something to clean."""
        return (
            self.need_compaction_now and self.cleanable_bytes > 0
        ) or self.cleanable_ratio > self.log.config.min_cleanable_dirty_ratio


def log_to_clean(
    tp: TopicPartition, log: Log, last_clean_offset: int | None, now_ms: int
) -> tuple[LogToClean, OffsetsToClean]:
    offsets = cleanable_offsets(log, last_clean_offset, now_ms)
    overdue = max_compaction_delay(log, offsets.first_dirty_offset, now_ms) > 0
    cleanable = LogToClean.of(
        tp, log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, overdue
    )
    return cleanable, offsets


# ---- cleaning one log (Kafka's Cleaner) ---------------------------------------------------


class Cleaner:
    def __init__(
        self,
        config: CleanerConfig | None = None,
        check_done: Callable[[], None] | None = None,
    ) -> None:
        self.config = config or CleanerConfig()
        self.offset_map = OffsetMap(self.config.offset_map_slots)
        self._check_done = check_done or (lambda: None)
        if self.offset_map.slots * self.config.dedupe_buffer_load_factor <= 1:
            raise ValueError("log.cleaner.dedupe.buffer.size is too small to map a single key")

    def clean(self, cleanable: LogToClean, now_ms: int) -> tuple[int, CleanerStats]:
        """Clean the log below `cleanable.first_uncleanable_offset`; returns the offset the
        next round's dirty section starts at (less than the uncleanable offset when the
        offset map filled up) and the round's statistics."""
        log = cleanable.log
        stats = CleanerStats()
        upper_bound = cleanable.first_uncleanable_offset
        self.build_offset_map(log, cleanable.first_dirty_offset, upper_bound, stats)
        end_offset = self.offset_map.latest_offset + 1
        txns = CleanedTransactionMetadata()
        segments = log.segments
        groups = group_segments_by_size(
            segments_between(segments[:-1], 0, end_offset),
            log.config.segment_bytes,
            log.config.segment_index_bytes,
            upper_bound,
        )
        for group in groups:
            self._clean_segments(log, group, txns, now_ms, stats, upper_bound)
        stats.buffer_utilization = self.offset_map.utilization
        return end_offset, stats

    # -- the offset map ------------------------------------------------------------------------

    def build_offset_map(self, log: Log, start: int, end: int, stats: CleanerStats) -> None:
        """Map every key of [start, end) to its last offset, skipping aborted data; stops
        early, with `latest_offset` where it stopped, when the map is full."""
        offset_map = self.offset_map
        offset_map.clear()
        dirty = segments_between(log.segments, start, end)
        txns = CleanedTransactionMetadata()
        txns.add_aborted_transactions(log.collect_aborted_txns(start, end))
        full_at = int(offset_map.slots * self.config.dedupe_buffer_load_factor)
        for i, segment in enumerate(dirty):
            self._check_done()
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            if self._map_segment(segment, start, next_start, txns, full_at, stats):
                logger.debug(
                    "offset map of %s full in the segment at %d",
                    log.directory.name,
                    segment.base_offset,
                )
                return

    def _map_segment(
        self,
        segment: LogSegment,
        start: int,
        next_start: int,
        txns: CleanedTransactionMetadata,
        full_at: int,
        stats: CleanerStats,
    ) -> bool:
        offset_map = self.offset_map
        _, position = segment.offset_index.lookup(start)
        for header, data in segment.batch_data_from(position):
            self._check_done()
            stats.map_bytes_read += header.size
            if header.is_control:
                txns.on_control_batch_read(header, decode_batch(data)[1])
            elif not txns.on_batch_read(header):  # aborted data never shadows a key
                for record in entry_records(data):
                    if record.key is not None and record.offset >= start:
                        if len(offset_map) >= full_at:
                            return True
                        offset_map.put(record.key, record.offset)
                    stats.map_messages_read += 1
            if header.last_offset >= start:
                offset_map.update_latest_offset(header.last_offset)
        # Holes at the segment's end (an earlier cleaning) are accounted for too.
        offset_map.update_latest_offset(next_start - 1)
        return False

    # -- rewriting -----------------------------------------------------------------------------

    def _clean_segments(
        self,
        log: Log,
        group: list[LogSegment],
        txns: CleanedTransactionMetadata,
        now_ms: int,
        stats: CleanerStats,
        upper_bound: int,
    ) -> None:
        """Clean `group` into one new segment at its first base offset and swap it in."""
        cleaned = log.new_cleaned_segment(group[0].base_offset, now_ms)
        txns.cleaned_index = cleaned.txn_index
        try:
            last_records = log.last_records_of_active_producers()
            segments = log.segments
            bases = [s.base_offset for s in segments]
            # The group's last batch always stays (as an empty header if need be): the cleaned
            # segment then ends where the group ended, which is how recovery knows which old
            # segments a completed swap replaced.
            group_last_base = _last_batch_base(group[-1])
            for segment in group:
                i = bisect_right(bases, segment.base_offset)
                upper = bases[i] if i < len(bases) else log.log_end_offset
                # The full range of the segment: the cleaned txn index is rebuilt from it.
                txns.add_aborted_transactions(log.collect_aborted_txns(segment.base_offset, upper))
                self._clean_into(
                    segment,
                    cleaned,
                    txns,
                    last_records,
                    now_ms,
                    log.config.delete_retention_ms,
                    upper_bound,
                    group_last_base,
                    stats,
                )
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified(group[-1].last_modified_ms)
        except BaseException:
            cleaned.delete_files()
            raise
        logger.info(
            "swapping in the cleaned segment at %d of %s for %d segment(s)",
            cleaned.base_offset,
            log.directory.name,
            len(group),
        )
        if not log.replace_segments(cleaned, group, now_ms):
            logger.info(
                "segments at %d of %s were deleted while being cleaned; left as they are",
                group[0].base_offset,
                log.directory.name,
            )

    def _clean_into(
        self,
        source: LogSegment,
        dest: LogSegment,
        txns: CleanedTransactionMetadata,
        last_records: dict[int, tuple[int | None, int]],
        now_ms: int,
        delete_retention_ms: int,
        upper_bound: int,
        group_last_base: int | None,
        stats: CleanerStats,
    ) -> None:
        read = 0
        tombstones_expired = source.last_modified_ms < now_ms - delete_retention_ms
        for header, data in source.batch_data_from(0):
            self._check_done()
            read += header.size
            stats.bytes_read += header.size
            if header.magic < MAGIC_V2:
                whole = header.next_offset == upper_bound or header.base_offset == group_last_base
                out = self._clean_old_entry(header, data, whole, tombstones_expired, stats)
                if out:
                    last = read_entry_header(out)
                    dest.append([out], len(out), last.last_offset, last.max_timestamp)
                    stats.bytes_written += len(out)
                continue
            stats.messages_read += header.records_count
            records: list[Record] | None = None
            if header.is_control:
                records = decode_batch(data)[1]
                can_discard = txns.on_control_batch_read(header, records)
                discard_records = (
                    can_discard and header.has_delete_horizon and header.base_timestamp <= now_ms
                )
            else:
                can_discard = txns.on_batch_read(header)
                discard_records = can_discard
            if header.producer_id >= 0 and _is_last_of_producer(header, last_records):
                retention = _RETAIN_EMPTY
            elif header.next_offset == upper_bound or header.base_offset == group_last_base:
                retention = _RETAIN_EMPTY
            elif discard_records:
                retention = _DELETE
            else:
                retention = _DELETE_EMPTY
            if retention == _DELETE:
                continue
            if discard_records:
                retained: list[Record] = []
            else:
                if records is None:
                    records = decode_batch(data)[1]
                if header.is_control:
                    retained = records
                else:
                    expired = header.has_delete_horizon and now_ms >= header.base_timestamp
                    retained = [
                        r
                        for r in records
                        if self._retain(
                            header.base_offset + r.offset_delta, r.key, r.value, expired, stats
                        )
                    ]
            if retained:
                marker_of_empty_txn = can_discard and header.is_control
                tombstones = any(r.value is None for r in retained)
                set_horizon = (tombstones or marker_of_empty_txn) and not header.has_delete_horizon
                if len(retained) == len(records) and not set_horizon:
                    out = bytes(data)
                    max_timestamp = header.max_timestamp
                else:
                    if set_horizon:
                        horizon: int | None = now_ms + delete_retention_ms
                    else:
                        horizon = header.base_timestamp if header.has_delete_horizon else None
                    out = _rebuild(header, retained, horizon)
                    max_timestamp = read_header(out).max_timestamp
            elif retention == _RETAIN_EMPTY:
                out = _empty_batch(header)
                max_timestamp = header.max_timestamp
            else:
                continue
            dest.append([out], len(out), header.last_offset, max_timestamp)
            stats.bytes_written += len(out)
            stats.messages_written += len(retained)
        if read != source.size:
            # Never swap in a segment that silently lost what could not be read.
            raise InvalidRecordError(
                f"{source.log_path.name}: unreadable data at position {read} of {source.size}"
            )

    def _retain(
        self,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        tombstones_expired: bool,
        stats: CleanerStats,
    ) -> bool:
        """Kafka's shouldRetainRecord: past the map everything stays; below it a record stays
        if it is its key's last, and, for a tombstone, until its delete horizon passed."""
        if offset > self.offset_map.latest_offset:
            return True
        if key is None:
            stats.invalid_messages += 1
            return False
        if offset < self.offset_map.get(key):
            return False
        return value is not None or not tombstones_expired

    def _clean_old_entry(
        self,
        header: BatchHeader,
        data: memoryview,
        whole: bool,
        tombstones_expired: bool,
        stats: CleanerStats,
    ) -> bytes | None:
        """A magic 0/1 entry with only its messages to keep, or None when none is left."""
        records = entry_records(data)
        stats.messages_read += len(records)
        retained = records
        if not whole:
            retained = [
                r
                for r in records
                if self._retain(r.offset, r.key, r.value, tombstones_expired, stats)
            ]
        stats.messages_written += len(retained)
        if len(retained) == len(records):
            return bytes(data)
        if not retained:
            return None
        return _rebuild_old_entry(header, retained)


def _is_last_of_producer(
    header: BatchHeader, last_records: dict[int, tuple[int | None, int]]
) -> bool:
    last = last_records.get(header.producer_id)
    if last is None:
        return False  # expired or unknown: nothing of it needs keeping
    last_data_offset, producer_epoch = last
    if last_data_offset is not None:
        return header.last_offset == last_data_offset
    return header.is_control and header.producer_epoch == producer_epoch


def _last_batch_base(segment: LogSegment) -> int | None:
    _, position = segment.offset_index.last_entry
    base = None
    for _, header in segment.batches_from(position):
        base = header.base_offset
    return base


def _rebuild(header: BatchHeader, retained: list[Record], horizon: int | None) -> bytes:
    """The batch with only `retained`, its offsets, producer fields and compression kept
    (MemoryRecords.buildRetainedRecordsInto). With a delete horizon the base timestamp
    carries it and the record timestamps are re-expressed against it."""
    stamps = [header.base_timestamp + r.timestamp_delta for r in retained]
    base_timestamp = horizon if horizon is not None else stamps[0]
    if header.timestamp_type == LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(stamps)
    records = [
        Record(r.offset_delta, ts - base_timestamp, r.key, r.value, r.headers, r.attributes)
        for r, ts in zip(retained, stamps, strict=True)
    ]
    return encode_batch(
        records,
        base_offset=header.base_offset,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        last_offset_delta=header.last_offset_delta,  # keeps the batch's sequence range
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        timestamp_type=header.timestamp_type,
        partition_leader_epoch=header.partition_leader_epoch,
        delete_horizon=horizon is not None,
    )


def _rebuild_old_entry(header: BatchHeader, retained: list[EntryRecord]) -> bytes:
    """A wrapper with only `retained`: same magic and codec, offsets kept (a magic 1 wrapper's
    relative offsets get holes, KIP-31), LogAppendTime kept as the wrapper's time."""
    log_append = header.magic > 0 and header.timestamp_type == LOG_APPEND_TIME
    return build_message_set(
        [(r.key, r.value, r.timestamp) for r in retained],
        magic=header.magic,
        compression=header.compression,
        offsets=[r.offset for r in retained],
        timestamp_type=LOG_APPEND_TIME if log_append else CREATE_TIME,
        log_append_time=header.max_timestamp if log_append else NO_TIMESTAMP,
    )


def _empty_batch(header: BatchHeader) -> bytes:
    """DefaultRecordBatch.writeEmptyHeader: no records, the same offsets and producer fields."""
    return encode_batch(
        [],
        base_offset=header.base_offset,
        base_timestamp=_NO_TIMESTAMP,
        max_timestamp=header.max_timestamp,
        last_offset_delta=header.last_offset_delta,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        timestamp_type=header.timestamp_type,
        partition_leader_epoch=header.partition_leader_epoch,
    )


def group_segments_by_size(
    segments: list[LogSegment], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[LogSegment]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose logs and indexes together fit
    one segment, and whose offsets fit its 32-bit relative offsets, are cleaned into one."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = len(segments[i].offset_index) * 8
        time_index_size = len(segments[i].time_index) * 12
        i += 1
        while i < len(segments):
            candidate = segments[i]
            last = (
                segments[i + 1].base_offset - 1
                if i + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if (
                log_size + candidate.size > max_size
                or index_size + len(candidate.offset_index) * 8 > max_index_size
                or time_index_size + len(candidate.time_index) * 12 > max_index_size
                or (candidate.size and last - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(candidate)
            log_size += candidate.size
            index_size += len(candidate.offset_index) * 8
            time_index_size += len(candidate.time_index) * 12
            i += 1
        groups.append(group)
    return groups


# ---- the cleaner thread's work (Kafka's LogCleaner) ---------------------------------------


@dataclass(frozen=True, slots=True)
class CleanResult:
    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: int
    stats: CleanerStats = field(compare=False)


class LogCleaner:
    """Cleans the logs of a LogManager one round at a time, the filthiest compacted log
    first, checkpointing where each round ended (cleaner-offset-checkpoint). Blocking: the
    broker runs it in a worker thread; rounds never overlap."""

    def __init__(
        self,
        log_manager,
        config: CleanerConfig | Callable[[], CleanerConfig] | None = None,
    ) -> None:
        self.log_manager = log_manager
        self._config = config or CleanerConfig()
        self._round_lock = threading.Lock()
        self._stopping = threading.Event()
        # Logs whose cleaning failed unexpectedly (Kafka's uncleanable partitions): skipped
        # until the broker restarts, so one bad batch does not stop all compaction.
        self.uncleanable: set[TopicPartition] = set()
        self.dirtiest_log_cleanable_ratio = 0.0
        self.totals = CleanerTotals()

    @property
    def config(self) -> CleanerConfig:
        return self._config() if callable(self._config) else self._config

    def shutdown(self) -> None:
        """Make a round in progress stop at its next batch."""
        self._stopping.set()

    def grab_filthiest_compacted_log(
        self, now_ms: int
    ) -> tuple[LogToClean, threading.Event] | None:
        """Kafka's grabFilthiestCompactedLog: the compacted log with the largest dirty ratio
        among those past their gate, marked as being cleaned."""
        manager = self.log_manager
        checkpoints = manager.cleaner_offsets()
        logs = manager.logs()
        self.uncleanable &= {tp for tp, _ in logs}
        candidates: list[LogToClean] = []
        for tp, log in logs:
            if not log.config.compact or tp in self.uncleanable:
                continue
            cleanable, offsets = log_to_clean(tp, log, checkpoints.get(tp), now_ms)
            if offsets.force_update_checkpoint:
                manager.update_cleaner_offset(tp, offsets.first_dirty_offset)
            if cleanable.total_bytes > 0:
                candidates.append(cleanable)
        self.dirtiest_log_cleanable_ratio = max(
            (c.cleanable_ratio for c in candidates), default=0.0
        )
        for cleanable in sorted(
            (c for c in candidates if c.should_clean),
            key=lambda c: c.cleanable_ratio,
            reverse=True,
        ):
            abort = manager.begin_cleaning(cleanable.topic_partition)
            if abort is not None:
                return cleanable, abort
        return None

    def clean_filthiest_log(self, now_ms: int | None = None) -> CleanResult | None:
        """One round: clean the filthiest log, if any is due. None when nothing was."""
        now = _now_ms() if now_ms is None else now_ms
        with self._round_lock:
            if self._stopping.is_set():
                return None
            grabbed = self.grab_filthiest_compacted_log(now)
            if grabbed is None:
                return None
            cleanable, abort = grabbed
            tp, log = cleanable.topic_partition, cleanable.log

            def check_done() -> None:
                if abort.is_set() or self._stopping.is_set():
                    raise CleaningAborted(f"cleaning of {tp[0]}-{tp[1]} aborted")

            log.begin_cleaning()
            started = time.monotonic()
            try:
                cleaner = Cleaner(self.config, check_done)
                logger.info(
                    "cleaning %s-%d: offsets [%d, %d), dirty ratio %.2f",
                    tp[0],
                    tp[1],
                    cleanable.first_dirty_offset,
                    cleanable.first_uncleanable_offset,
                    cleanable.cleanable_ratio,
                )
                end_offset, stats = cleaner.clean(cleanable, now)
                self.log_manager.update_cleaner_offset(tp, end_offset)
            except CleaningAborted as e:
                logger.info("%s", e)
                return None
            except Exception:
                logger.exception("cleaning %s-%d failed; it is not cleaned again", *tp)
                self.uncleanable.add(tp)
                return None
            finally:
                log.end_cleaning(_now_ms() if now_ms is None else now_ms)
                self.log_manager.done_cleaning(tp)
            self.totals.add(stats, time.monotonic() - started)
            logger.info(
                "cleaned %s-%d: %d of %d bytes and %d of %d records kept, up to offset %d",
                tp[0],
                tp[1],
                stats.bytes_written,
                stats.bytes_read,
                stats.messages_written,
                stats.messages_read,
                end_offset,
            )
            return CleanResult(tp, cleanable.first_dirty_offset, end_offset, stats)

    def clean_logs(self, now_ms: int | None = None) -> int:
        """Clean rounds back to back while any log is due (the cleaner thread backs off
        only when idle); returns how many rounds ran."""
        rounds = 0
        while not self._stopping.is_set():
            result = self.clean_filthiest_log(now_ms)
            if result is None or result.end_offset <= result.first_dirty_offset:
                break
            rounds += 1
        self.totals.last_run_ms = _now_ms()
        return rounds
