"""One log segment: `<base offset>.log` plus its `.index`, `.timeindex` and, once it holds an
aborted transaction's marker, `.txnindex` (Kafka's LogSegment)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from broker.records.batch import (
    BATCH_HEADER_SIZE,
    MIN_ENTRY_HEADER_SIZE,
    BatchHeader,
    crc_matches,
    iter_batches,
    read_entry_header,
)
from broker.records.entries import entry_records
from broker.storage.config import LogConfig
from broker.storage.file_slice import FileSlice
from broker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from broker.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
# The cleaner's replacement segment while it is written, then while it is swapped in (Kafka's
# LocalLog.CleanedFileSuffix and SwapFileSuffix); the log's recovery knows what each means.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_INT32_MAX = (1 << 31) - 1
_RECOVERY_CHUNK = 1 << 20


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """Appends go straight to the OS (O_APPEND, writev): nothing is buffered in the process,
    so acknowledged data survives the death of the process; fsync happens only in flush()."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        *,
        file_suffix: str = "",
    ) -> None:
        self.base_offset = base_offset
        self.log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + file_suffix)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(
            directory / (segment_file_name(base_offset, INDEX_SUFFIX) + file_suffix),
            base_offset,
            max(1, config.segment_index_bytes // 8),
        )
        self.time_index = TimeIndex(
            directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + file_suffix),
            base_offset,
            max(1, config.segment_index_bytes // 12),
        )
        # Filled by the log: its entries come from the producer state, which the log owns.
        self.txn_index = TransactionIndex(
            directory / (segment_file_name(base_offset, TXN_INDEX_SUFFIX) + file_suffix),
            base_offset,
        )
        self.index_interval_bytes = config.index_interval_bytes
        self.created_ms = now_ms
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = -1
        self.next_offset = base_offset  # exact once appended to, recovered or load_tail()ed
        self._last_index_position = 0
        self._rolling_timestamp: int | None = None

    # ---- opening -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        *,
        file_suffix: str = "",
    ) -> LogSegment:
        segment = cls(directory, base_offset, config, now_ms, file_suffix=file_suffix)
        if segment.size:  # a stale file from an earlier life of this offset range
            os.ftruncate(segment._fd, 0)
            segment.size = 0
        segment.offset_index.reset()
        segment.time_index.reset()
        segment.txn_index.reset()
        return segment

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int
    ) -> tuple[LogSegment, bool]:
        """Open an existing segment; the flag says its indexes are missing or unusable."""
        indexes_present = all(
            (directory / segment_file_name(base_offset, s)).exists()
            for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
        )
        segment = cls(directory, base_offset, config, now_ms)
        if not indexes_present:
            return segment, True
        try:
            segment.offset_index.load(segment.size)
            segment.time_index.load()
            segment.txn_index.load()
        except CorruptIndexError:
            return segment, True
        ts, offset = segment.time_index.last_entry
        segment.max_timestamp_so_far = ts
        segment.offset_of_max_timestamp_so_far = offset if ts >= 0 else -1
        if segment.size and not len(segment.time_index):
            return segment, True  # a closed segment always ends with a time index entry
        return segment, False

    def load_tail(self) -> bool:
        """Find next_offset by scanning from the last index entry; False if the tail doesn't
        frame into whole batches consistent with the index (the segment needs recovery)."""
        entry_offset, position = self.offset_index.last_entry
        self._last_index_position = position
        end_position = position
        checked_entry = False
        for pos, header in self.batches_from(position):
            if not checked_entry:
                checked_entry = True
                if len(self.offset_index) and header.last_offset != entry_offset:
                    return False
            if header.last_offset < self.base_offset:
                return False
            self.next_offset = header.next_offset
            end_position = pos + header.size
        return end_position == self.size

    def recover(self, min_offset: int) -> int:
        """Rebuild the indexes from the log, truncating at the first invalid batch.

        A batch is invalid when it is torn, its CRC fails, its magic or length is impossible,
        or its offsets go backwards or out of this segment's 32-bit relative range (Kafka's
        LogSegment.recover). Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = -1
        self._last_index_position = 0
        self._rolling_timestamp = None
        expected = max(min_offset, self.base_offset)
        self.next_offset = self.base_offset
        valid = 0
        end = self.size
        while valid < end:
            buf = os.pread(self._fd, min(end - valid, _RECOVERY_CHUNK), valid)
            first = read_entry_header(buf)
            if first is None:
                break
            if len(buf) < first.size <= end - valid:
                buf = os.pread(self._fd, first.size, valid)  # one batch bigger than a chunk
            consumed = 0
            sound = True
            for pos, header in iter_batches(buf):
                if (
                    header.base_offset < expected
                    or header.last_offset_delta < 0
                    or header.last_offset - self.base_offset > _INT32_MAX
                    or not crc_matches(buf, pos, header)
                ):
                    sound = False
                    break
                self._index_batch(valid + pos, header.last_offset, header.max_timestamp)
                expected = header.next_offset
                self.next_offset = header.next_offset
                consumed = pos + header.size
            valid += consumed
            if not sound or not consumed:
                break
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self._fd, valid)
            self.size = valid
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )
        return truncated

    # ---- appending -----------------------------------------------------------------------

    def append(
        self, chunks: Sequence[bytes | memoryview], size: int, last_offset: int, max_timestamp: int
    ) -> None:
        """Write one batch (given as chunks) at the end of the file and index it."""
        position = self._write(chunks, size)
        if self._rolling_timestamp is None and position == 0:
            self._rolling_timestamp = max_timestamp
        self._index_batch(position, last_offset, max_timestamp)
        self.next_offset = last_offset + 1

    def append_entries(self, data: bytes, entries: Sequence[tuple[int, int, int]]) -> None:
        """Write old-format entries in one go and index each: `entries` gives (position in
        `data`, offset, max timestamp) of each (LegacyAppend.stamp)."""
        position = self._write([data], len(data))
        for relative, offset, max_timestamp in entries:
            if self._rolling_timestamp is None and position + relative == 0:
                self._rolling_timestamp = max_timestamp
            self._index_batch(position + relative, offset, max_timestamp)
        self.next_offset = entries[-1][1] + 1

    def _write(self, chunks: Sequence[bytes | memoryview], size: int) -> int:
        """Append whole chunks; the position they start at."""
        position = self.size
        try:
            written = os.writev(self._fd, chunks)
            while written < size:  # short writes are legal; finish the batch
                rest = b"".join(bytes(c) for c in chunks)[written:]
                written += os.write(self._fd, rest)
        except OSError:
            os.ftruncate(self._fd, position)  # never leave half a batch behind (e.g. ENOSPC)
            raise
        self.size = position + size
        return position

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp_so_far = last_offset
        if position - self._last_index_position > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
            )
            self._last_index_position = position

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Kafka's LogSegment.truncateTo: drop every batch ending at or beyond `offset` with
        its index entries, and the aborted transactions whose marker went. A batch holding
        `offset` past its first offset goes whole. Returns the segment's new next offset:
        `offset`, or the first offset of a batch cut through the middle."""
        found = self.translate_offset(offset)
        if found is None:
            self.next_offset = offset
            return offset
        position, cut = found
        self.next_offset = min(offset, cut.base_offset)
        self.offset_index.truncate_to(self.next_offset)
        self.time_index.truncate_to(self.next_offset)
        self.txn_index.truncate_to(self.next_offset)
        os.ftruncate(self._fd, position)
        self.size = position
        self._last_index_position = self.offset_index.last_entry[1]
        if not position:
            # Kafka: an emptied segment counts its age for segment.ms from now.
            self.created_ms = now_ms
            self._rolling_timestamp = None
        # The last time index entry holds the largest timestamp up to its offset; batches
        # after it may hold larger ones.
        timestamp, at = self.time_index.last_entry
        self.max_timestamp_so_far = timestamp
        self.offset_of_max_timestamp_so_far = at if timestamp >= 0 else -1
        for _, header in self.batches_from(self.offset_index.lookup(at)[1]):
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp_so_far = header.last_offset
        return self.next_offset

    def can_hold(self, last_offset: int) -> bool:
        """Whether `last_offset` still fits the index's 32-bit offsets relative to the base."""
        return last_offset - self.base_offset <= _INT32_MAX

    def on_become_inactive(self) -> None:
        """Record the final max timestamp so a reopened segment knows it without a scan."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )

    # ---- reading -------------------------------------------------------------------------

    def read_at(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def file_slice(self, position: int, length: int) -> FileSlice:
        return FileSlice(self._fd, position, length)

    def whole_batches(
        self,
        position: int,
        first: BatchHeader,
        limit: int,
        max_offset: int | None,
        max_batches: int,
    ) -> tuple[int, int] | None:
        """(bytes, next offset) of the whole batches from `position` (where `first` is) that end
        within `limit` bytes and start below `max_offset` ((0, -1) when the first does not),
        told from their headers alone; None when that takes more than `max_batches` headers
        (small batches are cheaper to read than to walk)."""
        total, next_offset = 0, -1
        batches = itertools.chain([(position, first)], self.batches_from(position + first.size))
        for count, (pos, header) in enumerate(batches):
            if count == max_batches:
                return None
            if pos + header.size > position + limit or (
                max_offset is not None and header.base_offset >= max_offset
            ):
                break
            total, next_offset = pos + header.size - position, header.next_offset
        return total, next_offset

    def batches_from(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of whole batches from `position`, one header-sized pread each."""
        end = self.size
        while end - position >= MIN_ENTRY_HEADER_SIZE - 8:
            header = read_entry_header(os.pread(self._fd, BATCH_HEADER_SIZE, position))
            if header is None or position + header.size > end:
                return
            yield position, header
            position += header.size

    def batch_data_from(
        self, position: int = 0, chunk_bytes: int = _RECOVERY_CHUNK
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Whole batches from `position` with their bytes, read a chunk at a time (a batch
        larger than a chunk is read on its own): the cleaner's sequential scan."""
        end = self.size
        while end > position:
            buf = os.pread(self._fd, min(end - position, chunk_bytes), position)
            first = read_entry_header(buf)
            if first is None or position + first.size > end:
                return
            if first.size > len(buf):
                buf = os.pread(self._fd, first.size, position)
            view = memoryview(buf)
            consumed = 0
            for pos, header in iter_batches(view):
                yield header, view[pos : pos + header.size]
                consumed = pos + header.size
            if not consumed:
                return
            position += consumed

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= `offset`."""
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.batches_from(position):
            if header.last_offset >= offset:
                return pos, header
        return None

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at/after `starting_offset` stamped >= timestamp."""
        indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, starting_offset))
        for pos, header in self.batches_from(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            for record in entry_records(self.read_at(pos, header.size)):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return record.offset, record.timestamp
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record carrying this segment's max timestamp."""
        if self.max_timestamp_so_far < 0:
            return None
        _, position = self.offset_index.lookup(self.offset_of_max_timestamp_so_far)
        for pos, header in self.batches_from(position):
            if header.max_timestamp != self.max_timestamp_so_far:
                continue
            for record in entry_records(self.read_at(pos, header.size)):
                if record.timestamp == header.max_timestamp:
                    return record.offset, record.timestamp
            return None
        return None

    @property
    def rolling_based_timestamp(self) -> int | None:
        """Max timestamp of the first batch: the start of the segment's time for segment.ms."""
        if self._rolling_timestamp is None:
            first = read_entry_header(self.read_at(0, BATCH_HEADER_SIZE))
            if first is not None:
                self._rolling_timestamp = first.max_timestamp
        return self._rolling_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        ts = self.rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def largest_timestamp(self) -> int:
        """The retention clock: the max record timestamp, else the file's mtime."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.fstat(self._fd).st_mtime * 1000)

    @property
    def last_modified_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    def set_last_modified(self, ms: int) -> None:
        """Kafka's cleaner keeps the replaced segments' mtime on the cleaned one: the file's
        age is what retention falls back on when records carry no timestamps."""
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    # ---- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        if self._fd < 0:
            return  # deleted meanwhile (retention, cleaning): nothing left to make durable
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self, *, persist: bool = True) -> None:
        """Close the log file; `persist` writes index entries not yet in their files (a
        segment about to be deleted skips that)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.offset_index.close(persist=persist)
        self.time_index.close(persist=persist)
        self.txn_index.close()

    def mark_deleted(self) -> None:
        """Rename the files to *.deleted; readers holding the fds keep working until close."""
        new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.rename(self.log_path, new_log)
        self.log_path = new_log
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def change_file_suffix(self, old: str, new: str) -> None:
        """Rename every file of the segment from suffix `old` to `new` (the cleaner's
        .cleaned -> .swap -> final steps); open descriptors keep working."""
        for path, rename in (
            (self.log_path, self._rename_log),
            (self.offset_index.path, self.offset_index.rename),
            (self.time_index.path, self.time_index.rename),
            (self.txn_index.path, self.txn_index.rename),
        ):
            stem = path.name[: len(path.name) - len(old)] if old else path.name
            if old and not path.name.endswith(old):
                raise ValueError(f"{path.name} does not end with {old!r}")
            rename(path.with_name(stem + new))

    def _rename_log(self, path: Path) -> None:
        os.rename(self.log_path, path)
        self.log_path = path

    def delete_files(self) -> None:
        self.close(persist=False)
        for path in (
            self.log_path,
            self.offset_index.path,
            self.time_index.path,
            self.txn_index.path,
        ):
            path.unlink(missing_ok=True)
