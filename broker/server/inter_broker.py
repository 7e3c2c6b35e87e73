"""Connections from this broker to the other brokers of its cluster, on the inter-broker
listener at the endpoints they registered."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client.errors import KafkaAdminError
from broker.client.session import Session, open_session


async def open_inter_broker_session(broker, node_id: int, client_id: str) -> Session:
    """A session with broker `node_id`; ConnectionError when it registered no endpoint on the
    inter-broker listener."""
    registration = broker.image.brokers.get(node_id)
    listener = broker.config.inter_broker_listener
    if registration is None or listener not in registration.endpoints:
        raise ConnectionError(f"broker {node_id} has no {listener} endpoint")
    host, port = registration.endpoints[listener]
    return await open_session(
        host, port, broker.inter_broker_security, client_id=f"{client_id}-{broker.node_id}"
    )


class InterBrokerSessions:
    """One session per broker, opened on first use and again after `drop` (a failed request).
    `log` is where `send` reports the requests that failed."""

    def __init__(self, broker, client_id: str, log: logging.Logger) -> None:
        self.broker = broker
        self.client_id = client_id
        self.log = log
        self._sessions: dict[int, Session] = {}
        self._opening: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def get(self, node_id: int) -> Session:
        async with self._opening[node_id]:
            session = self._sessions.get(node_id)
            if session is None or session.closed:
                session = await open_inter_broker_session(self.broker, node_id, self.client_id)
                self._sessions[node_id] = session
            return session

    async def send(
        self, node_id: int, send: Callable[[Session], Awaitable[Any]], what: str
    ) -> Any | None:
        """`send(session)` with broker `node_id`'s session, and the response; None when the
        broker could not be reached, refused the request or did not answer within
        request.timeout.ms (then the failure is logged, `what` naming the request, and the
        session dropped, to be opened again on next use)."""
        timeout_s = self.broker.config["request.timeout.ms"] / 1000
        try:
            return await asyncio.wait_for(self._send(node_id, send), timeout_s)
        except (OSError, TimeoutError, KafkaAdminError) as e:
            self.log.info("%s to broker %d failed: %s", what, node_id, e)
            await self.drop(node_id)
            return None

    async def _send(self, node_id: int, send: Callable[[Session], Awaitable[Any]]) -> Any:
        return await send(await self.get(node_id))

    async def drop(self, node_id: int) -> None:
        session = self._sessions.pop(node_id, None)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()


def partition_answers(
    asked: Iterable[tuple[str, int]], answered: Iterable[tuple[str, int, int]]
) -> dict[tuple[str, int], ErrorCode]:
    """The error code another broker gave each partition asked about, from its response's
    (topic, partition, error code) rows; UNKNOWN_SERVER_ERROR for one it left out."""
    answers = dict.fromkeys(asked, ErrorCode.unknown_server_error)
    for topic, index, code in answered:
        if (topic, index) in answers:
            answers[(topic, index)] = ErrorCode(code)
    return answers


def by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """Partition indexes by topic, as requests name them."""
    grouped: dict[str, list[int]] = defaultdict(list)
    for topic, index in partitions:
        grouped[topic].append(index)
    return grouped
