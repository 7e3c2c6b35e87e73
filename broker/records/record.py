"""The records inside a RecordBatch v2: varint-framed, deltas against the batch header."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from broker.records.errors import INVALID_RECORD, InvalidRecordError
from broker.records.varint import decode_varint, varint_bytes

_NULL = varint_bytes(-1)

Header = tuple[str, bytes | None]
T = TypeVar("T")


@dataclass(slots=True)
class Record:
    """One record of a v2 batch; offset and timestamp are deltas from the batch header."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    attributes: int = 0  # unused by Kafka so far, kept so re-encoding is lossless

    def fields(self) -> RecordFields:
        """As encode_records takes a record."""
        return (
            self.offset_delta,
            self.timestamp_delta,
            self.key,
            self.value,
            self.headers,
            self.attributes,
        )


def encode_record(record: Record, out: bytearray) -> None:
    """Append one length-prefixed record to `out`."""
    encode_records(out, (record.fields(),))


RecordFields = tuple[int, int, bytes | None, bytes | None, Sequence[Header], int]


def python_encode_records(out: bytearray, records: Iterable[RecordFields]) -> None:
    """Append length-prefixed records given as (offset delta, timestamp delta, key, value,
    headers, attributes): the producer's per-record path, kept to one loop. The reference for
    broker/records/_records.c's encode_records, which is what runs where it is built."""
    varint = varint_bytes
    for offset_delta, timestamp_delta, key, value, headers, attributes in records:
        body = bytearray((attributes & 0xFF,))
        body += varint(timestamp_delta)
        body += varint(offset_delta)
        for data in (key, value):
            if data is None:
                body += _NULL
            else:
                body += varint(len(data))
                body += data
        body += varint(len(headers))
        for hkey, hvalue in headers:
            _encode_bytes(hkey.encode(), body)
            _encode_bytes(hvalue, body)
        out += varint(len(body))
        out += body


NO_HEADERS: Sequence[Header] = ()


def decoded_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
    attributes: int,
) -> Record:
    """read_records' `make` for a Record, which owns a list of headers."""
    return Record(offset_delta, timestamp_delta, key, value, list(headers), attributes)


# Zig-zag varints of one and two bytes, decoded by table and inlined: lengths, deltas and
# counts are almost always that small, and a consumer reads five of them per record (a function
# call costs more than the decoding).
_ZIGZAG = tuple((z >> 1) ^ -(z & 1) for z in range(1 << 14))


def python_read_records(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    make: Callable[[int, int, bytes | None, bytes | None, Sequence[Header], int], T],
    base_offset: int = 0,
    base_timestamp: int = 0,
) -> list[T]:
    """Decode exactly `count` records filling data[pos:end], as Kafka's DefaultRecord.readFrom
    checks, into make(offset, timestamp, key, value, headers, attributes) each: offset and
    timestamp are the deltas plus the bases given (with bases 0, decoded_record keeps deltas).

    A consumer's per-record path, hence one pass over `bytes` (indexing and slicing bytes is
    cheaper than a memoryview's), varints of one or two bytes inlined, and as few objects per
    record as can be, each an allocation and something more for the garbage collector to
    follow: records built by `make` directly rather than through an intermediate tuple, and
    those without headers (most) given NO_HEADERS, one shared empty tuple, not a list each.

    This is the reference; where broker/records/_records.c is built (setup.py), read_records
    is that module's, which does the same about four times faster."""
    zigzag = _ZIGZAG
    out: list[T] = []
    append = out.append
    try:
        for _ in range(count):
            # Each varint: one byte, two bytes, or longer (decoded by the general function).
            b = data[pos]
            if b < 0x80:
                size, pos = zigzag[b], pos + 1
            elif data[pos + 1] < 0x80:
                size, pos = zigzag[b & 0x7F | data[pos + 1] << 7], pos + 2
            else:
                size, pos = decode_varint(data, pos)
            stop = pos + size
            if size < 0 or stop > end:
                raise InvalidRecordError(f"invalid record size {size}", INVALID_RECORD)
            attributes = data[pos]
            b = data[pos + 1]
            if b < 0x80:
                timestamp_delta, pos = zigzag[b], pos + 2
            elif data[pos + 2] < 0x80:
                timestamp_delta, pos = zigzag[b & 0x7F | data[pos + 2] << 7], pos + 3
            else:
                timestamp_delta, pos = decode_varint(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                offset_delta, pos = zigzag[b], pos + 1
            elif data[pos + 1] < 0x80:
                offset_delta, pos = zigzag[b & 0x7F | data[pos + 1] << 7], pos + 2
            else:
                offset_delta, pos = decode_varint(data, pos)
            # A null key (-1, one byte) is the usual case. A key or value length running past
            # the record shows as a record whose fields do not end where its size says.
            if data[pos] == 1:
                key, pos = None, pos + 1
            else:
                key, pos = _decode_bytes(data, pos, stop)
            b = data[pos]
            if b < 0x80:
                n, pos = zigzag[b], pos + 1
            elif data[pos + 1] < 0x80:
                n, pos = zigzag[b & 0x7F | data[pos + 1] << 7], pos + 2
            else:
                n, pos = decode_varint(data, pos)
            value = None
            if n >= 0:
                value, pos = data[pos : pos + n], pos + n
            if data[pos] == 0:
                headers: Sequence[Header] = NO_HEADERS
                pos += 1
            else:
                headers, pos = _read_headers(data, pos, stop)
            if pos != stop:
                raise InvalidRecordError("record size does not match its fields", INVALID_RECORD)
            append(
                make(
                    base_offset + offset_delta,
                    base_timestamp + timestamp_delta,
                    key,
                    value,
                    headers,
                    attributes,
                )
            )
    except (ValueError, IndexError) as exc:
        if isinstance(exc, InvalidRecordError):
            raise
        raise InvalidRecordError(f"malformed record: {exc}", INVALID_RECORD) from exc
    if pos != end:
        raise InvalidRecordError("bytes left over after the last record", INVALID_RECORD)
    return out


try:
    from broker.records._records import encode_records, read_records
except ImportError:  # not compiled here
    encode_records = python_encode_records
    read_records = python_read_records


def _read_headers(data: bytes, pos: int, stop: int) -> tuple[list[Header], int]:
    header_count, pos = decode_varint(data, pos)
    if header_count < 0:
        raise InvalidRecordError(f"invalid header count {header_count}", INVALID_RECORD)
    headers: list[Header] = []
    for _ in range(header_count):
        hkey, pos = _decode_bytes(data, pos, stop)
        if hkey is None:
            raise InvalidRecordError("null header key", INVALID_RECORD)
        hvalue, pos = _decode_bytes(data, pos, stop)
        headers.append((hkey.decode(), hvalue))
    return headers, pos


def _encode_bytes(data: bytes | None, out: bytearray) -> None:
    if data is None:
        out += _NULL
    else:
        out += varint_bytes(len(data))
        out += data


def _decode_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise InvalidRecordError("record field runs past the record", INVALID_RECORD)
    return data[pos : pos + length], pos + length
