"""A byte-level Kafka client for tests that misbehave on purpose, and a wait-until helper."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable

from kafka_requests import req

from broker.protocol import codec

SIZE = struct.Struct(">i")


async def wait_until(predicate: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    """Poll `predicate` while the event loop runs; fail after a generous `timeout`."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what or predicate}") from None


def framed(request, correlation_id: int) -> bytes:
    """A kio request entity as it goes on the wire: size, header, body."""
    payload = codec.encode_request(request, correlation_id)
    return SIZE.pack(len(payload)) + payload


def api_versions_request(correlation_id: int, version: int = 0) -> bytes:
    """An ApiVersions request, framed."""
    fields = {"client_software_name": "raw", "client_software_version": "1"}
    return framed(req(18, version, "ApiVersionsRequest", **fields), correlation_id)


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int, receive_buffer: int | None = None) -> RawClient:
        """With `receive_buffer`, the socket's receive buffer is that small and fixed, so a
        broker writing to a client that does not read blocks soon."""
        if receive_buffer is None:
            return cls(*await asyncio.open_connection(host, port))
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
        return cls(*await asyncio.open_connection(sock=sock))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self) -> bytes:
        (size,) = SIZE.unpack(await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def closed_by_broker(self) -> bool:
        """True once the broker has closed the connection (reads end), after any responses."""
        try:
            while await self.reader.read(65536):
                pass
        except ConnectionError:
            pass
        return True

    async def api_versions(self, correlation_id: int = 7) -> int:
        """Send ApiVersions v0 and return the correlation id of the answer."""
        await self.send(api_versions_request(correlation_id))
        return SIZE.unpack_from(await self.read_frame(), 0)[0]

    def close(self) -> None:
        self.writer.close()
