"""ApiVersions: the versions Fjord serves (only the implemented and tested ones) and, from v3,
the feature flags as Kafka's ApiVersionsResponse.Builder shows them: every supported feature's
range (v3 leaves out those whose minimum is 0, which older clients cannot read: KAFKA-17492),
the finalized levels other than 0, and their epoch."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.base import NO_THROTTLE, RequestContext
from broker.metadata.features import SUPPORTED, FinalizedFeatures


def handle_api_versions(broker, ctx: RequestContext, request) -> object:
    return api_versions_response(ctx, broker.api_specs, ErrorCode.none, broker.features)


def api_versions_response(
    ctx: RequestContext, specs, error: ErrorCode, features: FinalizedFeatures | None = None
) -> object:
    keys = tuple(
        ctx.response(
            "ApiVersion", api_key=s.key, min_version=s.min_version, max_version=s.max_version
        )
        for s in sorted(specs.values(), key=lambda s: s.key)
    )
    return ctx.response(
        "ApiVersionsResponse",
        error_code=error,
        api_keys=keys,
        throttle_time=NO_THROTTLE,
        **(_features(ctx, features) if features is not None and ctx.api_version >= 3 else {}),
    )


def _features(ctx: RequestContext, features: FinalizedFeatures) -> dict:
    alter_feature_level_0 = ctx.api_version < 4
    supported = tuple(
        ctx.response("SupportedFeatureKey", name=name, min_version=low, max_version=high)
        for name, (low, high) in SUPPORTED.items()
        if not (alter_feature_level_0 and low == 0)
    )
    finalized = tuple(
        ctx.response(
            "FinalizedFeatureKey", name=name, min_version_level=level, max_version_level=level
        )
        for name, level in sorted(features.levels.items())
        if level != 0
    )
    return {
        "supported_features": supported,
        "finalized_features_epoch": features.epoch,
        "finalized_features": finalized,
    }
