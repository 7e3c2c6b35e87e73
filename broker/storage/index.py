"""Sparse segment indexes in Kafka's file formats, held in memory and written on flush.

`.index`: 8-byte entries (int32 offset relative to the segment base, int32 file position),
mapping the LAST offset of an indexed batch to the position where that batch starts.
`.timeindex`: 12-byte entries (int64 timestamp, int32 relative offset), timestamps strictly
increasing. Both big-endian.

Kafka mmaps its indexes and closes their files, so a segment costs one descriptor (its log)
and index pages reach the disk when the segment is flushed. Likewise here: entries live in
memory and flush() appends the new ones to the file, which is opened only for that. A
partition thus holds one descriptor per segment, and 10,000 partitions fit in 20,000 files.
After a crash an index may lag its log; segments past the recovery point are re-indexed by
recovery, and the ones before it were flushed, indexes included.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
OFFSET_ENTRY_SIZE = _OFFSET_ENTRY.size
TIME_ENTRY_SIZE = _TIME_ENTRY.size


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the segment must be recovered to rebuild it."""


class _IndexFile:
    entry_size: int
    _offsets: array  # relative to the base offset, ascending

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._in_file = 0  # entries the file holds; the rest are only in memory
        self._closed = False

    def __len__(self) -> int:
        raise NotImplementedError

    def _encode(self, start: int, end: int) -> bytes:
        """Entries [start, end) in the file's format."""
        raise NotImplementedError

    def _read_all(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""

    def _loaded(self) -> None:
        self._in_file = len(self)

    def _reset_file(self) -> None:
        self._in_file = 0
        with open(self.path, "wb"):
            pass

    def _columns(self) -> tuple[array, array]:
        raise NotImplementedError

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets at or beyond `offset` (the log was cut there), from
        memory and from the file. Not concurrent with flush(): the log excludes it."""
        keep = bisect_left(self._offsets, offset - self.base_offset)
        for column in self._columns():
            del column[keep:]
        if keep < self._in_file:
            os.truncate(self.path, keep * self.entry_size)
            self._in_file = keep

    def flush(self) -> None:
        """Append the entries the file lacks and fsync it. Safe in a worker thread next to
        appends: it writes the entries that existed when it started."""
        self._write_pending(sync=True)

    def _write_pending(self, *, sync: bool) -> None:
        if self._closed:
            return
        end = len(self)
        data = self._encode(self._in_file, end)
        if not data and not sync and self.path.exists():
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if data:
                os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._in_file = end

    def close(self, *, persist: bool = True) -> None:
        """Write what the file lacks (unless the segment is being deleted); idempotent."""
        if persist:
            self._write_pending(sync=False)
        self._closed = True

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path


def _unpack_column(raw: bytes, typecode: str) -> array:
    column = array(typecode, raw)
    if sys.byteorder == "little":
        column.byteswap()
    return column


class OffsetIndex(_IndexFile):
    entry_size = OFFSET_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self._offsets = array("i")  # relative
        self._positions = array("i")

    def load(self, log_size: int) -> None:
        """Read the file; raise CorruptIndexError unless it is well-formed for this segment."""
        raw = self._read_all()
        if len(raw) % OFFSET_ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: size {len(raw)} not a multiple of 8")
        pairs = _unpack_column(raw, "i")
        offsets, positions = pairs[0::2], pairs[1::2]
        for i in range(len(offsets)):
            if offsets[i] < 0 or positions[i] < 0 or positions[i] >= max(log_size, 1):
                raise CorruptIndexError(f"{self.path}: entry {i} out of range")
            if i and (offsets[i] <= offsets[i - 1] or positions[i] <= positions[i - 1]):
                raise CorruptIndexError(f"{self.path}: entry {i} not increasing")
        self._offsets, self._positions = offsets, positions
        self._loaded()

    def __len__(self) -> int:
        # Positions are appended after offsets: a flush in another thread sees whole entries.
        return len(self._positions)

    def _columns(self) -> tuple[array, array]:
        return self._offsets, self._positions

    def _encode(self, start: int, end: int) -> bytes:
        pairs = array("i", bytes(8 * (end - start)))
        pairs[0::2] = self._offsets[start:end]
        pairs[1::2] = self._positions[start:end]
        if sys.byteorder == "little":
            pairs.byteswap()
        return pairs.tobytes()

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        if not self._offsets:
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._offsets and relative <= self._offsets[-1]:
            raise ValueError(f"index offset {offset} not above the last entry")
        self._offsets.append(relative)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry whose offset is <= `offset`, or (base_offset, 0)."""
        slot = bisect_right(self._offsets, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[slot], self._positions[slot]

    def reset(self) -> None:
        self._offsets, self._positions = array("i"), array("i")
        self._reset_file()


class TimeIndex(_IndexFile):
    entry_size = TIME_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self._timestamps = array("q")
        self._offsets = array("i")  # relative

    def load(self) -> None:
        raw = self._read_all()
        if len(raw) % TIME_ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: size {len(raw)} not a multiple of 12")
        timestamps, offsets = array("q"), array("i")
        for i in range(len(raw) // TIME_ENTRY_SIZE):
            ts, rel = _TIME_ENTRY.unpack_from(raw, i * TIME_ENTRY_SIZE)
            if rel < 0 or (i and (ts <= timestamps[-1] or rel < offsets[-1])):
                raise CorruptIndexError(f"{self.path}: entry {i} out of order")
            timestamps.append(ts)
            offsets.append(rel)
        self._timestamps, self._offsets = timestamps, offsets
        self._loaded()

    def __len__(self) -> int:
        return len(self._offsets)  # appended after the timestamp (see OffsetIndex.__len__)

    def _columns(self) -> tuple[array, array]:
        return self._timestamps, self._offsets

    def _encode(self, start: int, end: int) -> bytes:
        return b"".join(
            _TIME_ENTRY.pack(self._timestamps[i], self._offsets[i]) for i in range(start, end)
        )

    @property
    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        if not self._timestamps:
            return -1, self.base_offset
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append only a timestamp above the last one: entries must strictly increase."""
        if not skip_full_check and self.is_full:
            raise ValueError(f"time index {self.path} is full")
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if timestamp < 0:
            return
        relative = offset - self.base_offset
        if self._offsets and relative < self._offsets[-1]:
            raise ValueError(f"time index offset {offset} below the last entry")
        self._timestamps.append(timestamp)
        self._offsets.append(relative)

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry with timestamp <= `timestamp`, or the base offset."""
        slot = bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return self.base_offset
        return self.base_offset + self._offsets[slot]

    def reset(self) -> None:
        self._timestamps, self._offsets = array("q"), array("i")
        self._reset_file()
