"""CreateAcls, DescribeAcls and DeleteAcls (what kafka-acls.sh and AdminClient send): they need
ALTER (create, delete) or DESCRIBE (describe) on the cluster, and an authorizer; without one,
Kafka answers SECURITY_DISABLED."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, ApiSpec, RequestContext
from broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    InvalidAclError,
    ResourcePattern,
)
from broker.security.operations import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    from_code,
)

NO_AUTHORIZER = "No Authorizer is configured."


def _binding(creation) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            from_code(ResourceType, creation.resource_type),
            creation.resource_name,
            from_code(PatternType, creation.resource_pattern_type),
        ),
        AccessControlEntry(
            creation.principal,
            creation.host,
            from_code(AclOperation, creation.operation),
            from_code(AclPermissionType, creation.permission_type),
        ),
    )


def _filter(f) -> AclBindingFilter:
    return AclBindingFilter(
        from_code(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        from_code(PatternType, f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        from_code(AclOperation, f.operation),
        from_code(AclPermissionType, f.permission_type),
    )


def _refusal(broker, ctx: RequestContext, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    if broker.authorizer is None:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    if not authorize_cluster(broker, ctx, operation):
        return ErrorCode.cluster_authorization_failed, None
    return None


async def handle_create_acls(broker, ctx: RequestContext, request) -> object:
    refusal = _refusal(broker, ctx, AclOperation.ALTER)
    if refusal is not None:
        results = [refusal] * len(request.creations)
    else:
        results = []
        valid = []
        for creation in request.creations:
            binding = _binding(creation)
            try:
                binding.validate()
            except InvalidAclError as e:
                results.append((ErrorCode.invalid_request, str(e)))
                continue
            valid.append(binding)
            results.append((ErrorCode.none, None))
        if valid:
            await broker.create_acls(valid)
    return ctx.response(
        "CreateAclsResponse",
        throttle_time=NO_THROTTLE,
        results=tuple(
            ctx.response("AclCreationResult", error_code=code, error_message=message)
            for code, message in results
        ),
    )


def handle_describe_acls(broker, ctx: RequestContext, request) -> object:
    acl_filter = _filter(request)
    refusal = _refusal(broker, ctx, AclOperation.DESCRIBE)
    if refusal is None:
        try:
            acl_filter.validate()
        except InvalidAclError as e:
            refusal = ErrorCode.invalid_request, str(e)
    if refusal is not None:
        code, message = refusal
        return ctx.response(
            "DescribeAclsResponse",
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            resources=(),
        )
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in broker.authorizer.acls(acl_filter):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    return ctx.response(
        "DescribeAclsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        resources=tuple(
            ctx.response(
                "DescribeAclsResource",
                resource_type=pattern.resource_type,
                resource_name=pattern.name,
                pattern_type=pattern.pattern_type,
                acls=tuple(
                    ctx.response(
                        "AclDescription",
                        principal=e.principal,
                        host=e.host,
                        operation=e.operation,
                        permission_type=e.permission_type,
                    )
                    for e in entries
                ),
            )
            for pattern, entries in by_pattern.items()
        ),
    )


async def handle_delete_acls(broker, ctx: RequestContext, request) -> object:
    filters = [_filter(f) for f in request.filters]
    refusal = _refusal(broker, ctx, AclOperation.ALTER)
    results: list[tuple[ErrorCode, str | None, list[AclBinding]]] = []
    if refusal is not None:
        results = [(*refusal, [])] * len(filters)
    else:
        valid = []
        for f in filters:
            try:
                f.validate()
            except InvalidAclError as e:
                results.append((ErrorCode.invalid_request, str(e), []))
                continue
            valid.append(f)
            results.append((ErrorCode.none, None, []))
        matched = iter(await broker.delete_acls(valid))
        results = [
            (code, message, next(matched) if code is ErrorCode.none else bindings)
            for code, message, bindings in results
        ]
    return ctx.response(
        "DeleteAclsResponse",
        throttle_time=NO_THROTTLE,
        filter_results=tuple(
            ctx.response(
                "DeleteAclsFilterResult",
                error_code=code,
                error_message=message,
                matching_acls=tuple(_matching_acl(ctx, b) for b in bindings),
            )
            for code, message, bindings in results
        ),
    )


def _matching_acl(ctx: RequestContext, b: AclBinding):
    return ctx.response(
        "DeleteAclsMatchingAcl",
        error_code=ErrorCode.none,
        error_message=None,
        resource_type=b.pattern.resource_type,
        resource_name=b.pattern.name,
        pattern_type=b.pattern.pattern_type,
        principal=b.entry.principal,
        host=b.entry.host,
        operation=b.entry.operation,
        permission_type=b.entry.permission_type,
    )


SPECS = (
    # Kafka 4 dropped v0 (KIP-896: v1 brought pattern types); v2 is flexible, v3 adds the
    # USER resource type.
    ApiSpec(29, "DescribeAcls", 1, 3, handle_describe_acls),
    ApiSpec(30, "CreateAcls", 1, 3, handle_create_acls),
    ApiSpec(31, "DeleteAcls", 1, 3, handle_delete_acls),
)
