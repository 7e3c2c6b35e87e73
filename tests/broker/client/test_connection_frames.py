"""The client connection on a stream that is not Kafka's: an answer whose size prefix is
negative, or too short to hold a correlation id, closes the connection and fails the request.
(Splitting the stream into frames is the broker's FrameDecoder: tests/broker/test_framing.py.)"""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.client.connection import BrokerConnection, ConnectionClosed


@pytest.mark.parametrize("answer", [struct.pack(">i", -2) + b"junk", struct.pack(">i", 2) + b"ab"])
async def test_an_answer_that_is_not_kafka_closes_the_connection(answer, caplog):
    async def answer_with_junk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        await reader.read(4)
        writer.write(answer)
        await writer.drain()
        await reader.read()  # until the client hangs up

    server = await asyncio.start_server(answer_with_junk, "127.0.0.1", 0)
    try:
        connection = await BrokerConnection.open(*server.sockets[0].getsockname()[:2])
        # A hand-made frame (ApiVersions v0, correlation id 7): its answer is the junk.
        request = struct.pack(">hhi", 18, 0, 7) + struct.pack(">h", 0)
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(connection.send_frame(request), 10)
        await asyncio.wait_for(connection.wait_closed(), 10)
        assert connection.closed
        # Closed as a stream it cannot read, not by an error escaping the protocol.
        assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    finally:
        server.close()
        await server.wait_closed()
