"""Fetch: full fetches (fetch sessions arrive with KIP-227), long-polled until min_bytes.

read_uncommitted reads up to the high watermark; read_committed (KIP-98) up to the last
stable offset, with the aborted transactions of the range read so the consumer can drop
their records.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.apis.base import NO_THROTTLE, RequestContext
from broker.server.replica_manager import FetchWaiter
from broker.storage import OffsetOutOfRangeError

READ_COMMITTED = 1


async def handle_fetch(broker, ctx: RequestContext, request) -> object:
    # v4-v6 predate fetch sessions (KIP-227): they are sessionless full fetches.
    if getattr(request, "session_id", 0) != 0 or getattr(request, "session_epoch", -1) > 0:
        # Fjord creates no fetch sessions yet: any session a client names is unknown to it.
        return ctx.response(
            "FetchResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.fetch_session_id_not_found,
            session_id=0,
            responses=(),
        )
    wanted = _resolve(broker, request)
    responses, size, failed = _read(broker, ctx, request, wanted)
    wait_s = request.max_wait.total_seconds()
    if size < request.min_bytes and wait_s > 0 and not failed and wanted:
        waiter = FetchWaiter(
            needed=request.min_bytes - size,
            partitions=[(name, p.partition) for name, _, p in wanted],
            read_committed=request.isolation_level == READ_COMMITTED,
        )
        broker.replica_manager.park(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), wait_s)
        except TimeoutError:
            pass
        finally:
            broker.replica_manager.unpark(waiter)
        responses, size, failed = _read(broker, ctx, request, wanted)
    return ctx.response(
        "FetchResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=responses,
    )


def _resolve(broker, request) -> list:
    """(topic name or None, topic id or None, partition request) in request order."""
    wanted = []
    for topic in request.topics:
        topic_id = getattr(topic, "topic_id", None)
        if topic_id is not None:
            meta = broker.image.topic_by_id(topic_id)
            name = meta.name if meta else None
        else:
            name = topic.topic
        for p in topic.partitions:
            wanted.append((name, topic_id, p))
    return wanted


def _read(broker, ctx: RequestContext, request, wanted) -> tuple[tuple, int, bool]:
    rm = broker.replica_manager
    read_committed = request.isolation_level == READ_COMMITTED
    remaining = request.max_bytes
    min_one_batch = True  # Kafka returns the first batch whole even when it exceeds the limits
    total = 0
    failed = False
    by_topic: dict[tuple, list] = {}
    for name, topic_id, p in wanted:
        log, code = rm.lookup(name, p.partition)
        if log is None and topic_id is not None and name is None:
            code = ErrorCode.unknown_topic_id
        if code == ErrorCode.none:
            code = rm.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
        records = b""
        aborted = None
        if code == ErrorCode.none:
            try:
                data = log.read(
                    p.fetch_offset,
                    min(p.partition_max_bytes, remaining),
                    max_offset=log.last_stable_offset if read_committed else log.high_watermark,
                    min_one_batch=min_one_batch,
                )
            except OffsetOutOfRangeError:
                code = ErrorCode.offset_out_of_range
            else:
                if data.size:
                    # One slice (the usual case) goes out as read; only a few join.
                    records = data.records[0] if len(data.records) == 1 else b"".join(data.records)
                    remaining = max(0, remaining - data.size)
                    total += data.size
                    min_one_batch = False
                if read_committed:
                    # Kafka bounds the search by the end of what was read; an empty read has
                    # none to report.
                    aborted = tuple(
                        ctx.response("AbortedTransaction", producer_id=pid, first_offset=first)
                        for pid, first in (
                            log.aborted_transactions(p.fetch_offset, data.next_offset)
                            if data.size
                            else ()
                        )
                    )
        failed = failed or code != ErrorCode.none
        partition = ctx.response(
            "PartitionData",
            partition_index=p.partition,
            error_code=code,
            high_watermark=log.high_watermark if log else -1,
            last_stable_offset=log.last_stable_offset if log else -1,
            log_start_offset=log.log_start_offset if log else -1,
            aborted_transactions=aborted,
            preferred_read_replica=-1,
            records=records,
        )
        by_topic.setdefault((name, topic_id), []).append(partition)
    responses = tuple(
        ctx.response(
            "FetchableTopicResponse", topic=name, topic_id=topic_id, partitions=tuple(parts)
        )
        for (name, topic_id), parts in by_topic.items()
    )
    return responses, total, failed
