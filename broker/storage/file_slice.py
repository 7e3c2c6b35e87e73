"""Whole batches of a segment file, to be sent from the file rather than from memory: Kafka's
FileRecords slice, which its network layer hands to sendfile(2)."""

from __future__ import annotations

import os


class FileSlice:
    """`size` bytes of a segment file from `position`. The slice holds a descriptor of its own
    (a duplicate of the segment's), so its bytes stay readable when the segment is deleted,
    closed or rolled before the response carrying it is written; the descriptor is closed when
    the slice is, or when the slice is dropped unsent."""

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd = os.dup(fd)
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()
