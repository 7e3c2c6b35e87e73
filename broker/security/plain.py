"""SASL/PLAIN (RFC 4616) against the `user_<name>="<password>"` options of the listener's
PlainLoginModule, as Kafka's PlainSaslServer and PlainServerCallbackHandler check them."""

from __future__ import annotations

import hmac

from broker.security.errors import SaslAuthenticationError
from broker.security.jaas import LoginModule

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def plain_users(module: LoginModule) -> dict[str, str]:
    return {k[len("user_") :]: v for k, v in module.options.items() if k.startswith("user_")}


class PlainSaslServer:
    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.authorization_id: str | None = None
        self.complete = False

    def evaluate_response(self, response: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("Unexpected challenge in SASL/PLAIN state COMPLETE")
        # message = [authzid] UTF8NUL authcid UTF8NUL passwd
        tokens = response.decode("utf-8", errors="replace").split("\x00")
        if len(tokens) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            )
        authzid, user, password = tokens
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.authorization_id = user
        self.complete = True
        return b""
