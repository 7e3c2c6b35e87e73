"""One pipelined connection to a Kafka broker, speaking kio request/response entities."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from broker.protocol import codec

_SIZE = struct.Struct(">i")


class ConnectionClosed(ConnectionError):
    pass


class BrokerConnection:
    """Requests may be sent concurrently; responses are matched to them in order, as the Kafka
    protocol guarantees."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._next_correlation_id = 0
        self._pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._reader_task = asyncio.create_task(self._read_responses())

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "fjord-client") -> BrokerConnection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id)

    async def send(self, request: Any) -> Any:
        """Send a kio request entity and wait for its response entity."""
        return await self.send_raw(request, expect_response=True)

    async def send_raw(self, request: Any, expect_response: bool = True) -> Any:
        if self._reader_task.done():
            raise ConnectionClosed("connection is closed")
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        payload = codec.encode_request(request, correlation_id, self._client_id)
        future = asyncio.get_running_loop().create_future()
        if expect_response:
            self._pending[correlation_id] = (future, request.__api_key__, request.__version__)
        self._writer.write(_SIZE.pack(len(payload)) + payload)
        await self._writer.drain()
        if not expect_response:
            return None
        return await future

    async def send_frame(self, payload: bytes) -> bytes:
        """Send a hand-made request (header and body) as one frame; return the raw response
        payload. For protocol tests: the caller picks a correlation id the client never uses."""
        future = asyncio.get_running_loop().create_future()
        self._pending[codec.peek_correlation_id(payload)] = (future, -1, -1)
        self._writer.write(_SIZE.pack(len(payload)) + payload)
        await self._writer.drain()
        return await future

    async def _read_responses(self) -> None:
        try:
            while True:
                size = _SIZE.unpack(await self._reader.readexactly(4))[0]
                payload = await self._reader.readexactly(size)
                correlation_id = _SIZE.unpack_from(payload, 0)[0]
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue
                future, api_key, api_version = entry
                if future.done():  # its caller gave up waiting (cancelled, timed out)
                    continue
                if api_key < 0:
                    future.set_result(payload)
                else:
                    try:
                        future.set_result(codec.decode_response(payload, api_key, api_version)[1])
                    except Exception as e:  # a response we cannot parse fails its request only
                        future.set_exception(e)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            for future, _, _ in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionClosed("connection closed by the broker"))
            self._pending.clear()

    @property
    def closed(self) -> bool:
        return self._reader_task.done()

    async def wait_closed(self) -> None:
        await self._reader_task

    async def close(self) -> None:
        self._writer.close()
        self._reader_task.cancel()
        try:
            await self._reader_task
        except asyncio.CancelledError:
            pass
