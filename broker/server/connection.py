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

from broker.addresses import normalise_address
from broker.apis.api_versions import api_versions_response
from broker.apis.base import (
    RequestContext,
    has_throttle_time,
    throttle_time_ms,
    with_throttle_time,
)
from broker.apis.fetch import replica_id
from broker.apis.produce import CLOSE_CONNECTION
from broker.apis.registry import API_SPECS
from broker.protocol import codec
from broker.protocol.framing import FrameDecoder, FrameTooLarge, InvalidFrame, frame
from broker.quota.quota_manager import monotonic_ms
from broker.security.listener import ListenerSecurity
from broker.security.tls import ANONYMOUS, NoMatchingRule, peer_principal
from broker.server import sasl_exchange
from broker.server.file_sender import FileSender
from broker.storage.file_slice import FileSlice, close_slices

log = logging.getLogger("broker.connection")

PRODUCE_KEY, FETCH_KEY = 0, 1


class _Slot:
    """A response position in the connection's queue."""

    __slots__ = ("payload", "done", "close")

    def __init__(self) -> None:
        self.payload: list[bytes | memoryview] | None = None  # response buffers
        self.done = False
        self.close = False


class _Timed:
    """An awaitable that adds up the time its coroutine runs on the loop, not the time it
    waits: the request time a request_percentage quota counts (Kafka's request handler time)."""

    __slots__ = ("_awaitable", "seconds")

    def __init__(self, awaitable, seconds: float) -> None:
        self._awaitable = awaitable
        self.seconds = seconds

    def __await__(self):
        steps = self._awaitable.__await__()
        value, error = None, None
        while True:
            started = time.perf_counter()
            try:
                sent = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as done:
                return done.value
            finally:
                self.seconds += time.perf_counter() - started
            value, error = None, None
            try:
                value = yield sent
            except BaseException as e:  # cancellation included: handed to the coroutine
                error = e


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
        self._quotas = broker.quotas
        self._muted_until = 0.0  # loop time; 0.0: not muted
        self._mute_timer: asyncio.TimerHandle | None = None
        # Log data leaves as file slices, sent from the page cache, where no TLS is in the way.
        self._zero_copy = security.ssl_context is None
        self._sender: FileSender | None = None

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self._zero_copy:
            self._sender = FileSender(transport, self._sender_idle, self._abort)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if peer else "?"
        refused = self.broker.connection_quotas.accept(self.peer, self.listener)
        if refused is not None:
            log.info("closing connection from %s on %s: over %s", self.peer, self.listener, refused)
            self.broker.metrics.connections_refused.labels(self.listener, refused).inc()
            self.close()
            return
        throttle_ms = self._quotas.connection_rate.accept(
            self._quotas.configs, normalise_address(self.peer), monotonic_ms()
        )
        if throttle_ms > 0:
            # KIP-612: over its address's connection_creation_rate, a connection is not served
            # and is closed once the throttle time is over, so that a client retrying at once
            # does not spin.
            log.info("closing connection from %s: over its connection_creation_rate", self.peer)
            self.broker.connection_quotas.release(self.peer, self.listener)
            transport.pause_reading()
            self.broker.held_connections.add(self)  # closed by the broker's stop, if not before
            asyncio.get_running_loop().call_later(throttle_ms / 1000, self.close)
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
        if self._sender is not None:
            self._sender.close()
            for slot in self._queue:  # answered but never written: their slices' descriptors
                close_slices(slot.payload or ())
        if not self._admitted:
            self.broker.held_connections.discard(self)
            return
        self.broker.connection_quotas.release(self.peer, self.listener)
        for timer in (self._idle_timer, self._mute_timer):
            if timer is not None:
                timer.cancel()
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
        return (
            self._writing_paused
            or len(self._queue) >= self.max_in_flight
            or self._muted_until > 0.0
            or (self._sender is not None and self._sender.busy)
        )

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
        ctx = self._context(
            api_key,
            api_version,
            correlation_id,
            request.client_id,
            replication=api_key == FETCH_KEY and replica_id(request.body) >= 0,
        )
        request_bytes = len(payload) + 4
        self.broker.metrics.requests.api(api_key, spec.name).request_bytes += request_bytes
        try:
            result = spec.handler(self.broker, ctx, request.body)
        except Exception:
            log.exception("%s v%d from %s failed", spec.name, api_version, self.peer)
            self.close()
            return
        # Request time is measured only while some entity has a request_percentage quota.
        seconds = time.perf_counter() - started if self._quotas.request_time_measured else None
        if inspect.isawaitable(result):
            if seconds is not None:
                result = _Timed(result, seconds)
            slot = _Slot()
            self._queue.append(slot)
            task = asyncio.ensure_future(self._complete(slot, ctx, result, started, request_bytes))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._respond_now(ctx, result, started, request_bytes, seconds)

    def _context(
        self, api_key, api_version, correlation_id, client_id, replication=False
    ) -> RequestContext:
        return RequestContext(
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=client_id,
            client_host=self.peer,
            listener=self.listener,
            principal=self.principal,
            replication=replication,
            zero_copy=self._zero_copy,
        )

    async def _complete(
        self, slot: _Slot, ctx: RequestContext, awaitable, started, request_bytes
    ) -> None:
        try:
            response = await awaitable
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("api key %d v%d from %s failed", ctx.api_key, ctx.api_version, self.peer)
            slot.close = True
        else:
            seconds = awaitable.seconds if isinstance(awaitable, _Timed) else None
            self._fill(slot, ctx, response, started, request_bytes, seconds)
        slot.done = True
        self._flush()

    def _respond_now(self, ctx, response, started, request_bytes=0, seconds=None) -> None:
        if not self._queue:
            slot = _Slot()
            self._fill(slot, ctx, response, started, request_bytes, seconds)
            if slot.close:
                self.close()
            else:
                self._write(slot)
            return
        slot = _Slot()
        self._fill(slot, ctx, response, started, request_bytes, seconds)
        slot.done = True
        self._queue.append(slot)
        self._flush()

    def _fill(
        self,
        slot: _Slot,
        ctx: RequestContext,
        response,
        started: float,
        request_bytes: int,
        seconds: float | None,
    ) -> None:
        # From every API's specs, not the advertised ones: UpdateFeatures may stop advertising
        # an API (group.version 0) while one of its requests is still being answered.
        name = API_SPECS[ctx.api_key].name
        stats = self.broker.metrics.requests.api(ctx.api_key, name)
        stats.observe(time.perf_counter() - started)
        if response is CLOSE_CONNECTION:
            slot.close = True
            return
        encoding = time.perf_counter()
        if response is not None and not self._encode(slot, ctx, name, response):
            return
        if seconds is not None:
            seconds += time.perf_counter() - encoding
        response_bytes = sum(map(len, slot.payload)) + 4 if slot.payload is not None else 0
        throttle_ms = self._quotas.throttle_ms(
            ctx.api_key,
            ctx.user,
            ctx.client_id or "",
            request_bytes - 4 if ctx.api_key == PRODUCE_KEY else 0,  # as Kafka's sizeInBytes
            response_bytes if ctx.api_key == FETCH_KEY and not ctx.replication else 0,
            seconds,
            monotonic_ms(),
        )
        given_ms = throttle_time_ms(response)  # a handler's own (controller mutations)
        if throttle_ms > given_ms and response is not None and has_throttle_time(response):
            if not self._encode(slot, ctx, name, with_throttle_time(response, throttle_ms)):
                return
            response_bytes = sum(map(len, slot.payload)) + 4
        if max(throttle_ms, given_ms) > 0:
            # At once, not when the response is written: requests already read must not be
            # dispatched behind one that is throttled (Kafka serves one request per connection
            # at a time, so its mute catches the next one).
            self._mute(max(throttle_ms, given_ms))
        if slot.payload is not None:
            stats.response_bytes += response_bytes

    def _encode(self, slot: _Slot, ctx: RequestContext, name: str, response) -> bool:
        try:
            slot.payload = codec.encode_response(ctx.correlation_id, response)
        except Exception:
            # A response kio cannot encode is a bug; it must not leave the slot unanswered
            # forever (the connection would hang) nor escape into the event loop.
            log.exception("%s v%d response to %s failed", name, ctx.api_version, self.peer)
            slot.close = True
            return False
        return True

    def _write(self, slot: _Slot) -> None:
        payload = slot.payload
        if payload is None:
            return
        sender = self._sender
        # A slice is a part of its own, after the response's first bytes: one-part responses
        # (most) are not searched.
        if sender is not None and (
            sender.busy or (len(payload) > 1 and any(type(p) is FileSlice for p in payload))
        ):
            sender.write(frame(payload))
        else:
            self.transport.writelines(frame(payload))

    def _mute(self, throttle_ms: int) -> None:
        """KIP-219: read nothing more from a throttled client until its throttle time is over
        (requests already read wait in the backlog)."""
        until = self._loop_now() + throttle_ms / 1000
        if until <= self._muted_until:
            return
        self._muted_until = until
        if self._mute_timer is not None:
            self._mute_timer.cancel()
        self._mute_timer = asyncio.get_running_loop().call_at(until, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._mute_timer = None
        self._muted_until = 0.0
        if not self._closed:
            self._drain_backlog()

    @staticmethod
    def _loop_now() -> float:
        return asyncio.get_running_loop().time()

    def _flush(self) -> None:
        queue = self._queue
        while queue and queue[0].done:
            slot = queue.popleft()
            if self._closed:
                return
            if slot.close:
                self.close()
                return
            self._write(slot)
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
            if self._sender is not None and self._sender.busy:
                return  # closed when what is queued there is written, as the transport's own
            self.transport.close()

    def _sender_idle(self) -> None:
        if self._closed:
            self.transport.close()
        else:
            self._drain_backlog()

    def _abort(self) -> None:
        """A response broke off mid-stream: nothing more can be framed on this connection."""
        self._closed = True
        self.transport.abort()
