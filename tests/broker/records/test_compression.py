import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.records import compression
from broker.records.errors import CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE, InvalidRecordError

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec):
    data = b"".join(b"record %d, " % i for i in range(20000))  # > several snappy blocks
    packed = compression.compress(codec, data)
    if codec != compression.NONE:
        assert len(packed) < len(data)
    assert compression.decompress(codec, packed) == data


@settings(max_examples=50, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=70000))
def test_round_trip_property(codec, data):
    assert compression.decompress(codec, compression.compress(codec, data)) == data


def test_snappy_is_written_xerial_framed_like_the_java_client():
    packed = compression.compress(compression.SNAPPY, b"x" * 100)
    assert packed.startswith(compression.XERIAL_MAGIC)


def test_snappy_raw_as_librdkafka_writes_it_is_accepted():
    raw = bytes(cramjam.snappy.compress_raw(b"hello librdkafka" * 50))
    assert compression.decompress(compression.SNAPPY, raw) == b"hello librdkafka" * 50


def test_zstd_streaming_frame_without_content_size():
    compressor = cramjam.zstd.Compressor()
    compressor.compress(b"streamed " * 1000)
    frame = bytes(compressor.finish())
    assert compression.decompress(compression.ZSTD, frame) == b"streamed " * 1000


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec):
    with pytest.raises(InvalidRecordError) as err:
        compression.decompress(codec, b"abc")
    assert err.value.error_code == UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(InvalidRecordError):
        compression.compress(codec, b"abc")


@pytest.mark.parametrize("codec", CODECS[1:])
def test_garbage_is_corrupt_message(codec):
    with pytest.raises(InvalidRecordError) as err:
        compression.decompress(codec, b"\x00\x01garbage that is not compressed\xff" * 3)
    assert err.value.error_code == CORRUPT_MESSAGE


def test_truncated_xerial_block():
    packed = compression.compress(compression.SNAPPY, b"y" * 1000)
    with pytest.raises(InvalidRecordError) as err:
        compression.decompress(compression.SNAPPY, packed[:-3])
    assert err.value.error_code == CORRUPT_MESSAGE
