"""The request decoders on hostile bytes: for every advertised API and version, a mutated
valid request or a header followed by random bytes either decodes or raises DecodeError —
the one exception the connection turns into a closed connection. Anything else would escape
as a crash of the request's dispatch."""

from __future__ import annotations

import pytest
from fuzz_support import (
    API_VERSIONS,
    FUZZ_SETTINGS,
    TALLY,
    api_id,
    encoded,
    garbage,
    mutated,
    valid_request,
)
from hypothesis import given
from hypothesis import strategies as st

from broker.protocol import codec


def decode(payload: bytes, key: int, version: int, as_view: bool) -> str:
    # The connection hands small frames over as bytes, large ones as read-only memoryviews.
    frame = memoryview(payload).toreadonly() if as_view else payload
    try:
        codec.decode_request(frame, key, version)
    except codec.DecodeError:
        return "DecodeError"
    return "decoded"


@pytest.mark.parametrize("pair", API_VERSIONS, ids=api_id)
def test_valid_requests_round_trip(pair):
    key, version = pair

    @FUZZ_SETTINGS
    @given(valid_request(key, version), st.integers(-(2**31), 2**31 - 1))
    def check(request, correlation_id):
        frame = codec.decode_request(codec.encode_request(request, correlation_id), key, version)
        assert frame.correlation_id == correlation_id
        assert frame.body == request
        TALLY.add(pair, "valid")

    check()


@pytest.mark.parametrize("pair", API_VERSIONS, ids=api_id)
def test_mutated_requests_decode_or_raise_decode_error(pair):
    key, version = pair

    @FUZZ_SETTINGS
    @given(mutated(encoded(key, version)), st.booleans())
    def check(payload, as_view):
        TALLY.add(pair, "mutated:" + decode(payload, key, version, as_view))

    check()


@pytest.mark.parametrize("pair", API_VERSIONS, ids=api_id)
def test_random_bodies_decode_or_raise_decode_error(pair):
    key, version = pair

    @FUZZ_SETTINGS
    @given(garbage(key, version), st.booleans())
    def check(payload, as_view):
        TALLY.add(pair, "random:" + decode(payload, key, version, as_view))

    check()
