"""A SASL listener connection's frames before authentication completes: wires the sans-io
SaslServerAuthenticator to the connection's framing and responses."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker.protocol import codec
from broker.protocol.framing import frame
from broker.security.errors import SaslError
from broker.security.sasl import (
    API_VERSIONS,
    NO_SESSION_LIFETIME,
    SASL_HANDSHAKE,
    IllegalSaslState,
    UnsupportedSaslMechanism,
)

if TYPE_CHECKING:
    from broker.server.connection import KafkaConnection

log = logging.getLogger("broker.security")


def handle_frame(conn: KafkaConnection, payload, started: float) -> bool:
    """Handle one frame of an unauthenticated connection; False leaves it to the ordinary
    dispatch (an ApiVersions request)."""
    auth = conn.authenticator
    if auth.raw_tokens:
        _raw_token(conn, bytes(payload))
        return True
    try:
        api_key, api_version = codec.peek_key_version(payload)
        correlation_id = codec.peek_correlation_id(payload)
        auth.check_request(api_key)
    except IllegalSaslState as e:
        conn._protocol_error(str(e))
        return True
    except Exception:
        conn._protocol_error("a frame too short for a request header")
        return True
    spec = conn.broker.api_specs[api_key]
    supported = spec.min_version <= api_version <= spec.max_version
    if api_key == API_VERSIONS:
        # An unsupported version is answered (in v0) and the client may ask again.
        if supported:
            auth.api_versions_answered()
        return False
    if not supported:
        conn._protocol_error(f"unsupported API key {api_key} version {api_version}")
        return True
    try:
        request = codec.decode_request(payload, api_key, api_version)
    except codec.DecodeError as e:
        conn._protocol_error(str(e))
        return True
    ctx = conn._context(api_key, api_version, correlation_id, request.client_id)
    if api_key == SASL_HANDSHAKE:
        _handshake(conn, ctx, request.body.mechanism, started)
    else:
        _authenticate(conn, ctx, request.body.auth_bytes, started)
    return True


def _handshake(conn: KafkaConnection, ctx, mechanism: str, started: float) -> None:
    auth = conn.authenticator
    try:
        auth.handshake(ctx.api_version, mechanism)
    except UnsupportedSaslMechanism as e:
        log.info("closing connection from %s on %s: %s", conn.peer, conn.listener, e)
        response = ctx.response(
            "SaslHandshakeResponse",
            error_code=ErrorCode.unsupported_sasl_mechanism,
            mechanisms=tuple(auth.enabled_mechanisms),
        )
        conn.respond_then_close(ctx, response, started)
        return
    response = ctx.response(
        "SaslHandshakeResponse",
        error_code=ErrorCode.none,
        mechanisms=tuple(auth.enabled_mechanisms),
    )
    conn._respond_now(ctx, response, started)


def _authenticate(conn: KafkaConnection, ctx, token: bytes, started: float) -> None:
    auth = conn.authenticator
    try:
        challenge = auth.authenticate(token)
    except SaslError as e:
        _log_failure(conn, e)
        response = ctx.response(
            "SaslAuthenticateResponse",
            error_code=ErrorCode.sasl_authentication_failed,
            error_message=auth.failure_message(e),
            auth_bytes=b"",
            session_lifetime=NO_SESSION_LIFETIME,
        )
        conn.respond_then_close(ctx, response, started)
        return
    _learn_principal(conn)
    response = ctx.response(
        "SaslAuthenticateResponse",
        error_code=ErrorCode.none,
        error_message=None,
        auth_bytes=challenge,
        session_lifetime=NO_SESSION_LIFETIME,
    )
    conn._respond_now(ctx, response, started)


def _raw_token(conn: KafkaConnection, token: bytes) -> None:
    """After a SaslHandshake v0: bare tokens both ways; a failure can only close."""
    auth = conn.authenticator
    try:
        challenge = auth.authenticate(token)
    except SaslError as e:
        _log_failure(conn, e)
        conn.close()
        return
    _learn_principal(conn)
    conn.transport.writelines(frame([challenge]))


def _log_failure(conn: KafkaConnection, e: SaslError) -> None:
    log.info(
        "failed authentication with %s on %s (%s): %s",
        conn.peer,
        conn.listener,
        conn.authenticator.mechanism,
        e,
    )


def _learn_principal(conn: KafkaConnection) -> None:
    if conn.authenticator.complete:
        conn.principal = conn.authenticator.principal
        conn.decoder.max_size = conn.broker.config["socket.request.max.bytes"]
        log.debug("%s authenticated from %s on %s", conn.principal, conn.peer, conn.listener)
