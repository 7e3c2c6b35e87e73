"""Producer: one record per Produce request, acks=all, routed to the partition leader.

Made for the control plane (test messages, imports), not throughput: no batching, no linger,
no idempotence (no producer id), so a retry after a lost connection may write a record twice,
as Kafka's non-idempotent producer may.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client.errors import KafkaAdminError, check
from broker.client.models import RecordMetadata
from broker.client.routing import RoutingClient, partition_for_key
from broker.records import compression as codecs
from broker.records.batch import build_batch

PRODUCE = 0
ACKS_ALL = -1

_CODECS = {name: codec for codec, name in codecs.CODEC_NAMES.items()}


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
