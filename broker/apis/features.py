"""UpdateFeatures (KIP-584, KIP-778): change the finalized feature levels ApiVersions shows.

Kafka's ControllerApis.handleUpdateFeatures and QuorumController.updateFeatures: ALTER on the
cluster is needed (CLUSTER_AUTHORIZATION_FAILED otherwise). The updates are checked together
and applied all or none; the first refused one fails the request with INVALID_UPDATE_VERSION
and no per-feature results. v0's allow_downgrade is a safe downgrade (UpdateFeaturesRequest's
getFeature), v1 adds upgrade_type and validate_only, v2 drops the per-feature results."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, RequestContext
from broker.apis.scram_credentials import CLUSTER_AUTHORIZATION_FAILED
from broker.metadata.features import FeatureUpdate, InvalidFeatureUpdate, UpgradeType
from broker.security.operations import AclOperation


def _update(ctx: RequestContext, key) -> FeatureUpdate:
    if ctx.api_version == 0:
        upgrade = UpgradeType.SAFE_DOWNGRADE if key.allow_downgrade else UpgradeType.UPGRADE
    else:
        upgrade = UpgradeType.from_code(key.upgrade_type)
    return FeatureUpdate(key.feature, key.max_version_level, upgrade)


async def handle_update_features(broker, ctx: RequestContext, request) -> object:
    if not authorize_cluster(broker, ctx, AclOperation.ALTER):
        return _response(ctx, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
    updates = [_update(ctx, key) for key in request.feature_updates]
    try:
        await broker.update_features(updates, getattr(request, "validate_only", False))
    except InvalidFeatureUpdate as e:
        return _response(
            ctx,
            ErrorCode.invalid_update_version,
            f"The update failed for all features since the following feature had an error: {e}",
        )
    results = ()
    if ctx.has("UpdatableFeatureResult"):  # v0-1 list every update, v2 none
        results = tuple(
            ctx.response(
                "UpdatableFeatureResult",
                feature=u.name,
                error_code=ErrorCode.none,
                error_message=None,
            )
            for u in updates
        )
    return _response(ctx, ErrorCode.none, None, results)


def _response(ctx: RequestContext, code: ErrorCode, message: str | None, results=()) -> object:
    return ctx.response(
        "UpdateFeaturesResponse",
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        results=results,
    )
