"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), validated as Kafka's
ScramImage and ScramControlManager do. Clients send a salted password; the broker derives
StoredKey and ServerKey from it and keeps only those, the salt and the iteration count."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.auth_helper import authorize_cluster
from broker.apis.base import NO_THROTTLE, ApiSpec, RequestContext
from broker.security.operations import AclOperation
from broker.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramMechanism

CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."  # Kafka's exception message


def handle_describe_user_scram_credentials(broker, ctx: RequestContext, request) -> object:
    if not authorize_cluster(broker, ctx, AclOperation.DESCRIBE):
        return ctx.response(
            "DescribeUserScramCredentialsResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=CLUSTER_AUTHORIZATION_FAILED,
            # As Kafka's getErrorResponse: every user asked for carries the error too.
            results=tuple(
                ctx.response(
                    "DescribeUserScramCredentialsResult",
                    user=u.name,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message=CLUSTER_AUTHORIZATION_FAILED,
                    credential_infos=(),
                )
                for u in request.users or ()
            ),
        )
    by_user: dict[str, list[tuple[ScramMechanism, int]]] = {}
    for (user, name), credential in sorted(broker.scram_credentials.items()):
        by_user.setdefault(user, []).append((ScramMechanism.from_name(name), credential.iterations))
    if request.users:
        asked: dict[str, bool] = {}
        for u in request.users:
            asked[u.name] = u.name in asked  # True: named twice
    else:
        asked = dict.fromkeys(by_user, False)
    results = []
    for user, duplicate in asked.items():
        if duplicate:
            code, message = (
                ErrorCode.duplicate_resource,
                f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
            )
        elif user not in by_user:
            code, message = (
                ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {user}",
            )
        else:
            code, message = ErrorCode.none, None
        infos = (
            ()
            if code != ErrorCode.none
            else tuple(
                ctx.response("CredentialInfo", mechanism=m.type_id, iterations=i)
                for m, i in by_user[user]
            )
        )
        results.append(
            ctx.response(
                "DescribeUserScramCredentialsResult",
                user=user,
                error_code=code,
                error_message=message,
                credential_infos=infos,
            )
        )
    return ctx.response(
        "DescribeUserScramCredentialsResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code, self.message = code, message


def _mechanism(name: str, type_id: int) -> ScramMechanism:
    if not name:
        raise _Refused(ErrorCode.unacceptable_credential, "Username must not be empty")
    mechanism = ScramMechanism.from_type(type_id)
    if mechanism is None:
        raise _Refused(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return mechanism


async def handle_alter_user_scram_credentials(broker, ctx: RequestContext, request) -> object:
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not authorize_cluster(broker, ctx, AclOperation.ALTER):
        return _alter_response(
            ctx,
            [
                (u, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
                for u in dict.fromkeys(users)
            ],
        )
    errors: dict[str, tuple[ErrorCode, str]] = {}
    deletions: dict[str, tuple[str, str]] = {}
    upsertions: dict[str, tuple[tuple[str, str], ScramCredential]] = {}
    twice = (
        ErrorCode.duplicate_resource,
        "A user credential cannot be altered twice in the same request",
    )
    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = twice
            continue
        try:
            mechanism = _mechanism(d.name, d.mechanism)
            key = (d.name, mechanism.mechanism_name)
            if key not in broker.scram_credentials:
                raise _Refused(
                    ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist",
                )
            deletions[d.name] = key
        except _Refused as e:
            errors[d.name] = (e.code, e.message)
    for u in request.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = twice
            continue
        try:
            upsertions[u.name] = _upsertion(u)
        except _Refused as e:
            errors[u.name] = (e.code, e.message)
    await broker.alter_scram_credentials(dict(upsertions.values()), list(deletions.values()))
    return _alter_response(
        ctx,
        [(user, ErrorCode.none, None) for user in [*deletions, *upsertions]]
        + [(user, code, message) for user, (code, message) in errors.items()],
    )


def _upsertion(u) -> tuple[tuple[str, str], ScramCredential]:
    mechanism = _mechanism(u.name, u.mechanism)
    if u.iterations < MIN_ITERATIONS:
        raise _Refused(ErrorCode.unacceptable_credential, "Too few iterations")
    if u.iterations > MAX_ITERATIONS:
        raise _Refused(ErrorCode.unacceptable_credential, "Too many iterations")
    if not u.salt:
        raise _Refused(ErrorCode.unacceptable_credential, "Salt must not be empty")
    if not u.salted_password:
        raise _Refused(ErrorCode.unacceptable_credential, "Salted password must not be empty")
    credential = mechanism.credential(u.salted_password, u.salt, u.iterations)
    return (u.name, mechanism.mechanism_name), credential


def _alter_response(ctx: RequestContext, results) -> object:
    return ctx.response(
        "AlterUserScramCredentialsResponse",
        throttle_time=NO_THROTTLE,
        results=tuple(
            ctx.response(
                "AlterUserScramCredentialsResult", user=user, error_code=code, error_message=message
            )
            for user, code, message in results
        ),
    )


SPECS = [
    ApiSpec(50, "DescribeUserScramCredentials", 0, 0, handle_describe_user_scram_credentials),
    ApiSpec(51, "AlterUserScramCredentials", 0, 0, handle_alter_user_scram_credentials),
]
