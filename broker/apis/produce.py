"""Produce: validate each partition's batch, append it as received, answer per acks.

A producer needs WRITE on each topic, and for transactional batches WRITE on its transactional
id too (KIP-98: so no producer can hold the last stable offset back without being allowed).
v13 names topics by id (UNKNOWN_TOPIC_ID for one the cluster does not have)."""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import filter_authorized
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.apis.transaction_join import check_produce, coordinated_elsewhere, join_transaction
from broker.records.batch import (
    ATTRIBUTES_OFFSET,
    MAGIC_OFFSET,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    BatchHeader,
    InvalidRecordError,
    decode_batch,
    read_entry_header,
    validate_produce_batch,
)
from broker.records.legacy import LegacyAppend, to_legacy
from broker.security.operations import AclOperation, ResourceType
from broker.storage.producer_state import ProducerStateError

CLOSE_CONNECTION = object()  # acks=0 has no response: an error closes the connection instead
TOPIC_IDS_VERSION = 13
BEHIND_A_REFUSAL = (
    "An earlier batch of this producer, refused as this one is, must be written first"
)


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """One partition's outcome, whatever the request version that asked for it."""

    error_code: ErrorCode
    error_message: str | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    # The offset after the records written (or found written), for acks=all to wait on.
    end_offset: int = -1


def handle_produce(broker, ctx: RequestContext, request, checked=None) -> object:
    """`checked`: the answers of the transaction's coordinator on another broker."""
    acks = request.acks
    now_ms = int(time.time() * 1000)
    any_error = False
    to_flush: list = []  # logs whose flush.messages was reached by this request
    names = _topic_names(broker, ctx, request)
    transactional = _has_transactional_records(request)
    if transactional and not (
        request.transactional_id is not None
        and broker.authorize(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        )
    ):
        writable: set[str] = set()
        refusal = PartitionResult(ErrorCode.transactional_id_authorization_failed)
    else:
        known = (n for n in names if n is not None)
        writable = filter_authorized(broker, ctx, AclOperation.WRITE, ResourceType.TOPIC, known)
        refusal = PartitionResult(ErrorCode.topic_authorization_failed)
    if (
        checked is None
        and writable
        and transactional
        and coordinated_elsewhere(broker, request, ctx.api_version)
    ):
        return _checked_by_coordinator(broker, ctx, request, names)
    transaction = (request.transactional_id, ctx.api_version, checked)
    results = []
    for topic_data, name in zip(request.topic_data, names, strict=True):
        partitions = []
        for pd in topic_data.partition_data:
            if name is None:
                result = PartitionResult(ErrorCode.unknown_topic_id)
            elif name not in writable:
                result = refusal
            elif acks not in (-1, 0, 1):
                result = PartitionResult(ErrorCode.invalid_required_acks)
            else:
                result = _append(
                    broker, name, pd.index, pd.records, acks, now_ms, to_flush, transaction
                )
            any_error = any_error or result.error_code != ErrorCode.none
            partitions.append((pd.index, result))
        results.append((name, getattr(topic_data, "topic_id", None), partitions))
    if acks == 0:
        response = CLOSE_CONNECTION if any_error else None
    elif acks == -1 and broker.replica_manager.clustered:
        return _replicated(broker, ctx, request, results, to_flush)
    else:
        response = _produce_response(ctx, results)
    if to_flush:
        return _flushed(broker, to_flush, response)
    return response


async def _checked_by_coordinator(broker, ctx: RequestContext, request, names) -> object:
    checked = await check_produce(broker, request, names, ctx.api_version)
    response = handle_produce(broker, ctx, request, checked)
    return await response if inspect.isawaitable(response) else response


def _produce_response(ctx: RequestContext, results) -> object:
    topics = tuple(
        ctx.response(
            "TopicProduceResponse",
            name=name,
            topic_id=topic_id,
            partition_responses=tuple(_partition_response(ctx, i, r) for i, r in partitions),
        )
        for name, topic_id, partitions in results
    )
    return ctx.response("ProduceResponse", responses=topics, throttle_time=NO_THROTTLE)


async def _replicated(broker, ctx: RequestContext, request, results, to_flush) -> object:
    """acks=all in a cluster: each written partition answers once the ISR has its records
    (or NOT_ENOUGH_REPLICAS_AFTER_APPEND, or REQUEST_TIMED_OUT after the request's timeout)."""
    if to_flush:
        await flush_logs(broker, to_flush)
    rm = broker.replica_manager
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.timeout.total_seconds()
    slots, waits = [], []  # (a topic's results, the index there), its wait
    for name, _, partitions in results:
        meta = broker.image.topic(name) if name is not None else None
        if meta is None:
            continue
        min_isr = rm.topic_config_value(meta, "min.insync.replicas")
        for i, (index, result) in enumerate(partitions):
            if result.end_offset >= 0:
                slots.append((partitions, i))
                waits.append(
                    rm.wait_for_replication((name, index), result.end_offset, min_isr, deadline)
                )
    for (partitions, i), code in zip(slots, await asyncio.gather(*waits), strict=True):
        if code != ErrorCode.none:
            partitions[i] = (partitions[i][0], PartitionResult(code))
    return _produce_response(ctx, results)


def _topic_names(broker, ctx: RequestContext, request) -> list[str | None]:
    """Each topic's name; from v13 resolved from its id (None for an unknown id)."""
    if ctx.api_version < TOPIC_IDS_VERSION:
        return [t.name for t in request.topic_data]
    topics = (broker.image.topic_by_id(t.topic_id) for t in request.topic_data)
    return [None if topic is None else topic.name for topic in topics]


def _has_transactional_records(request) -> bool:
    """As Kafka, by the first batch of each partition (a request mixing others is refused
    later, by the producer-state checks)."""
    for topic_data in request.topic_data:
        for pd in topic_data.partition_data:
            records = pd.records
            if (
                records is not None
                and len(records) > ATTRIBUTES_OFFSET + 1
                and records[MAGIC_OFFSET] == MAGIC_V2
                and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK
            ):
                return True
    return False


async def flush_logs(broker, logs: list) -> None:
    """fsync in threads, the loop keeps serving."""
    await asyncio.gather(*(broker.run_blocking(log.flush) for log in logs))


async def _flushed(broker, logs: list, response: object) -> object:
    """Answer only once the data is on disk."""
    await flush_logs(broker, logs)
    return response


def writable_partition(
    broker, topic: str, partition: int
) -> tuple[object, object, PartitionResult]:
    """(log, topic metadata, result): the log and metadata are None with an error result when
    clients may not produce to the partition."""
    rm = broker.replica_manager
    log, code = rm.lookup(topic, partition)
    if log is None:
        return None, None, PartitionResult(code)
    meta = broker.image.topic(topic)
    if meta.internal:
        return (
            None,
            None,
            PartitionResult(
                ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {topic}"
            ),
        )
    return log, meta, PartitionResult(ErrorCode.none)


def _append(
    broker,
    topic: str,
    partition: int,
    records,
    acks: int,
    now_ms: int,
    to_flush: list,
    transaction: tuple,
) -> PartitionResult:
    log, meta, result = writable_partition(broker, topic, partition)
    if log is None:
        if result.error_code == ErrorCode.not_leader_or_follower and records is not None:
            # This broker may be about to learn it leads (see refused_batches); the header
            # alone is read, unchecked: the batch is not written.
            header = read_entry_header(records)
            if header is not None and header.magic == MAGIC_V2:
                broker.replica_manager.refused_batches.refused(
                    (topic, partition), header, result.error_code, now_ms
                )
        return result
    if records is None:
        return PartitionResult(ErrorCode.invalid_record, "Produce request without records")
    try:
        header = validate_produce_batch(records)
    except InvalidRecordError as e:
        return PartitionResult(ErrorCode(e.error_code), str(e))
    return append_batch(
        broker,
        topic,
        partition,
        log,
        meta,
        records,
        header,
        acks,
        now_ms,
        to_flush,
        transaction=transaction,
    )


def append_batch(
    broker,
    topic: str,
    partition: int,
    log,
    meta,
    records: bytes | memoryview,
    header: BatchHeader,
    acks: int,
    now_ms: int,
    to_flush: list,
    *,
    timestamp_bounds: tuple[int, int] | None = None,
    as_is: LegacyAppend | None = None,
    transaction: tuple = (None, 0, None),
) -> PartitionResult:
    """Append one validated v2 batch to the partition `writable_partition` found: topic
    limits, timestamps, transaction and producer-state checks, then Log.append.

    `timestamp_bounds` (lowest, highest; -1 for none) replaces the header's bounds when the
    caller knows the records' exact ones (an up-converted message set), and `as_is` is that
    set as produced, appended instead of converting the batch back when the log keeps the
    set's magic. `transaction` is the request's transactional id and Produce version, which
    say how a transactional batch's partition joins its transaction, with the answers of its
    coordinator on another broker if it was asked (`join_transaction`)."""
    rm = broker.replica_manager
    if header.is_control:
        return PartitionResult(
            ErrorCode.invalid_record, "Clients are not allowed to write control records"
        )
    max_bytes = rm.topic_config_value(meta, "max.message.bytes")
    if header.size > max_bytes:
        return PartitionResult(
            ErrorCode.message_too_large,
            f"The batch of {header.size} bytes exceeds max.message.bytes={max_bytes}",
        )
    if acks == -1 and not rm.enough_replicas(
        topic, partition, rm.topic_config_value(meta, "min.insync.replicas")
    ):
        rm.refused_batches.refused(
            (topic, partition), header, ErrorCode.not_enough_replicas, now_ms
        )
        return PartitionResult(
            ErrorCode.not_enough_replicas,
            "The in-sync replicas are fewer than min.insync.replicas",
        )
    if rm.topic_config_value(meta, "message.timestamp.type") == "CreateTime":
        # The batch header bounds the records' timestamps without decompressing them:
        # max_timestamp from above, base_timestamp (the first record's) from below.
        low, high = timestamp_bounds or (header.base_timestamp, header.max_timestamp)
        problem = _timestamp_problem(rm, meta, low, high, now_ms)
        if problem:
            return PartitionResult(ErrorCode.invalid_timestamp, problem)
    if log.config.compact and any(r.key is None for r in decode_batch(records)[1]):
        # The one place Produce reads records (Kafka's LogValidator does the same): the
        # cleaner keeps a record per key, so a keyless one has nothing to be kept by.
        return PartitionResult(
            ErrorCode.invalid_record, "Compacted topic cannot accept message without key"
        )
    legacy = None
    magic = log.config.message_format_magic
    if magic < MAGIC_V2:
        try:
            legacy = as_is if as_is is not None and as_is.magic == magic else None
            legacy = legacy or to_legacy(records, magic)
        except InvalidRecordError as e:
            return PartitionResult(ErrorCode(e.error_code), str(e))
    if header.is_transactional:
        refused = join_transaction(broker, *transaction, header, (topic, partition))
        if refused is not None:
            return PartitionResult(*refused)
    if header.producer_id >= 0:
        state = log.producer_state
        try:
            duplicate, problem = state.check(header), None
        except ProducerStateError as e:
            duplicate, problem = None, e
        sequenced = duplicate is None and (
            problem is None or problem.error_code == ErrorCode.out_of_order_sequence_number
        )
        if rm.refused_batches and sequenced:
            expected = state.next_sequence(header.producer_id, header.producer_epoch)
            behind = rm.refused_batches.behind_refusal((topic, partition), header, expected, now_ms)
            if behind is not None:
                return PartitionResult(behind, BEHIND_A_REFUSAL)
        if problem is not None:
            return PartitionResult(problem.error_code, str(problem))
        if duplicate is not None:
            # A retry of a batch already in the log (seed 000): DUPLICATE_SEQUENCE_NUMBER with
            # the original's offset, which clients take as success; nothing is written. Where
            # flush.messages makes acks wait for fsync, the retry waits for the original's.
            if duplicate.last_offset >= log.recovery_point and log.config.flushes_by_count:
                to_flush.append(log)
            return PartitionResult(
                ErrorCode.duplicate_sequence_number,
                base_offset=duplicate.first_offset,
                log_append_time_ms=now_ms if log.config.log_append_time else -1,
                log_start_offset=log.log_start_offset,
                end_offset=duplicate.last_offset + 1,
            )
    if legacy is not None:
        appended = log.append_legacy(legacy, now_ms=now_ms)
    else:
        appended = log.append(
            records, header, now_ms=now_ms, leader_epoch=rm.leader_epoch_of(topic, partition)
        )
    if appended.flush_due:
        to_flush.append(log)
    if header.producer_id >= 0:
        rm.refused_batches.appended((topic, partition), header.producer_id)
    rm.appended((topic, partition), appended.size)
    return PartitionResult(
        ErrorCode.none,
        base_offset=appended.base_offset,
        log_append_time_ms=appended.log_append_time_ms,
        log_start_offset=log.log_start_offset,
        end_offset=appended.last_offset + 1,
    )


def _partition_response(ctx, partition: int, result: PartitionResult):
    return ctx.response(
        "PartitionProduceResponse",
        index=partition,
        error_code=result.error_code,
        base_offset=result.base_offset,
        log_append_time=(
            datetime.fromtimestamp(result.log_append_time_ms / 1000, tz=UTC)
            if result.log_append_time_ms >= 0
            else None
        ),
        log_start_offset=result.log_start_offset,
        record_errors=(),
        error_message=result.error_message,
    )


def _timestamp_problem(rm, meta, low: int, high: int, now_ms: int) -> str | None:
    after_name, after = _timestamp_bound(rm, meta, "message.timestamp.after.max.ms")
    before_name, before = _timestamp_bound(rm, meta, "message.timestamp.before.max.ms")
    if high - now_ms > after:
        return f"Timestamp {high} is more than {after_name}={after} ahead of the broker's time"
    if low >= 0 and now_ms - low > before:
        return f"Timestamp {low} is more than {before_name}={before} behind the broker's time"
    return None


def _timestamp_bound(rm, meta, name: str) -> tuple[str, int]:
    """A one-sided bound or, when tighter, Kafka 3's two-sided
    message.timestamp.difference.max.ms; named for the error message."""
    limit = rm.topic_config_value(meta, name)
    difference = rm.topic_config_value(meta, "message.timestamp.difference.max.ms")
    if difference < limit:
        return "message.timestamp.difference.max.ms", difference
    return name, limit
