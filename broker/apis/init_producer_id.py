"""InitProducerId: a fresh producer id at epoch 0 for an idempotent producer; for a
transactional one, the transaction coordinator's id and epoch for its transactional id (which
fences the previous instance and ends its open transaction).

A transactional producer needs WRITE on its transactional id; an idempotent one IDEMPOTENT_WRITE
on the cluster or WRITE on some topic (Kafka 3+, KIP-679)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.security.operations import AclOperation, ResourceType

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


async def handle_init_producer_id(broker, ctx: RequestContext, request) -> object:
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not broker.authorize(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
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
        return await _init_transactional(broker, ctx, request, producer_id, producer_epoch)
    # Without a transactional id Kafka hands out a new id blindly, whatever the request names:
    # the old id's sequences live on in the partitions until they expire.
    return _response(ctx, ErrorCode.none, await broker.generate_producer_id(), 0)


async def _init_transactional(broker, ctx, request, producer_id: int, producer_epoch: int):
    fresh = await broker.generate_producer_id()  # used only if the id needs a new one
    coordinator = broker.transaction_coordinator
    result = await broker.transaction_runtime.run(
        lambda now_ms: coordinator.init_producer_id(
            request.transactional_id,
            int(request.transaction_timeout.total_seconds() * 1000),
            producer_id,
            producer_epoch,
            fresh,
            now_ms,
        )
    )
    error = result.error
    if error is ErrorCode.producer_fenced and ctx.api_version < 4:
        error = ErrorCode.invalid_producer_epoch  # PRODUCER_FENCED came with v4 (KIP-588)
    return _response(ctx, error, result.producer_id, result.producer_epoch)


def _response(
    ctx: RequestContext,
    error_code: ErrorCode,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
):
    return ctx.response(
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=error_code,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )
