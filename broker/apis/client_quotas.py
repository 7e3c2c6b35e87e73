"""DescribeClientQuotas and AlterClientQuotas (KIP-546): the quota configs of users, client ids
and addresses, as Kafka's ControllerApis answers them.

Describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS (else
CLUSTER_AUTHORIZATION_FAILED: the whole request for describe, every entry for alter). A bad
filter fails the describe with INVALID_REQUEST (UNSUPPORTED_VERSION for an unknown entity
type); alter answers each entity on its own, and applies the valid ones unless validate_only.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, ApiSpec, RequestContext
from broker.apis.scram_credentials import CLUSTER_AUTHORIZATION_FAILED
from broker.quota.client_quotas import (
    ClientQuotaEntity,
    FilterComponent,
    InvalidQuota,
    UnsupportedEntityType,
    check_filter,
    check_value,
    parse_entity,
)
from broker.security.operations import AclOperation


def handle_describe_client_quotas(broker, ctx: RequestContext, request) -> object:
    if not authorize_cluster(broker, ctx, AclOperation.DESCRIBE_CONFIGS):
        return _describe_response(
            ctx, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED
        )
    try:
        exact, specified = check_filter(
            FilterComponent(c.entity_type, c.match_type, c.match) for c in request.components
        )
    except InvalidQuota as e:
        return _describe_response(ctx, ErrorCode.invalid_request, str(e))
    except UnsupportedEntityType as e:
        return _describe_response(ctx, ErrorCode.unsupported_version, str(e))
    entries = tuple(
        ctx.response(
            "EntryData",
            entity=tuple(
                ctx.response("EntityData", entity_type=t, entity_name=n) for t, n in entity.entries
            ),
            values=tuple(
                ctx.response("ValueData", key=key, value=value) for key, value in values.items()
            ),
        )
        for entity, values in broker.quotas.configs.describe(exact, specified, request.strict)
    )
    return _describe_response(ctx, ErrorCode.none, None, entries)


def _describe_response(ctx, code: ErrorCode, message: str | None, entries=None) -> object:
    return ctx.response(
        "DescribeClientQuotasResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        entries=entries,
    )


async def handle_alter_client_quotas(broker, ctx: RequestContext, request) -> object:
    # Sorted by type: the same entity named in another order is the same entity.
    pairs = [
        tuple(sorted(((e.entity_type, e.entity_name) for e in entry.entity), key=_entity_type))
        for entry in request.entries
    ]
    if not authorize_cluster(broker, ctx, AclOperation.ALTER_CONFIGS):
        denied = (ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
        return _alter_response(ctx, [(entity, *denied) for entity in dict.fromkeys(pairs)])
    results: dict[tuple, tuple[ErrorCode, str | None]] = {}
    changes: dict[ClientQuotaEntity, dict[str, float | None]] = {}
    for entity_pairs, entry in zip(pairs, request.entries, strict=True):
        if entity_pairs in results:
            # As Kafka's ClientQuotaControlManager: a second mention of an entity is answered
            # with an error, and the first mention's changes stand.
            results[entity_pairs] = (
                ErrorCode.invalid_request,
                f"Ignoring duplicate entity {ClientQuotaEntity(entity_pairs)}",
            )
            continue
        try:
            entity = parse_entity(entity_pairs)
            changes[entity] = _changes(entity, entry.ops)
        except InvalidQuota as e:
            results[entity_pairs] = (ErrorCode.invalid_request, str(e))
        else:
            results[entity_pairs] = (ErrorCode.none, None)
    if changes and not request.validate_only:
        await broker.alter_client_quotas(changes)
    return _alter_response(ctx, [(entity, *result) for entity, result in results.items()])


def _entity_type(pair: tuple[str, str | None]) -> str:
    return pair[0]


def _changes(entity: ClientQuotaEntity, ops) -> dict[str, float | None]:
    """The entry's changes, a removal as None; setting a value twice or removing an unset
    key changes nothing."""
    wanted: dict[str, float | None] = {}
    for op in ops:
        if op.key in wanted:
            raise InvalidQuota(
                f"Duplicate quota key {op.key} not updating quota for this entity {entity}"
            )
        if op.remove:
            wanted[op.key] = None
        else:
            check_value(entity, op.key, op.value)
            wanted[op.key] = op.value
    return wanted


def _alter_response(ctx: RequestContext, results) -> object:
    return ctx.response(
        "AlterClientQuotasResponse",
        throttle_time=NO_THROTTLE,
        entries=tuple(
            ctx.response(
                "EntryData",
                error_code=code,
                error_message=message,
                entity=tuple(
                    ctx.response("EntityData", entity_type=t, entity_name=n) for t, n in entity
                ),
            )
            for entity, code, message in results
        ),
    )


SPECS = [
    ApiSpec(48, "DescribeClientQuotas", 0, 1, handle_describe_client_quotas),
    ApiSpec(49, "AlterClientQuotas", 0, 1, handle_alter_client_quotas),
]
