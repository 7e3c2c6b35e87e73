import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.records.varint import decode_varint, encode_varint


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_round_trip(value):
    out = bytearray(b"\xaa")
    encode_varint(value, out)
    assert decode_varint(bytes(out), 1) == (value, len(out))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01")],
)
def test_zigzag_matches_kafka(value, encoded):
    out = bytearray()
    encode_varint(value, out)
    assert bytes(out) == encoded


def test_truncated_and_overlong():
    with pytest.raises(ValueError):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(ValueError):
        decode_varint(b"\xff" * 11, 0)
