"""Message sets of magic 0 and 1, the formats before RecordBatch v2, and their conversions.

Fjord keeps v2 on disk, as Kafka 4 does, unless a topic's message.format.version predates
0.11 (seed 004: magic 0 before 0.10, magic 1 before 0.11). Produce v0-2 brings magic 0/1
message sets, which are up-converted into one v2 batch; a topic kept in an old format gets
its batches down-converted on append (`to_legacy`, placed by `LegacyAppend.stamp`). Fetch
v0-3 down-converts what it reads to the newest magic the request version allows; Fetch v4+
gets old-format entries as they are on disk, which every client reads. The conversions decode
every record, so they are the broker's per-record Python work the design allows for old
clients.

An entry is `offset int64, size int32, crc uint32, magic int8, attributes int8, [timestamp
int64, magic 1 only], key bytes, value bytes`; the CRC is CRC32 (not v2's CRC32C) over the
bytes from magic to the end. A compressed entry (a "wrapper") carries a whole inner message
set, compressed, as its value. Magic 0 inner messages carry absolute offsets; magic 1 ones
carry offsets relative to the first inner message and the wrapper carries the absolute offset
of the last one (KIP-31), so the inner messages' absolute offsets are
`wrapper.offset - last.offset + inner.offset`.

KIP-31 lets a broker whose on-disk magic matches the producer's stamp the wrapper's offset
without recompressing; with v2 on disk that never applies to old producers (the records
themselves change format), so up-conversion always rebuilds and assigns fresh contiguous
offsets, which also repairs wrappers whose relative offsets have holes, as Kafka does.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import cramjam

from broker.records import compression as codecs
from broker.records.batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    BatchHeader,
    decode_batch,
    encode_batch,
    iter_batches,
    read_header,
)
from broker.records.errors import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    UNSUPPORTED_COMPRESSION_TYPE,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    InvalidRecordError,
)
from broker.records.record import Record

__all__ = [
    "MAGIC_V0",
    "MAGIC_V1",
    "DownConverted",
    "LegacyAppend",
    "Message",
    "UpConverted",
    "build_message_set",
    "decode_message_set",
    "down_convert",
    "encode_entry",
    "encode_wrapper",
    "iter_entries",
    "magic_for_fetch_version",
    "to_legacy",
    "unwrap",
    "up_convert",
    "xxh32",
]

MAGIC_V0 = 0
MAGIC_V1 = 1

LOG_OVERHEAD = 12  # offset + size, in front of every message
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # magic 1 only

_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_CRC_OFFSET = 12  # within an entry
_MAGIC_OFFSET = 16  # the CRC covers the entry from here to its end

# crc + magic + attributes [+ timestamp] + key length + value length
RECORD_OVERHEAD = {MAGIC_V0: 14, MAGIC_V1: 22}

# Old formats know gzip, snappy and lz4 only; zstd came with v2 (KIP-110).
LEGACY_CODECS = (codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4)


def magic_for_fetch_version(version: int) -> int:
    """The newest magic a Fetch request of `version` can read (Kafka's down-conversion rule)."""
    if version <= 1:
        return MAGIC_V0
    if version <= 3:
        return MAGIC_V1
    return 2


@dataclass(slots=True, frozen=True)
class Message:
    """One magic 0/1 message. `offset` is as the entry carries it (absolute for a shallow
    entry, relative or absolute inside a wrapper, see `unwrap`); `timestamp` is -1 for magic 0."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """LogAppendTime or CreateTime; magic 0 has no timestamps, reported as CreateTime."""
        if self.magic > MAGIC_V0 and self.attributes & TIMESTAMP_TYPE_MASK:
            return LOG_APPEND_TIME
        return CREATE_TIME


# -- encoding ------------------------------------------------------------------------------


def encode_entry(
    out: bytearray,
    offset: int,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    *,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
) -> None:
    """Append one message with its offset and size prefix to `out`."""
    start = len(out)
    out += _ENTRY.pack(offset, 0, 0, magic, attributes)
    if magic > MAGIC_V0:
        out += _INT64.pack(timestamp)
    for field in (key, value):
        if field is None:
            out += _INT32.pack(-1)
        else:
            out += _INT32.pack(len(field))
            out += field
    _INT32.pack_into(out, start + 8, len(out) - start - LOG_OVERHEAD)
    crc = zlib.crc32(memoryview(out)[start + _MAGIC_OFFSET :])
    struct.pack_into(">I", out, start + _CRC_OFFSET, crc)


def encode_wrapper(
    out: bytearray,
    inner: bytes | bytearray,
    *,
    offset: int,
    magic: int,
    compression: int,
    timestamp: int = NO_TIMESTAMP,
    timestamp_type: int = CREATE_TIME,
) -> None:
    """Append a wrapper message holding the (uncompressed) inner message set `inner`."""
    attributes = compression & COMPRESSION_MASK
    if magic > MAGIC_V0 and timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    payload = compress(compression, inner, magic)
    encode_entry(out, offset, magic, None, payload, timestamp=timestamp, attributes=attributes)


RecordInput = tuple[bytes | None, bytes | None, int]  # key, value, timestamp


def build_message_set(
    records: Sequence[RecordInput],
    *,
    magic: int,
    compression: int = codecs.NONE,
    base_offset: int = 0,
    offsets: Sequence[int] | None = None,
    timestamp_type: int = CREATE_TIME,
    log_append_time: int = NO_TIMESTAMP,
) -> bytes:
    """A message set as a producer (base offset 0) or a broker would write it.

    `offsets` gives each record's absolute offset (default consecutive from `base_offset`).
    Compressed, the records go into one wrapper whose offset is the last record's; inner
    offsets are relative to the first record for magic 1 and absolute for magic 0. Under
    LogAppendTime (magic 1) every message carries `log_append_time`.
    """
    if magic not in RECORD_OVERHEAD:
        raise ValueError(f"magic {magic} is not a legacy format")
    if offsets is None:
        offsets = range(base_offset, base_offset + len(records))
    log_append = magic > MAGIC_V0 and timestamp_type == LOG_APPEND_TIME
    attributes = TIMESTAMP_TYPE_MASK if log_append else 0

    def stamp(timestamp: int) -> int:
        if magic == MAGIC_V0:
            return NO_TIMESTAMP
        return log_append_time if log_append else timestamp

    out = bytearray()
    if compression == codecs.NONE:
        for (key, value, ts), offset in zip(records, offsets, strict=True):
            encode_entry(out, offset, magic, key, value, timestamp=stamp(ts), attributes=attributes)
        return bytes(out)
    if not records:
        raise ValueError("a compressed message set needs at least one record")
    inner = bytearray()
    first = offsets[0]
    for (key, value, ts), offset in zip(records, offsets, strict=True):
        inner_offset = offset - first if magic > MAGIC_V0 else offset
        encode_entry(
            inner, inner_offset, magic, key, value, timestamp=stamp(ts), attributes=attributes
        )
    wrapper_ts = NO_TIMESTAMP
    if magic > MAGIC_V0:
        wrapper_ts = log_append_time if log_append else max(r[2] for r in records)
    encode_wrapper(
        out,
        inner,
        offset=offsets[-1],
        magic=magic,
        compression=compression,
        timestamp=wrapper_ts,
        timestamp_type=LOG_APPEND_TIME if log_append else CREATE_TIME,
    )
    return bytes(out)


# -- decoding ------------------------------------------------------------------------------


def iter_entries(
    buf: bytes | memoryview, *, allow_partial_tail: bool = False
) -> Iterator[tuple[int, Message]]:
    """(size of the whole entry, message) for each entry of a shallow message set.

    Every malformed entry raises InvalidRecordError(CORRUPT_MESSAGE): a short or overlong
    size, a magic other than 0/1, a CRC32 mismatch, key and value lengths that do not fill
    the message. A cut-off last entry ends the iteration silently with
    `allow_partial_tail` (a fetch response may end that way) and is corrupt otherwise.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            if allow_partial_tail:
                return
            raise InvalidRecordError("message set ends inside an entry header", CORRUPT_MESSAGE)
        offset, size = struct.unpack_from(">qi", view, pos)
        if size < RECORD_OVERHEAD[MAGIC_V0]:
            raise InvalidRecordError(f"message size {size} below the minimum", CORRUPT_MESSAGE)
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > end:
            if allow_partial_tail:
                return
            raise InvalidRecordError(
                f"message of {size} bytes runs past the end of the message set", CORRUPT_MESSAGE
            )
        yield LOG_OVERHEAD + size, _parse_message(view, pos, entry_end, offset)
        pos = entry_end


def _parse_message(view: memoryview, pos: int, end: int, offset: int) -> Message:
    _, _, crc, magic, attributes = _ENTRY.unpack_from(view, pos)
    if magic not in RECORD_OVERHEAD:
        raise InvalidRecordError(f"invalid magic byte {magic} in a message set", CORRUPT_MESSAGE)
    if end - pos - LOG_OVERHEAD < RECORD_OVERHEAD[magic]:
        raise InvalidRecordError(f"message too short for magic {magic}", CORRUPT_MESSAGE)
    computed = zlib.crc32(view[pos + _MAGIC_OFFSET : end])
    if computed != crc:
        raise InvalidRecordError(
            f"message at offset {offset} is corrupt (stored crc = {crc}, computed crc = "
            f"{computed})",
            CORRUPT_MESSAGE,
        )
    p = pos + LOG_OVERHEAD + 6
    timestamp = NO_TIMESTAMP
    if magic > MAGIC_V0:
        (timestamp,) = _INT64.unpack_from(view, p)
        p += 8
    key, p = _read_bytes(view, p, end)
    value, p = _read_bytes(view, p, end)
    if p != end:
        raise InvalidRecordError("message size does not match its key and value", CORRUPT_MESSAGE)
    return Message(offset, magic, attributes, timestamp, key, value)


def _read_bytes(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise InvalidRecordError("message ends inside a length field", CORRUPT_MESSAGE)
    (length,) = _INT32.unpack_from(view, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise InvalidRecordError(f"invalid key or value length {length}", CORRUPT_MESSAGE)
    return bytes(view[pos : pos + length]), pos + length


def unwrap(wrapper: Message) -> list[Message]:
    """The inner messages of a compressed wrapper with absolute offsets and the timestamps a
    consumer sees (a LogAppendTime wrapper's own timestamp for every inner message).

    Rejects, as Kafka's LogValidator does, nested compression and inner messages of another
    magic (INVALID_RECORD) and inner CRC mismatches (CORRUPT_MESSAGE)."""
    codec = wrapper.compression
    if codec not in LEGACY_CODECS:
        raise InvalidRecordError(
            f"compression codec {codec} is not valid for magic {wrapper.magic}",
            UNSUPPORTED_COMPRESSION_TYPE,
        )
    if wrapper.value is None:
        raise InvalidRecordError("compressed message without a value", CORRUPT_MESSAGE)
    inner = [m for _, m in iter_entries(decompress(codec, wrapper.value, wrapper.magic))]
    if not inner:
        raise InvalidRecordError("compressed message set without messages", INVALID_RECORD)
    for m in inner:
        if m.compression != codecs.NONE:
            raise InvalidRecordError(
                "compressed message set holds a compressed message", INVALID_RECORD
            )
        if m.magic != wrapper.magic:
            raise InvalidRecordError(
                f"inner message magic {m.magic} does not match its wrapper's {wrapper.magic}",
                INVALID_RECORD,
            )
    if wrapper.magic == MAGIC_V0:
        return inner
    shift = wrapper.offset - inner[-1].offset
    log_append = wrapper.timestamp_type == LOG_APPEND_TIME
    return [
        Message(
            shift + m.offset,
            m.magic,
            m.attributes | (TIMESTAMP_TYPE_MASK if log_append else 0),
            wrapper.timestamp if log_append else m.timestamp,
            m.key,
            m.value,
        )
        for m in inner
    ]


def decode_message_set(
    buf: bytes | memoryview, *, allow_partial_tail: bool = False
) -> list[Message]:
    """Every message of a message set, wrappers opened, with absolute offsets."""
    out: list[Message] = []
    for _, m in iter_entries(buf, allow_partial_tail=allow_partial_tail):
        out += unwrap(m) if m.compression != codecs.NONE else [m]
    return out


# -- up-conversion (Produce v0-2) ---------------------------------------------------------


@dataclass(slots=True, frozen=True)
class UpConverted:
    """A produced message set as one v2 batch (base offset 0), and what validation needs.

    `min_timestamp` and `max_timestamp` bound the messages that carry a timestamp (-1 when
    none does). `claims_log_append_time` says some message came stamped LogAppendTime by
    its producer, `untimed_claims_log_append_time` that one of those has no timestamp: Kafka
    refuses the first on LogAppendTime topics and the second on CreateTime topics."""

    batch: bytes
    header: BatchHeader
    magic: int
    largest_entry: int  # bytes of the largest shallow entry, a wrapper or a message
    min_timestamp: int
    max_timestamp: int
    claims_log_append_time: bool
    untimed_claims_log_append_time: bool
    # The set as produced, for a log kept in its magic (see up_convert's `keep_magic`).
    as_is: LegacyAppend | None = None


def up_convert(
    data: bytes | memoryview,
    *,
    target_compression: int | None = None,
    compacted: bool = False,
    keep_magic: int | None = None,
) -> UpConverted:
    """Validate a Produce v0-2 message set and rebuild it as one v2 batch.

    Uncompressed sets may hold any number of messages; a compressed one exactly one wrapper
    (Kafka's LogValidator). All entries must share one magic. Messages keep their keys,
    values and (magic 1) timestamps; magic 0 ones get no timestamp (-1). Offsets become
    consecutive deltas from 0 whatever the producer wrote. `target_compression` None keeps
    the producer's codec. A compacted topic refuses messages without a key.
    When the set's magic is `keep_magic` (the log's on-disk magic) and its offsets need no
    reassignment, `as_is` also holds it ready to append as produced (KIP-31).
    Raises InvalidRecordError with CORRUPT_MESSAGE, INVALID_RECORD or
    UNSUPPORTED_COMPRESSION_TYPE.
    """
    sized = list(iter_entries(data))
    entries = [m for _, m in sized]
    if not entries:
        raise InvalidRecordError("produce request without messages")
    magic = entries[0].magic
    source = codecs.NONE
    for m in entries:
        if m.magic != magic:
            raise InvalidRecordError(
                f"message magic {m.magic} differs from the first message's magic {magic}"
            )
        if m.compression != codecs.NONE:
            source = m.compression
    if source != codecs.NONE:
        if len(entries) > 1:
            raise InvalidRecordError("compressed message set has more than one wrapper")
        messages = unwrap(entries[0])
    else:
        messages = entries
    if compacted and any(m.key is None for m in messages):
        raise InvalidRecordError("Compacted topic cannot accept message without key")
    timed = [m.timestamp for m in messages if m.timestamp != NO_TIMESTAMP]
    claiming = [m for m in messages if m.timestamp_type == LOG_APPEND_TIME]
    # As Kafka's builder: deltas from the first message's timestamp, even when that is -1.
    base_timestamp = messages[0].timestamp
    records = [
        Record(i, m.timestamp - base_timestamp, m.key, m.value) for i, m in enumerate(messages)
    ]
    batch = encode_batch(
        records,
        base_offset=0,
        base_timestamp=base_timestamp,
        max_timestamp=max(m.timestamp for m in messages),
        compression=source if target_compression is None else target_compression,
    )
    return UpConverted(
        batch,
        read_header(batch),
        magic,
        max(size for size, _ in sized),
        min(timed, default=NO_TIMESTAMP),
        max(timed, default=NO_TIMESTAMP),
        bool(claiming),
        any(m.timestamp == NO_TIMESTAMP for m in claiming),
        _as_is(data, sized, messages)
        if keep_magic == magic and target_compression in (None, source)
        else None,
    )


def _as_is(
    data: bytes | memoryview, sized: list[tuple[int, Message]], messages: list[Message]
) -> LegacyAppend | None:
    """The produced set with offsets counting from 0, or None when a wrapper's inner offsets
    have holes (KIP-31: the broker then reassigns them, which means rebuilding). Magic 1
    readers count inner offsets back from the last one; magic 0 ones are placed as written,
    so they must be 0, 1, ..."""
    entries = [m for _, m in sized]
    magic = entries[0].magic
    if entries[0].compression != codecs.NONE:
        offsets = [m.offset for m in messages]
        start = offsets[0] if magic > MAGIC_V0 else 0
        if offsets != list(range(start, start + len(offsets))):
            return None
    out = bytearray(data)
    pos = 0
    offset = -1
    for size, m in sized:
        offset += len(messages) if m.compression != codecs.NONE else 1
        _INT64.pack_into(out, pos, offset)
        pos += size
    timestamp = max(m.timestamp for m in entries) if magic > MAGIC_V0 else NO_TIMESTAMP
    return LegacyAppend(bytes(out), magic, len(messages), timestamp)


# -- old formats on disk (message.format.version before 0.11) ------------------------------


@dataclass(slots=True, frozen=True)
class LegacyAppend:
    """A message set bound for a log kept in magic 0/1, built with offsets counting from 0
    (`count` of them), placed by `stamp` once the log knows its base offset."""

    data: bytes
    magic: int
    count: int
    max_timestamp: int

    def stamp(
        self, base_offset: int, log_append_time: int | None = None
    ) -> tuple[bytes, list[tuple[int, int, int]]]:
        """The set at `base_offset`, and (position, offset, max timestamp) of each shallow
        entry for the segment's indexes.

        KIP-31: a shallow entry's offset lies outside its CRC, and a magic 1 wrapper's inner
        offsets are relative, so placing costs no recompression; a magic 0 wrapper's inner
        offsets are absolute and it is rebuilt. `log_append_time` stamps a magic 1 set's
        shallow entries (their timestamp, attribute bit and CRC; a wrapper's inner messages
        stay as they are, their readers take the wrapper's time, as in Kafka)."""
        out = bytearray()
        entries = []
        for pos, header in iter_batches(self.data):
            start = len(out)
            offset = base_offset + header.base_offset
            raw = memoryview(self.data)[pos : pos + header.size]
            if self.magic == MAGIC_V0 and header.compression != codecs.NONE:
                (_, wrapper), *_ = iter_entries(raw)
                inner = unwrap(wrapper)
                out += build_message_set(
                    [(m.key, m.value, NO_TIMESTAMP) for m in inner],
                    magic=MAGIC_V0,
                    compression=header.compression,
                    offsets=[base_offset + m.offset for m in inner],
                )
            else:
                out += raw
                _INT64.pack_into(out, start, offset)
                if log_append_time is not None and self.magic > MAGIC_V0:
                    out[start + _MAGIC_OFFSET + 1] |= TIMESTAMP_TYPE_MASK
                    _INT64.pack_into(out, start + _MAGIC_OFFSET + 2, log_append_time)
                    crc = zlib.crc32(memoryview(out)[start + _MAGIC_OFFSET :])
                    struct.pack_into(">I", out, start + _CRC_OFFSET, crc)
            timestamp = header.max_timestamp
            if log_append_time is not None and self.magic > MAGIC_V0:
                timestamp = log_append_time
            entries.append((start, offset, timestamp))
        return bytes(out), entries


def to_legacy(batch: bytes | memoryview, magic: int) -> LegacyAppend:
    """A produced v2 batch as a magic 0/1 message set for a log kept in that format, as
    Kafka's LogValidator converts on append: one wrapper of the same codec when compressed,
    consecutive offsets. Headers have no place in the old formats and zstd no old form:
    refused (UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_COMPRESSION_TYPE), nothing dropped."""
    header, records = decode_batch(batch)
    if header.producer_id >= 0:
        raise InvalidRecordError(
            f"idempotent and transactional records cannot be used with magic v{magic}",
            UNSUPPORTED_FOR_MESSAGE_FORMAT,
        )
    if header.compression not in LEGACY_CODECS:
        raise InvalidRecordError(
            f"compression codec {header.compression} has no magic {magic} form",
            UNSUPPORTED_COMPRESSION_TYPE,
        )
    if any(r.headers for r in records):
        raise InvalidRecordError(
            f"magic v{magic} does not support record headers", UNSUPPORTED_FOR_MESSAGE_FORMAT
        )
    timestamps = [header.record_timestamp(r) for r in records]
    data = build_message_set(
        [(r.key, r.value, ts) for r, ts in zip(records, timestamps, strict=True)],
        magic=magic,
        compression=header.compression,
    )
    return LegacyAppend(data, magic, len(records), max(timestamps) if magic else NO_TIMESTAMP)


# -- down-conversion (Fetch v0-3) ---------------------------------------------------------


@dataclass(slots=True, frozen=True)
class DownConverted:
    """`records` is the converted message set; `error` a Kafka error code when nothing
    could be converted (UNSUPPORTED_COMPRESSION_TYPE for zstd data), else None."""

    records: bytes
    error: int | None = None


def down_convert(
    chunks: Iterable[bytes | memoryview],
    *,
    magic: int,
    fetch_offset: int,
    max_bytes: int | None = None,
) -> DownConverted:
    """Rewrite the v2 batches read for a fetch as a magic 0 or 1 message set.

    As Kafka's RecordsUtil.downConvert: control batches are dropped, each uncompressed batch
    becomes plain messages (those below `fetch_offset` left out), each compressed one a single
    wrapper of the same codec, headers are lost, LogAppendTime survives in magic 1. Old
    consumers read uncommitted: transactional data, aborted or not, is theirs as in Kafka.
    Zstd has no legacy form: conversion stops before the first zstd batch, and a fetch that
    starts at one gets UNSUPPORTED_COMPRESSION_TYPE. `max_bytes` bounds the output except
    that the first converted batch is always returned whole. Old-format entries on disk go
    out as they are when the request reads their magic, else as magic 0.
    """
    out = bytearray()
    for chunk in chunks:
        for pos, header in iter_batches(chunk):
            if header.is_control:
                continue
            batch_bytes = memoryview(chunk)[pos : pos + header.size]
            if header.compression not in LEGACY_CODECS:
                if out:
                    return DownConverted(bytes(out))
                return DownConverted(b"", UNSUPPORTED_COMPRESSION_TYPE)
            if header.magic <= magic:
                converted = bytes(batch_bytes)
            elif header.magic < 2:
                converted = _down_convert_entry(batch_bytes, header.compression)
            else:
                converted = _convert_batch(batch_bytes, magic, fetch_offset)
            if out and max_bytes is not None and len(out) + len(converted) > max_bytes:
                return DownConverted(bytes(out))
            out += converted
    return DownConverted(bytes(out))


def _down_convert_entry(entry: memoryview, compression: int) -> bytes:
    """A magic 1 entry as magic 0: timestamps go, offsets and codec stay."""
    messages = decode_message_set(entry)
    return build_message_set(
        [(m.key, m.value, NO_TIMESTAMP) for m in messages],
        magic=MAGIC_V0,
        compression=compression,
        offsets=[m.offset for m in messages],
    )


def _convert_batch(batch_bytes: memoryview, magic: int, fetch_offset: int) -> bytes:
    header, records = decode_batch(batch_bytes)
    log_append = header.timestamp_type == LOG_APPEND_TIME
    inputs = [(r.key, r.value, header.record_timestamp(r)) for r in records]
    offsets = [header.record_offset(r) for r in records]
    if header.compression == codecs.NONE:
        keep = [i for i, o in enumerate(offsets) if o >= fetch_offset]
        inputs = [inputs[i] for i in keep]
        offsets = [offsets[i] for i in keep]
    if not inputs:
        return b""
    return build_message_set(
        inputs,
        magic=magic,
        compression=header.compression,
        offsets=offsets,
        timestamp_type=LOG_APPEND_TIME if log_append else CREATE_TIME,
        log_append_time=header.max_timestamp if log_append else NO_TIMESTAMP,
    )


# -- compression -----------------------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def compress(codec: int, data: bytes | bytearray, magic: int) -> bytes:
    """A wrapper's value. LZ4 is written with independent blocks, which Kafka's own LZ4
    reader requires; magic 0 gets the frame header checksum old Kafka computed (wrongly,
    over the frame magic too: KAFKA-3160), which its readers check."""
    if codec not in LEGACY_CODECS:
        raise InvalidRecordError(
            f"compression codec {codec} is not valid for magic {magic}",
            UNSUPPORTED_COMPRESSION_TYPE,
        )
    if codec != codecs.LZ4:
        return codecs.compress(codec, data)
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(bytes(data))
    frame = bytearray(compressor.finish())
    if magic == MAGIC_V0:
        hc = _lz4_header_checksum_position(frame)
        frame[hc] = (xxh32(bytes(frame[:hc])) >> 8) & 0xFF
    return bytes(frame)


def decompress(codec: int, data: bytes | memoryview, magic: int) -> bytes:
    if codec == codecs.LZ4 and magic == MAGIC_V0:
        # Old producers wrote a wrong header checksum that Kafka never verified for magic 0:
        # put the right one in so the frame decoder accepts the frame.
        frame = bytearray(data)
        hc = _lz4_header_checksum_position(frame)
        frame[hc] = (xxh32(bytes(frame[4:hc])) >> 8) & 0xFF
        data = frame
    return codecs.decompress(codec, data)


def _lz4_header_checksum_position(frame: bytearray) -> int:
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise InvalidRecordError("lz4 data without a frame header", CORRUPT_MESSAGE)
    flags = frame[4]
    position = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if position >= len(frame):
        raise InvalidRecordError("truncated lz4 frame header", CORRUPT_MESSAGE)
    return position


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, for LZ4 frame header checksums only (a few bytes): no library at runtime
    provides it."""
    n = len(data)
    i = 0
    if n >= 16:
        lanes = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32]
        while i + 16 <= n:
            for j in range(4):
                word = int.from_bytes(data[i : i + 4], "little")
                lanes[j] = _rotl((lanes[j] + word * _P2) & _M32, 13) * _P1 & _M32
                i += 4
        h = _rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)
    else:
        h = seed + _P5
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M32
        h = _rotl(h, 17) * _P4 & _M32
        i += 4
    while i < n:
        h = (h + data[i] * _P5) & _M32
        h = _rotl(h, 11) * _P1 & _M32
        i += 1
    h ^= h >> 15
    h = h * _P2 & _M32
    h ^= h >> 13
    h = h * _P3 & _M32
    h ^= h >> 16
    return h
