"""Splits a byte stream into Kafka frames (a 4-byte big-endian size, then the request)."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(Exception):
    pass


class InvalidFrame(Exception):
    pass


class FrameDecoder:
    """Feed bytes as they arrive, take whole frames out. Sizes above `max_size` (Kafka's
    socket.request.max.bytes) raise before any of the frame is buffered."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buffer = bytearray()
        self._needed: int | None = None

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        pos = 0
        end = len(buffer)
        while True:
            if end - pos < 4:
                break
            (size,) = _SIZE.unpack_from(buffer, pos)
            if size < 0:
                raise InvalidFrame(f"negative frame size {size}")
            if size > self.max_size:
                raise FrameTooLarge(
                    f"frame of {size} bytes is larger than socket.request.max.bytes "
                    f"({self.max_size})"
                )
            if end - pos - 4 < size:
                break
            frames.append(bytes(buffer[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buffer[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def frame(payload_parts: list[bytes]) -> list[bytes]:
    """Prefix the parts of one message with its total size."""
    return [_SIZE.pack(sum(len(p) for p in payload_parts)), *payload_parts]
