"""InitProducerId: a fresh producer id at epoch 0 for an idempotent producer; for a
transactional one, the transaction coordinator's id and epoch for its transactional id (which
fences the previous instance and ends its open transaction).

A transactional producer needs WRITE on its transactional id; an idempotent one IDEMPOTENT_WRITE
on the cluster or WRITE on some topic (Kafka 3+, KIP-679).

v6 is KIP-939's two-phase commit: `enable2Pc` asks for a transaction without timeout, which
needs the broker's `transaction.two.phase.commit.enable` and TWO_PHASE_COMMIT on the
transactional id (Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED to both, so a client
cannot tell a disabled feature from a missing ACL); `keepPreparedTxn` leaves an ongoing
transaction open and answers its producer id and epoch besides the new process's own."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, RequestContext, answers_coordinator_errors
from broker.coordinator.transaction_coordinator import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    InitProducerIdResponse,
)
from broker.security.operations import AclOperation, ResourceType


@answers_coordinator_errors(lambda broker, ctx, request, code: _response(ctx, code))
async def handle_init_producer_id(broker, ctx: RequestContext, request) -> object:
    transactional_id = request.transactional_id
    two_phase_commit = getattr(request, "enable2_pc", False)
    keep_prepared_txn = getattr(request, "keep_prepared_txn", False)
    if two_phase_commit and not broker.config["transaction.two.phase.commit.enable"]:
        return _response(ctx, ErrorCode.transactional_id_authorization_failed)
    if transactional_id is not None:
        if not broker.authorize(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
        ) or (
            two_phase_commit
            and not broker.authorize(
                ctx, AclOperation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID, transactional_id
            )
        ):
            return _response(ctx, ErrorCode.transactional_id_authorization_failed)
    elif not (
        authorize_cluster(broker, ctx, AclOperation.IDEMPOTENT_WRITE)
        or broker.authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC)
    ):
        return _response(ctx, ErrorCode.cluster_authorization_failed)
    # v3+ may name the producer id and epoch to resume: both or neither (KafkaApis).
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
    producer_epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return _response(ctx, ErrorCode.invalid_request)
    if transactional_id == "":
        return _response(ctx, ErrorCode.invalid_request)
    if transactional_id is not None:
        return await _init_transactional(
            broker, ctx, request, producer_id, producer_epoch, two_phase_commit, keep_prepared_txn
        )
    if two_phase_commit or keep_prepared_txn:
        return _response(ctx, ErrorCode.invalid_request)  # there is no transaction to keep
    # Without a transactional id Kafka hands out a new id blindly, whatever the request names:
    # the old id's sequences live on in the partitions until they expire.
    return _response(ctx, ErrorCode.none, await broker.generate_producer_id(), 0)


async def _init_transactional(
    broker,
    ctx,
    request,
    producer_id: int,
    producer_epoch: int,
    two_phase_commit: bool,
    keep_prepared_txn: bool,
):
    coordinator = broker.transaction_coordinator
    # A new producer id is allocated only when the id needs one (first use, an exhausted epoch).
    result: InitProducerIdResponse = await broker.transaction_runtime.run_with_producer_id(
        request.transactional_id,
        lambda now_ms, fresh: coordinator.init_producer_id(
            request.transactional_id,
            int(request.transaction_timeout.total_seconds() * 1000),
            producer_id,
            producer_epoch,
            fresh,
            now_ms,
            two_phase_commit=two_phase_commit,
            keep_prepared_txn=keep_prepared_txn,
            transaction_version=broker.transaction_runtime.transaction_version,
        ),
    )
    error = result.error
    if error is ErrorCode.producer_fenced and ctx.api_version < 4:
        error = ErrorCode.invalid_producer_epoch  # PRODUCER_FENCED came with v4 (KIP-588)
    return _response(
        ctx,
        error,
        result.producer_id,
        result.producer_epoch,
        result.ongoing_producer_id,
        result.ongoing_producer_epoch,
    )


def _response(
    ctx: RequestContext,
    error_code: ErrorCode,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    ongoing_producer_id: int = NO_PRODUCER_ID,
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH,
):
    return ctx.response(
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=error_code,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        ongoing_txn_producer_id=ongoing_producer_id,
        ongoing_txn_producer_epoch=ongoing_producer_epoch,
    )
