"""One pipelined connection to a Kafka broker, speaking kio request/response entities."""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import struct
from collections.abc import Callable
from typing import Any

from broker.protocol import codec
from broker.protocol.framing import FrameDecoder, InvalidFrame

_SIZE = struct.Struct(">i")
# The smallest response: its correlation id.
MIN_FRAME = 4
# Responses are as large as the client asked for (fetch_max_bytes and more): only the
# protocol's own bound applies.
MAX_FRAME = (1 << 31) - 1


class ConnectionClosed(ConnectionError):
    pass


class ResponseFrames(asyncio.BufferedProtocol):
    """The transport's side of a connection: the broker's FrameDecoder on the response
    stream, frames handed to `on_frame` as they complete. A fetch response of a few megabytes
    is read by the kernel straight into the buffer handed on (the decoder copies out what it
    keeps), and one whose size prefix is not Kafka's (an HTTP or TLS answer read as hundreds of
    megabytes, KAFKA-4493) costs what arrives, not what it declares."""

    def __init__(self, on_frame: Callable[[bytes | memoryview], None]) -> None:
        self._on_frame = on_frame
        self._decoder = FrameDecoder(MAX_FRAME)
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()
        # Called, as the transport reports it, when the broker closes the connection (not
        # when this side does).
        self.on_lost: Callable[[], None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._decoder.buffer_updated(nbytes)
        except InvalidFrame:
            frames = [b""]  # nothing after it can be framed
        for frame in frames:
            if len(frame) < MIN_FRAME:
                self.transport.abort()  # not Kafka
                return
            self._on_frame(frame)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
            if self.on_lost is not None:
                self.on_lost()
        self._writable.set()  # a waiting writer finds the connection closed

    def close(self) -> None:
        """Closed by this side: closed at once for the requests, whatever the transport still
        has to flush."""
        self.on_lost = None
        self.transport.close()
        self.connection_lost(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if not self._writable.is_set():
            await self._writable.wait()
        if self.closed.done():
            raise ConnectionClosed("connection is closed")


class BrokerConnection:
    """Requests may be sent concurrently; responses are matched to them in order, as the Kafka
    protocol guarantees."""

    def __init__(self, frames: ResponseFrames, client_id: str) -> None:
        self._frames = frames
        self._transport = frames.transport
        self._client_id = client_id
        self._next_correlation_id = 0
        self._pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        frames.closed.add_done_callback(self._fail_pending)

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        client_id: str = "fjord-client",
        ssl: ssl_module.SSLContext | None = None,
    ) -> BrokerConnection:
        connection: BrokerConnection | None = None

        def on_frame(payload: bytes) -> None:
            connection._on_response(payload)

        loop = asyncio.get_running_loop()
        _, frames = await loop.create_connection(
            lambda: ResponseFrames(on_frame), host, port, ssl=ssl
        )
        connection = cls(frames, client_id)
        return connection

    async def send(self, request: Any) -> Any:
        """Send a kio request entity and wait for its response entity."""
        return await self.send_raw(request, expect_response=True)

    async def send_raw(self, request: Any, expect_response: bool = True) -> Any:
        if self.closed:
            raise ConnectionClosed("connection is closed")
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        payload = codec.encode_request(request, correlation_id, self._client_id)
        future = asyncio.get_running_loop().create_future()
        if expect_response:
            self._pending[correlation_id] = (future, request.__api_key__, request.__version__)
        self._transport.write(_SIZE.pack(len(payload)) + payload)
        await self._frames.drain()
        if not expect_response:
            return None
        return await future

    async def send_frame(self, payload: bytes) -> bytes:
        """Send a hand-made request (header and body) as one frame; return the raw response
        payload. For protocol tests: the caller picks a correlation id the client never uses."""
        future = asyncio.get_running_loop().create_future()
        self._pending[codec.peek_correlation_id(payload)] = (future, -1, -1)
        self._transport.write(_SIZE.pack(len(payload)) + payload)
        await self._frames.drain()
        return await future

    def _on_response(self, payload: bytes | memoryview) -> None:
        correlation_id = _SIZE.unpack_from(payload, 0)[0]
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return
        future, api_key, api_version = entry
        if future.done():  # its caller gave up waiting (cancelled, timed out)
            return
        if api_key < 0:
            future.set_result(bytes(payload))
            return
        try:
            future.set_result(codec.decode_response(payload, api_key, api_version)[1])
        except Exception as e:  # a response we cannot parse fails its request only
            future.set_exception(e)

    def _fail_pending(self, _: asyncio.Future) -> None:
        for future, _, _ in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed("connection closed by the broker"))
        self._pending.clear()

    def when_lost(self, callback: Callable[[], None]) -> None:
        """Call `callback` as soon as the broker closes the connection (or the network loses
        it): before the requests waiting on it fail."""
        self._frames.on_lost = callback

    @property
    def closed(self) -> bool:
        return self._frames.closed.done()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._frames.closed)

    async def close(self) -> None:
        self._frames.close()
