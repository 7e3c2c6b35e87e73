"""A SASL listener connection's authentication state machine (Kafka's SaslServerAuthenticator),
without sockets: the connection feeds it requests and raw tokens and acts on the outcome.

Before authentication a client may send ApiVersions (once, before the handshake), then
SaslHandshake, then the mechanism's tokens: in SaslAuthenticate requests after a v1 handshake,
as raw size-prefixed frames after a v0 one (Kafka 4 still serves v0). Anything else is an
illegal SASL state and closes the connection.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from enum import Enum, auto

from broker.security.errors import SaslAuthenticationError, SaslError

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

# SaslAuthenticate's session_lifetime: connections.max.reauth.ms is 0, no re-authentication.
NO_SESSION_LIFETIME = timedelta(0)


class SaslState(Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = auto()
    HANDSHAKE_REQUEST = auto()
    AUTHENTICATE = auto()
    COMPLETE = auto()
    FAILED = auto()


class IllegalSaslState(Exception):
    """A request the SASL state does not allow: the connection is closed without an answer."""


class UnsupportedSaslMechanism(Exception):
    pass


# The mechanism servers (PlainSaslServer, ScramSaslServer) share this shape.
SaslServerFactory = Callable[[str], object]


class SaslServerAuthenticator:
    def __init__(self, enabled_mechanisms: list[str], new_server: SaslServerFactory) -> None:
        self.enabled_mechanisms = list(enabled_mechanisms)
        self._new_server = new_server
        self._server = None
        self.mechanism: str | None = None
        self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        self.raw_tokens = False
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def check_request(self, api_key: int) -> None:
        """Whether a request with this key may come now; raises IllegalSaslState if not."""
        allowed = {
            SaslState.HANDSHAKE_OR_VERSIONS_REQUEST: (API_VERSIONS, SASL_HANDSHAKE),
            SaslState.HANDSHAKE_REQUEST: (SASL_HANDSHAKE,),
            SaslState.AUTHENTICATE: () if self.raw_tokens else (SASL_AUTHENTICATE,),
        }.get(self.state, ())
        if api_key not in allowed:
            during = "authentication" if self.state is SaslState.AUTHENTICATE else "handshake"
            self.state = SaslState.FAILED
            raise IllegalSaslState(
                f"Unexpected Kafka request of type {api_key} during SASL {during}"
            )

    def api_versions_answered(self) -> None:
        self.state = SaslState.HANDSHAKE_REQUEST

    def handshake(self, version: int, mechanism: str) -> None:
        """Choose the mechanism; raises UnsupportedSaslMechanism for one not enabled."""
        if mechanism not in self.enabled_mechanisms:
            self.state = SaslState.FAILED
            raise UnsupportedSaslMechanism(f"Unsupported SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.raw_tokens = version == 0
        self.state = SaslState.AUTHENTICATE

    def authenticate(self, token: bytes) -> bytes:
        """The server's answer to a client token; raises SaslError when authentication fails
        (failure_message says what the client is told)."""
        if self.state is not SaslState.AUTHENTICATE:
            raise SaslError(f"Unexpected SASL token in state {self.state.name}")
        try:
            challenge = self._server.evaluate_response(token)
        except SaslError:
            self.state = SaslState.FAILED
            raise
        if self._server.complete:
            self.principal = "User:" + self._server.authorization_id
            self.state = SaslState.COMPLETE
        return challenge

    def failure_message(self, error: SaslError) -> str:
        if isinstance(error, SaslAuthenticationError):
            return str(error)
        return (
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {self.mechanism}"
        )
