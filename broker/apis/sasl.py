"""SaslHandshake and SaslAuthenticate outside an authentication exchange: on a listener
without SASL, or on a connection already authenticated (re-authentication, KIP-368, is off as
with Kafka's default connections.max.reauth.ms=0). The exchange itself is
broker/server/sasl_exchange.py's."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.apis.base import ApiSpec, RequestContext
from broker.security.sasl import NO_SESSION_LIFETIME


def handle_sasl_handshake(broker, ctx: RequestContext, request) -> object:
    return ctx.response("SaslHandshakeResponse", error_code=ErrorCode.illegal_sasl_state)


def handle_sasl_authenticate(broker, ctx: RequestContext, request) -> object:
    return ctx.response(
        "SaslAuthenticateResponse",
        error_code=ErrorCode.illegal_sasl_state,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
        session_lifetime=NO_SESSION_LIFETIME,
    )


SPECS = [
    # v0 is still Kafka 4's: its tokens follow as raw frames (sasl_exchange._raw_token).
    ApiSpec(17, "SaslHandshake", 0, 1, handle_sasl_handshake),
    ApiSpec(36, "SaslAuthenticate", 0, 2, handle_sasl_authenticate),
]
