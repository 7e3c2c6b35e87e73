import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.records import compression
from broker.records.batch import (
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    LOG_APPEND_TIME,
    RECORDS_COUNT_OFFSET,
    InvalidRecordError,
    Record,
    build_batch,
    crc_matches,
    decode_batch,
    encode_batch,
    iter_batches,
    read_header,
    validate_produce_batch,
    with_log_append_time,
)
from broker.records.errors import CORRUPT_MESSAGE, INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE

CODECS = [0, 1, 2, 3, 4]

record_inputs = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=10)), max_size=3),
        st.integers(min_value=0, max_value=1 << 45),
    ),
    min_size=1,
    max_size=20,
)


def _with_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _code(data) -> int:
    with pytest.raises(InvalidRecordError) as err:
        validate_produce_batch(data)
    return err.value.error_code


@settings(max_examples=60, deadline=None)
@given(records=record_inputs, codec=st.sampled_from(CODECS), base_offset=st.integers(0, 1 << 40))
def test_build_decode_round_trip(records, codec, base_offset):
    data = build_batch(records, base_offset=base_offset, compression=codec)
    header = validate_produce_batch(data)
    assert header.compression == codec
    assert header.records_count == len(records)
    assert header.base_offset == base_offset
    assert header.size == len(data)
    assert header.max_timestamp == max(r[3] for r in records)
    decoded_header, decoded = decode_batch(data)
    assert decoded_header == header
    got = [
        (r.key, r.value, r.headers, decoded_header.record_timestamp(r), header.record_offset(r))
        for r in decoded
    ]
    want = [(k, v, list(h), ts, base_offset + i) for i, (k, v, h, ts) in enumerate(records)]
    assert got == want


def test_header_fields_and_attributes():
    data = build_batch(
        [(b"k", b"v", [], 5)],
        base_offset=7,
        compression=3,
        producer_id=42,
        producer_epoch=3,
        base_sequence=9,
        transactional=True,
        timestamp_type=LOG_APPEND_TIME,
        partition_leader_epoch=11,
    )
    h = read_header(data)
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (7, 11, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 9)
    assert h.compression == 3 and h.timestamp_type == LOG_APPEND_TIME
    assert h.is_transactional and not h.is_control
    assert (h.last_offset, h.next_offset, h.size) == (7, 8, len(data))
    assert len(data) >= BATCH_HEADER_SIZE
    control = read_header(build_batch([(b"\0\0\0\0", b"", [], 1)], control=True))
    assert control.is_control and not control.is_transactional


def test_validate_accepts_a_producer_batch():
    data = build_batch([(None, b"a", [], 1), (None, b"b", [], 2)], producer_id=1, base_sequence=0)
    assert validate_produce_batch(memoryview(data)).records_count == 2


def test_validate_bad_crc_is_corrupt():
    data = bytearray(build_batch([(b"k", b"value", [], 1)]))
    data[-1] ^= 0xFF
    assert _code(bytes(data)) == CORRUPT_MESSAGE


def test_validate_size_mismatch_is_corrupt():
    data = build_batch([(b"k", b"value", [], 1)])
    assert _code(data[:-1]) == CORRUPT_MESSAGE
    assert _code(data + b"\x00\x01") == CORRUPT_MESSAGE
    assert _code(data[:30]) == CORRUPT_MESSAGE
    short_length = bytearray(data)
    struct.pack_into(">i", short_length, 8, 10)
    assert _code(bytes(short_length)) == CORRUPT_MESSAGE


def test_validate_wrong_magic_is_invalid_record():
    data = bytearray(build_batch([(b"k", b"value", [], 1)]))
    data[16] = 1
    assert _code(bytes(data)) == INVALID_RECORD


def test_validate_multiple_or_no_batches_is_invalid_record():
    one = build_batch([(b"k", b"value", [], 1)])
    assert _code(one + one) == INVALID_RECORD
    assert _code(b"") == INVALID_RECORD


def test_validate_count_and_offset_delta_consistency():
    data = bytearray(build_batch([(None, b"a", [], 1), (None, b"b", [], 2)]))
    struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, 3)
    assert _code(_with_crc(data)) == INVALID_RECORD
    struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, 0)
    assert _code(_with_crc(data)) == INVALID_RECORD


def test_validate_idempotent_batch_needs_a_sequence():
    data = build_batch([(None, b"a", [], 1)], producer_id=5, producer_epoch=0, base_sequence=-1)
    assert _code(data) == INVALID_RECORD


def test_validate_unknown_codec():
    data = bytearray(build_batch([(None, b"a", [], 1)]))
    struct.pack_into(">h", data, 21, 5)
    assert _code(_with_crc(data)) == UNSUPPORTED_COMPRESSION_TYPE


def test_iter_batches_stops_at_a_torn_batch():
    batches = [build_batch([(None, b"x" * i, [], i)], base_offset=i) for i in range(1, 5)]
    buf = b"".join(batches)
    positions = [pos for pos, _ in iter_batches(buf)]
    assert len(positions) == 4
    for cut in range(len(buf) - len(batches[-1]), len(buf)):
        assert [h.base_offset for _, h in iter_batches(buf[:cut])] == [1, 2, 3]
    assert all(crc_matches(buf, pos, h) for pos, h in iter_batches(buf))
    start = positions[1]
    assert [h.base_offset for _, h in iter_batches(memoryview(buf), start)] == [2, 3, 4]


@pytest.mark.parametrize("codec", CODECS)
def test_with_log_append_time_restamps_header_only(codec):
    data = build_batch([(b"k", b"v1", [], 100), (b"k", b"v2", [], 150)], compression=codec)
    head = with_log_append_time(data, 9999, base_offset=77)
    assert len(head) == BATCH_HEADER_SIZE
    stamped = head + data[BATCH_HEADER_SIZE:]
    header = validate_produce_batch(stamped)  # CRC recomputed and valid
    assert header.timestamp_type == LOG_APPEND_TIME
    assert (header.max_timestamp, header.base_timestamp, header.base_offset) == (9999, 100, 77)
    assert header.compression == codec
    _, records = decode_batch(stamped)
    assert [header.record_timestamp(r) for r in records] == [9999, 9999]


def test_encode_batch_keeps_offset_holes_for_compaction():
    records = [Record(0, 0, b"a", b"1"), Record(3, 5, b"b", b"2", [("h", None)])]
    data = encode_batch(
        records, base_offset=10, base_timestamp=50, max_timestamp=55, last_offset_delta=4
    )
    header, decoded = decode_batch(data)
    assert (header.last_offset, header.records_count) == (14, 2)
    assert [header.record_offset(r) for r in decoded] == [10, 13]
    assert decoded[1].headers == [("h", None)]


def test_decode_rejects_trailing_garbage_in_records():
    data = bytearray(build_batch([(None, b"a", [], 1)]))
    struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, 0)
    with pytest.raises(InvalidRecordError):
        decode_batch(bytes(data))


def test_build_rejects_empty():
    with pytest.raises(ValueError):
        build_batch([])


@pytest.mark.parametrize("codec", CODECS)
def test_interop_with_aiokafka_both_ways(codec):
    records = pytest.importorskip("aiokafka.record.default_records")
    builder = records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=1000, key=b"k", value=b"v" * 300, headers=[("h", b"x")])
    builder.append(1, timestamp=1010, key=None, value=b"w", headers=[])
    theirs = bytes(builder.build())
    header = validate_produce_batch(theirs)
    _, decoded = decode_batch(theirs)
    assert [(r.key, r.value, r.headers) for r in decoded] == [
        (b"k", b"v" * 300, [("h", b"x")]),
        (None, b"w", []),
    ]
    assert header.max_timestamp == 1010

    ours = build_batch(
        [(b"k", b"v" * 300, [("h", b"x")], 1000), (None, b"w", [], 1010)], compression=codec
    )
    batch = records.DefaultRecordBatch(ours)
    assert batch.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == [
        (0, 1000, b"k", b"v" * 300, [("h", b"x")]),
        (1, 1010, None, b"w", []),
    ]


def test_compression_module_constants_match_attributes():
    assert compression.CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
