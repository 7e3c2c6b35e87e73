"""The compiled record decoding and encoding (broker/records/_records.c) against the Python
references they stand in for: the same records from valid bytes, the same error from corrupt
ones, never a read past the records' region, and the same bytes from the producer's records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.records.errors import InvalidRecordError
from broker.records.record import (
    NO_HEADERS,
    Record,
    decoded_record,
    encode_record,
    encode_records,
    python_encode_records,
    python_read_records,
    read_records,
)

pytestmark = pytest.mark.skipif(
    read_records is python_read_records or encode_records is python_encode_records,
    reason="broker.records._records is not built here",
)

small = st.binary(max_size=40)
varying = st.integers(-(1 << 40), 1 << 40) | st.integers(-300, 300)
records = st.lists(
    st.builds(
        Record,
        offset_delta=varying,
        timestamp_delta=varying,
        key=st.none() | small,
        value=st.none() | small | st.binary(min_size=100, max_size=300),
        headers=st.lists(st.tuples(st.text(max_size=8), st.none() | small), max_size=3),
        attributes=st.integers(0, 255),
    ),
    max_size=12,
)


def encoded(batch: list[Record], prefix: bytes = b"") -> bytearray:
    out = bytearray(prefix)
    for record in batch:
        encode_record(record, out)
    return out


def outcome(read, data: bytes, pos: int, count: int, bases: tuple[int, int]):
    try:
        return read(data, pos, len(data), count, decoded_record, *bases)
    except InvalidRecordError:
        return InvalidRecordError


@given(records, st.binary(max_size=5), st.tuples(st.integers(0, 1 << 40), varying))
def test_valid_records_decode_alike(batch, prefix, bases):
    data = bytes(encoded(batch, prefix))
    compiled = outcome(read_records, data, len(prefix), len(batch), bases)
    assert compiled == python_read_records(
        data, len(prefix), len(data), len(batch), decoded_record, *bases
    )
    assert [(r.offset_delta - bases[0], r.timestamp_delta - bases[1]) for r in compiled] == [
        (r.offset_delta, r.timestamp_delta) for r in batch
    ]


@given(
    records.filter(bool),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 8),
    st.integers(-2, 2),
)
def test_corrupt_records_fail_alike(batch, flips, cut, miscount):
    """Flipped bytes, a cut tail, a wrong record count: both decoders give the same records or
    both raise InvalidRecordError (a read past the region would crash or differ here)."""
    data = encoded(batch)
    for where, byte in flips:
        data[where % len(data)] = byte
    data = bytes(data[: len(data) - cut])
    count = max(0, len(batch) + miscount)
    expected = outcome(python_read_records, data, 0, count, (0, 0))
    assert outcome(read_records, data, 0, count, (0, 0)) == expected


def test_records_without_headers_share_the_empty_tuple():
    data = bytes(encoded([Record(0, 0, None, b"v")]))
    [record] = read_records(data, 0, len(data), 1, lambda *fields: fields)
    assert record[4] is NO_HEADERS


@pytest.mark.parametrize(
    "data, count, message",
    [
        (b"\x7f" * 12, 1, "invalid record size"),  # size -64
        (bytes(encoded([Record(0, 0, None, b"v")])) + b"\x00", 1, "left over"),
        (bytes(encoded([Record(0, 0, None, b"v")])), 1 << 40, "records in"),
        (bytes(encoded([Record(0, 0, None, b"v", [("k", b"x")])]))[:-1], 1, "invalid record size"),
    ],
)
def test_errors_name_the_fault(data, count, message):
    with pytest.raises(InvalidRecordError, match=message):
        read_records(data, 0, len(data), count, decoded_record)


def test_header_key_must_be_utf8():
    data = bytearray(encoded([Record(0, 0, None, b"v", [("k", b"x")])]))
    data[data.index(b"k")] = 0xFF
    with pytest.raises(InvalidRecordError, match="UTF-8"):
        read_records(bytes(data), 0, len(data), 1, decoded_record)


@given(records, st.binary(max_size=5))
def test_records_encode_alike(batch, prefix):
    compiled, reference = bytearray(prefix), bytearray(prefix)
    encode_records(compiled, (r.fields() for r in batch))
    python_encode_records(reference, (r.fields() for r in batch))
    assert compiled == reference


@pytest.mark.parametrize(
    "record, error",
    [
        ((0, 0, None, b"v", ()), ValueError),  # five fields
        ((0, 0, "key", b"v", (), 0), TypeError),  # a str key
        ((0, 0, None, b"v", [("k",)], 0), ValueError),  # a header of one field
        ((0, 0, None, b"v", [(b"k", b"x")], 0), TypeError),  # a bytes header key
        ((1 << 64, 0, None, b"v", (), 0), OverflowError),
    ],
)
def test_malformed_records_raise_and_append_nothing(record, error):
    out = bytearray(b"kept")
    with pytest.raises(error):
        encode_records(out, [record])
    assert out == b"kept"
