"""The transaction APIs (KIP-98): AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
WriteTxnMarkers; and the operators' views of KIP-664: ListTransactions, DescribeTransactions,
DescribeProducers. InitProducerId lives in init_producer_id.py.

Authorization as KIP-98 and Kafka's KafkaApis have it: whatever changes a transaction needs WRITE
on its transactional id, AddPartitionsToTxn also WRITE on the topics, AddOffsetsToTxn and
TxnOffsetCommit also READ on the group (TxnOffsetCommit READ on the topics too); WriteTxnMarkers
is inter-broker, CLUSTER_ACTION on the cluster. The operators' views show only the
transactional ids the principal may DESCRIBE, DescribeProducers needs READ on the topic."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster, filter_authorized
from broker.apis.base import NO_THROTTLE, ApiSpec, RequestContext, answers_coordinator_errors
from broker.apis.transaction_join import abortable_for
from broker.coordinator.transaction_coordinator import EndTxnResponse
from broker.coordinator.transaction_records import TransactionState
from broker.regex import InvalidRegex, compile_regex
from broker.security.operations import AclOperation, ResourceType
from broker.server.coordinator_log import replicated_markers
from broker.server.transaction_verification import (
    INTER_BROKER_VERSIONS,
    UNVERIFIED,
    TransactionCheck,
    check_here,
    check_with_coordinator,
)
from broker.storage.producer_state import ProducerStateError

OFFSETS_TOPIC = "__consumer_offsets"
# The first versions of transaction version 2 (KIP-890 part 2). As in Kafka they are served
# as that version whatever transaction.version the cluster finalized: the request's version
# alone says which protocol the client speaks (TransactionVersion.transactionVersionForEndTxn).
TRANSACTION_V2_END_TXN = 5
TRANSACTION_V2_TXN_OFFSET_COMMIT = 5
# TRANSACTION_ABORTABLE came with TxnOffsetCommit v4.
TRANSACTION_ABORTABLE_TXN_OFFSET_COMMIT = 4


def _transaction_version(ctx: RequestContext, first_v2_version: int) -> int:
    """The transaction version a request speaks: 2 from the API's KIP-890 part 2 version."""
    return 2 if ctx.api_version >= first_v2_version else 0


def _fenced(error: ErrorCode, ctx: RequestContext, first_version: int) -> ErrorCode:
    """PRODUCER_FENCED is answered from the version that knows it (KIP-588); older clients get
    INVALID_PRODUCER_EPOCH, which they treat alike."""
    if error is ErrorCode.producer_fenced and ctx.api_version < first_version:
        return ErrorCode.invalid_producer_epoch
    return error


def _may_write(broker, ctx: RequestContext, transactional_id: str) -> bool:
    return broker.authorize(
        ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    )


# -- AddPartitionsToTxn ------------------------------------------------------------------------


def _add_partitions_error(broker, ctx: RequestContext, request, code: ErrorCode) -> object:
    topics = _requested_partitions(request)
    return _add_partitions_response(ctx, topics, {tp: code for tp in _flat(topics)})


def _requested_partitions(request) -> list[tuple[str, tuple[int, ...]]]:
    return [(t.name, tuple(t.partitions)) for t in request.v3_and_below_topics]


def _flat(topics) -> list[tuple[str, int]]:
    return [(name, p) for name, partitions in topics for p in partitions]


async def handle_add_partitions_to_txn(broker, ctx: RequestContext, request) -> object:
    if ctx.api_version >= INTER_BROKER_VERSIONS.start:
        return await _add_partitions_for_brokers(broker, ctx, request)
    return await _add_partitions_for_client(broker, ctx, request)


@answers_coordinator_errors(_add_partitions_error)
async def _add_partitions_for_client(broker, ctx: RequestContext, request) -> object:
    topics = _requested_partitions(request)
    writable = filter_authorized(
        broker, ctx, AclOperation.WRITE, ResourceType.TOPIC, (name for name, _ in topics)
    )
    refused = {}
    for name, partitions in topics:
        for p in partitions:
            if name not in writable:
                refused[(name, p)] = ErrorCode.topic_authorization_failed
            elif broker.image.partition(name, p) is None:
                refused[(name, p)] = ErrorCode.unknown_topic_or_partition
    if not _may_write(broker, ctx, request.v3_and_below_transactional_id):
        errors = dict.fromkeys(_flat(topics), ErrorCode.transactional_id_authorization_failed)
    elif refused:
        # Nothing is added when any partition is refused; the others are "not attempted".
        errors = {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in _flat(topics)}
    else:
        coordinator = broker.transaction_coordinator
        transactional_id = request.v3_and_below_transactional_id
        error = await broker.transaction_runtime.run(
            transactional_id,
            lambda now_ms: coordinator.add_partitions(
                transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                _flat(topics),
                now_ms,
            ),
        )
        errors = dict.fromkeys(_flat(topics), _fenced(error, ctx, 2))
    return _add_partitions_response(ctx, topics, errors)


def _add_partitions_response(ctx: RequestContext, topics, errors) -> object:
    return ctx.response(
        "AddPartitionsToTxnResponse",
        throttle_time=NO_THROTTLE,
        results_by_topic_v3_and_below=_add_partitions_topic_results(ctx, topics, errors),
    )


def _add_partitions_topic_results(ctx: RequestContext, topics, errors) -> tuple:
    return tuple(
        ctx.response(
            "AddPartitionsToTxnTopicResult",
            name=name,
            results_by_partition=tuple(
                ctx.response(
                    "AddPartitionsToTxnPartitionResult",
                    partition_index=p,
                    partition_error_code=errors[(name, p)],
                )
                for p in partitions
            ),
        )
        for name, partitions in topics
    )


async def _add_partitions_for_brokers(broker, ctx: RequestContext, request) -> object:
    """v4+: a partition leader or group coordinator verifying transactions with their
    coordinator (KIP-890), or adding partitions to them (transaction version 2); an
    inter-broker request, CLUSTER_ACTION on the cluster."""
    if not authorize_cluster(broker, ctx, AclOperation.CLUSTER_ACTION):
        return ctx.response(
            "AddPartitionsToTxnResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    results = []
    for txn in request.transactions:
        topics = [(t.name, tuple(t.partitions)) for t in txn.topics]
        check = TransactionCheck(
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            tuple(_flat(topics)),
            add=not txn.verify_only,
        )
        errors = await check_here(broker, check)
        results.append(
            ctx.response(
                "AddPartitionsToTxnResult",
                transactional_id=txn.transactional_id,
                topic_results=_add_partitions_topic_results(ctx, topics, errors),
            )
        )
    return ctx.response(
        "AddPartitionsToTxnResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(results),
    )


# -- AddOffsetsToTxn ---------------------------------------------------------------------------


def _add_offsets_response(broker, ctx: RequestContext, request, error: ErrorCode) -> object:
    return ctx.response(
        "AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE, error_code=_fenced(error, ctx, 2)
    )


@answers_coordinator_errors(_add_offsets_response)
async def handle_add_offsets_to_txn(broker, ctx: RequestContext, request) -> object:
    if not _may_write(broker, ctx, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not broker.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif not request.group_id:
        error = ErrorCode.invalid_group_id
    else:
        await broker.coordinator_runtime.ensure_topic()
        error = await _add_offsets_partition(broker, request)
    return _add_offsets_response(broker, ctx, request, error)


async def _add_offsets_partition(broker, request) -> ErrorCode:
    """The group's partition of `__consumer_offsets` joins the producer's transaction."""
    partition = broker.group_coordinator.partition_for(request.group_id)
    coordinator = broker.transaction_coordinator
    return await broker.transaction_runtime.run(
        request.transactional_id,
        lambda now_ms: coordinator.add_partitions(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            [(OFFSETS_TOPIC, partition)],
            now_ms,
        ),
    )


# -- EndTxn ------------------------------------------------------------------------------------


def _end_txn_response(ctx: RequestContext, result: EndTxnResponse) -> object:
    return ctx.response(
        "EndTxnResponse",
        throttle_time=NO_THROTTLE,
        error_code=_fenced(result.error, ctx, 2),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )


@answers_coordinator_errors(
    lambda broker, ctx, request, code: _end_txn_response(ctx, EndTxnResponse(code))
)
async def handle_end_txn(broker, ctx: RequestContext, request) -> object:
    """v5 is transaction version 2 (KafkaApis.handleEndTxnRequest): the end bumps the epoch
    and the response carries the producer id and epoch for the next transaction."""
    transaction_version = _transaction_version(ctx, TRANSACTION_V2_END_TXN)
    if not _may_write(broker, ctx, request.transactional_id):
        result = EndTxnResponse(ErrorCode.transactional_id_authorization_failed)
    else:
        coordinator = broker.transaction_coordinator
        # A new producer id is allocated only for a valid end at the exhausted epoch.
        result = await broker.transaction_runtime.run_with_producer_id(
            request.transactional_id,
            lambda now_ms, fresh: coordinator.end_transaction(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
                now_ms,
                transaction_version=transaction_version,
                fresh_producer_id=fresh,
            ),
        )
    return _end_txn_response(ctx, result)


# -- TxnOffsetCommit ---------------------------------------------------------------------------


def _requested_offsets(request) -> dict:
    return {
        (t.name, p.partition_index): (
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for t in request.topics
        for p in t.partitions
    }


@answers_coordinator_errors(
    lambda broker, ctx, request, code: _txn_offset_commit_response(
        ctx, dict.fromkeys(_requested_offsets(request), code)
    )
)
async def handle_txn_offset_commit(broker, ctx: RequestContext, request) -> object:
    offsets = _requested_offsets(request)
    if not _may_write(broker, ctx, request.transactional_id):
        errors = dict.fromkeys(offsets, ErrorCode.transactional_id_authorization_failed)
    elif not broker.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        errors = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
    else:
        readable = filter_authorized(
            broker, ctx, AclOperation.READ, ResourceType.TOPIC, (t for t, _ in offsets)
        )
        errors = {
            tp: ErrorCode.topic_authorization_failed
            if tp[0] not in readable
            else ErrorCode.unknown_topic_or_partition
            for tp in offsets
            if tp[0] not in readable or broker.image.partition(*tp) is None
        }
        accepted = {tp: offset for tp, offset in offsets.items() if tp not in errors}
        if accepted:
            errors.update(await _txn_offset_commit(broker, ctx, request, accepted))
    return _txn_offset_commit_response(ctx, errors)


def _txn_offset_commit_response(ctx: RequestContext, errors) -> object:
    by_topic: dict[str, list] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(
            ctx.response(
                "TxnOffsetCommitResponsePartition", partition_index=partition, error_code=code
            )
        )
    return ctx.response(
        "TxnOffsetCommitResponse",
        throttle_time=NO_THROTTLE,
        topics=tuple(
            ctx.response("TxnOffsetCommitResponseTopic", name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


async def _txn_offset_commit(broker, ctx: RequestContext, request, offsets) -> dict:
    """The group's partition of `__consumer_offsets` must be in the transaction: v5 adds it
    (transaction version 2), older versions are verified as a Produce is (KIP-890), with the
    transaction's coordinator wherever it is. One that cannot be asked is answered
    COORDINATOR_LOAD_IN_PROGRESS, as Kafka's group coordinator does: the client retries."""
    if not request.group_id:
        error = ErrorCode.invalid_group_id
    else:
        add = _transaction_version(ctx, TRANSACTION_V2_TXN_OFFSET_COMMIT) >= 2
        group_partition = (OFFSETS_TOPIC, broker.group_coordinator.partition_for(request.group_id))
        check = TransactionCheck(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            (group_partition,),
            add,
        )
        error = (await check_with_coordinator(broker, check))[group_partition]
        if error in UNVERIFIED:
            error = ErrorCode.coordinator_load_in_progress
        elif not add:
            error = abortable_for(error, ctx.api_version, TRANSACTION_ABORTABLE_TXN_OFFSET_COMMIT)
    if error is ErrorCode.none:
        try:
            errors = await _commit_pending_offsets(broker, request, offsets)
        except ProducerStateError:  # the group's partition saw a newer epoch
            error = ErrorCode.producer_fenced
    if error is not ErrorCode.none:
        errors = dict.fromkeys(offsets, _fenced(error, ctx, 3))
    return errors


def _commit_pending_offsets(broker, request, offsets):
    """The offsets, pending in the group until the transaction's marker."""
    group_coordinator = broker.group_coordinator
    return broker.coordinator_runtime.run_transactional(
        request.group_id,
        request.producer_id,
        request.producer_epoch,
        lambda now_ms: group_coordinator.txn_offset_commit(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            getattr(request, "member_id", ""),
            getattr(request, "generation_id", -1),
            getattr(request, "group_instance_id", None),
            offsets,
            now_ms,
        ),
    )


# -- WriteTxnMarkers ---------------------------------------------------------------------------


async def handle_write_txn_markers(broker, ctx: RequestContext, request) -> object:
    """Markers written on request: what a coordinator sends to partition leaders, and what an
    operator sends to abort a hanging transaction (kafka-transactions.sh abort, KIP-664). In a
    cluster each partition answers once its marker is replicated, as Kafka's appends with
    acks=all.

    v2 says which transaction version each marker ends (KIP-1228). It is not written to the
    log; the partition checks the marker's producer epoch by it: transaction version 2 bumps
    the epoch at every transaction's end, so its marker must be above the epoch the partition
    knows, and one that is not is a late or duplicate marker (INVALID_PRODUCER_EPOCH); older
    versions end a transaction under the epoch of its records, at or above that epoch."""
    now_ms = int(time.time() * 1000)
    may_write_markers = authorize_cluster(broker, ctx, AclOperation.CLUSTER_ACTION)
    written = []
    for marker in request.markers:
        for topic in marker.topics:
            for p in topic.partition_indexes:
                if not may_write_markers:
                    error = ErrorCode.cluster_authorization_failed
                else:
                    error = broker.transaction_runtime.write_marker(
                        topic.name,
                        p,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.transaction_result,
                        marker.coordinator_epoch,
                        now_ms,
                        getattr(marker, "transaction_version", 0),
                    )
                written.append(((topic.name, p), error))
    outcomes = iter(await replicated_markers(broker, written))
    return ctx.response(
        "WriteTxnMarkersResponse",
        markers=tuple(
            ctx.response(
                "WritableTxnMarkerResult",
                producer_id=marker.producer_id,
                topics=tuple(
                    ctx.response(
                        "WritableTxnMarkerTopicResult",
                        name=topic.name,
                        partitions=tuple(
                            ctx.response(
                                "WritableTxnMarkerPartitionResult",
                                partition_index=p,
                                error_code=next(outcomes),
                            )
                            for p in topic.partition_indexes
                        ),
                    )
                    for topic in marker.topics
                ),
            )
            for marker in request.markers
        ),
    )


# -- KIP-664: ListTransactions, DescribeTransactions, DescribeProducers -----------------------

_STATE_NAMES = {s.display_name: s for s in TransactionState}
# Kafka sends -1 for "no transaction started"; kio's timestamp type cannot carry a negative
# value, so the epoch itself stands for it (no real transaction starts in 1970).
NO_START_TIME = datetime.fromtimestamp(0, tz=UTC)


def handle_list_transactions(broker, ctx: RequestContext, request) -> object:
    wanted = set(request.state_filters)
    unknown = sorted(wanted - _STATE_NAMES.keys())
    states = {_STATE_NAMES[n] for n in wanted if n in _STATE_NAMES}
    producer_ids = set(request.producer_id_filters)
    # v1 (KIP-994): only transactions started more than this many ms ago (-1: no filter). As
    # in Kafka's TransactionStateManager the state is not looked at: an id without a
    # transaction (start -1) passes any duration.
    min_duration_ms = getattr(request, "duration_filter", -1)
    # v2 (KIP-1152): only transactional ids the whole of which the pattern matches (null or
    # empty: all), compiled with RE2 as Kafka's RE2/J.
    pattern = getattr(request, "transactional_id_pattern", None)
    try:
        matcher = compile_regex(pattern).fullmatch if pattern else None
    except InvalidRegex:
        # Kafka's InvalidRegularExpression, answered as its error response: nothing listed.
        return ctx.response(
            "ListTransactionsResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.invalid_regular_expression,
            unknown_state_filters=(),
            transaction_states=(),
        )
    now_ms = int(time.time() * 1000)
    listed = []
    for meta in broker.transaction_coordinator.transactions.values():
        if wanted and meta.state not in states:
            continue
        if not broker.authorize(
            ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id
        ):
            continue
        if producer_ids and meta.producer_id not in producer_ids:
            continue
        if min_duration_ms >= 0 and now_ms - meta.start_ms <= min_duration_ms:
            continue
        if matcher is not None and matcher(meta.transactional_id) is None:
            continue
        listed.append(
            ctx.response(
                "TransactionState",
                transactional_id=meta.transactional_id,
                producer_id=meta.producer_id,
                transaction_state=meta.state.display_name,
            )
        )
    return ctx.response(
        "ListTransactionsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(listed),
    )


def handle_describe_transactions(broker, ctx: RequestContext, request) -> object:
    transactions = broker.transaction_coordinator.transactions
    states = []
    for txn_id in request.transactional_ids:
        meta = transactions.get(txn_id)
        if not broker.authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            error = ErrorCode.transactional_id_authorization_failed
        else:
            error = broker.transaction_runtime.partitions.error(txn_id)
            if error is ErrorCode.none and meta is None:
                error = ErrorCode.transactional_id_not_found
        if error is not ErrorCode.none:
            states.append(
                ctx.response(
                    "TransactionState",
                    error_code=error,
                    transactional_id=txn_id,
                    transaction_state="",
                    transaction_timeout=timedelta(0),
                    transaction_start_time=NO_START_TIME,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        # Partitions of topics the principal may not DESCRIBE are left out.
        describable = filter_authorized(
            broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in meta.partitions)
        )
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            if topic in describable:
                by_topic.setdefault(topic, []).append(partition)
        states.append(
            ctx.response(
                "TransactionState",
                error_code=ErrorCode.none,
                transactional_id=txn_id,
                transaction_state=meta.state.display_name,
                transaction_timeout=timedelta(milliseconds=meta.timeout_ms),
                transaction_start_time=(
                    datetime.fromtimestamp(meta.start_ms / 1000, tz=UTC)
                    if meta.start_ms >= 0
                    else NO_START_TIME
                ),
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=tuple(
                    ctx.response("TopicData", topic=t, partitions=tuple(ps))
                    for t, ps in by_topic.items()
                ),
            )
        )
    return ctx.response(
        "DescribeTransactionsResponse", throttle_time=NO_THROTTLE, transaction_states=tuple(states)
    )


def handle_describe_producers(broker, ctx: RequestContext, request) -> object:
    rm = broker.replica_manager
    topics = []
    readable = filter_authorized(
        broker, ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    for topic in request.topics:
        partitions = []
        for p in topic.partition_indexes:
            if topic.name in readable:
                log_, code = rm.lookup(topic.name, p)
            else:
                log_, code = None, ErrorCode.topic_authorization_failed
            producers = () if log_ is None else log_.producers()
            partitions.append(
                ctx.response(
                    "PartitionResponse",
                    partition_index=p,
                    error_code=code if log_ is None else ErrorCode.none,
                    error_message=None,
                    active_producers=tuple(
                        ctx.response(
                            "ProducerState",
                            producer_id=s.producer_id,
                            producer_epoch=s.producer_epoch,
                            last_sequence=s.last_sequence,
                            last_timestamp=s.last_timestamp,
                            coordinator_epoch=s.coordinator_epoch,
                            current_txn_start_offset=s.current_txn_start_offset,
                        )
                        for s in producers
                    ),
                )
            )
        topics.append(ctx.response("TopicResponse", name=topic.name, partitions=tuple(partitions)))
    return ctx.response(
        "DescribeProducersResponse", throttle_time=NO_THROTTLE, topics=tuple(topics)
    )


SPECS = (
    # v4+ is the broker-to-broker form (KIP-890); clients use up to v3.
    ApiSpec(24, "AddPartitionsToTxn", 0, 5, handle_add_partitions_to_txn),
    ApiSpec(25, "AddOffsetsToTxn", 0, 4, handle_add_offsets_to_txn),
    # EndTxn v5 and TxnOffsetCommit v5 are transaction version 2 (KIP-890 part 2), advertised
    # and served as Kafka does whatever transaction.version is finalized: clients choose by
    # that level, and a request of that version is one the broker can handle.
    ApiSpec(26, "EndTxn", 0, 5, handle_end_txn),
    ApiSpec(27, "WriteTxnMarkers", 1, 2, handle_write_txn_markers),
    ApiSpec(28, "TxnOffsetCommit", 0, 5, handle_txn_offset_commit),
    ApiSpec(61, "DescribeProducers", 0, 0, handle_describe_producers),
    ApiSpec(65, "DescribeTransactions", 0, 0, handle_describe_transactions),
    ApiSpec(66, "ListTransactions", 0, 2, handle_list_transactions),
)
