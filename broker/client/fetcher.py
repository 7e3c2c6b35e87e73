"""PartitionReader: records of one partition from an offset or a timestamp, without a group.

What a console's "show messages" or an export job needs: sessionless Fetch requests (session
id 0, epoch -1) to the partition leader that never wait (max_wait 0), decoded as a Kafka
consumer does (record_decoder.py).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client.errors import KafkaAdminError, check
from broker.client.models import ConsumerRecord
from broker.client.record_decoder import ISOLATION_LEVELS, FetchedChunk, decode_records
from broker.client.routing import RoutingClient
from broker.client.session import Session

FETCH = 1
_MAX_FETCH_BYTES = (1 << 31) - 1


class PartitionReader(RoutingClient):
    """`async with PartitionReader("host:9092") as reader: await reader.read("t", 0, offset=0)`"""

    DEFAULT_CLIENT_ID = "fjord-reader"

    async def read(
        self,
        topic: str,
        partition: int,
        *,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        max_records: int = 50,
        isolation_level: str = "read_uncommitted",
        max_bytes: int = 1 << 20,
    ) -> list[ConsumerRecord]:
        """Up to `max_records` records from `offset`, or from the first record whose timestamp
        is at least `timestamp_ms`; [] at the end of the log. OFFSET_OUT_OF_RANGE for an
        offset outside [log start, high watermark]."""
        if (offset is None) == (timestamp_ms is None):
            raise ValueError("give exactly one of offset and timestamp_ms")
        isolation = _isolation(isolation_level)
        if timestamp_ms is not None:
            offset = await self.offset_for_timestamp(topic, partition, timestamp_ms, isolation)
            if offset < 0:
                return []
        records: list[ConsumerRecord] = []
        while len(records) < max_records:
            chunk = await self._fetch(
                topic, partition, offset, isolation, max_bytes, max_records - len(records)
            )
            records += chunk.records
            # Stop at the end of the log, or once some records came: a caller paging through
            # asks again from the last offset + 1.
            if records or chunk.next_offset >= chunk.end_offset or chunk.next_offset <= offset:
                break
            offset = chunk.next_offset
        return records

    async def iter_records(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        end_offset: int | None = None,
        *,
        isolation_level: str = "read_uncommitted",
        max_bytes: int = 1 << 20,
    ) -> AsyncIterator[ConsumerRecord]:
        """Every record from `start_offset` up to, excluding, `end_offset` (None: the end of
        the log when each fetch is answered), in offset order, for exports."""
        isolation = _isolation(isolation_level)
        offset = start_offset
        while end_offset is None or offset < end_offset:
            chunk = await self._fetch(topic, partition, offset, isolation, max_bytes, None)
            for record in chunk.records:
                if end_offset is not None and record.offset >= end_offset:
                    return
                yield record
            if chunk.next_offset <= offset:
                return  # nothing left to read before the end of the log
            offset = chunk.next_offset

    async def offset_for_timestamp(
        self, topic: str, partition: int, timestamp_ms: int, isolation: int = 0
    ) -> int:
        """ListOffsets: the first offset whose timestamp is at least `timestamp_ms`; -1 when
        every record is older. -2 and -1 ask for the log start and end, as in Kafka."""

        async def attempt() -> int:
            _, leader = await self.leader(topic, partition)
            offsets = await self.list_offsets_at(
                leader, [(topic, partition)], timestamp_ms, isolation
            )
            return offsets[(topic, partition)]

        return await self.retrying_routed(topic, attempt)

    async def _fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        isolation: int,
        max_bytes: int,
        max_records: int | None,
    ) -> FetchedChunk:
        return await self.retrying_routed(
            topic,
            lambda: self._fetch_once(topic, partition, offset, isolation, max_bytes, max_records),
        )

    async def _fetch_once(
        self,
        topic: str,
        partition: int,
        offset: int,
        isolation: int,
        max_bytes: int,
        max_records: int | None,
    ) -> FetchedChunk:
        route, leader = await self.leader(topic, partition)
        session = await self.session(leader)
        while True:
            data = await self._send_fetch(
                session, topic, route.topic_id, partition, offset, isolation, max_bytes
            )
            check(data.error_code, None, f"{topic}-{partition}")
            end = data.last_stable_offset if isolation else data.high_watermark
            if end < 0:  # a broker that does not report the LSO
                end = data.high_watermark
            raw = data.records or b""
            chunk = decode_records(
                topic, partition, offset, raw, data.aborted_transactions, isolation, max_records
            )
            chunk.end_offset = end
            if chunk.next_offset > offset or offset >= end or max_bytes >= _MAX_FETCH_BYTES:
                return chunk
            # Bytes came but not a whole entry: a broker that keeps to max_bytes strictly
            # (Kafka returns the first batch whole, KIP-74) needs room for it.
            max_bytes = min(max(max_bytes * 2, len(raw) * 2), _MAX_FETCH_BYTES)

    async def _send_fetch(
        self,
        session: Session,
        topic: str,
        topic_id: uuid.UUID | None,
        partition: int,
        offset: int,
        isolation: int,
        max_bytes: int,
    ) -> Any:
        request_partition = session.request(
            FETCH,
            "FetchPartition",
            partition=partition,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=max_bytes,
        )
        response = await session.send(
            session.request(
                FETCH,
                "FetchRequest",
                replica_id=-1,
                max_wait=timedelta(0),
                min_bytes=0,
                max_bytes=max_bytes,
                isolation_level=isolation,
                session_id=0,
                session_epoch=-1,  # sessionless: a full fetch the broker keeps nothing for
                topics=(
                    session.request(
                        FETCH,
                        "FetchTopic",
                        topic=topic,
                        topic_id=topic_id,
                        partitions=(request_partition,),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            )
        )
        check(response.error_code, None, topic)
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index == partition:
                    return p
        raise KafkaAdminError.from_code(
            ErrorCode.unknown_topic_or_partition,
            "not in the fetch response",
            f"{topic}-{partition}",
        )


def _isolation(name: str) -> int:
    try:
        return ISOLATION_LEVELS[name]
    except KeyError:
        raise ValueError(f"isolation.level must be one of {', '.join(ISOLATION_LEVELS)}") from None
