"""InitProducerId for idempotent producers: a fresh producer id at epoch 0.

Transactional producers need the transaction coordinator, which Fjord does not run yet: their
requests answer COORDINATOR_NOT_AVAILABLE, as a Kafka broker does while no coordinator is up.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.base import NO_THROTTLE, RequestContext

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


async def handle_init_producer_id(broker, ctx: RequestContext, request) -> object:
    # v3+ may name the producer id and epoch to resume: both or neither (KafkaApis).
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
    producer_epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return _response(ctx, ErrorCode.invalid_request)
    transactional_id = request.transactional_id
    if transactional_id == "":
        return _response(ctx, ErrorCode.invalid_request)
    if transactional_id is not None:
        return _response(ctx, ErrorCode.coordinator_not_available)
    # Without a transactional id Kafka hands out a new id blindly, whatever the request names:
    # the old id's sequences live on in the partitions until they expire.
    return _response(ctx, ErrorCode.none, await broker.generate_producer_id(), 0)


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
