"""A segment's `.txnindex`: the aborted transactions whose ABORT marker the segment holds
(Kafka's TransactionIndex), for read_committed fetches to return as aborted_transactions.

Entries are Kafka's AbortedTxn: int16 version (0), int64 producer id, int64 first offset,
int64 last offset (the marker's), int64 last stable offset right after the abort; 34 bytes,
big-endian. The file exists only once a segment has an entry. Entries are mirrored in memory
as columns (8 bytes per field per entry), so a fetch never reads the file and a segment
without aborted transactions costs one length check.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from broker.storage.index import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(slots=True, frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd = -1
        self._producer_ids = array("q")
        self._first_offsets = array("q")
        self._last_offsets = array("q")  # strictly increasing: markers are appended in order
        self._last_stable_offsets = array("q")

    def __len__(self) -> int:
        return len(self._last_offsets)

    @property
    def last_offset(self) -> int | None:
        return self._last_offsets[-1] if self._last_offsets else None

    def entries(self) -> list[AbortedTxn]:
        return [self._entry(i) for i in range(len(self))]

    def _entry(self, i: int) -> AbortedTxn:
        return AbortedTxn(
            self._producer_ids[i],
            self._first_offsets[i],
            self._last_offsets[i],
            self._last_stable_offsets[i],
        )

    # ---- loading -------------------------------------------------------------------------

    def load(self) -> None:
        """Read the file if there is one; CorruptIndexError when it is torn or inconsistent
        (the segment is then recovered, which rebuilds the index from its markers)."""
        self._clear_memory()
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return
        if len(raw) % ENTRY_SIZE:
            raise CorruptIndexError(
                f"{self.path.name}: size {len(raw)} is not a multiple of {ENTRY_SIZE}"
            )
        previous = None
        for version, pid, first, last, lso in _ENTRY.iter_unpack(raw):
            if version != ABORTED_TXN_VERSION:
                raise CorruptIndexError(f"{self.path.name}: unknown entry version {version}")
            if last < self.base_offset or first > last:
                raise CorruptIndexError(
                    f"{self.path.name}: entry ({pid}, {first}, {last}, {lso}) outside the "
                    f"segment at {self.base_offset}"
                )
            if previous is not None and last <= previous:
                raise CorruptIndexError(f"{self.path.name}: last offsets not increasing")
            previous = last
            self._remember(pid, first, last, lso)

    # ---- writing -------------------------------------------------------------------------

    def append(self, producer_id: int, first_offset: int, last_offset: int, lso: int) -> bool:
        """Add an aborted transaction; returns True when this created the file (its
        directory entry then needs an fsync)."""
        if self._last_offsets and last_offset <= self._last_offsets[-1]:
            raise ValueError(
                f"aborted transaction ending at {last_offset} not after {self._last_offsets[-1]}"
            )
        created = False
        if self._fd < 0:
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(
            self._fd,
            _ENTRY.pack(ABORTED_TXN_VERSION, producer_id, first_offset, last_offset, lso),
        )
        self._remember(producer_id, first_offset, last_offset, lso)
        return created

    def _remember(self, producer_id: int, first: int, last: int, lso: int) -> None:
        self._producer_ids.append(producer_id)
        self._first_offsets.append(first)
        self._last_offsets.append(last)
        self._last_stable_offsets.append(lso)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or beyond `offset` (the log was cut there)."""
        keep = bisect_left(self._last_offsets, offset)
        if keep == len(self):
            return
        if keep == 0:
            self.reset()
            return
        for column in self._columns():
            del column[keep:]
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        os.ftruncate(self._fd, keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Forget every entry and remove the file: a segment without aborted transactions
        has no txn index."""
        self._clear_memory()
        self.close()
        self.path.unlink(missing_ok=True)

    def _clear_memory(self) -> None:
        for column in self._columns():
            del column[:]

    def _columns(self) -> tuple[array, ...]:
        return (
            self._producer_ids,
            self._first_offsets,
            self._last_offsets,
            self._last_stable_offsets,
        )

    # ---- reading -------------------------------------------------------------------------

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's collectAbortedTxns: the aborted transactions overlapping
        [fetch_offset, upper_bound_offset), and whether the search is complete.

        It is complete at the first entry whose last stable offset reaches the upper bound:
        every transaction starting below the bound had ended by then, so its entry is not in
        a later segment. Entries ending before `fetch_offset` cannot overlap and are skipped
        by bisection (last offsets increase); the LSOs they carry are no larger than those
        of the entries after them, so skipping them never skips the completing entry.
        """
        if not self._last_offsets:
            return [], False
        found: list[AbortedTxn] = []
        for i in range(bisect_left(self._last_offsets, fetch_offset), len(self)):
            if self._first_offsets[i] < upper_bound_offset:
                found.append(self._entry(i))
            if self._last_stable_offsets[i] >= upper_bound_offset:
                return found, True
        return found, False

    # ---- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
