"""Magic 0/1 message sets: encoding, decoding, wrappers and their inner offsets, CRC32, the
conversions to and from RecordBatch v2, and rejection of corrupt input. kafka-python's own
legacy record code is the independent reference for the byte layout."""

from __future__ import annotations

import struct
import zlib

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.records import compression as codecs
from broker.records import legacy
from broker.records.batch import (
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    build_batch,
    decode_batch,
    encode_batch,
    iter_batches,
    with_log_append_time,
)
from broker.records.control import build_control_batch
from broker.records.errors import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    UNSUPPORTED_COMPRESSION_TYPE,
    InvalidRecordError,
)
from broker.records.legacy import (
    MAGIC_V0,
    MAGIC_V1,
    build_message_set,
    decode_message_set,
    down_convert,
    encode_entry,
    encode_wrapper,
    iter_entries,
    unwrap,
    up_convert,
)
from broker.records.record import Record

TS = 1_700_000_000_000
LEGACY_CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4]
MAGICS = [MAGIC_V0, MAGIC_V1]


def records(n: int = 5) -> list[tuple[bytes | None, bytes | None, int]]:
    out = [(b"k%d" % i, b"value-%d" % i * (i + 1), TS + i) for i in range(n)]
    if n > 3:
        out[1] = (None, b"no key", TS + 1)
        out[2] = (b"no value", None, TS + 2)
        out[3] = (b"", b"", TS + 3)
    return out


class _XXHash:
    """kafka-python writes and reads magic 0 lz4 through the xxhash package, which this
    environment lacks; the same XXH32 stands in for it."""

    class xxh32:  # lower case, as in the package
        def __init__(self, data: bytes) -> None:
            self._hash = legacy.xxh32(bytes(data))

        def digest(self) -> bytes:
            return self._hash.to_bytes(4, "big")


@pytest.fixture
def kafka_python_xxhash(monkeypatch):
    import kafka.codec

    if kafka.codec.xxhash is None:
        monkeypatch.setattr(kafka.codec, "xxhash", _XXHash)


def expected_timestamp(magic: int, ts: int) -> int:
    return NO_TIMESTAMP if magic == MAGIC_V0 else ts


# -- layout and round trips --------------------------------------------------------------------


def test_magic0_message_layout_and_crc32():
    out = bytearray()
    encode_entry(out, 7, MAGIC_V0, b"key", b"value")
    offset, size, crc, magic, attributes = struct.unpack_from(">qiIbb", out)
    assert (offset, size, magic, attributes) == (7, len(out) - 12, 0, 0)
    assert out[18:] == struct.pack(">i", 3) + b"key" + struct.pack(">i", 5) + b"value"
    # CRC32 (zlib's), over magic to the end: not v2's CRC32C
    assert crc == zlib.crc32(out[16:]) != crc32c.crc32c(out[16:])


def test_magic1_message_carries_its_timestamp_and_type():
    out = bytearray()
    encode_entry(out, 0, MAGIC_V1, None, b"v", timestamp=TS, attributes=0x08)
    [(size, m)] = list(iter_entries(out))
    assert size == len(out) == 12 + 22 + 1
    assert (m.magic, m.timestamp, m.key, m.value) == (1, TS, None, b"v")
    assert m.timestamp_type == LOG_APPEND_TIME


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_round_trip(magic, codec):
    recs = records()
    data = build_message_set(recs, magic=magic, compression=codec, base_offset=100)
    got = decode_message_set(data)
    assert [m.offset for m in got] == list(range(100, 105))
    assert [(m.key, m.value, m.timestamp) for m in got] == [
        (k, v, expected_timestamp(magic, ts)) for k, v, ts in recs
    ]
    assert all(m.magic == magic and m.compression == codecs.NONE for m in got)


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_kafka_python_reads_what_we_write(magic, codec, kafka_python_xxhash):
    recs = records()
    data = build_message_set(recs, magic=magic, compression=codec, base_offset=40)
    batches = MemoryRecords(data)
    got = []
    while batches.has_next():
        batch = batches.next_batch()
        assert batch.validate_crc()
        got += [(r.offset, r.key, r.value, r.timestamp) for r in batch]
    assert got == [
        (40 + i, k, v, None if magic == MAGIC_V0 else ts) for i, (k, v, ts) in enumerate(recs)
    ]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_we_read_what_kafka_python_writes(magic, codec, kafka_python_xxhash):
    builder = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 20)
    recs = records()
    for i, (k, v, ts) in enumerate(recs):
        builder.append(i, ts, k, v)
    data = bytes(builder.build())
    converted = up_convert(data)
    header, got = decode_batch(converted.batch)
    assert header.compression == codec and header.records_count == len(recs)
    assert [(r.key, r.value, header.record_timestamp(r)) for r in got] == [
        (k, v, expected_timestamp(magic, ts)) for k, v, ts in recs
    ]


def test_magic1_wrapper_holds_relative_inner_offsets_and_the_last_absolute_one():
    data = build_message_set(records(), magic=MAGIC_V1, compression=codecs.GZIP, base_offset=500)
    [(_, wrapper)] = list(iter_entries(data))
    assert wrapper.offset == 504 and wrapper.key is None
    assert wrapper.timestamp == TS + 4  # the largest inner timestamp
    inner = list(iter_entries(codecs.decompress(codecs.GZIP, wrapper.value)))
    assert [m.offset for _, m in inner] == [0, 1, 2, 3, 4]
    assert [m.offset for m in unwrap(wrapper)] == [500, 501, 502, 503, 504]


def test_magic0_wrapper_holds_absolute_inner_offsets():
    data = build_message_set(records(), magic=MAGIC_V0, compression=codecs.SNAPPY, base_offset=9)
    [(_, wrapper)] = list(iter_entries(data))
    inner = list(iter_entries(codecs.decompress(codecs.SNAPPY, wrapper.value)))
    assert (
        [m.offset for _, m in inner] == [9, 10, 11, 12, 13] == [m.offset for m in unwrap(wrapper)]
    )
    assert wrapper.offset == 13


def test_non_contiguous_relative_offsets_are_resolved_then_reassigned():
    # A compacted topic mirrored without recompression (KIP-31): inner offsets with holes.
    inner = bytearray()
    for rel, value in [(0, b"a"), (2, b"b"), (5, b"c")]:
        encode_entry(inner, rel, MAGIC_V1, b"k", value, timestamp=TS + rel)
    data = bytearray()
    encode_wrapper(data, inner, offset=105, magic=MAGIC_V1, compression=codecs.GZIP)
    [(_, wrapper)] = list(iter_entries(data))
    assert [m.offset for m in unwrap(wrapper)] == [100, 102, 105]
    converted = up_convert(data)
    header, got = decode_batch(converted.batch)
    assert [r.offset_delta for r in got] == [0, 1, 2] and header.last_offset_delta == 2
    assert [header.record_timestamp(r) for r in got] == [TS, TS + 2, TS + 5]


def test_log_append_time_wrapper_stamps_its_inner_messages():
    data = build_message_set(
        records(3),
        magic=MAGIC_V1,
        compression=codecs.LZ4,
        timestamp_type=LOG_APPEND_TIME,
        log_append_time=TS + 999,
    )
    got = decode_message_set(data)
    assert {m.timestamp for m in got} == {TS + 999}
    assert {m.timestamp_type for m in got} == {LOG_APPEND_TIME}


# -- lz4 frame header checksums -------------------------------------------------------------


def test_xxh32_known_values():
    assert legacy.xxh32(b"") == 0x02CC5D05
    assert legacy.xxh32(b"abc") == 0x32D153FF
    assert legacy.xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_lz4_magic1_frames_are_standard_with_independent_blocks():
    frame = legacy.compress(codecs.LZ4, b"x" * 300_000, MAGIC_V1)
    assert frame[4] & 0x20  # block independence, which Kafka's LZ4 reader requires
    assert bytes(cramjam.lz4.decompress(frame)) == b"x" * 300_000


def test_lz4_magic0_frames_carry_old_kafkas_header_checksum():
    frame = legacy.compress(codecs.LZ4, b"old kafka" * 10, MAGIC_V0)
    hc = legacy._lz4_header_checksum_position(bytearray(frame))
    # KAFKA-3160: the checksum covered the frame magic too
    assert frame[hc] == (legacy.xxh32(frame[:hc]) >> 8) & 0xFF
    assert frame[hc] != (legacy.xxh32(frame[4:hc]) >> 8) & 0xFF
    assert legacy.decompress(codecs.LZ4, frame, MAGIC_V0) == b"old kafka" * 10
    # and standard frames from magic 0 producers are read too
    standard = bytes(cramjam.lz4.compress(b"new" * 10))
    assert legacy.decompress(codecs.LZ4, standard, MAGIC_V0) == b"new" * 10


# -- corrupt input ----------------------------------------------------------------------------


def corrupt(data: bytes, at: int, value: int | None = None) -> bytes:
    out = bytearray(data)
    out[at] = out[at] ^ 0xFF if value is None else value
    return bytes(out)


def message(magic=MAGIC_V1, key=b"k", value=b"v", attributes=0, offset=0) -> bytes:
    out = bytearray()
    encode_entry(out, offset, magic, key, value, timestamp=TS, attributes=attributes)
    return bytes(out)


def with_crc(data: bytes) -> bytes:
    """Recompute the CRC after a deliberate change, so a later check is what fails."""
    out = bytearray(data)
    struct.pack_into(">I", out, 12, zlib.crc32(out[16:]))
    return bytes(out)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (corrupt(message(), -1), CORRUPT_MESSAGE),  # CRC32 mismatch
        (corrupt(message(), 12), CORRUPT_MESSAGE),  # the stored CRC itself
        (message()[:-1], CORRUPT_MESSAGE),  # cut short
        (message()[:10], CORRUPT_MESSAGE),  # inside the entry header
        (struct.pack(">qi", 0, 3) + b"abc", CORRUPT_MESSAGE),  # size below the minimum
        (with_crc(corrupt(message(), 16, 2)), CORRUPT_MESSAGE),  # magic 2 in a message set
        (with_crc(corrupt(message(), 16, 0)), CORRUPT_MESSAGE),  # magic 0 with v1's fields
        (with_crc(message()[:26] + struct.pack(">i", 99) + message()[30:]), CORRUPT_MESSAGE),
        (with_crc(message()[:26] + struct.pack(">i", -5) + message()[30:]), CORRUPT_MESSAGE),
        (with_crc(message(attributes=4)), UNSUPPORTED_COMPRESSION_TYPE),  # zstd
        (with_crc(message(attributes=6)), UNSUPPORTED_COMPRESSION_TYPE),
        (message(attributes=codecs.GZIP), CORRUPT_MESSAGE),  # "v" is not gzip
        (message(attributes=codecs.GZIP, value=None), CORRUPT_MESSAGE),
        (b"", INVALID_RECORD),
    ],
    ids=[
        "crc",
        "stored-crc",
        "truncated",
        "truncated-header",
        "tiny-size",
        "magic-2",
        "magic-0-size",
        "key-overrun",
        "negative-key-length",
        "zstd",
        "codec-6",
        "bad-gzip",
        "null-wrapper-value",
        "empty",
    ],
)
def test_corrupt_input_is_rejected_with_kafkas_error(data, code):
    with pytest.raises(InvalidRecordError) as e:
        up_convert(data)
    assert e.value.error_code == code


def wrapper_of(*inner_messages: bytes, magic=MAGIC_V1, codec=codecs.GZIP) -> bytes:
    out = bytearray()
    encode_wrapper(out, b"".join(inner_messages), offset=0, magic=magic, compression=codec)
    return bytes(out)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (wrapper_of(message(), corrupt(message(offset=1), -1)), CORRUPT_MESSAGE),
        (wrapper_of(message(), message(magic=MAGIC_V0, offset=1)), INVALID_RECORD),
        (wrapper_of(message(), wrapper_of(message())), INVALID_RECORD),
        (wrapper_of(), INVALID_RECORD),
        (wrapper_of(message()) + wrapper_of(message()), INVALID_RECORD),
        (message() + message(magic=MAGIC_V0), INVALID_RECORD),
        (message() + wrapper_of(message()), INVALID_RECORD),
    ],
    ids=[
        "inner-crc",
        "inner-magic",
        "nested-compression",
        "empty-wrapper",
        "two-wrappers",
        "mixed-magic",
        "plain-then-wrapper",
    ],
)
def test_invalid_message_sets_are_rejected(data, code):
    with pytest.raises(InvalidRecordError) as e:
        up_convert(data)
    assert e.value.error_code == code


def test_fetch_responses_may_end_with_a_partial_message():
    data = build_message_set(records(), magic=MAGIC_V1)
    assert len(decode_message_set(data[:-3], allow_partial_tail=True)) == 4
    four = sum(size for size, _ in list(iter_entries(data))[:4])
    assert len(decode_message_set(data[: four + 5], allow_partial_tail=True)) == 4
    with pytest.raises(InvalidRecordError):
        decode_message_set(data[:-3])


# -- up-conversion ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_up_conversion_keeps_codec_keys_values_and_magic1_timestamps(magic, codec):
    recs = records()
    converted = up_convert(build_message_set(recs, magic=magic, compression=codec))
    header, got = decode_batch(converted.batch)
    assert header.magic == 2 and header.base_offset == 0 and header.compression == codec
    assert header.producer_id == -1 and not header.is_transactional
    assert [r.offset_delta for r in got] == list(range(len(recs)))
    assert [(r.key, r.value, r.headers) for r in got] == [(k, v, []) for k, v, _ in recs]
    stamps = [header.record_timestamp(r) for r in got]
    assert stamps == [expected_timestamp(magic, ts) for _, _, ts in recs]
    assert header.max_timestamp == max(stamps)
    if magic == MAGIC_V0:
        assert (converted.min_timestamp, converted.max_timestamp) == (-1, -1)
    else:
        assert (converted.min_timestamp, converted.max_timestamp) == (TS, TS + 4)


def test_up_conversion_bounds_every_timestamp_not_just_the_first():
    recs = [(b"a", b"1", TS), (b"b", b"2", TS - 50_000), (b"c", b"3", TS + 7)]
    converted = up_convert(build_message_set(recs, magic=MAGIC_V1))
    assert (converted.min_timestamp, converted.max_timestamp) == (TS - 50_000, TS + 7)
    assert converted.header.base_timestamp == TS  # the header alone would miss the low one


def test_up_conversion_can_recompress_for_the_topic():
    converted = up_convert(
        build_message_set(records(), magic=MAGIC_V1, compression=codecs.SNAPPY),
        target_compression=codecs.ZSTD,
    )
    assert converted.header.compression == codecs.ZSTD
    assert len(decode_batch(converted.batch)[1]) == 5


def test_up_conversion_reports_log_append_time_claims():
    plain = up_convert(build_message_set(records(), magic=MAGIC_V1))
    assert not plain.claims_log_append_time
    claimed = up_convert(
        build_message_set(
            records(), magic=MAGIC_V1, timestamp_type=LOG_APPEND_TIME, log_append_time=TS
        )
    )
    assert claimed.claims_log_append_time and not claimed.untimed_claims_log_append_time
    untimed = bytearray()
    encode_entry(untimed, 0, MAGIC_V1, b"k", b"v", timestamp=NO_TIMESTAMP, attributes=0x08)
    assert up_convert(untimed).untimed_claims_log_append_time
    # magic 0 has no timestamp type: the bit means nothing there
    assert not up_convert(with_crc(message(MAGIC_V0, attributes=0x08))).claims_log_append_time


def test_compacted_topics_refuse_messages_without_key():
    data = build_message_set(records(), magic=MAGIC_V1, compression=codecs.GZIP)
    with pytest.raises(InvalidRecordError) as e:
        up_convert(data, compacted=True)
    assert e.value.error_code == INVALID_RECORD
    keyed = build_message_set([(b"k", b"v", TS)], magic=MAGIC_V0)
    assert up_convert(keyed, compacted=True).header.records_count == 1


def test_uncompressed_sets_may_hold_many_messages_with_any_offsets():
    data = message(offset=77) + message(offset=3) + message(offset=3)
    converted = up_convert(data)
    assert converted.header.last_offset_delta == 2 and converted.largest_entry == len(message())


# -- down-conversion ----------------------------------------------------------------------------


def v2(recs, *, base_offset=0, compression=codecs.NONE, **kw) -> bytes:
    return build_batch(
        [(k, v, [("h", b"x")], ts) for k, v, ts in recs],
        base_offset=base_offset,
        compression=compression,
        **kw,
    )


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_down_conversion_round_trip(magic, codec):
    recs = records()
    data = v2(recs, base_offset=20, compression=codec)
    out = down_convert([data], magic=magic, fetch_offset=20)
    assert out.error is None
    entries = list(iter_entries(out.records))
    assert len(entries) == (len(recs) if codec == codecs.NONE else 1)
    got = decode_message_set(out.records)
    assert [(m.offset, m.key, m.value, m.timestamp, m.magic) for m in got] == [
        (20 + i, k, v, expected_timestamp(magic, ts), magic) for i, (k, v, ts) in enumerate(recs)
    ]


def test_down_conversion_skips_uncompressed_records_below_the_fetch_offset():
    data = v2(records(), base_offset=10)
    got = decode_message_set(down_convert([data], magic=1, fetch_offset=13).records)
    assert [m.offset for m in got] == [13, 14]
    # a compressed batch goes whole: the consumer skips what it did not ask for
    data = v2(records(), base_offset=10, compression=codecs.GZIP)
    got = decode_message_set(down_convert([data], magic=1, fetch_offset=13).records)
    assert [m.offset for m in got] == [10, 11, 12, 13, 14]


def test_down_conversion_keeps_holes_left_by_compaction():
    compacted = encode_batch(
        [Record(0, 0, b"a", b"1"), Record(3, 1, b"b", b"2"), Record(4, 2, b"c", b"3")],
        base_offset=50,
        base_timestamp=TS,
        max_timestamp=TS + 2,
        last_offset_delta=6,
        compression=codecs.SNAPPY,
    )
    for magic in MAGICS:
        got = decode_message_set(down_convert([compacted], magic=magic, fetch_offset=50).records)
        assert [m.offset for m in got] == [50, 53, 54]


def test_down_conversion_to_magic1_keeps_log_append_time():
    data = v2(records(3), compression=codecs.LZ4)
    stamped = with_log_append_time(data, TS + 5000) + data[61:]
    got = decode_message_set(down_convert([stamped], magic=1, fetch_offset=0).records)
    assert [(m.timestamp, m.timestamp_type) for m in got] == [(TS + 5000, LOG_APPEND_TIME)] * 3


def test_down_conversion_drops_control_batches_and_keeps_all_data():
    committed = v2(
        [(b"c", b"committed", TS)],
        base_offset=0,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    commit = bytearray(build_control_batch(7, 0, True, 0, TS))
    struct.pack_into(">q", commit, 0, 1)
    aborted = v2(
        [(b"a", b"aborted", TS)],
        base_offset=2,
        producer_id=8,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    plain = v2([(b"p", b"plain", TS)], base_offset=3)
    abort = bytearray(build_control_batch(8, 0, False, 0, TS))
    struct.pack_into(">q", abort, 0, 4)
    later = v2(
        [(b"l", b"later", TS)],
        base_offset=5,
        producer_id=8,
        producer_epoch=0,
        base_sequence=1,
        transactional=True,
    )
    log = committed + bytes(commit) + aborted + plain + bytes(abort) + later
    assert len(list(iter_batches(log))) == 6
    out = down_convert([log], magic=1, fetch_offset=0)
    got = decode_message_set(out.records)
    # Read uncommitted, as Kafka serves old consumers: the aborted record too.
    assert [(m.offset, m.value) for m in got] == [
        (0, b"committed"),
        (2, b"aborted"),
        (3, b"plain"),
        (5, b"later"),
    ]


def test_zstd_batches_cannot_be_down_converted():
    zstd = v2(records(2), base_offset=2, compression=codecs.ZSTD)
    out = down_convert([zstd], magic=1, fetch_offset=2)
    assert (out.records, out.error) == (b"", UNSUPPORTED_COMPRESSION_TYPE)
    # what comes before the zstd batch is still served
    before = v2(records(2))
    out = down_convert([before + zstd], magic=0, fetch_offset=0)
    assert out.error is None and [m.offset for m in decode_message_set(out.records)] == [0, 1]


def test_down_conversion_stays_within_max_bytes_but_returns_a_first_batch():
    chunk = b"".join(v2([(b"k", b"x" * 100, TS)], base_offset=i) for i in range(5))
    one = len(down_convert([chunk[: len(chunk) // 5]], magic=1, fetch_offset=0).records)
    out = down_convert([chunk], magic=1, fetch_offset=0, max_bytes=2 * one + 10)
    assert [m.offset for m in decode_message_set(out.records)] == [0, 1]
    out = down_convert([chunk], magic=1, fetch_offset=0, max_bytes=1)
    assert [m.offset for m in decode_message_set(out.records)] == [0]


# -- fuzzing ------------------------------------------------------------------------------------

VALID = [
    build_message_set(records(), magic=magic, compression=codec)
    for magic in MAGICS
    for codec in LEGACY_CODECS
]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_the_decoders(data):
    for decode in (
        lambda: up_convert(data),
        lambda: decode_message_set(data, allow_partial_tail=True),
        lambda: list(iter_entries(data)),
    ):
        try:
            decode()
        except InvalidRecordError:
            pass


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(VALID),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
    fix_crc=st.booleans(),
)
def test_mutated_message_sets_are_accepted_or_rejected_cleanly(base, edits, cut, fix_crc):
    data = bytearray(base)
    for at, value in edits:
        data[at % len(data)] = value
    data = data[: max(1, len(data) - cut % 40)]
    if fix_crc and len(data) > 16:
        # past the CRC, so the field checks behind it are what the fuzzing reaches
        struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    try:
        converted = up_convert(bytes(data))
    except InvalidRecordError as e:
        assert e.error_code in (CORRUPT_MESSAGE, INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE)
    else:
        assert decode_batch(converted.batch)[0].records_count >= 1


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(
        st.tuples(
            st.none() | st.binary(max_size=40),
            st.none() | st.binary(max_size=200),
            st.integers(0, 2**41),
        ),
        min_size=1,
        max_size=20,
    ),
    magic=st.sampled_from(MAGICS),
    codec=st.sampled_from(LEGACY_CODECS),
    base=st.integers(0, 2**40),
)
def test_conversions_round_trip(recs, magic, codec, base):
    converted = up_convert(build_message_set(recs, magic=magic, compression=codec))
    stored = bytearray(converted.batch)
    struct.pack_into(">q", stored, 0, base)
    out = down_convert([bytes(stored)], magic=magic, fetch_offset=base)
    got = decode_message_set(out.records)
    assert [(m.offset, m.key, m.value, m.timestamp) for m in got] == [
        (base + i, k, v, expected_timestamp(magic, ts)) for i, (k, v, ts) in enumerate(recs)
    ]


def test_kafka_python_decodes_down_converted_wrappers():
    # LegacyRecordBatch is what kafka-python's fetcher uses on Fetch v0-3 responses
    data = down_convert([v2(records(), compression=codecs.GZIP)], magic=1, fetch_offset=0)
    batch = LegacyRecordBatch(bytearray(data.records), 1)
    assert [r.offset for r in batch] == [0, 1, 2, 3, 4]
