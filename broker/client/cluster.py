"""The admin client's view of the cluster: a session per broker node learned from Metadata,
coordinators found with FindCoordinator, and bounded retries of retriable errors."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Self, TypeVar

from kio.schema.errors import ErrorCode

from broker.client.connection import ConnectionClosed
from broker.client.errors import KafkaAdminError, check
from broker.client.models import Node, TopicPartition
from broker.client.session import Security, Session, open_session

T = TypeVar("T")

LIST_OFFSETS, METADATA, FIND_COORDINATOR = 2, 3, 10
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types

# Errors that clear up by themselves or after re-routing: a coordinator or leader moved or is
# still loading. Anything else is the caller's to see at once (Kafka marks
# UNKNOWN_TOPIC_OR_PARTITION retriable for producers; for an admin it is an answer).
RETRIABLE = frozenset(
    {
        ErrorCode.network_exception,
        ErrorCode.request_timed_out,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.not_controller,
    }
)


def _address(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    return host.strip("[]"), int(port)


async def ask_metadata(session: Session, topics: Sequence[str] | None) -> Any:
    """The broker's Metadata response for `topics` (None: all), creating none."""
    request_topics = None
    if topics is not None:
        request_topics = tuple(
            session.request(METADATA, "MetadataRequestTopic", name=t, topic_id=None) for t in topics
        )
    return await session.send(
        session.request(
            METADATA,
            "MetadataRequest",
            topics=request_topics,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
            include_cluster_authorized_operations=False,
        )
    )


class ClusterClient:
    # What the broker's logs and quotas see unless the caller names the client.
    DEFAULT_CLIENT_ID = "fjord-admin"

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        security: Security | None = None,
        *,
        client_id: str | None = None,
        retries: int = 5,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
    ) -> None:
        servers = (
            bootstrap_servers.split(",")
            if isinstance(bootstrap_servers, str)
            else bootstrap_servers
        )
        self._bootstrap = [_address(s) for s in servers if s.strip()]
        if not self._bootstrap:
            raise ValueError("no bootstrap servers")
        self.security = security or Security()
        self.client_id = client_id or self.DEFAULT_CLIENT_ID
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        # What the broker may take for work it waits on (topic creation, ListOffsets v10+).
        self.request_timeout_ms = request_timeout_ms
        self.nodes: dict[int, Node] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        self._sessions: dict[int, Session] = {}
        self._any: Session | None = None
        self._coordinators: dict[tuple[int, str], int] = {}
        self._opening = asyncio.Lock()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        await self.metadata()

    async def close(self) -> None:
        sessions = {id(s): s for s in [*self._sessions.values(), self._any] if s is not None}
        self._sessions.clear()
        self._any = None
        for session in sessions.values():
            await session.close()

    async def _open(self, host: str, port: int) -> Session:
        return await open_session(host, port, self.security, self.client_id)

    async def any_session(self) -> Session:
        """A session to some broker, for requests any of them answers."""
        if self._any is None or self._any.closed:
            self._any = None
            errors: list[Exception] = []
            for host, port in self._bootstrap:
                try:
                    self._any = await self._open(host, port)
                    break
                except (OSError, ConnectionClosed) as e:
                    errors.append(e)
            else:
                raise ConnectionError(f"no bootstrap server answers: {errors}")
        return self._any

    def open_session(self, node_id: int) -> Session | None:
        """The connection to `node_id` if one is open; None rather than opening one."""
        session = self._sessions.get(node_id)
        return session if session is not None and not session.closed else None

    async def session(self, node_id: int) -> Session:
        session = self.open_session(node_id)
        if session is not None:
            return session
        # One connection per node: concurrent callers (a producer's requests in flight) wait
        # for the one being opened instead of each opening, and leaking, their own.
        async with self._opening:
            session = self._sessions.get(node_id)
            if session is None or session.closed:
                if node_id not in self.nodes:
                    await self.metadata()
                node = self.nodes.get(node_id)
                if node is None:
                    raise KafkaAdminError.from_code(
                        ErrorCode.broker_not_available, f"broker {node_id} is not in the cluster"
                    )
                session = self._sessions[node_id] = await self._open(node.host, node.port)
        return session

    async def send_to_every_node(
        self, api_key: int, request_name: str, nodes: Iterable[int] | None = None, **fields
    ) -> dict[int, Any]:
        """One request to each of `nodes` (default: every broker) at once, their responses
        by node in node order: what each broker answers only for itself (groups,
        transactions, log dirs). A response's top-level error is raised."""
        if nodes is None:
            await self.metadata()
            nodes = self.nodes
        ordered = sorted(nodes)

        async def send(node_id: int) -> Any:
            session = await self.session(node_id)
            response = await session.send(session.request(api_key, request_name, **fields))
            check(getattr(response, "error_code", ErrorCode.none))
            return response

        return dict(zip(ordered, await asyncio.gather(*map(send, ordered)), strict=True))

    async def controller(self) -> Session:
        # KRaft brokers forward controller requests; Fjord's single node answers them itself.
        if self.controller_id in self.nodes:
            return await self.session(self.controller_id)
        return await self.any_session()

    async def metadata(self, topics: Sequence[str] | None = ()) -> Any:
        """A Metadata response for those topics (None: all), refreshing the broker list."""
        response = await ask_metadata(await self.any_session(), topics)
        self.nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        return response

    async def coordinator(self, key_type: int, key: str) -> Session:
        node_id = self._coordinators.get((key_type, key))
        if node_id is None:
            session = await self.any_session()
            response = await session.send(
                session.request(
                    FIND_COORDINATOR,
                    "FindCoordinatorRequest",
                    key_type=key_type,
                    coordinator_keys=(key,),
                )
            )
            found = response.coordinators[0]
            check(found.error_code, found.error_message, key)
            node_id = self._coordinators[(key_type, key)] = found.node_id
            if node_id not in self.nodes:
                self.nodes[node_id] = Node(node_id, found.host, found.port)
        return await self.session(node_id)

    def forget_coordinator(self, key_type: int, key: str) -> None:
        """Look the coordinator up again next time (it moved, or its connection broke)."""
        self._coordinators.pop((key_type, key), None)

    async def list_offsets_at(
        self, leader: int, tps: list[TopicPartition], timestamp: int, isolation_level: int
    ) -> dict[TopicPartition, int]:
        """One ListOffsets to the leader of `tps`: the offset of each for `timestamp` (-2 log
        start, -1 end, or milliseconds; -1 when every record is older), or its error."""
        found = await self.list_offsets_and_timestamps(leader, tps, timestamp, isolation_level)
        return {tp: offset for tp, (offset, _) in found.items()}

    async def list_offsets_and_timestamps(
        self, leader: int, tps: list[TopicPartition], timestamp: int, isolation_level: int
    ) -> dict[TopicPartition, tuple[int, int]]:
        """`list_offsets_at`, with the timestamp of the record found (-1 for log ends)."""
        session = await self.session(leader)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in tps:
            by_topic[topic].append(partition)
        topics = tuple(
            session.request(
                LIST_OFFSETS,
                "ListOffsetsTopic",
                name=topic,
                partitions=tuple(
                    session.request(
                        LIST_OFFSETS,
                        "ListOffsetsPartition",
                        partition_index=p,
                        current_leader_epoch=-1,
                        timestamp=timestamp,
                    )
                    for p in ps
                ),
            )
            for topic, ps in by_topic.items()
        )
        response = await session.send(
            session.request(
                LIST_OFFSETS,
                "ListOffsetsRequest",
                replica_id=-1,
                isolation_level=isolation_level,
                topics=topics,
                timeout=timedelta(milliseconds=self.request_timeout_ms),
            )
        )
        offsets = {}
        for t in response.topics:
            for p in t.partitions:
                check(p.error_code, None, f"{t.name}-{p.partition_index}")
                offsets[(t.name, p.partition_index)] = (p.offset, p.timestamp)
        return offsets

    async def retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt` again on a retriable error or a lost connection, at most `retries`
        times with exponential backoff; coordinators are looked up afresh each time."""
        for n in range(self.retries):
            try:
                return await attempt()
            except KafkaAdminError as e:
                if e.code not in RETRIABLE:
                    raise
            except (ConnectionClosed, OSError):
                pass
            self._coordinators.clear()
            await asyncio.sleep(self.retry_backoff_ms * 2**n / 1000)
        return await attempt()
