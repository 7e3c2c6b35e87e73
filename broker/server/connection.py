"""One client connection: frames in, requests dispatched, responses out in request order.

Kafka clients pipeline requests and match responses by order, so a slow request (a parked
fetch) holds back the responses behind it. Reading stops while too many requests are in
flight or the socket's write buffer is full, which bounds what one connection can make the
broker hold.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque

from kio.schema.errors import ErrorCode

from broker.apis.api_versions import api_versions_response
from broker.apis.base import RequestContext
from broker.apis.produce import CLOSE_CONNECTION
from broker.protocol import codec
from broker.protocol.framing import FrameDecoder, FrameTooLarge, InvalidFrame, frame

log = logging.getLogger("broker.connection")


class _Slot:
    """A response position in the connection's queue."""

    __slots__ = ("payload", "done", "close")

    def __init__(self) -> None:
        self.payload: list[bytes | memoryview] | None = None  # response buffers
        self.done = False
        self.close = False


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker, listener: str) -> None:
        self.broker = broker
        self.listener = listener
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
        self.max_in_flight = broker.config["queued.max.requests"]
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._queue: deque[_Slot] = deque()
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False
        self._tasks: set[asyncio.Task] = set()

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if peer else "?"
        self.broker.connections.add(self)
        self.broker.metrics.connections.labels(self.listener).inc()

    def connection_lost(self, exc) -> None:
        self._closed = True
        self.broker.connections.discard(self)
        self.broker.metrics.connections.labels(self.listener).dec()
        for task in self._tasks:
            task.cancel()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except (FrameTooLarge, InvalidFrame) as e:
            log.warning("closing connection from %s: %s", self.peer, e)
            self.close()
            return
        for payload in frames:
            if self._closed:
                return
            self._dispatch(payload)
        self._update_reading()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self, payload: bytes) -> None:
        started = time.perf_counter()
        try:
            api_key, api_version = codec.peek_key_version(payload)
            correlation_id = codec.peek_correlation_id(payload)
        except (codec.DecodeError, Exception):
            self._protocol_error("a frame too short for a request header")
            return
        spec = self.broker.api_specs.get(api_key)
        if spec is None or not spec.min_version <= api_version <= spec.max_version:
            if api_key == codec.API_VERSIONS_KEY:
                # Answer in v0 so that any client can read which versions we do serve.
                ctx = self._context(api_key, 0, correlation_id, None)
                self._respond_now(
                    ctx,
                    api_versions_response(
                        ctx, self.broker.api_specs, ErrorCode.unsupported_version
                    ),
                    started,
                )
            else:
                self._protocol_error(f"unsupported API key {api_key} version {api_version}")
            return
        try:
            request = codec.decode_request(payload, api_key, api_version)
        except codec.DecodeError as e:
            self._protocol_error(str(e))
            return
        ctx = self._context(api_key, api_version, correlation_id, request.client_id)
        self.broker.metrics.request_bytes.labels(spec.name).inc(len(payload) + 4)
        try:
            result = spec.handler(self.broker, ctx, request.body)
        except Exception:
            log.exception("%s v%d from %s failed", spec.name, api_version, self.peer)
            self.close()
            return
        if inspect.isawaitable(result):
            slot = _Slot()
            self._queue.append(slot)
            task = asyncio.ensure_future(self._complete(slot, ctx, result, started))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._respond_now(ctx, result, started)

    def _context(self, api_key, api_version, correlation_id, client_id) -> RequestContext:
        return RequestContext(
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=client_id,
            client_host=self.peer,
            listener=self.listener,
        )

    async def _complete(self, slot: _Slot, ctx: RequestContext, awaitable, started) -> None:
        try:
            response = await awaitable
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("api key %d v%d from %s failed", ctx.api_key, ctx.api_version, self.peer)
            slot.close = True
        else:
            self._fill(slot, ctx, response, started)
        slot.done = True
        self._flush()

    def _respond_now(self, ctx, response, started) -> None:
        if not self._queue:
            slot = _Slot()
            self._fill(slot, ctx, response, started)
            if slot.close:
                self.close()
            elif slot.payload is not None:
                self.transport.writelines(frame(slot.payload))
            return
        slot = _Slot()
        self._fill(slot, ctx, response, started)
        slot.done = True
        self._queue.append(slot)
        self._flush()

    def _fill(self, slot: _Slot, ctx: RequestContext, response, started: float) -> None:
        name = self.broker.api_specs[ctx.api_key].name
        metrics = self.broker.metrics
        metrics.requests.labels(name).inc()
        metrics.request_latency.labels(name).observe(time.perf_counter() - started)
        if response is CLOSE_CONNECTION:
            slot.close = True
        elif response is not None:
            slot.payload = codec.encode_response(ctx.correlation_id, response)
            metrics.response_bytes.labels(name).inc(sum(map(len, slot.payload)) + 4)

    def _flush(self) -> None:
        queue = self._queue
        while queue and queue[0].done:
            slot = queue.popleft()
            if self._closed:
                return
            if slot.close:
                self.close()
                return
            if slot.payload is not None:
                self.transport.writelines(frame(slot.payload))
        self._update_reading()

    def _update_reading(self) -> None:
        if self._closed:
            return
        should_pause = self._writing_paused or len(self._queue) >= self.max_in_flight
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def _protocol_error(self, reason: str) -> None:
        # Kafka closes a connection that sends a request it cannot parse; others are unaffected.
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.transport.close()
