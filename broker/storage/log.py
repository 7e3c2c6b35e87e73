"""A partition's log: an ordered run of segments with offsets, retention and recovery."""

from __future__ import annotations

import logging
import os
import shutil
import struct
import threading
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Set
from dataclasses import dataclass
from pathlib import Path

from broker.records.batch import (
    BATCH_HEADER_SIZE,
    MAGIC_V2,
    BatchHeader,
    iter_batches,
    read_entry_header,
    read_header,
    with_log_append_time,
)
from broker.records.control import build_control_batch, read_control
from broker.records.errors import InvalidRecordError
from broker.records.legacy import MAGIC_V0, LegacyAppend
from broker.storage.checkpoint import fsync_directory
from broker.storage.config import LogConfig
from broker.storage.errors import OffsetOutOfRangeError
from broker.storage.file_slice import FileSlice
from broker.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    LeaderEpochCache,
)
from broker.storage.producer_state import (
    SNAPSHOT_SUFFIX,
    CompletedTxn,
    CorruptSnapshotError,
    ProducerSnapshot,
    ProducerStateManager,
    snapshot_file_name,
)
from broker.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from broker.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

logger = logging.getLogger("broker.storage.log")

# Reads sent from the file (FileSlice): large enough that sendfile beats a copy through memory
# (and, at 64 KB, always a buffer of its own in an encoded response: protocol.codec's _Chunks
# keeps values from 16 KB apart); in few enough batches that their headers are cheaper to
# read than the batches.
SLICE_MIN_BYTES = 64 * 1024
SLICE_MAX_BATCHES = 16
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(slots=True, frozen=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 with CreateTime, as in ProduceResponse
    max_timestamp: int
    log_start_offset: int
    # flush.messages was reached: the caller fsyncs (flush()) before acknowledging, off the
    # event loop, since an fsync may take milliseconds.
    flush_due: bool = False
    size: int = 0  # bytes written: what parked fetches count


@dataclass(slots=True)
class FetchData:
    """Whole batches, read or as a FileSlice; `first_offset` is the first returned batch's base
    offset (the requested offset when nothing is returned), `next_offset` the offset after the
    last returned batch (the requested offset when nothing is returned)."""

    records: list[bytes | memoryview | FileSlice]
    size: int
    first_offset: int
    next_offset: int = -1


def _slice_or_read(segment: LogSegment, position: int, size: int) -> bytes | FileSlice:
    if size >= SLICE_MIN_BYTES:
        try:
            return segment.file_slice(position, size)
        except OSError:  # out of descriptors, or of the slices' share of them: read instead
            pass
    return segment.read_at(position, size)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        high_watermark_follows_appends: bool = True,
    ) -> None:
        self.directory = directory
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_end_offset = segments[-1].next_offset
        self._log_start_offset = segments[0].base_offset
        self._high_watermark = self._log_end_offset
        # A single node commits every write as it lands. A replicated log's high watermark
        # moves only through update_high_watermark() and maybe_increment_high_watermark()
        # (replication), and back only through truncation.
        self.high_watermark_follows_appends = high_watermark_follows_appends
        self._recovery_point = 0
        self._unflushed_messages = 0
        self._dir_dirty = False  # created or renamed files the directory entry must persist
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.producer_state = ProducerStateManager()
        self.leader_epochs = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
        # Base offsets of the segments whose txn index has entries, ascending: read_committed
        # fetches look only at these, so logs without aborted transactions pay nothing.
        self._aborted_bases: list[int] = []
        # Bytes appended since open, the count when each ongoing transaction began (those
        # begun before open count as 0) and the count below the high watermark, with the
        # count at the end of each append above it: what read_committed long polls measure
        # (stable_bytes). Truncation never lowers them, so the measure only grows.
        self._appended_bytes = 0
        self._txn_start_bytes: dict[int, int] = {}
        self._bytes_below_high_watermark = 0
        self._appends_above_high_watermark: deque[tuple[int, int]] = deque()
        # Serialises structural changes against flush()/read() running in worker threads;
        # fsync itself happens outside it so appends never wait for the disk.
        self._lock = threading.RLock()
        # The cleaner reads segments without the lock: while it runs, segments that retention
        # or DeleteRecords drop keep their descriptors open (their unlinking waits).
        self._cleaning = False
        # flush() writes segment and index files outside the lock; truncation waits for the
        # flushes under way, so none writes index entries it cut or moves the recovery point
        # past the new log end.
        self._flushes_in_flight = 0
        self._flushes_done = threading.Condition(self._lock)

    # ---- loading -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        now_ms: int | None = None,
        high_watermark: int | None = None,
        high_watermark_follows_appends: bool = True,
    ) -> Log:
        """Load the segments in `directory`, recovering what an unclean shutdown may have torn.

        After an unclean shutdown every segment from the one holding `recovery_point` onward
        is rescanned (CRC-checked, indexes rebuilt) and the log is cut at the first invalid
        batch, dropping any later segments, as Kafka's LogLoader does. Segments with missing
        or inconsistent indexes are rebuilt whatever the shutdown was.

        A log whose high watermark follows appends starts with it at the log end. A
        replicated one starts from the checkpointed `high_watermark` (None: not known, so
        the log start offset), kept within [log start offset, log end offset].
        """
        now = _now_ms() if now_ms is None else now_ms
        directory.mkdir(parents=True, exist_ok=True)
        bases = _scan_directory(directory)
        segments: list[LogSegment] = []
        needs_rebuild: list[bool] = []
        for base in bases:
            segment, rebuild = LogSegment.open(directory, base, config, now)
            segments.append(segment)
            needs_rebuild.append(rebuild)
        first_unflushed = len(segments)
        if not clean_shutdown and segments:
            first_unflushed = max(0, bisect_right(bases, recovery_point) - 1)
        # Recovered segments get their txn index rebuilt from the markers they hold: a crash
        # may have cut the log before a marker, or come between a marker and its entry.
        rebuild_txn_index: set[int] = set()
        for i, segment in enumerate(segments):
            is_last = i == len(segments) - 1
            if i >= first_unflushed or needs_rebuild[i]:
                truncated = segment.recover(segment.base_offset)
                rebuild_txn_index.add(segment.base_offset)
                if truncated and i >= first_unflushed:
                    for later in segments[i + 1 :]:
                        later.delete_files()
                    del segments[i + 1 :]
                    break
            elif is_last and not segment.load_tail():
                segment.recover(segment.base_offset)
                rebuild_txn_index.add(segment.base_offset)
        if not segments:
            segments.append(LogSegment.create(directory, max(0, log_start_offset), config, now))
        log = cls(
            directory,
            config,
            segments,
            high_watermark_follows_appends=high_watermark_follows_appends,
        )
        if log_start_offset > log._log_end_offset:
            # The checkpointed start lies past what survived: start over at that offset.
            log.truncate_fully_and_start_at(log_start_offset, now_ms=now)
        log._log_start_offset = max(log_start_offset, log._segments[0].base_offset)
        log._recovery_point = max(log._log_start_offset, min(recovery_point, log._log_end_offset))
        if not high_watermark_follows_appends:
            checkpointed = log._log_start_offset if high_watermark is None else high_watermark
            log._high_watermark = min(max(checkpointed, log._log_start_offset), log._log_end_offset)
        log._load_producer_state(rebuild_txn_index)
        log._load_leader_epochs(rebuild_txn_index)
        active = log._segments[-1]
        if active.base_offset not in rebuild_txn_index:
            active.txn_index.truncate_to(log._log_end_offset)
        log._aborted_bases = [s.base_offset for s in log._segments if len(s.txn_index)]
        return log

    def _load_producer_state(self, rebuild_txn_index: Set[int] = frozenset()) -> None:
        """Kafka's loadProducerState: the newest sound snapshot not beyond the log end, then
        the batches and markers after it. Snapshots past the end (the log was truncated by
        recovery or replication) or torn ones are deleted, so the state never holds batches
        the log lost.

        Segments in `rebuild_txn_index` have their txn index rebuilt by this replay, so it
        starts from a snapshot no later than the first of them (as Kafka's recovery rebuilds
        the producer state up to a segment before recovering it)."""
        for leftover in self.directory.glob(f"*{SNAPSHOT_SUFFIX}.tmp"):  # a write cut short
            leftover.unlink()
        stems = (p.name[: -len(SNAPSHOT_SUFFIX)] for p in self.directory.glob("*.snapshot"))
        offsets = sorted((int(s) for s in stems if len(s) == 20 and s.isdigit()), reverse=True)
        rebuilt = [s for s in self._segments if s.base_offset in rebuild_txn_index]
        usable = rebuilt[0].base_offset if rebuilt else self._log_end_offset
        state, replay_from = ProducerStateManager(), self._segments[0].base_offset
        for offset in offsets:
            path = self.directory / snapshot_file_name(offset)
            if offset > self._log_end_offset:
                path.unlink()
                continue
            if offset > usable:
                continue  # sound, but the replay must cover the segments being rebuilt
            try:
                state = ProducerStateManager.decode_snapshot(path.read_bytes())
                replay_from = offset
                break
            except CorruptSnapshotError as e:
                logger.warning("deleting producer snapshot %s: %s", path, e)
                path.unlink()
        for segment in rebuilt:
            segment.txn_index.reset()
        start = max(0, bisect_right(self._bases, replay_from) - 1)
        for segment in self._segments[start:]:
            rebuilding = segment.base_offset in rebuild_txn_index
            found = segment.translate_offset(replay_from)
            if found is None:
                continue
            for pos, header in segment.batches_from(found[0]):
                if header.producer_id < 0:
                    continue
                if not header.is_control:
                    state.update(
                        header, header.base_offset, header.last_offset, header.max_timestamp
                    )
                    continue
                marker = _marker_of(segment.read_at(pos, header.size))
                if marker is None:
                    continue
                completed = state.append_end_txn_marker(
                    header.producer_id,
                    header.producer_epoch,
                    marker[0],
                    marker[1],
                    header.base_offset,
                    header.max_timestamp,
                )
                if completed is not None and completed.is_aborted and rebuilding:
                    if segment.txn_index.append(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        state.last_stable_offset(completed),
                    ):
                        self._dir_dirty = True
        self.producer_state = state

    def _load_leader_epochs(self, rescanned: Set[int]) -> None:
        """Kafka's LogLoader: the checkpointed epochs plus those of the batches recovery
        rescanned (written after the checkpoint, maybe), cut to the recovered log end and the
        log start. A missing or corrupt checkpoint is rebuilt from every batch."""
        cache, read = LeaderEpochCache.load(self.leader_epochs.path)
        for segment in self._segments:
            if not read or segment.base_offset in rescanned:
                for _, header in segment.batches_from(0):
                    # Only ever newer epochs, as Kafka's LogSegment.recover: a batch carrying
                    # an older one than the checkpoint's latest must not cut the cache.
                    epoch = header.partition_leader_epoch
                    if header.magic >= MAGIC_V2 and epoch > cache.latest_epoch:
                        cache.assign(epoch, header.base_offset)
        cache.truncate_from_end(self._log_end_offset)
        cache.truncate_from_start(self._log_start_offset)
        self.leader_epochs = cache

    def take_producer_snapshot(self, *, sync: bool = False) -> None:
        """Write the producer state as of the log end offset (`<offset>.snapshot`), so that
        loading replays only the batches after it. Written aside and renamed: a reader sees
        the old file or the new one; a torn one fails its CRC and an older one is used."""
        path = self.directory / snapshot_file_name(self._log_end_offset)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, self.producer_state.encode_snapshot())
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self._dir_dirty = True

    # ---- properties ----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest ongoing transaction, else the high watermark;
        never above the high watermark nor below the log start offset (Kafka clamps the first
        unstable offset to the log start when retention passed it)."""
        first = self.producer_state.first_unstable_offset
        if first is None:
            return self._high_watermark
        return min(max(first, self._log_start_offset), self._high_watermark)

    @property
    def committed_bytes(self) -> int:
        """Bytes appended since open that lie below the high watermark: what consumers'
        long polls count as arrived."""
        return self._bytes_below_high_watermark

    @property
    def stable_bytes(self) -> int:
        """Bytes appended since open that lie below the last stable offset. It only grows:
        a read_committed long poll counts its min_bytes in it, so transactional data wakes
        the poll when its marker lands, not when it is appended (nor, replicated, before
        the high watermark passes it)."""
        first = self.producer_state.first_unstable_offset
        if first is None:
            return self._bytes_below_high_watermark
        return min(self._bytes_below_high_watermark, self._txn_start_bytes.get(first, 0))

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its transaction still waiting for a marker."""
        return self.producer_state.ongoing_transactions()

    def producers(self) -> list[ProducerSnapshot]:
        """The producers with state on this partition (DescribeProducers)."""
        return self.producer_state.active_producers()

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch: LeaderEpochCache.end_offset_for."""
        with self._lock:
            return self.leader_epochs.end_offset_for(leader_epoch, self._log_end_offset)

    def assign_epoch_start_offset(self, leader_epoch: int) -> None:
        """Kafka's Partition.makeLeader: the new leader's epoch starts at the log end, so a
        follower holding writes of an older epoch beyond it learns where to truncate."""
        with self._lock:
            # A log kept in magic 0/1 has no epochs to record (Kafka keeps no cache for one).
            if self.config.message_format_magic >= MAGIC_V2:
                self.leader_epochs.assign(leader_epoch, self._log_end_offset)

    def update_high_watermark(self, offset: int) -> int:
        """Kafka's updateHighWatermark: set the high watermark, kept within [log start offset,
        log end offset] (a follower takes the leader's this way). Returns the new value."""
        with self._lock:
            self._set_high_watermark(min(max(offset, self._log_start_offset), self._log_end_offset))
            return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Kafka's maybeIncrementHighWatermark, for a leader whose in-sync replicas all have
        the offsets below `offset`: move the high watermark up to it, never down. Returns
        whether it moved; ValueError for an offset past the log end."""
        with self._lock:
            if offset > self._log_end_offset:
                raise ValueError(
                    f"high watermark {offset} beyond log end offset {self._log_end_offset} "
                    f"of {self.directory.name}"
                )
            if offset <= self._high_watermark:
                return False
            self._set_high_watermark(offset)
            return True

    def _set_high_watermark(self, offset: int) -> None:
        self._high_watermark = offset
        pending = self._appends_above_high_watermark
        while pending and pending[0][0] <= offset:
            self._bytes_below_high_watermark = pending.popleft()[1]

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self._segments[-1].index_interval_bytes = config.index_interval_bytes

    # ---- appending -----------------------------------------------------------------------

    def append(
        self,
        data: bytes | memoryview,
        header: BatchHeader,
        *,
        now_ms: int,
        leader_epoch: int | None = None,
        assign_offsets: bool = True,
    ) -> AppendResult:
        """Append one validated batch, stamping its base offset without copying the records.

        Only the first 16 bytes (base offset, length, leader epoch: outside the CRC) are
        replaced, or the whole 61-byte header under LogAppendTime; the rest is handed to
        writev as a view of `data`. With `assign_offsets=False` (replicas, tests) the batch
        keeps its offsets, which must not go backwards. A control batch ends its producer's
        transaction like append_marker, without the zombie checks (a replica's view).
        """
        view = memoryview(data)
        size = header.size
        if len(view) < size:
            raise ValueError(f"batch of {size} bytes given only {len(view)} bytes")
        marker = None
        if header.is_control and header.producer_id >= 0:
            marker = read_control(view[:size])  # a malformed marker is refused, not written
        with self._lock:
            if assign_offsets:
                base_offset = self._log_end_offset
            else:
                base_offset = header.base_offset
                if base_offset < self._log_end_offset:
                    raise ValueError(
                        f"offset {base_offset} below log end offset {self._log_end_offset}"
                    )
            last_offset = base_offset + header.last_offset_delta
            if self.config.log_append_time and assign_offsets:
                # Only the leader stamps: a replica keeps the leader's bytes (Kafka's
                # appendAsFollower), and a magic 0/1 entry has no v2 header to stamp.
                head = bytearray(with_log_append_time(view, now_ms, base_offset=base_offset))
                max_timestamp = log_append_time = now_ms
            else:
                head = bytearray(view[:16])
                struct.pack_into(">q", head, 0, base_offset)
                max_timestamp, log_append_time = header.max_timestamp, -1
            if leader_epoch is not None:
                struct.pack_into(">i", head, 12, leader_epoch)
            else:
                leader_epoch = header.partition_leader_epoch
            segment = self._maybe_roll(size, max_timestamp, last_offset, now_ms)
            segment.append([head, view[len(head) : size]], size, last_offset, max_timestamp)
            # Kafka's maybeAssignEpochStartOffset; batches without an epoch (-1) record none.
            if leader_epoch != self.leader_epochs.latest_epoch and leader_epoch >= 0:
                self.leader_epochs.assign(leader_epoch, base_offset)
            elif header.magic < MAGIC_V2:
                self._forget_epochs(header.magic)  # a replica of a log kept in magic 0/1
            self._log_end_offset = last_offset + 1
            self._unflushed_messages += header.last_offset_delta + 1
            if marker is not None:
                self._end_txn(segment, header, marker, base_offset, max_timestamp)
            elif header.producer_id >= 0:
                if self.producer_state.update(header, base_offset, last_offset, max_timestamp):
                    self._txn_start_bytes[base_offset] = self._appended_bytes
            self._appended(size)
            must_flush = self._unflushed_messages >= self.config.flush_interval_messages
        return AppendResult(
            base_offset,
            last_offset,
            log_append_time,
            max_timestamp,
            self._log_start_offset,
            must_flush,
            size,
        )

    def _forget_epochs(self, magic: int) -> None:
        """Kafka's answer to a magic 0/1 append: such entries carry no epoch, so the cache
        can no longer tell epochs' ends; truncation falls back to the high watermark, and
        OffsetForLeaderEpoch answers UNDEFINED."""
        if self.leader_epochs.latest_epoch != UNDEFINED_EPOCH:
            logger.warning(
                "%s: clearing the leader epoch cache after an append in magic %d",
                self.directory.name,
                magic,
            )
            self.leader_epochs.clear()

    def append_legacy(self, message_set: LegacyAppend, *, now_ms: int) -> AppendResult:
        """Append a message set of magic 0/1 (a log kept in an old format, seed 004) at the
        log end, each shallow entry indexed on its own. Such entries carry no producer."""
        log_append = self.config.log_append_time and message_set.magic > MAGIC_V0
        with self._lock:
            base_offset = self._log_end_offset
            last_offset = base_offset + message_set.count - 1
            data, entries = message_set.stamp(base_offset, now_ms if log_append else None)
            max_timestamp = max(ts for _, _, ts in entries)
            segment = self._maybe_roll(len(data), max_timestamp, last_offset, now_ms)
            segment.append_entries(data, entries)
            self._forget_epochs(message_set.magic)
            self._log_end_offset = last_offset + 1
            self._unflushed_messages += message_set.count
            self._appended(len(data))
            must_flush = self._unflushed_messages >= self.config.flush_interval_messages
        return AppendResult(
            base_offset,
            last_offset,
            now_ms if log_append else -1,
            max_timestamp,
            self._log_start_offset,
            must_flush,
            len(data),
        )

    def _appended(self, size: int) -> None:
        """Count `size` bytes just appended, up to the log end offset."""
        self._appended_bytes += size
        if self.high_watermark_follows_appends:
            self._high_watermark = self._log_end_offset
            self._bytes_below_high_watermark = self._appended_bytes
        else:
            self._appends_above_high_watermark.append((self._log_end_offset, self._appended_bytes))

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        *,
        now_ms: int,
        leader_epoch: int | None,
        transaction_version: int = 0,
    ) -> AppendResult:
        """Append a COMMIT or ABORT marker for the producer (WriteTxnMarkers), ending its
        transaction on this partition; an aborted one is added to the txn index.

        Raises ProducerStateError, writing nothing, for a zombie: a producer epoch below the
        one the partition knows, or for `transaction_version` 2 not above it
        (INVALID_PRODUCER_EPOCH), or a coordinator epoch below the last marker's
        (TRANSACTION_COORDINATOR_FENCED). A marker for a producer without an ongoing
        transaction here is still written and records the epochs, as Kafka does."""
        data = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        header = read_header(data)
        with self._lock:
            self.producer_state.check_end_txn_marker(
                producer_id, producer_epoch, coordinator_epoch, transaction_version
            )
            return self.append(data, header, now_ms=now_ms, leader_epoch=leader_epoch)

    def _end_txn(
        self,
        segment: LogSegment,
        header: BatchHeader,
        marker: tuple[int, int],
        offset: int,
        timestamp: int,
    ) -> CompletedTxn | None:
        completed = self.producer_state.append_end_txn_marker(
            header.producer_id, header.producer_epoch, marker[0], marker[1], offset, timestamp
        )
        if completed is None:
            return None
        self._txn_start_bytes.pop(completed.first_offset, None)
        if completed.is_aborted:
            index = segment.txn_index
            if not len(index):
                self._aborted_bases.append(segment.base_offset)  # the active one: the largest
            # Written under the log lock with the marker: a flush that covers the marker
            # covers its entry too, so only unflushed segments can miss one after a crash.
            if index.append(
                completed.producer_id,
                completed.first_offset,
                completed.last_offset,
                self.producer_state.last_stable_offset(completed),
            ):
                self._dir_dirty = True
        return completed

    def _maybe_roll(
        self, size: int, max_timestamp: int, last_offset: int, now_ms: int
    ) -> LogSegment:
        """Kafka's LogSegment.shouldRoll: size, segment.ms since the first batch's timestamp,
        full indexes, or offsets beyond 32-bit relative range."""
        active = self._segments[-1]
        if active.size == 0:
            return active
        config = self.config
        expired = (
            active.time_waited_for_roll(now_ms, max_timestamp)
            > config.max_segment_ms - config.segment_jitter_ms
        )
        if (
            active.size > config.segment_bytes - size
            or expired
            or active.offset_index.is_full
            or active.time_index.is_full
            or not active.can_hold(last_offset)
        ):
            return self.roll(now_ms)
        return active

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            active = self._segments[-1]
            if active.size == 0:
                return active
            active.on_become_inactive()
            segment = LogSegment.create(self.directory, self._log_end_offset, self.config, now_ms)
            self._segments.append(segment)
            self._bases.append(segment.base_offset)
            self._dir_dirty = True
            # Kafka snapshots producer state at every roll: recovery then replays at most the
            # active segment.
            self.take_producer_snapshot()
            return segment

    # ---- reading -------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        as_slice: bool = False,
    ) -> FetchData:
        """Whole batches from the one containing `offset`, from a single segment as Kafka does.

        Stops before a batch whose base offset is >= `max_offset` (high watermark or LSO) and
        within `max_bytes`, except that with `min_one_batch` a first batch larger than
        `max_bytes` is returned whole. Only the needed slice of the file is read; with
        `as_slice`, a read of at least SLICE_MIN_BYTES in few batches is not read at all but
        returned as a FileSlice, for the network to send from the file.
        """
        with self._lock:
            start, end = self._log_start_offset, self._log_end_offset
            segments = self._segments[max(0, bisect_right(self._bases, offset) - 1) :]
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside log range [{start}, {end}] of {self.directory.name}"
            )
        empty = FetchData([], 0, offset, offset)
        if offset == end:
            return empty
        for segment in segments:
            found = segment.translate_offset(offset)
            if found is None:
                continue  # offset in a gap at the segment's end (compaction): try the next one
            position, header = found
            if max_offset is not None and header.base_offset >= max_offset:
                return empty
            limit = max(0, min(max_bytes, segment.size - position))
            if as_slice and (limit >= SLICE_MIN_BYTES or header.size >= SLICE_MIN_BYTES):
                walked = segment.whole_batches(
                    position, header, limit, max_offset, SLICE_MAX_BATCHES
                )
                if walked is not None:
                    total, next_offset = walked
                    if not total:
                        if not min_one_batch:
                            return empty
                        total, next_offset = header.size, header.next_offset
                    return FetchData(
                        [_slice_or_read(segment, position, total)],
                        total,
                        header.base_offset,
                        next_offset,
                    )
            chunk = segment.read_at(position, limit) if limit else b""
            total = 0
            next_offset = offset
            for pos, batch in iter_batches(chunk):
                if max_offset is not None and batch.base_offset >= max_offset:
                    break
                total = pos + batch.size
                next_offset = batch.next_offset
            if not total:
                if not min_one_batch:
                    return empty
                chunk = segment.read_at(position, header.size)
                total = header.size
                next_offset = header.next_offset
            data: bytes | memoryview = chunk if total == len(chunk) else memoryview(chunk)[:total]
            return FetchData([data], total, header.base_offset, next_offset)
        return empty

    def aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping
        [start_offset, upper_bound_offset): Kafka's collectAbortedTransactions, from the txn
        indexes of the segment holding `start_offset` onward until one says the search is
        complete. Segments without a txn index are never looked at."""
        found = self.collect_aborted_txns(start_offset, upper_bound_offset)
        return [(t.producer_id, t.first_offset) for t in found]

    def collect_aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The txn index entries behind aborted_transactions(), whole."""
        out: list[AbortedTxn] = []
        with self._lock:
            if not self._aborted_bases:
                return out
            floor = self._bases[max(0, bisect_right(self._bases, start_offset) - 1)]
            for base in self._aborted_bases[bisect_left(self._aborted_bases, floor) :]:
                index = self._segments[bisect_left(self._bases, base)].txn_index
                found, complete = index.collect(start_offset, upper_bound_offset)
                out += found
                if complete:
                    break
        return out

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record stamped >= `timestamp_ms` (ListOffsets)."""
        with self._lock:
            segments = list(self._segments)
            start = self._log_start_offset
        for segment in segments:
            if segment.max_timestamp_so_far >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms, start)
                if found is not None:
                    return found
        return None

    def offsets_before(self, timestamp: int, max_num_offsets: int, now_ms: int) -> list[int]:
        """ListOffsets v0 (Kafka's legacyFetchOffsetsBefore): the start offsets of segments
        whose files were last modified at or before `timestamp`, plus the log end while the
        active segment holds data (as of now), newest first, at most `max_num_offsets`.
        LATEST (-1) starts from the log end, EARLIEST (-2) answers the log start."""
        with self._lock:
            segments = list(self._segments)
            start, end = self._log_start_offset, self._log_end_offset
        points = [(max(s.base_offset, start), s.last_modified_ms) for s in segments]
        if segments[-1].size:
            points.append((end, now_ms))
        if timestamp == -2:
            index = 0
        else:
            index = len(points) - 1
            while timestamp != -1 and index >= 0 and points[index][1] > timestamp:
                index -= 1
        count = max(0, min(max_num_offsets, index + 1))
        return sorted((points[index - j][0] for j in range(count)), reverse=True)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """ListOffsets MAX_TIMESTAMP (-3): the earliest record carrying the log's largest
        timestamp, found in the first segment holding it (Kafka 3.8+ semantics)."""
        with self._lock:
            segments = list(self._segments)
        best = segments[0]
        for segment in segments[1:]:
            if segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        return best.offset_of_max_timestamp()

    # ---- deletion ------------------------------------------------------------------------

    def delete_records_before(self, offset: int, *, now_ms: int | None = None) -> int:
        """DeleteRecords: move the log start offset up to `offset` (at most the high
        watermark) and drop segments that lie wholly below it. Returns the new start."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            if offset < 0 or offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: high watermark is "
                    f"{self._high_watermark}"
                )
            if offset > self._log_start_offset:
                self._advance_log_start_offset(offset)
            self._delete_old_segments(self._start_offset_breached, now)
            self._purge_deleted(now)
            return self._log_start_offset

    def enforce_retention(self, now_ms: int) -> int:
        """Delete segments past retention.ms (by their largest record timestamp) and beyond
        retention.bytes, plus those below the log start offset. Returns how many went."""
        with self._lock:
            deleted = 0
            config = self.config
            if config.delete:
                if config.retention_ms >= 0:
                    deleted += self._delete_old_segments(
                        lambda seg, _nxt: now_ms - seg.largest_timestamp() > config.retention_ms,
                        now_ms,
                    )
                if config.retention_bytes >= 0:
                    deleted += self._delete_old_segments(self._size_breached(), now_ms)
            deleted += self._delete_old_segments(self._start_offset_breached, now_ms)
            self._purge_deleted(now_ms)
            return deleted

    def _start_offset_breached(self, _segment: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= self._log_start_offset

    def _size_breached(self) -> Callable[[LogSegment, LogSegment | None], bool]:
        excess = self.size_in_bytes - self.config.retention_bytes

        def breached(segment: LogSegment, _nxt: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size >= 0:
                excess -= segment.size
                return True
            return False

        return breached

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], now_ms: int
    ) -> int:
        """Kafka's deletableSegments: a prefix of segments, all below the high watermark,
        never an empty active segment; deleting every segment first rolls a new one."""
        deletable: list[LogSegment] = []
        segments = self._segments
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            if nxt is None and segment.size == 0:
                break
            if self._high_watermark < upper or not predicate(segment, nxt):
                break
            deletable.append(segment)
        if not deletable:
            return 0
        if len(deletable) == len(segments):
            self.roll(now_ms)
        del self._segments[: len(deletable)]
        del self._bases[: len(deletable)]
        first_base = self._bases[0]
        del self._aborted_bases[: bisect_left(self._aborted_bases, first_base)]
        self._advance_log_start_offset(self._segments[0].base_offset)
        for segment in deletable:
            segment.mark_deleted()
            (self.directory / snapshot_file_name(segment.base_offset)).unlink(missing_ok=True)
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))
        self._dir_dirty = True
        return len(deletable)

    def _advance_log_start_offset(self, offset: int) -> None:
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self.leader_epochs.truncate_from_start(offset)
            if self._high_watermark < offset:
                self._set_high_watermark(offset)
            self._recovery_point = max(self._recovery_point, offset)

    def _purge_deleted(self, now_ms: int) -> None:
        """Unlink *.deleted files once file.delete.delay.ms has let in-flight reads finish."""
        if self._cleaning:
            return
        keep = []
        for due, segment in self._pending_deletes:
            if due <= now_ms:
                segment.delete_files()
            else:
                keep.append((due, segment))
        self._pending_deletes = keep

    # ---- truncation (replication) ----------------------------------------------------------

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> bool:
        """Kafka's UnifiedLog.truncateTo, for a follower whose log diverged from its leader's:
        drop every offset from `offset` on. False, with no data changed, when the log ends at
        or before `offset`; an offset below the log start offset empties the log
        (truncate_fully_and_start_at).

        Segments beyond `offset` go as retention's do (*.deleted, unlinked after
        file.delete.delay.ms), the one holding it is cut there with its indexes. The log end
        offset becomes `offset` (the first offset of the batch holding it, if that batch
        starts below it); the high watermark and the recovery point come down to it, the
        leader epoch cache forgets the epochs begun from it and the producer state is rebuilt
        as of it (Kafka's loadProducerState: the newest snapshot not beyond it, then the
        batches after that snapshot).

        Blocking (file operations, an fsync); refused while the cleaner may be reading a
        segment this would cut: LogManager.truncate_to pauses the log's cleaning first.
        After a kill -9 anywhere in it, Log.open finds a prefix of the log at least `offset`
        long: later segments go newest first and before the segment holding `offset` is cut,
        and after an unclean shutdown the last segment is always recovered."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.directory.name} to offset {offset}")
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            self._wait_for_flushes()
            if offset >= self._log_end_offset:
                # Kafka's too: an epoch this broker assigned at its log end as leader, with
                # nothing written in it, conflicts with the new leader's epochs.
                self.leader_epochs.truncate_from_end(self._log_end_offset)
                return False
            if offset < self._log_start_offset:
                self.truncate_fully_and_start_at(offset, now_ms=now)
                return True
            keep = bisect_right(self._bases, offset)
            stable_floor = self._truncation_floor(cuts_inactive=keep < len(self._segments))
            self._drop_segments_from(keep, now)
            active = self._segments[-1]
            # Active again: update_config() kept only the active segment's setting current.
            active.index_interval_bytes = self.config.index_interval_bytes
            self._truncated(active.truncate_to(offset, now), stable_floor)
            return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Kafka's truncateFullyAndStartAt, for a follower whose fetch offset fell out of its
        leader's log (below its log start): delete every segment and start an empty one at
        `offset`, which becomes the log start and end offsets, the high watermark and the
        recovery point. Producer state, snapshots and leader epochs start empty.

        Blocking; refused while the log is being cleaned (LogManager's method pauses it).
        Snapshots and the epoch checkpoint go before any segment, segments newest first, and
        the new segment comes last: a kill -9 leaves a prefix of the old log, or the new one."""
        if offset < 0:
            raise ValueError(f"cannot start {self.directory.name} at offset {offset}")
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            self._wait_for_flushes()
            stable_floor = self._truncation_floor(cuts_inactive=True)
            for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
                path.unlink()
            self.leader_epochs.clear()
            # Absent, the checkpoint is rebuilt from the batches, which a crash leaves in step
            # with it; an old one would lend the new log the old epochs.
            self.leader_epochs.path.unlink(missing_ok=True)
            self._drop_segments_from(0, now)
            self._segments = [LogSegment.create(self.directory, offset, self.config, now)]
            self._bases = [offset]
            self._log_start_offset = self._recovery_point = self._high_watermark = offset
            self._truncated(offset, stable_floor)

    def _wait_for_flushes(self) -> None:
        while self._flushes_in_flight:
            self._flushes_done.wait()

    def _truncation_floor(self, *, cuts_inactive: bool) -> int:
        """Refuse to cut segments the cleaner may be reading without the lock (it would swap
        the old records back in); returns stable_bytes, which truncation must not lower."""
        if self._cleaning and cuts_inactive:
            raise RuntimeError(
                f"{self.directory.name}: truncation while the log is being cleaned "
                "(LogManager.truncate_to pauses its cleaning first)"
            )
        return self.stable_bytes

    def _drop_segments_from(self, keep: int, now_ms: int) -> None:
        """Take the segments from index `keep` on out of the log, renaming them *.deleted
        newest first so that a crash leaves a prefix of the log; their files go after
        file.delete.delay.ms, as retention's do, so reads under way finish. The renames are
        made durable before the caller changes the segments left: a power failure must not
        bring back later segments behind a cut one."""
        doomed = self._segments[keep:]
        if not doomed:
            return
        for segment in reversed(doomed):
            segment.mark_deleted()
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))
        del self._segments[keep:]
        del self._bases[keep:]
        fsync_directory(self.directory)

    def _truncated(self, end: int, stable_floor: int) -> None:
        """Bring the log's state down to its segments, which now end at `end` (below the log
        start offset only when a batch holding it went whole: Kafka lowers the start too)."""
        self._log_end_offset = end
        self._log_start_offset = min(self._log_start_offset, end)
        self._high_watermark = min(self._high_watermark, end)
        self._recovery_point = min(self._recovery_point, end)
        self.leader_epochs.truncate_from_end(end)
        self._load_producer_state()
        pending = self._appends_above_high_watermark
        while pending and pending[-1][0] > end:
            pending.pop()
        # A transaction whose marker was cut is ongoing again: it holds stable_bytes where
        # they were, as the byte counts only grow.
        self._txn_start_bytes = {
            first: self._txn_start_bytes.get(first, stable_floor)
            for first in self.producer_state.ongoing_transactions().values()
        }
        self._aborted_bases = [s.base_offset for s in self._segments if len(s.txn_index)]
        self._dir_dirty = True

    # ---- compaction ----------------------------------------------------------------------

    def begin_cleaning(self) -> None:
        with self._lock:
            self._cleaning = True

    def end_cleaning(self, now_ms: int) -> None:
        with self._lock:
            self._cleaning = False
            self._purge_deleted(now_ms)

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """Kafka's lastRecordsOfActiveProducers: producer id -> (last offset of its last data
        batch, None when none is remembered; its epoch). The cleaner keeps those batches, as
        empty headers if their records go, so a reload rebuilds the same sequences and epochs."""
        with self._lock:
            # Copied in one step: producer expiry runs on the loop without the lock.
            entries = list(self.producer_state.producers.items())
            return {
                pid: (
                    entry.batches[-1].last_offset if entry.batches else None,
                    entry.producer_epoch,
                )
                for pid, entry in entries
            }

    def new_cleaned_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        """An empty `<base>.log.cleaned` segment for the cleaner to write, outside the log
        until replace_segments(); leftovers of an aborted run are truncated."""
        return LogSegment.create(
            self.directory, base_offset, self.config, now_ms, file_suffix=CLEANED_SUFFIX
        )

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment], now_ms: int) -> bool:
        """Swap the flushed `cleaned` segment in for the consecutive inactive segments `old`
        (Kafka's replaceSegments), so that a crash at any point leaves a loadable log:

        1. cleaned files -> *.swap, directory fsynced: from here on, loading completes the
           swap (_scan_directory); before it, loading drops the *.cleaned files.
        2. `old` -> *.deleted and reads move to `cleaned`; directory fsynced.
        3. *.swap -> final names.

        The lock is held for renames only, never across an fsync. Returns False, dropping
        `cleaned`, when retention or DeleteRecords removed one of `old` meanwhile."""
        with self._lock:
            if self._position_of(old) is None:
                cleaned.delete_files()
                return False
            cleaned.change_file_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_directory(self.directory)
        with self._lock:
            i = self._position_of(old)
            if i is None:
                cleaned.delete_files()
                return False
            for segment in old:
                segment.mark_deleted()
                self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))
            self._segments[i : i + len(old)] = [cleaned]
            self._bases = [s.base_offset for s in self._segments]
            self._aborted_bases = [s.base_offset for s in self._segments if len(s.txn_index)]
        fsync_directory(self.directory)
        with self._lock:
            # Retention may have taken the new segment already (it is then *.swap.deleted).
            if cleaned.log_path.name.endswith(SWAP_SUFFIX) and any(
                s is cleaned for s in self._segments
            ):
                cleaned.change_file_suffix(SWAP_SUFFIX, "")
                self._dir_dirty = True
        return True

    def _position_of(self, old: list[LogSegment]) -> int | None:
        """Where `old` still lies, consecutive and short of the active segment, in the log."""
        segments = self._segments
        for i, segment in enumerate(segments):
            if segment is old[0]:
                end = i + len(old)
                if end < len(segments) and all(
                    a is b for a, b in zip(segments[i:end], old, strict=True)
                ):
                    return i
                return None
        return None

    # ---- durability ----------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync segments holding offsets below `offset` (default: everything) and advance
        the recovery point there. Safe to run in a worker thread next to appends."""
        epochs = self.leader_epochs
        with self._lock:
            target = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
            if target <= self._recovery_point and not self._dir_dirty and not epochs.dirty:
                return
            segments = self._segments
            to_sync = []
            for i, segment in enumerate(segments):
                nxt = segments[i + 1].base_offset if i + 1 < len(segments) else target + 1
                if segment.base_offset < target and nxt > self._recovery_point:
                    to_sync.append(segment)
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            if offset is None:
                self._unflushed_messages = 0
            self._flushes_in_flight += 1
        try:
            for segment in to_sync:
                segment.flush()
            # Before the recovery point passes `target`: recovery re-reads epochs only from
            # the batches after it, so the checkpoint must hold every epoch begun below it.
            epochs.write_checkpoint(self._lock)
            if dir_dirty:
                fsync_directory(self.directory)
            with self._lock:
                self._recovery_point = max(self._recovery_point, target)
        finally:
            with self._lock:
                self._flushes_in_flight -= 1
                if not self._flushes_in_flight:
                    self._flushes_done.notify_all()

    def flush_rolled_segments(self) -> None:
        """Kafka flushes a segment soon after rolling it; this does it when the owner calls."""
        active_base = self._segments[-1].base_offset
        if self._recovery_point < active_base:
            self.flush(active_base)

    def close(self) -> None:
        """Flush everything and leave valid, trimmed index files for a clean reopen."""
        with self._lock:
            self._segments[-1].on_become_inactive()
            self.take_producer_snapshot(sync=True)
        self.flush()
        with self._lock:
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletes:
                segment.delete_files()
            self._pending_deletes = []

    def delete(self) -> None:
        """Close without flushing and remove the whole partition directory."""
        with self._lock:
            for segment in self._segments:
                segment.close(persist=False)
            for _, segment in self._pending_deletes:
                segment.close(persist=False)
            self._pending_deletes = []
            shutil.rmtree(self.directory, ignore_errors=True)


def _scan_directory(directory: Path) -> list[int]:
    """Base offsets of the segments present; drops leftovers Kafka also drops at load and
    settles a cleaner swap a crash interrupted (Kafka's LogLoader):

    - *.deleted files are dropped, and so are *.cleaned ones: that swap never began.
    - A `<base>.log.swap` with cleaned files at or above its base was still being renamed:
      the segments it was to replace are intact, so it is dropped.
    - Any other `<base>.log.swap` replaces the segments whose base offsets fall in
      [base, its next offset) and takes its final name. Swapped indexes are dropped and
      rebuilt from the log, as Kafka does.
    """
    cleaned: list[int] = []
    log_swaps: list[tuple[int, Path]] = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(DELETED_SUFFIX):
            os.unlink(entry.path)
        elif name.endswith(CLEANED_SUFFIX):
            base = _base_offset_of(name)
            if base is not None:
                cleaned.append(base)
            os.unlink(entry.path)
        elif name.endswith(SWAP_SUFFIX):
            base = _base_offset_of(name)
            if base is not None and name == segment_file_name(base, LOG_SUFFIX) + SWAP_SUFFIX:
                log_swaps.append((base, Path(entry.path)))
            else:
                os.unlink(entry.path)
    first_cleaned = min(cleaned, default=None)
    for base, swap in sorted(log_swaps):
        if first_cleaned is not None and base >= first_cleaned:
            logger.warning("dropping %s: its swap was interrupted before it was complete", swap)
            swap.unlink()
            continue
        end = _next_offset_of(swap, base)
        logger.warning("completing the interrupted swap of %s (offsets %d-%d)", swap, base, end)
        for entry in os.scandir(directory):
            replaced = _base_offset_of(entry.name)
            if (
                replaced is not None
                and (replaced == base or base <= replaced < end)
                and any(entry.name == segment_file_name(replaced, s) for s in _SEGMENT_SUFFIXES)
            ):
                os.unlink(entry.path)
        os.rename(swap, swap.with_name(segment_file_name(base, LOG_SUFFIX)))
    if log_swaps:
        fsync_directory(directory)
    logs: set[int] = set()
    indexes: dict[int, list[Path]] = {}
    for entry in os.scandir(directory):
        name = entry.name
        stem, _, suffix = name.partition(".")
        if len(stem) != 20 or not stem.isdigit():
            continue
        if "." + suffix == LOG_SUFFIX:
            logs.add(int(stem))
        elif "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            indexes.setdefault(int(stem), []).append(Path(entry.path))
    for base, paths in indexes.items():
        if base not in logs:  # an index without its log is garbage
            for path in paths:
                path.unlink(missing_ok=True)
    return sorted(logs)


def _base_offset_of(name: str) -> int | None:
    stem = name.partition(".")[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _next_offset_of(path: Path, base_offset: int) -> int:
    """The offset after the last whole batch of a segment file, by its batch headers."""
    next_offset, position = base_offset, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        while position < size:
            header = read_entry_header(os.pread(fd, BATCH_HEADER_SIZE, position))
            if header is None or position + header.size > size:
                break
            next_offset = header.next_offset
            position += header.size
    finally:
        os.close(fd)
    return next_offset


def _marker_of(batch: bytes) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a marker found while replaying; None for a
    control batch that ends nothing (emptied, or not a transaction marker), as in Kafka."""
    try:
        return read_control(batch)
    except InvalidRecordError:
        return None
