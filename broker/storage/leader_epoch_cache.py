"""A partition's leader epoch cache: the offset at which each leader epoch's writes began.

Kafka's LeaderEpochFileCache, whose semantics replication's truncation (issue 16) and
OffsetForLeaderEpoch rely on. Plain state: the owning Log mutates it under its lock and says
when to persist it (`write_checkpoint`, from flush), so appends never wait for the disk.
Kafka fsyncs on every new epoch instead; here a crash may lose entries written since the last
flush, which is safe because flush writes the checkpoint before moving the recovery point
past the data, and recovery re-assigns the epochs of the batches it rescans (moving the log
start moves the recovery point there, so the segment holding the new start is rescanned).

The checkpoint file is Kafka's leader-epoch-checkpoint: "0", the entry count, then one
"epoch start_offset" line per entry.
"""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from broker.storage.checkpoint import CorruptCheckpointError, read_lines, write_lines

logger = logging.getLogger("broker.storage.leader_epoch_cache")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(slots=True, frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[EpochEntry] = []  # ascending in both epoch and start offset
        # The newest epoch, UNDEFINED_EPOCH while empty: appends compare their epoch with it,
        # the one check they pay, since the epoch changes only with leadership.
        self.latest_epoch = UNDEFINED_EPOCH
        # Entries changed since the checkpoint was last written (or it was never read).
        self.dirty = True
        self._checkpoint_lock = threading.Lock()
        self._stopped = False  # the log is being deleted: its directory is no longer `path`

    @classmethod
    def load(cls, path: Path) -> tuple[LeaderEpochCache, bool]:
        """The cache as its checkpoint left it, and whether the file was read: False when it
        is missing or corrupt, in which case the caller rebuilds the entries from the log."""
        cache = cls(path)
        try:
            stored = read_leader_epoch_checkpoint(path)
        except CorruptCheckpointError as e:
            logger.warning("rebuilding the leader epoch cache from the log: %s", e)
            return cache, False
        if stored is None:
            return cache, False
        for entry in stored:  # as Kafka: assigned one by one, so a disordered file is mended
            cache.assign(entry.epoch, entry.start_offset)
        cache.dirty = cache._entries != stored
        return cache, True

    # ---- queries -----------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetFor: (the largest epoch <= `requested_epoch`, the start offset of
        the first epoch after it), or the log end offset for the latest epoch.

        A requested epoch below the first known one answers (requested epoch, first start):
        the older data is gone and a follower should replicate from there. UNDEFINED_EPOCH,
        an epoch above the latest or an empty cache answer (UNDEFINED_EPOCH,
        UNDEFINED_EPOCH_OFFSET), so the follower falls back to the high watermark."""
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries and requested_epoch == self.latest_epoch:
            # The leader is still writing this epoch: a consumer validating its position
            # after a rebalance must see every offset written so far as within it.
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for entry in self._entries:
            if entry.epoch > requested_epoch:
                break
            floor = entry
        if floor is None:
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose leader wrote `offset` (Kafka's epochForOffset, what ListOffsets
        reports with an offset); UNDEFINED_EPOCH before the first known epoch."""
        found = UNDEFINED_EPOCH
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    # ---- changes -----------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` begins at `start_offset`. Ignored unless the epoch differs from
        the latest one or is the latest one starting lower; otherwise every entry whose epoch
        or start offset is not below the new one's goes first, keeping both ascending.
        Returns whether the entries changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        entries = self._entries
        if entries and epoch == entries[-1].epoch and start_offset >= entries[-1].start_offset:
            return False
        new = EpochEntry(epoch, start_offset)
        keep = len(entries)
        while keep and (
            entries[keep - 1].epoch >= epoch or entries[keep - 1].start_offset >= start_offset
        ):
            keep -= 1
        removed = entries[keep:]
        del entries[keep:]
        entries.append(new)
        # Kafka's warning: dropping only an entry at the same offset means nothing was
        # written in it, the expected case of successive elections.
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            logger.warning(
                "%s: new epoch entry %s caused truncation of conflicting entries %s; "
                "the cache now holds %d entries",
                self.path.parent.name,
                new,
                removed,
                len(entries),
            )
        self._changed()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after `end_offset` (the log was cut there)."""
        entries = self._entries
        if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
            return
        while entries and entries[-1].start_offset >= end_offset:
            entries.pop()
        self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop the entries starting at or before `start_offset`, the last of them moving to
        `start_offset`: the epoch of the new log start stays known."""
        entries = self._entries
        drop = 0
        while drop < len(entries) and entries[drop].start_offset <= start_offset:
            drop += 1
        if not drop or (drop == 1 and entries[0].start_offset == start_offset):
            return  # nothing moves
        first = EpochEntry(entries[drop - 1].epoch, start_offset)
        entries[:drop] = [first]
        self._changed()

    def clear(self) -> None:
        if self._entries:
            self._entries.clear()
            self._changed()

    def _changed(self) -> None:
        self.latest_epoch = self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH
        self.dirty = True

    # ---- persistence -------------------------------------------------------------------

    def write_checkpoint(self, guard: AbstractContextManager) -> None:
        """Write the checkpoint if the entries changed. `guard` is the lock the cache's
        changes are made under: the entries are copied under it and written outside it, and
        writers go one at a time so an older copy never lands over a newer one."""
        with self._checkpoint_lock:
            with guard:
                if not self.dirty or self._stopped:
                    return
                self.dirty = False
                lines = [f"{e.epoch} {e.start_offset}" for e in self._entries]
            try:
                write_lines(self.path, lines)
            except BaseException:
                self.dirty = True
                raise

    def stop_checkpoints(self) -> None:
        """No more checkpoint writes, once any in flight is done: the log's directory is about
        to be renamed for deletion, and a topic created again under the name owns `path`."""
        with self._checkpoint_lock:
            self._stopped = True


def read_leader_epoch_checkpoint(path: Path) -> list[EpochEntry] | None:
    """The entries of a leader-epoch-checkpoint file; None if it does not exist. Raises
    CorruptCheckpointError."""
    lines = read_lines(path)
    if lines is None:
        return None
    entries = []
    for line in lines:
        fields = line.split()
        try:
            if len(fields) != 2:
                raise ValueError(f"expected 2 fields, got {len(fields)}")
            entry = EpochEntry(int(fields[0]), int(fields[1]))
        except ValueError as exc:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}: {exc}") from exc
        if entry.epoch < 0 or entry.start_offset < 0:
            raise CorruptCheckpointError(f"{path}: invalid entry {line!r}")
        entries.append(entry)
    return entries
