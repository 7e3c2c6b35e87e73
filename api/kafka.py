"""The control plane's one road to the broker: Kafka clients from broker.client, kept open on an
event loop of their own.

Django views are synchronous and Celery tasks run in worker processes; both reach the broker
through `call`, which runs a coroutine on this process's client loop and waits for its result.
The loop lives in a daemon thread and keeps one connection pool per client kind, so a page view
costs a request, not a connection and an ApiVersions/SASL handshake. A forked worker starts its
own loop: sockets are not shared across processes.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TypeVar

from django.conf import settings

from broker.client import AdminClient, Security
from broker.client.cluster import ClusterClient

T = TypeVar("T")
C = TypeVar("C", bound=ClusterClient)

# What a single call may take before the view answers 504; the broker bounds its own waits
# (request.timeout.ms) below this.
CALL_TIMEOUT_SECONDS = 35.0


class BrokerUnavailable(Exception):
    """No bootstrap server answered: the control plane cannot reach the cluster."""


def security_from_settings() -> Security:
    protocol = settings.FJORD_SECURITY_PROTOCOL
    context = None
    if protocol.endswith("SSL"):
        context = ssl.create_default_context(cafile=settings.FJORD_SSL_CAFILE)
        if settings.FJORD_SSL_CERTFILE:
            context.load_cert_chain(settings.FJORD_SSL_CERTFILE, settings.FJORD_SSL_KEYFILE)
    return Security(
        protocol=protocol,
        ssl_context=context,
        sasl_mechanism=settings.FJORD_SASL_MECHANISM,
        username=settings.FJORD_SASL_USERNAME,
        password=settings.FJORD_SASL_PASSWORD,
    )


class ClientLoop:
    """An event loop in a daemon thread holding one started client per client class."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.clients: dict[type[ClusterClient], ClusterClient] = {}
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="fjord-kafka", daemon=True
        )
        self.thread.start()

    def submit(self, coro: Awaitable[T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    async def client(self, cls: type[C]) -> C:
        client = self.clients.get(cls)
        if client is None:
            client = cls(
                settings.FJORD_BOOTSTRAP, security_from_settings(), client_id="fjord-control"
            )
            try:
                await client.start()
            except (OSError, ConnectionError) as e:
                await client.close()
                raise BrokerUnavailable(f"no broker answers at {settings.FJORD_BOOTSTRAP}") from e
            self.clients[cls] = client
        return client  # type: ignore[return-value]

    async def run(self, cls: type[C], operation: Callable[[C], Awaitable[T]]) -> T:
        client = await self.client(cls)
        try:
            return await operation(client)
        except (OSError, ConnectionError) as e:
            # The broker went away mid-call: the next call bootstraps afresh.
            self.clients.pop(cls, None)
            await client.close()
            raise BrokerUnavailable(f"lost the connection to {settings.FJORD_BOOTSTRAP}") from e

    async def close(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            await client.close()


_lock = threading.Lock()
_loop: ClientLoop | None = None
_loop_pid = 0


def _client_loop() -> ClientLoop:
    global _loop, _loop_pid
    with _lock:
        if _loop is None or _loop_pid != os.getpid():
            _loop, _loop_pid = ClientLoop(), os.getpid()
        return _loop


def call(operation: Callable[[C], Awaitable[T]], client: type[C] = AdminClient) -> T:  # type: ignore[assignment]
    """Run `operation(client)` on the broker and return its result, from synchronous code.

    `kafka.call(lambda admin: admin.list_topics())`; raises KafkaAdminError for a Kafka error,
    BrokerUnavailable when no broker answers, TimeoutError past CALL_TIMEOUT_SECONDS.
    """
    loop = _client_loop()
    return loop.submit(loop.run(client, operation)).result(CALL_TIMEOUT_SECONDS)


async def acall(operation: Callable[[C], Awaitable[T]], client: type[C] = AdminClient) -> T:  # type: ignore[assignment]
    """`call` from a coroutine on another loop (Channels consumers, daphne's sampler)."""
    loop = _client_loop()
    return await asyncio.wait_for(
        asyncio.wrap_future(loop.submit(loop.run(client, operation))), CALL_TIMEOUT_SECONDS
    )


def reset() -> None:
    """Close every client of this process, so that the next call reads settings afresh (tests
    point the control plane at another broker)."""
    global _loop
    with _lock:
        loop, _loop = _loop, None
    if loop is not None and _loop_pid == os.getpid():
        loop.submit(loop.close()).result(CALL_TIMEOUT_SECONDS)
        loop.loop.call_soon_threadsafe(loop.loop.stop)
