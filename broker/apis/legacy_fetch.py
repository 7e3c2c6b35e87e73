"""Fetch v0-3 and ListOffsets v0, for consumers that read only magic 0 (Fetch v0-1) or magic 1
(Fetch v2-3) message sets.

Fetch v0-3 predate isolation levels: they read up to the high watermark like read_uncommitted.
What they read is down-converted from the v2 batches on disk, so there is no zero-copy here
(the seed's phase 2): control batches are dropped; transactional data, aborted or not, is
served as Kafka serves it to these read_uncommitted consumers. Conversion of anything
compressed or large runs in a thread.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import filter_authorized
from broker.apis.base import RequestContext
from broker.apis.fetch import FetchBudget, readable_topics
from broker.protocol import legacy as wire
from broker.records import compression as codecs
from broker.records.batch import iter_batches
from broker.records.legacy import DownConverted, down_convert, magic_for_fetch_version
from broker.security.operations import AclOperation, ResourceType
from broker.server.replica_manager import FetchWaiter
from broker.storage import OffsetOutOfRangeError

INLINE_LIMIT = 16 * 1024  # uncompressed data up to this size is converted on the loop


@dataclass(slots=True)
class _PartitionRead:
    topic: str
    partition: int
    error_code: ErrorCode
    high_watermark: int = -1
    fetch_offset: int = 0
    limit: int = 0
    chunks: tuple = ()


async def handle(broker, ctx: RequestContext, request: wire.FetchRequest) -> wire.FetchResponse:
    wanted = [(t.topic, p) for t in request.topics for p in t.partitions]
    readable = readable_topics(broker, ctx, request, {t.topic for t in request.topics})
    reads, size = _read(broker, request, wanted, readable)
    failed = any(r.error_code != ErrorCode.none for r in reads)
    wait_s = request.max_wait_ms / 1000
    if size < request.min_bytes and wait_s > 0 and not failed and wanted:
        waiter = FetchWaiter(
            needed=request.min_bytes - size,
            partitions=[(name, p.partition) for name, p in wanted],
        )
        broker.replica_manager.park(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), wait_s)
        except TimeoutError:
            pass
        finally:
            broker.replica_manager.unpark(waiter)
        reads, size = _read(broker, request, wanted, readable)
    magic = magic_for_fetch_version(ctx.api_version)
    if size > INLINE_LIMIT or any(_compressed(r) for r in reads):
        converted = await broker.run_blocking(_convert_all, reads, magic)
    else:
        converted = _convert_all(reads, magic)
    return _response(ctx.api_version, reads, converted)


def _read(
    broker, request: wire.FetchRequest, wanted: list, readable: set
) -> tuple[list[_PartitionRead], int]:
    """The v2 data each partition offers, and its total size (what min_bytes counts)."""
    rm = broker.replica_manager
    budget = FetchBudget(request.max_bytes)
    reads = []
    for name, p in wanted:
        if name not in readable:
            reads.append(_PartitionRead(name, p.partition, ErrorCode.topic_authorization_failed))
            continue
        log, code = rm.lookup(name, p.partition)
        if log is None:
            reads.append(_PartitionRead(name, p.partition, code))
            continue
        read = _PartitionRead(name, p.partition, ErrorCode.none, log.high_watermark)
        try:
            data, limit = budget.read(
                log, p.fetch_offset, p.partition_max_bytes, log.high_watermark
            )
        except OffsetOutOfRangeError:
            read.error_code = ErrorCode.offset_out_of_range
        else:
            if data.size:
                read.fetch_offset = p.fetch_offset
                read.limit = limit
                read.chunks = tuple(data.records)
        reads.append(read)
    return reads, budget.total


def _compressed(read: _PartitionRead) -> bool:
    return any(
        header.compression != codecs.NONE
        for chunk in read.chunks
        for _, header in iter_batches(chunk)
    )


def _convert_all(reads: list[_PartitionRead], magic: int) -> list[DownConverted]:
    return [
        down_convert(
            r.chunks,
            magic=magic,
            fetch_offset=r.fetch_offset,
            max_bytes=r.limit,
        )
        if r.chunks
        else DownConverted(b"")
        for r in reads
    ]


def _response(version: int, reads: list[_PartitionRead], converted: list) -> wire.FetchResponse:
    by_topic: dict[str, list] = {}
    for r, c in zip(reads, converted, strict=True):
        code = r.error_code if c.error is None else ErrorCode(c.error)
        by_topic.setdefault(r.topic, []).append(
            wire.FetchPartitionResponse(r.partition, code, r.high_watermark, c.records)
        )
    return wire.FetchResponse.at(version)(
        responses=tuple(
            wire.FetchTopicResponse(topic, tuple(parts)) for topic, parts in by_topic.items()
        ),
        throttle_time_ms=0,
    )


def handle_list_offsets_v0(
    broker, ctx: RequestContext, request: wire.ListOffsetsRequest
) -> wire.ListOffsetsResponse:
    """ListOffsets v0 answers up to max_num_offsets offsets found by the segment files'
    modification times, as Kafka did (Log.offsets_before), not by record timestamps."""
    rm = broker.replica_manager
    now_ms = int(time.time() * 1000)
    names = (t.name for t in request.topics)
    describable = filter_authorized(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            if topic.name in describable:
                log, code = rm.lookup(topic.name, p.partition_index)
            else:
                log, code = None, ErrorCode.topic_authorization_failed
            offsets: tuple[int, ...] = ()
            if log is not None:
                offsets = tuple(log.offsets_before(p.timestamp, p.max_num_offsets, now_ms))
            partitions.append(wire.ListOffsetsPartitionResponse(p.partition_index, code, offsets))
        topics.append(wire.ListOffsetsTopicResponse(topic.name, tuple(partitions)))
    return wire.ListOffsetsResponse.at(ctx.api_version)(topics=tuple(topics))
