"""RecordBatch v2 (magic 2) handled as bytes: header parsing, produce validation, stamping.

The broker's hot path never touches records: it reads the 61-byte header, checks the CRC32C
and writes the batch out with a new base offset. Records are decoded only for tests, the
client, compaction and timestamp lookups.

A log may also hold entries of the older formats (a topic whose message.format.version is
before 0.11, seed 004). They share the v2 framing: an int64 offset, an int32 length of what
follows, the magic at byte 16. `read_entry_header` frames either kind into a BatchHeader, so
segments, recovery and fetches walk mixed logs without knowing formats; broker/records/legacy.py
owns what lies inside a legacy entry.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c

from broker.records import compression as codecs
from broker.records.errors import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    UNSUPPORTED_COMPRESSION_TYPE,
    InvalidRecordError,
)
from broker.records.record import (
    Header,
    Record,
    T,
    decoded_record,
    encode_record,
    read_records,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "MIN_ENTRY_HEADER_SIZE",
    "BatchHeader",
    "InvalidRecordError",
    "Record",
    "batch_records",
    "build_batch",
    "crc_matches",
    "decode_batch",
    "encode_batch",
    "frame_batch",
    "iter_batches",
    "read_entry_header",
    "read_header",
    "validate_produce_batch",
    "with_log_append_time",
]

_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # base offset + batch length: the part not counted in batch_length

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers everything from here to the end of the batch
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

MAGIC_V2 = 2
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1

_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD

# A magic 0/1 entry: offset, size, CRC32 over the rest from the magic on, magic, attributes,
# and for magic 1 a timestamp. Its offset is that of its last message (a compressed wrapper's
# inner messages end there), the smallest ones are 26 and 34 bytes.
_LEGACY_V0 = struct.Struct(">qiIbb")
_LEGACY_V1 = struct.Struct(">qiIbbq")
_LEGACY_MIN_LENGTH = {0: 14, 1: 22}  # crc, magic, attributes, [timestamp], key and value sizes
# Bytes that frame any entry: enough for a v0/v1 header; a v2 one needs BATCH_HEADER_SIZE.
MIN_ENTRY_HEADER_SIZE = _LEGACY_V1.size  # 26


@dataclass(slots=True, frozen=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def record_timestamp(self, record: Record) -> int:
        """A record's timestamp: with LogAppendTime every record carries the batch's max."""
        if self.timestamp_type == LOG_APPEND_TIME:
            return self.max_timestamp
        return self.base_timestamp + record.timestamp_delta

    def record_offset(self, record: Record) -> int:
        return self.base_offset + record.offset_delta


def read_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte v2 header at `pos`; does not check magic, size or CRC."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise InvalidRecordError("buffer shorter than a batch header", CORRUPT_MESSAGE)
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def read_entry_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader | None:
    """Frame the log entry at `pos`: a v2 batch's header, or for a magic 0/1 entry a header
    of one offset (the entry's), no producer, its timestamp as both bounds. None when the
    bytes from `pos` hold no whole header or an impossible magic or length; the entry's
    size is not checked against the buffer."""
    left = len(buf) - pos
    if left < MIN_ENTRY_HEADER_SIZE - 8:
        return None
    magic = buf[pos + MAGIC_OFFSET]
    if magic == MAGIC_V2:
        if left < BATCH_HEADER_SIZE:
            return None
        header = BatchHeader(*_HEADER.unpack_from(buf, pos))
        return header if header.batch_length >= _MIN_BATCH_LENGTH else None
    if magic == 0:
        offset, length, crc, _, attributes = _LEGACY_V0.unpack_from(buf, pos)
        timestamp = NO_TIMESTAMP
    elif magic == 1 and left >= MIN_ENTRY_HEADER_SIZE:
        offset, length, crc, _, attributes, timestamp = _LEGACY_V1.unpack_from(buf, pos)
    else:
        return None
    if length < _LEGACY_MIN_LENGTH[magic]:
        return None
    return BatchHeader(
        offset, length, -1, magic, crc, attributes, 0, timestamp, timestamp, -1, -1, -1, 1
    )


def crc_matches(buf: bytes | memoryview, pos: int, header: BatchHeader) -> bool:
    """Whether the stored checksum matches the entry at `pos`: CRC32C of [attributes, end) for
    a v2 batch, CRC32 of [magic, end) for a magic 0/1 entry."""
    if header.magic != MAGIC_V2:
        return zlib.crc32(memoryview(buf)[pos + MAGIC_OFFSET : pos + header.size]) == header.crc
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + header.size]
    return crc32c.crc32c(view) == header.crc


def validate_produce_batch(data: bytes | memoryview) -> BatchHeader:
    """Check a Produce (v3+) partition payload is exactly one sound v2 batch; no decompression.

    Raises InvalidRecordError with INVALID_RECORD, CORRUPT_MESSAGE or
    UNSUPPORTED_COMPRESSION_TYPE as Kafka's ProduceRequest and LogValidator do. Rejecting
    control batches from clients is left to the caller, which knows the request's origin.
    """
    size = len(data)
    if size < LOG_OVERHEAD:
        raise InvalidRecordError("produce requires exactly one record batch, got none")
    if size > MAGIC_OFFSET and data[MAGIC_OFFSET] != MAGIC_V2:
        raise InvalidRecordError(f"produce v3+ requires magic 2, got {data[MAGIC_OFFSET]}")
    (batch_length,) = struct.unpack_from(">i", data, BATCH_LENGTH_OFFSET)
    if batch_length < _MIN_BATCH_LENGTH:
        raise InvalidRecordError(f"batch length {batch_length} below minimum", CORRUPT_MESSAGE)
    if size < BATCH_HEADER_SIZE:
        raise InvalidRecordError("truncated record batch header", CORRUPT_MESSAGE)
    header = read_header(data)
    if header.size < size and _starts_whole_batch(data, header.size):
        raise InvalidRecordError("produce requires exactly one record batch, got several")
    if header.size != size:
        raise InvalidRecordError(
            f"batch length {batch_length} does not match {size - LOG_OVERHEAD} bytes received",
            CORRUPT_MESSAGE,
        )
    if not crc_matches(data, 0, header):
        raise InvalidRecordError("record batch CRC32C mismatch", CORRUPT_MESSAGE)
    if header.compression not in codecs.CODEC_NAMES:
        raise InvalidRecordError(
            f"unknown compression codec {header.compression}", UNSUPPORTED_COMPRESSION_TYPE
        )
    if header.last_offset_delta < 0:
        raise InvalidRecordError(f"invalid last offset delta {header.last_offset_delta}")
    if header.records_count <= 0:
        raise InvalidRecordError(f"invalid record count {header.records_count}")
    if header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"last offset delta {header.last_offset_delta} inconsistent with "
            f"{header.records_count} records"
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"invalid sequence {header.base_sequence} for producer id {header.producer_id}"
        )
    return header


def _starts_whole_batch(data: bytes | memoryview, pos: int) -> bool:
    if len(data) - pos < LOG_OVERHEAD:
        return False
    (length,) = struct.unpack_from(">i", data, pos + BATCH_LENGTH_OFFSET)
    return length >= _MIN_BATCH_LENGTH and pos + LOG_OVERHEAD + length <= len(data)


def iter_batches(buf: bytes | memoryview, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each whole log entry from `pos`: v2 batches and, in a log
    that holds them, magic 0/1 entries (see read_entry_header).

    Stops silently at a partial entry, an impossible length or an unknown magic: whatever
    follows cannot be framed, so callers treat the stop position as the valid end.
    CRCs are not checked here (see crc_matches).
    """
    end = len(buf)
    while True:
        header = read_entry_header(buf, pos)
        if header is None or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def with_log_append_time(
    data: bytes | memoryview, timestamp_ms: int, *, base_offset: int | None = None
) -> bytes:
    """Return a replacement 61-byte header stamping LogAppendTime, as Kafka's setMaxTimestamp.

    Sets the timestamp-type bit and max_timestamp (base_timestamp stays), then recomputes the
    CRC over the new header tail plus the untouched records, so the caller can write
    `header + data[61:]` without copying the records. `base_offset` optionally stamps the
    offset too (it lies outside the CRC).
    """
    head = bytearray(data[:BATCH_HEADER_SIZE])
    if base_offset is not None:
        struct.pack_into(">q", head, BASE_OFFSET_OFFSET, base_offset)
    (attributes,) = struct.unpack_from(">h", head, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", head, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", head, MAX_TIMESTAMP_OFFSET, timestamp_ms)
    (batch_length,) = struct.unpack_from(">i", head, BATCH_LENGTH_OFFSET)
    crc = crc32c.crc32c(head[ATTRIBUTES_OFFSET:])
    crc = crc32c.crc32c(memoryview(data)[BATCH_HEADER_SIZE : batch_length + LOG_OVERHEAD], crc)
    struct.pack_into(">I", head, CRC_OFFSET, crc)
    return bytes(head)


RecordInput = tuple[bytes | None, bytes | None, Sequence[Header], int]


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build a v2 batch from (key, value, headers, timestamp_ms) tuples, like a producer."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_timestamp = records[0][3]
    encoded = [
        Record(i, ts - base_timestamp, key, value, list(headers))
        for i, (key, value, headers, ts) in enumerate(records)
    ]
    return encode_batch(
        encoded,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        max_timestamp=max(r[3] for r in records),
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        control=control,
        timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
    )


def encode_batch(
    records: Sequence[Record],
    *,
    last_offset_delta: int | None = None,
    compression: int = 0,
    **header: Any,
) -> bytes:
    """Encode records with explicit deltas (compaction keeps offset holes and may set
    last_offset_delta past the last surviving record); `header` is frame_batch's fields
    (base_offset, base_timestamp and max_timestamp at least)."""
    body = bytearray()
    for record in records:
        encode_record(record, body)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else -1
    return frame_batch(
        codecs.compress(compression, body),
        records_count=len(records),
        last_offset_delta=last_offset_delta,
        compression=compression,
        **header,
    )


def frame_batch(
    payload: bytes | memoryview,
    *,
    records_count: int,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    last_offset_delta: int,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
    delete_horizon: bool = False,
) -> bytes:
    """The header and CRC around an already encoded (and compressed) records section: a
    producer frames the same payload again when a retry carries a new epoch or sequence."""
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    if delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    out = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    out += payload
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def decode_batch(data: bytes | memoryview) -> tuple[BatchHeader, list[Record]]:
    """Parse one whole batch and its (decompressed) records; the CRC is not re-checked."""
    header = read_header(data)
    if header.magic != MAGIC_V2:
        raise InvalidRecordError(f"unsupported magic {header.magic}", INVALID_RECORD)
    if header.batch_length < _MIN_BATCH_LENGTH or header.size > len(data):
        raise InvalidRecordError("truncated record batch", CORRUPT_MESSAGE)
    return header, batch_records(bytes(data), 0, header, decoded_record)


def batch_records(
    data: bytes,
    pos: int,
    header: BatchHeader,
    make: Callable[[int, int, bytes | None, bytes | None, Sequence[Header], int], T],
    base_offset: int = 0,
    base_timestamp: int = 0,
) -> list[T]:
    """The records of the whole v2 batch at `pos` that `header` frames, decompressed, built by
    `make` (see read_records); an uncompressed batch is read where it lies, without a copy."""
    if header.records_count < 0:
        raise InvalidRecordError(f"invalid record count {header.records_count}")
    start, end = pos + BATCH_HEADER_SIZE, pos + header.size
    if header.compression != codecs.NONE:
        data = codecs.decompress(header.compression, memoryview(data)[start:end])
        start, end = 0, len(data)
    return read_records(data, start, end, header.records_count, make, base_offset, base_timestamp)
