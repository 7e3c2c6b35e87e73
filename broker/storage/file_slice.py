"""Whole batches of a segment file, to be sent from the file rather than from memory: Kafka's
FileRecords slice, which its network layer hands to sendfile(2)."""

from __future__ import annotations

import errno
import os
import resource


def _descriptor_budget() -> int:
    """Descriptors slices may hold at once: a twentieth of the process's limit, so that slices
    waiting behind slow readers never take the ones connections and segments need (past it,
    reads go through memory)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else max(1, soft // 20)


class FileSlice:
    """`size` bytes of a segment file from `position`. The slice holds a descriptor of its own
    (a duplicate of the segment's), so its bytes stay readable when the segment is deleted,
    closed or rolled before the response carrying it is written; the descriptor is closed when
    the slice is, or when the slice is dropped unsent."""

    __slots__ = ("fd", "position", "size")
    budget = _descriptor_budget()
    held = 0  # descriptors the live slices hold

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd = -1
        if FileSlice.held >= FileSlice.budget:
            raise OSError(errno.EMFILE, "the descriptors for file slices are all in use")
        self.fd = os.dup(fd)
        FileSlice.held += 1
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            FileSlice.held -= 1

    def __del__(self) -> None:
        self.close()


def close_slices(parts) -> None:
    """Close the slices among a response's parts that will not be sent."""
    for part in parts:
        if type(part) is FileSlice:
            part.close()
