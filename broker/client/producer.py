"""Producer: one record per Produce request, acks=all, routed to the partition leader.

Made for the control plane (test messages, imports), not throughput: no batching, no linger,
no idempotence (no producer id), so a retry after a lost connection may write a record twice,
as Kafka's non-idempotent producer may.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from broker.client.cluster import ClusterClient
from broker.client.errors import KafkaAdminError, check
from broker.client.models import RecordMetadata
from broker.records import compression as codecs
from broker.records.batch import build_batch

T = TypeVar("T")

PRODUCE = 0
ACKS_ALL = -1

_CODECS = {name: codec for codec, name in codecs.CODEC_NAMES.items()}

# Errors after which the topic's leaders are looked up again before the next attempt.
_STALE_ROUTES = frozenset(
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

    def forget_route(self, topic: str, error: Exception) -> None:
        """Drop the cached leaders when `error` means they may have moved."""
        if not isinstance(error, KafkaAdminError) or error.code in _STALE_ROUTES:
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


class Producer(RoutingClient):
    """`async with Producer("host:9092") as producer: await producer.send("t", b"v")`"""

    DEFAULT_CLIENT_ID = "fjord-producer"

    def __init__(self, *args: Any, compression_type: str = "none", **kwargs: Any) -> None:
        """ClusterClient's arguments, and Kafka's compression.type."""
        super().__init__(*args, **kwargs)
        if compression_type not in _CODECS:
            raise ValueError(f"compression.type must be one of {', '.join(_CODECS)}")
        self.compression = _CODECS[compression_type]
        self._round_robin = itertools.count()

    async def partition_for(self, topic: str, key: bytes | None) -> int:
        """Where a record without an explicit partition goes: murmur2 of its key as Kafka's
        default partitioner, round-robin over the partitions for a null key."""
        count = (await self.route(topic)).partition_count
        if count == 0:
            raise KafkaAdminError.from_code(ErrorCode.unknown_topic_or_partition, None, topic)
        if key is not None:
            return partition_for_key(key, count)
        return next(self._round_robin) % count

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Write one record and wait for all in-sync replicas (acks=all); its offset and the
        timestamp the log keeps (the broker's for a LogAppendTime topic)."""
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        batch = build_batch(
            [(key, value, list(headers), timestamp_ms)], compression=self.compression
        )

        async def attempt() -> RecordMetadata:
            target = partition
            if target is None:
                target = await self.partition_for(topic, key)
            return await self._produce(topic, target, batch, timestamp_ms)

        return await self.retrying_routed(topic, attempt)

    async def _produce(
        self, topic: str, partition: int, batch: bytes, timestamp_ms: int
    ) -> RecordMetadata:
        _, leader = await self.leader(topic, partition)
        session = await self.session(leader)
        data = session.request(PRODUCE, "PartitionProduceData", index=partition, records=batch)
        response = await session.send(
            session.request(
                PRODUCE,
                "ProduceRequest",
                transactional_id=None,
                acks=ACKS_ALL,
                timeout=timedelta(milliseconds=self.request_timeout_ms),
                topic_data=(
                    session.request(
                        PRODUCE, "TopicProduceData", name=topic, partition_data=(data,)
                    ),
                ),
            )
        )
        result = response.responses[0].partition_responses[0]
        message = result.error_message
        if result.record_errors:
            message = "; ".join(
                e.batch_index_error_message or f"record {e.batch_index}"
                for e in result.record_errors
            )
        check(result.error_code, message, f"{topic}-{partition}")
        appended_at = result.log_append_time
        if appended_at is not None:
            timestamp_ms = int(appended_at.timestamp() * 1000)
        return RecordMetadata(topic, partition, result.base_offset, timestamp_ms)
