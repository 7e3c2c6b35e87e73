"""The compiled response writers write what kio's writers write, over every response schema
of every API and version Fjord serves (and the response headers), for generated entities;
where kio refuses a value (out of range, None where none is allowed), so do they."""

from __future__ import annotations

import io

import pytest
from fuzz_support import API_VERSIONS, FUZZ_SETTINGS, api_id
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_writer

from broker.protocol import codec, legacy
from broker.protocol.compiled_writers import compiled_writer, uvarint

SCHEMAS = [
    pair for pair in API_VERSIONS if not legacy.is_legacy(*pair)
]  # the legacy versions have hand-written codecs, not kio's


def _written(writer, entity) -> bytes | type[Exception]:
    out = io.BytesIO()
    try:
        writer(out, entity)
    except (TypeError, ValueError, OverflowError, AttributeError) as error:
        return type(error)
    except Exception as error:  # struct.error and kio's own OutOfBoundValue
        return Exception if "struct" in type(error).__module__ else type(error)
    return out.getvalue()


def _same(schema: type, entity) -> None:
    expected = _written(entity_writer(schema), entity)
    actual = _written(compiled_writer(schema), entity)
    if isinstance(expected, bytes):
        assert actual == expected
    else:
        assert not isinstance(actual, bytes), f"kio refused ({expected.__name__}), compiled wrote"


@pytest.mark.parametrize("pair", SCHEMAS, ids=api_id)
@FUZZ_SETTINGS
@given(data=st.data())
def test_a_compiled_response_writer_writes_what_kio_writes(pair, data):
    schema = codec.response_schema(*pair)
    _same(schema, data.draw(st.from_type(schema)))


@pytest.mark.parametrize("header", [ResponseHeaderV0, ResponseHeaderV1])
@FUZZ_SETTINGS
@given(data=st.data())
def test_a_compiled_header_writer_writes_what_kio_writes(header, data):
    _same(header, data.draw(st.from_type(header)))


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16_383, 16_384, 2**32 - 1])
def test_uvarint_is_leb128(n):
    encoded = uvarint(n)
    value = shift = 0
    for byte in encoded:
        value |= (byte & 0x7F) << shift
        shift += 7
    assert value == n
    assert all(byte & 0x80 for byte in encoded[:-1]) and not encoded[-1] & 0x80


@pytest.mark.parametrize("n", [-1, 2**32])
def test_uvarint_refuses_what_kio_refuses(n):
    with pytest.raises(ValueError):
        uvarint(n)
