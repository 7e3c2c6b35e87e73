"""Produce v0-2: old producers' magic 0/1 message sets, up-converted to one v2 batch each and
appended through the same checks as Produce v3+ (produce.append_batch).

Conversion decompresses and recompresses, so all but small uncompressed sets are converted in
a thread. Appends must still happen in the order the requests arrived (a producer pipelines
them and expects its messages in that order), so each request takes its place behind the
earlier legacy requests for the same partitions before any conversion starts.
"""

from __future__ import annotations

import asyncio
import time
import weakref

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import filter_authorized
from broker.apis.base import RequestContext
from broker.apis.produce import (
    CLOSE_CONNECTION,
    PartitionResult,
    append_batch,
    flush_logs,
    writable_partition,
)
from broker.protocol import legacy as wire
from broker.records import compression as codecs
from broker.records.errors import InvalidRecordError
from broker.records.legacy import COMPRESSION_MASK, UpConverted, up_convert
from broker.security.operations import AclOperation, ResourceType

INLINE_LIMIT = 16 * 1024  # uncompressed sets up to this size are converted on the loop
_ATTRIBUTES = 17  # of the first entry: its codec tells whether conversion decompresses

# compression.type values other than "producer" (which keeps the producer's codec)
TARGET_CODECS = {
    "uncompressed": codecs.NONE,
    "gzip": codecs.GZIP,
    "snappy": codecs.SNAPPY,
    "lz4": codecs.LZ4,
    "zstd": codecs.ZSTD,
}

# broker -> {(topic, partition): future of the latest legacy request appending there}
_tails: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def handle(broker, ctx: RequestContext, request: wire.ProduceRequest) -> object:
    acks = request.acks
    tails = _tails.setdefault(broker, {})
    turn = asyncio.get_running_loop().create_future()
    earlier: set[asyncio.Future] = set()
    slots = []  # ((topic, partition), conversion task or None, result known up front or None)
    names = (t.name for t in request.topic_data)
    writable = filter_authorized(broker, ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
    try:
        for topic_data in request.topic_data:
            for pd in topic_data.partition_data:
                tp = (topic_data.name, pd.index)
                if tp[0] in writable:
                    result, task = _start(broker, tp, pd.records, acks)
                else:
                    result, task = PartitionResult(ErrorCode.topic_authorization_failed), None
                if task is not None:
                    if tails.get(tp, turn) is not turn:
                        earlier.add(tails[tp])
                    tails[tp] = turn
                slots.append((tp, task, result))
        conversions = [task for _, task, _ in slots if task is not None]
        if conversions:
            await asyncio.wait(conversions)
        if earlier:
            # asyncio.wait, not await: a cancelled request must not cancel the others' turns
            await asyncio.wait(earlier)
        now_ms = int(time.time() * 1000)
        to_flush: list = []
        results = []
        for tp, task, result in slots:
            if task is not None:
                result = _append(broker, tp, task.result(), acks, now_ms, to_flush)
            results.append((tp, result))
    finally:
        turn.set_result(None)
        for tp, task, _ in slots:
            if tails.get(tp) is turn:
                del tails[tp]
            if task is not None and not task.done():
                task.cancel()
    if to_flush:
        await flush_logs(broker, to_flush)
    if acks == 0:
        failed = any(r.error_code != ErrorCode.none for _, r in results)
        return CLOSE_CONNECTION if failed else None
    return _response(ctx.api_version, results)


def _start(broker, tp: tuple[str, int], records, acks: int):
    """(result, None) for a partition that fails before conversion, else (None, a task that
    converts its message set into an UpConverted or the InvalidRecordError)."""
    if acks not in (-1, 0, 1):
        return PartitionResult(ErrorCode.invalid_required_acks), None
    log, meta, result = writable_partition(broker, *tp)
    if log is None:
        return result, None
    if records is None:
        return PartitionResult(ErrorCode.invalid_record, "Produce request without records"), None
    rm = broker.replica_manager
    target = TARGET_CODECS.get(rm.topic_config_value(meta, "compression.type"))
    compacted = "compact" in rm.topic_config_value(meta, "cleanup.policy")
    on_disk = log.config.message_format_magic
    heavy = len(records) > INLINE_LIMIT or (
        len(records) > _ATTRIBUTES and records[_ATTRIBUTES] & COMPRESSION_MASK
    )
    if heavy:
        work = broker.run_blocking(_convert, records, target, compacted, on_disk)
    else:
        work = _done(_convert(records, target, compacted, on_disk))
    return None, asyncio.ensure_future(work)


async def _done(value):
    return value


def _convert(
    records, target: int | None, compacted: bool, on_disk: int
) -> UpConverted | InvalidRecordError:
    try:
        return up_convert(
            records, target_compression=target, compacted=compacted, keep_magic=on_disk
        )
    except InvalidRecordError as e:
        return e


def _append(
    broker, tp: tuple[str, int], converted, acks: int, now_ms: int, to_flush: list
) -> PartitionResult:
    if isinstance(converted, InvalidRecordError):
        return PartitionResult(ErrorCode(converted.error_code), str(converted))
    # Looked up again: the topic may have gone while the set was being converted.
    log, meta, result = writable_partition(broker, *tp)
    if log is None:
        return result
    rm = broker.replica_manager
    max_bytes = rm.topic_config_value(meta, "max.message.bytes")
    if converted.largest_entry > max_bytes:
        return PartitionResult(
            ErrorCode.message_too_large,
            f"A message of {converted.largest_entry} bytes exceeds max.message.bytes={max_bytes}",
        )
    # Kafka's LogValidator: a producer may not stamp LogAppendTime itself, except on a
    # timestamped message bound for a CreateTime topic.
    create_time = rm.topic_config_value(meta, "message.timestamp.type") == "CreateTime"
    if (
        converted.untimed_claims_log_append_time
        if create_time
        else converted.claims_log_append_time
    ):
        return PartitionResult(
            ErrorCode.invalid_timestamp,
            "Invalid timestamp type in message: the producer should not set LogAppendTime",
        )
    return append_batch(
        broker,
        tp[0],
        tp[1],
        log,
        meta,
        converted.batch,
        converted.header,
        acks,
        now_ms,
        to_flush,
        timestamp_bounds=(converted.min_timestamp, converted.max_timestamp),
        as_is=converted.as_is,
    )


def _response(version: int, results: list) -> wire.ProduceResponse:
    by_topic: dict[str, list] = {}
    for (topic, partition), r in results:
        by_topic.setdefault(topic, []).append(
            wire.ProducePartitionResponse(
                index=partition,
                error_code=r.error_code,
                base_offset=r.base_offset,
                log_append_time_ms=r.log_append_time_ms,
            )
        )
    return wire.ProduceResponse.at(version)(
        responses=tuple(
            wire.ProduceTopicResponse(name, tuple(parts)) for name, parts in by_topic.items()
        ),
        throttle_time_ms=0,
    )
