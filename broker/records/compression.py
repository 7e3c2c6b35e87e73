"""Compression codecs of RecordBatch attributes bits 0-2, all through cramjam."""

from __future__ import annotations

import struct

import cramjam

from broker.records.errors import CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE, InvalidRecordError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# The Java client writes snappy through xerial's SnappyOutputStream: this header, then blocks
# of (int32 compressed length, raw snappy). librdkafka produces raw snappy; readers take both.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # SnappyOutputStream's default block size


def compress(codec: int, data: bytes | memoryview) -> bytes:
    """Compress a records section the way the Java producer does for `codec`."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise InvalidRecordError(f"unknown compression codec {codec}", UNSUPPORTED_COMPRESSION_TYPE)


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a records section; garbage input raises InvalidRecordError(CORRUPT_MESSAGE)."""
    if codec == NONE:
        return bytes(data)
    if codec not in CODEC_NAMES:
        raise InvalidRecordError(f"unknown compression codec {codec}", UNSUPPORTED_COMPRESSION_TYPE)
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            if bytes(data[:8]) == XERIAL_MAGIC:
                return _xerial_decompress(memoryview(data))
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except InvalidRecordError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and ValueErrors
        raise InvalidRecordError(
            f"cannot decompress {CODEC_NAMES[codec]} records: {exc}", CORRUPT_MESSAGE
        ) from exc


def _xerial_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(view: memoryview) -> bytes:
    pos = len(_XERIAL_HEADER)
    out = []
    while pos < len(view):
        if pos + 4 > len(view):
            raise InvalidRecordError("truncated xerial snappy block length", CORRUPT_MESSAGE)
        (length,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise InvalidRecordError("truncated xerial snappy block", CORRUPT_MESSAGE)
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(out)
