"""ApiVersions: the versions Fjord serves (only the implemented and tested ones)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.base import NO_THROTTLE, RequestContext


def handle_api_versions(broker, ctx: RequestContext, request) -> object:
    return api_versions_response(ctx, broker.api_specs, ErrorCode.none)


def api_versions_response(ctx: RequestContext, specs, error: ErrorCode) -> object:
    keys = tuple(
        ctx.response(
            "ApiVersion", api_key=s.key, min_version=s.min_version, max_version=s.max_version
        )
        for s in sorted(specs.values(), key=lambda s: s.key)
    )
    return ctx.response(
        "ApiVersionsResponse", error_code=error, api_keys=keys, throttle_time=NO_THROTTLE
    )
