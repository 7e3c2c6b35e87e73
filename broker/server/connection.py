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
from broker.apis.registry import API_SPECS
from broker.protocol import codec
from broker.protocol.framing import FrameDecoder, FrameTooLarge, InvalidFrame, frame
from broker.security.listener import ListenerSecurity
from broker.security.tls import ANONYMOUS, NoMatchingRule, peer_principal
from broker.server import sasl_exchange

log = logging.getLogger("broker.connection")


class _Slot:
    """A response position in the connection's queue."""

    __slots__ = ("payload", "done", "close")

    def __init__(self) -> None:
        self.payload: list[bytes | memoryview] | None = None  # response buffers
        self.done = False
        self.close = False


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker, listener: str, security: ListenerSecurity) -> None:
        self.broker = broker
        self.listener = listener
        self.security = security
        # PLAINTEXT, and SSL without a client certificate, stay anonymous; SASL listeners
        # learn the principal from the exchange, SSL ones from the certificate.
        self.principal = ANONYMOUS
        self.authenticator = (
            security.authenticator(broker.scram_credential) if security.uses_sasl else None
        )
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
        if self.authenticator is not None:
            # Until authenticated, frames are bounded by sasl.server.max.receive.size.
            self.decoder.max_size = min(
                self.decoder.max_size, broker.config["sasl.server.max.receive.size"]
            )
        self.max_in_flight = broker.config["queued.max.requests"]
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._queue: deque[_Slot] = deque()
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False
        self._tasks: set[asyncio.Task] = set()
        # Frames read but not yet dispatched: those behind the one that filled the write
        # buffer or the in-flight queue wait here, at most one read's worth of bytes.
        self._backlog: deque[bytes | memoryview] = deque()
        self._draining = False
        self._admitted = False
        self._idle_timeout = broker.config["connections.max.idle.ms"] / 1000
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_active = 0.0

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if peer else "?"
        refused = self.broker.connection_quotas.accept(self.peer, self.listener)
        if refused is not None:
            log.info("closing connection from %s on %s: over %s", self.peer, self.listener, refused)
            self.broker.metrics.connections_refused.labels(self.listener, refused).inc()
            self.close()
            return
        self._admitted = True
        self.broker.connections.add(self)
        self.broker.metrics.connections.labels(self.listener).inc()
        if self._idle_timeout >= 0:
            self._loop = asyncio.get_running_loop()
            self._last_active = self._loop.time()
            self._idle_timer = self._loop.call_later(self._idle_timeout, self._check_idle)
        if self.security.protocol == "SSL":
            try:
                self.principal = peer_principal(
                    transport.get_extra_info("ssl_object"), self.security.principal_mapper
                )
            except NoMatchingRule as e:
                log.warning("closing connection from %s: %s", self.peer, e)
                self.close()

    def connection_lost(self, exc) -> None:
        self._closed = True
        if not self._admitted:
            return
        self.broker.connection_quotas.release(self.peer, self.listener)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
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
        if self._idle_timer is not None:
            self._last_active = self._loop.time()
        self._backlog.extend(frames)
        self._drain_backlog()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._drain_backlog()

    def _drain_backlog(self) -> None:
        """Dispatch read frames until the connection must pause: a burst of small requests
        with large responses then stops at the write buffer's high-water mark instead of
        writing every response of the burst."""
        if self._draining:
            return  # a response written by the loop below flushed the queue: the loop goes on
        self._draining = True
        try:
            backlog = self._backlog
            while backlog and not self._closed and not self._must_pause():
                self._dispatch(backlog.popleft())
        finally:
            self._draining = False
        self._update_reading()

    def _must_pause(self) -> bool:
        return self._writing_paused or len(self._queue) >= self.max_in_flight

    def _check_idle(self) -> None:
        """connections.max.idle.ms: one timer per connection, re-armed for the deadline the
        last read set. A request still in flight (a parked fetch) keeps the connection busy."""
        if self._closed:
            return
        now = self._loop.time()
        if self._queue or self._backlog:
            self._last_active = now
        deadline = self._last_active + self._idle_timeout
        if now >= deadline:
            idle_ms = (now - self._last_active) * 1000
            log.info("closing connection from %s: no request for %.0f ms", self.peer, idle_ms)
            self.broker.metrics.connections_idle_closed.labels(self.listener).inc()
            self.close()
            return
        self._idle_timer = self._loop.call_later(deadline - now, self._check_idle)

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self, payload: bytes) -> None:
        started = time.perf_counter()
        if self.authenticator is not None and not self.authenticator.complete:
            if sasl_exchange.handle_frame(self, payload, started):
                return
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
            principal=self.principal,
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
        # From every API's specs, not the advertised ones: UpdateFeatures may stop advertising
        # an API (group.version 0) while one of its requests is still being answered.
        name = API_SPECS[ctx.api_key].name
        metrics = self.broker.metrics
        metrics.requests.labels(name).inc()
        metrics.request_latency.labels(name).observe(time.perf_counter() - started)
        if response is CLOSE_CONNECTION:
            slot.close = True
        elif response is not None:
            try:
                slot.payload = codec.encode_response(ctx.correlation_id, response)
            except Exception:
                # A response kio cannot encode is a bug; it must not leave the slot unanswered
                # forever (the connection would hang) nor escape into the event loop.
                log.exception("%s v%d response to %s failed", name, ctx.api_version, self.peer)
                slot.close = True
                return
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
        self._drain_backlog()

    def _update_reading(self) -> None:
        if self._closed:
            return
        # Frames still in the backlog are read but not dispatched: read no more until they are.
        should_pause = self._must_pause() or bool(self._backlog)
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

    def respond_then_close(self, ctx: RequestContext, response, started: float) -> None:
        """Answer a failed authentication, then close once the answer is written and
        connection.failed.authentication.delay.ms has passed (KIP-306)."""
        self._respond_now(ctx, response, started)
        delay = self.broker.config["connection.failed.authentication.delay.ms"] / 1000
        asyncio.get_running_loop().call_later(delay, self._close_when_answered)

    def _close_when_answered(self) -> None:
        closing = _Slot()
        closing.done = closing.close = True
        self._queue.append(closing)
        self._flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.transport.close()
