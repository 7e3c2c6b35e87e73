"""Where records go: Kafka's murmur2 key hash and partition leaders from Metadata, kept until
an error says they moved. Shared by the producer, the consumer and the PartitionReader."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from kio.schema.errors import ErrorCode

from broker.client.cluster import ClusterClient
from broker.client.errors import KafkaAdminError, check

T = TypeVar("T")

# Errors after which the topic's leaders are looked up again before the next attempt.
STALE_ROUTES = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_id,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
    }
)


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (seed 0x9747b28c) as an unsigned 32-bit value: the hash the Java
    client's default partitioner and librdkafka's murmur2 partitioners place keys with."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    tail = length & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    left = length & 3
    if left == 3:
        h ^= data[tail + 2] << 16
    if left >= 2:
        h ^= data[tail + 1] << 8
    if left >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: toPositive(murmur2(key)) % partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


@dataclass(frozen=True)
class TopicRoute:
    topic_id: uuid.UUID | None
    leaders: dict[int, int]  # partition -> leader node id (-1: none)

    @property
    def partition_count(self) -> int:
        return len(self.leaders)

    @cached_property
    def available_partitions(self) -> list[int]:
        """The partitions with a leader."""
        return [p for p, leader in self.leaders.items() if leader >= 0]


class RoutingClient(ClusterClient):
    """Partition leaders from Metadata, kept until an error says they moved."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._routes: dict[str, TopicRoute] = {}

    async def route(self, topic: str) -> TopicRoute:
        """The topic's id and partition leaders; UNKNOWN_TOPIC_OR_PARTITION when it does not
        exist (answered at once: the control plane asks about topics it names)."""
        route = self._routes.get(topic)
        if route is None:
            response = await self.metadata([topic])
            for t in response.topics:
                check(t.error_code, None, t.name)
                if t.name == topic:
                    route = TopicRoute(
                        getattr(t, "topic_id", None),
                        {p.partition_index: p.leader_id for p in t.partitions},
                    )
            if route is None:
                raise KafkaAdminError.from_code(ErrorCode.unknown_topic_or_partition, None, topic)
            self._routes[topic] = route
        return route

    async def leader(self, topic: str, partition: int) -> tuple[TopicRoute, int]:
        route = await self.route(topic)
        leader = route.leaders.get(partition)
        if leader is None:
            raise KafkaAdminError.from_code(
                ErrorCode.unknown_topic_or_partition, None, f"{topic}-{partition}"
            )
        if leader < 0:
            self._routes.pop(topic, None)
            raise KafkaAdminError.from_code(
                ErrorCode.leader_not_available, None, f"{topic}-{partition}"
            )
        return route, leader

    def cached_route(self, topic: str) -> TopicRoute | None:
        """The leaders known without asking, if any."""
        return self._routes.get(topic)

    def forget_route(self, topic: str, error: Exception | None) -> None:
        """Drop the cached leaders when `error` means they may have moved (None: they
        did)."""
        if not isinstance(error, KafkaAdminError) or error.code in STALE_ROUTES:
            self._routes.pop(topic, None)

    async def retrying_routed(self, topic: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """`retrying`, with the topic's leaders looked up afresh after an error that says
        they moved."""

        async def routed() -> T:
            try:
                return await attempt()
            except Exception as e:
                self.forget_route(topic, e)
                raise

        return await self.retrying(routed)
