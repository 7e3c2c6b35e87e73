"""The records inside a RecordBatch v2: varint-framed, deltas against the batch header."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from broker.records.errors import INVALID_RECORD, InvalidRecordError
from broker.records.varint import decode_varint, varint_bytes

_NULL = varint_bytes(-1)

Header = tuple[str, bytes | None]


@dataclass(slots=True)
class Record:
    """One record of a v2 batch; offset and timestamp are deltas from the batch header."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    attributes: int = 0  # unused by Kafka so far, kept so re-encoding is lossless


def encode_record(record: Record, out: bytearray) -> None:
    """Append one length-prefixed record to `out`."""
    encode_records(
        out,
        (
            (
                record.offset_delta,
                record.timestamp_delta,
                record.key,
                record.value,
                record.headers,
                record.attributes,
            ),
        ),
    )


RecordFields = tuple[int, int, bytes | None, bytes | None, Sequence[Header], int]


def encode_records(out: bytearray, records: Iterable[RecordFields]) -> None:
    """Append length-prefixed records given as (offset delta, timestamp delta, key, value,
    headers, attributes): the producer's per-record path, kept to one loop."""
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


def decode_records(buf: bytes | memoryview, count: int) -> list[Record]:
    """Decode exactly `count` records filling `buf`, as Kafka's DefaultRecord.readFrom checks."""
    view = memoryview(buf)
    records: list[Record] = []
    pos = 0
    try:
        for _ in range(count):
            size, pos = decode_varint(view, pos)
            end = pos + size
            if size < 0 or end > len(view):
                raise InvalidRecordError(f"invalid record size {size}", INVALID_RECORD)
            attributes = view[pos]
            timestamp_delta, p = decode_varint(view, pos + 1)
            offset_delta, p = decode_varint(view, p)
            key, p = _decode_bytes(view, p, end)
            value, p = _decode_bytes(view, p, end)
            header_count, p = decode_varint(view, p)
            if header_count < 0:
                raise InvalidRecordError(f"invalid header count {header_count}", INVALID_RECORD)
            headers: list[Header] = []
            for _ in range(header_count):
                hkey, p = _decode_bytes(view, p, end)
                if hkey is None:
                    raise InvalidRecordError("null header key", INVALID_RECORD)
                hvalue, p = _decode_bytes(view, p, end)
                headers.append((hkey.decode(), hvalue))
            if p != end:
                raise InvalidRecordError("record size does not match its fields", INVALID_RECORD)
            records.append(Record(offset_delta, timestamp_delta, key, value, headers, attributes))
            pos = end
    except (ValueError, IndexError) as exc:
        if isinstance(exc, InvalidRecordError):
            raise
        raise InvalidRecordError(f"malformed record: {exc}", INVALID_RECORD) from exc
    if pos != len(view):
        raise InvalidRecordError("bytes left over after the last record", INVALID_RECORD)
    return records


def _encode_bytes(data: bytes | None, out: bytearray) -> None:
    if data is None:
        out += _NULL
    else:
        out += varint_bytes(len(data))
        out += data


def _decode_bytes(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(view, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise InvalidRecordError("record field runs past the record", INVALID_RECORD)
    return bytes(view[pos : pos + length]), pos + length
