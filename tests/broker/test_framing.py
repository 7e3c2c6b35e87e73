"""Frame splitting: any chunking of the byte stream yields the same frames; limits hold."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.protocol.framing import CHUNK, FrameDecoder, FrameTooLarge, InvalidFrame


def framed(payloads):
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


payloads = st.lists(
    st.one_of(st.binary(max_size=300), st.integers(CHUNK - 8, 3 * CHUNK).map(bytes)),
    max_size=8,
)


@given(payloads, st.lists(st.integers(1, 2 * CHUNK), min_size=1, max_size=40))
def test_any_chunking_yields_the_frames(frames, cuts):
    stream = framed(frames)
    decoder = FrameDecoder(max_size=1 << 30)
    got, pos, i = [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        got += decoder.feed(stream[pos : pos + step])
        pos += step
        i += 1
    assert [bytes(f) for f in got] == frames


def test_oversized_frame_is_refused_from_its_header():
    decoder = FrameDecoder(max_size=100)
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">i", 101))


def test_negative_size_is_invalid():
    with pytest.raises(InvalidFrame):
        FrameDecoder(max_size=100).feed(struct.pack(">i", -1))
