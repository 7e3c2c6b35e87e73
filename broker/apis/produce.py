"""Produce: validate each partition's batch, append it as received, answer per acks."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from kio.schema.errors import ErrorCode

from broker.apis.base import NO_THROTTLE, RequestContext
from broker.records.batch import InvalidRecordError, validate_produce_batch
from broker.storage.producer_state import ProducerStateError

CLOSE_CONNECTION = object()  # acks=0 has no response: an error closes the connection instead


def handle_produce(broker, ctx: RequestContext, request) -> object:
    acks = request.acks
    now_ms = int(time.time() * 1000)
    any_error = False
    to_flush: list = []  # logs whose flush.messages was reached by this request
    topics = []
    for topic_data in request.topic_data:
        name = topic_data.name
        partitions = []
        for pd in topic_data.partition_data:
            if acks not in (-1, 0, 1):
                result = _error(ctx, pd.index, ErrorCode.invalid_required_acks)
            else:
                result = _append(broker, ctx, name, pd.index, pd.records, acks, now_ms, to_flush)
            any_error = any_error or result.error_code != ErrorCode.none
            partitions.append(result)
        topics.append(
            ctx.response("TopicProduceResponse", name=name, partition_responses=tuple(partitions))
        )
    if acks == 0:
        response = CLOSE_CONNECTION if any_error else None
    else:
        response = ctx.response(
            "ProduceResponse", responses=tuple(topics), throttle_time=NO_THROTTLE
        )
    if to_flush:
        return _flushed(broker, to_flush, response)
    return response


async def _flushed(broker, logs: list, response: object) -> object:
    """Answer only once the data is on disk: fsync in a thread, the loop keeps serving."""
    await asyncio.gather(*(broker.run_blocking(log.flush) for log in logs))
    return response


def _append(
    broker, ctx, topic: str, partition: int, records, acks: int, now_ms: int, to_flush: list
):
    rm = broker.replica_manager
    log, code = rm.lookup(topic, partition)
    if log is None:
        return _error(ctx, partition, code)
    meta = broker.image.topic(topic)
    if meta.internal:
        return _error(
            ctx,
            partition,
            ErrorCode.invalid_topic_exception,
            f"Cannot append to internal topic {topic}",
        )
    if records is None:
        return _error(ctx, partition, ErrorCode.invalid_record, "Produce request without records")
    try:
        header = validate_produce_batch(records)
    except InvalidRecordError as e:
        return _error(ctx, partition, ErrorCode(e.error_code), str(e))
    if header.is_control:
        return _error(
            ctx,
            partition,
            ErrorCode.invalid_record,
            "Clients are not allowed to write control records",
        )
    max_bytes = rm.topic_config_value(meta, "max.message.bytes")
    if header.size > max_bytes:
        return _error(
            ctx,
            partition,
            ErrorCode.message_too_large,
            f"The batch of {header.size} bytes exceeds max.message.bytes={max_bytes}",
        )
    if acks == -1 and rm.topic_config_value(meta, "min.insync.replicas") > 1:
        return _error(
            ctx,
            partition,
            ErrorCode.not_enough_replicas,
            "The in-sync replicas are fewer than min.insync.replicas",
        )
    if rm.topic_config_value(meta, "message.timestamp.type") == "CreateTime":
        problem = _timestamp_problem(rm, meta, header, now_ms)
        if problem:
            return _error(ctx, partition, ErrorCode.invalid_timestamp, problem)
    if header.is_transactional:
        # Kafka's partition verification (KIP-890 part 1): only a partition the producer's
        # ongoing transaction added takes its data, so no zombie leaves a transaction hanging.
        error = broker.transaction_coordinator.verify_partition(
            header.producer_id, header.producer_epoch, (topic, partition)
        )
        if error is not ErrorCode.none:
            return _error(ctx, partition, error, "The transaction does not hold this partition")
    if header.producer_id >= 0:
        try:
            duplicate = log.producer_state.check(header)
        except ProducerStateError as e:
            return _error(ctx, partition, e.error_code, str(e))
        if duplicate is not None:
            # A retry of a batch already in the log (seed 000): DUPLICATE_SEQUENCE_NUMBER with
            # the original's offset, which clients take as success; nothing is written. Where
            # flush.messages makes acks wait for fsync, the retry waits for the original's.
            if duplicate.last_offset >= log.recovery_point and log.config.flushes_by_count:
                to_flush.append(log)
            append_time = now_ms if log.config.log_append_time else -1
            return _appended(
                ctx,
                partition,
                duplicate.first_offset,
                append_time,
                log,
                ErrorCode.duplicate_sequence_number,
            )
    result = log.append(records, header, now_ms=now_ms, leader_epoch=rm.leader_epoch)
    if result.flush_due:
        to_flush.append(log)
    rm.appended((topic, partition), header.size)
    return _appended(ctx, partition, result.base_offset, result.log_append_time_ms, log)


def _appended(ctx, partition, base_offset, log_append_time_ms, log, error_code=ErrorCode.none):
    return ctx.response(
        "PartitionProduceResponse",
        index=partition,
        error_code=error_code,
        base_offset=base_offset,
        log_append_time=(
            datetime.fromtimestamp(log_append_time_ms / 1000, tz=UTC)
            if log_append_time_ms >= 0
            else None
        ),
        log_start_offset=log.log_start_offset,
        record_errors=(),
        error_message=None,
    )


def _timestamp_problem(rm, meta, header, now_ms: int) -> str | None:
    # The batch header bounds the records' timestamps without decompressing them: max_timestamp
    # from above, base_timestamp (the first record's) from below.
    after = rm.topic_config_value(meta, "message.timestamp.after.max.ms")
    before = rm.topic_config_value(meta, "message.timestamp.before.max.ms")
    if header.max_timestamp - now_ms > after:
        return (
            f"Timestamp {header.max_timestamp} is more than "
            f"message.timestamp.after.max.ms={after} ahead of the broker's time"
        )
    if header.base_timestamp >= 0 and now_ms - header.base_timestamp > before:
        return (
            f"Timestamp {header.base_timestamp} is more than "
            f"message.timestamp.before.max.ms={before} behind the broker's time"
        )
    return None


def _error(ctx, partition: int, code: ErrorCode, message: str | None = None):
    return ctx.response(
        "PartitionProduceResponse",
        index=partition,
        error_code=code,
        base_offset=-1,
        log_append_time=None,
        log_start_offset=-1,
        record_errors=(),
        error_message=message,
    )
