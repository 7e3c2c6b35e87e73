"""The client connection's framing (ResponseFrames): responses read into a staging buffer many
at a time, or a large one straight into a buffer of its own, whatever way the kernel splits
the bytes; a negative size closes the connection."""

from __future__ import annotations

import asyncio
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.client.connection import (
    FRAME_STEP,
    MIN_FRAME,
    STAGE_SIZE,
    BrokerConnection,
    ConnectionClosed,
    ResponseFrames,
)

SIZES = st.one_of(
    st.integers(MIN_FRAME, 64),
    st.sampled_from([STAGE_SIZE - 5, STAGE_SIZE - 4, STAGE_SIZE - 3, STAGE_SIZE, 3 * STAGE_SIZE]),
    st.integers(MIN_FRAME, 4 * STAGE_SIZE),
)


def feed(frames: ResponseFrames, data: bytes, cuts: list[int]) -> None:
    """What a transport does: fill the buffer the protocol offers, as far as the bytes go
    (cut short at `cuts`), and say how much it wrote."""
    pos, cuts = 0, iter(cuts)
    while pos < len(data):
        buffer = frames.get_buffer(-1)
        n = min(len(buffer), len(data) - pos, next(cuts, len(data)) or 1)
        buffer[:n] = data[pos : pos + n]
        frames.buffer_updated(n)
        pos += n


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(SIZES, min_size=1, max_size=6).map(
        lambda sizes: [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    ),
    cuts=st.lists(st.integers(0, 3 * STAGE_SIZE), max_size=40),
)
def test_every_frame_arrives_whole_however_the_bytes_are_split(payloads, cuts):
    async def run() -> list[bytes]:
        got: list[bytes] = []
        frames = ResponseFrames(lambda frame: got.append(bytes(frame)))
        data = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
        feed(frames, data, cuts)
        return got

    assert asyncio.run(run()) == payloads


async def test_a_frame_larger_than_a_step_grows_as_it_comes():
    got: list[bytes] = []
    frames = ResponseFrames(lambda frame: got.append(bytes(frame)))
    payload = bytes(range(256)) * ((2 * FRAME_STEP + 1000) // 256)
    feed(frames, struct.pack(">i", len(payload)) + payload, [STAGE_SIZE] * 1000)
    assert got == [payload]


async def test_a_size_that_is_not_kafka_costs_what_arrives_not_what_it_declares():
    frames = ResponseFrames(lambda frame: None)
    feed(frames, b"HTTP/1.1 400 Bad Request\r\n", [])  # "HTTP": a frame of 1.2 GB
    assert len(frames.get_buffer(-1)) < FRAME_STEP


async def test_a_negative_size_closes_the_connection():
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4)
        writer.write(struct.pack(">i", -2) + b"junk")
        await writer.drain()
        await reader.read()  # until the client hangs up

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        connection = await BrokerConnection.open(*server.sockets[0].getsockname()[:2])
        # A hand-made frame: its answer is the negative size, and the connection closes.
        request = struct.pack(">hhi", 18, 0, 7) + struct.pack(">h", 0)
        try:
            await asyncio.wait_for(connection.send_frame(request), 10)
            raise AssertionError("answered")
        except ConnectionClosed:
            pass
        await asyncio.wait_for(connection.wait_closed(), 10)
        assert connection.closed
    finally:
        server.close()
        await server.wait_closed()
