"""Splits a byte stream into Kafka frames (a 4-byte big-endian size, then the request).

Built for asyncio's BufferedProtocol: the socket reads straight into the decoder's memory. Small
frames share one chunk buffer; a frame larger than it gets a buffer of its own, sized from its
header, that the socket fills directly — a produced megabyte is never copied on its way in.
"""

from __future__ import annotations

import mmap
import struct

_SIZE = struct.Struct(">i")
# Each connection holds one chunk for as long as it is open, so its size is memory per
# connection (a busy broker holds thousands): 16 KB takes many small requests in one read, and
# a frame larger than it is read into a buffer of its own, which costs no more.
CHUNK = 16 * 1024
# A frame larger than this is read into anonymous memory that the kernel commits page by page
# as the bytes arrive (a bytearray is zeroed, so committed, at once): a client announcing a
# frame near socket.request.max.bytes and sending nothing costs address space, not memory.
# Produce requests of common clients (1 MB batches) stay below it, on the bytearray path.
LAZY_FRAME = 8 * 1024 * 1024


class FrameTooLarge(Exception):
    pass


class InvalidFrame(Exception):
    pass


class FrameDecoder:
    """`get_buffer()` gives the memory to read into, `buffer_updated(n)` returns the frames
    completed by those n bytes. Sizes above `max_size` (socket.request.max.bytes) raise before
    any of the frame's body is buffered."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._chunk = bytearray(CHUNK)
        self._start = 0  # first unconsumed byte in _chunk
        self._end = 0  # end of the bytes read into _chunk
        self._frame: bytearray | mmap.mmap | None = None  # a large frame being filled in place
        self._filled = 0

    def get_buffer(self) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        if self._end == len(self._chunk):
            self._compact()
        return memoryview(self._chunk)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[bytes | memoryview]:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled < len(self._frame):
                return []
            frame, self._frame = self._frame, None
            # read-only, as the codec requires; the frame's buffer is its own, so no copy
            return [memoryview(frame).toreadonly()]
        self._end += nbytes
        frames: list[bytes | memoryview] = []
        chunk, pos, end = self._chunk, self._start, self._end
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(chunk, pos)
            if size < 0:
                raise InvalidFrame(f"negative frame size {size}")
            if size > self.max_size:
                raise FrameTooLarge(
                    f"frame of {size} bytes is larger than socket.request.max.bytes "
                    f"({self.max_size})"
                )
            available = end - pos - 4
            if available >= size:
                frames.append(bytes(memoryview(chunk)[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            elif size > len(chunk) - 4:
                # Too big for the chunk: move what has arrived into the frame's own buffer.
                self._frame = mmap.mmap(-1, size) if size > LAZY_FRAME else bytearray(size)
                self._frame[:available] = chunk[pos + 4 : end]
                self._filled = available
                pos = end
                break
            else:
                break
        self._start = pos
        if pos == end:
            self._start = self._end = 0
        return frames

    def _compact(self) -> None:
        """Move a partial small frame to the front of the chunk to make room behind it."""
        pending = self._end - self._start
        self._chunk[:pending] = self._chunk[self._start : self._end]
        self._start, self._end = 0, pending

    def feed(self, data: bytes) -> list[bytes | memoryview]:
        """Push bytes in as if read from a socket (tests, fuzzing)."""
        frames: list[bytes | memoryview] = []
        view = memoryview(data)
        while view:
            buf = self.get_buffer()
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            view = view[n:]
            frames += self.buffer_updated(n)
        return frames


def frame(payload_parts: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """Prefix the parts of one message with its total size."""
    return [_SIZE.pack(sum(len(p) for p in payload_parts)), *payload_parts]
