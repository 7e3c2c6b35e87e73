"""Zig-zag varints as used inside RecordBatch v2 records (protobuf style, Kafka's ByteUtils)."""

from __future__ import annotations

# A varlong never needs more than 10 bytes; more means garbage, not a long number.
_MAX_VARLONG_BYTES = 10


def unsigned_varint_bytes(value: int) -> bytes:
    """`value` (>= 0) seven bits a byte, low bits first: also the protocol's unsigned varints
    (compact lengths, KIP-482)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _zigzag_bytes(value: int) -> bytes:
    return unsigned_varint_bytes(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# Values of one or two bytes (lengths, deltas, counts of a producer's records) come from a
# table: encoding them is on the producer's per-record path.
_SMALL = 1 << 13
_SMALL_VARINTS = tuple(_zigzag_bytes(v) for v in range(-_SMALL, _SMALL))


def varint_bytes(value: int) -> bytes:
    """`value` zig-zag encoded; covers both varint (int32) and varlong (int64)."""
    if -_SMALL <= value < _SMALL:
        return _SMALL_VARINTS[value + _SMALL]
    return _zigzag_bytes(value)


def encode_varint(value: int, out: bytearray) -> None:
    """Append `value` zig-zag encoded."""
    out += varint_bytes(value)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Return (value, next position). Raises ValueError on a truncated or overlong varint."""
    z = 0
    shift = 0
    for i in range(_MAX_VARLONG_BYTES):
        try:
            b = buf[pos + i]
        except IndexError:
            raise ValueError("truncated varint") from None
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos + i + 1
        shift += 7
    raise ValueError("varint longer than 10 bytes")
