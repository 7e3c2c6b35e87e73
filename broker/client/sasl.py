"""Client side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), sans-io.

A mechanism turns the server's challenges into the client's responses; broker.client.session
carries them in SaslAuthenticate requests after a SaslHandshake v1.
"""

from __future__ import annotations

import base64
import hmac
import secrets

from broker.security.scram import ScramMechanism


class SaslClientError(Exception):
    """The server's answer breaks the mechanism (a wrong nonce, a forged signature)."""


class PlainSaslClient:
    mechanism_name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._message = b"\0" + username.encode() + b"\0" + password.encode()
        self.complete = False

    def initial_response(self) -> bytes:
        return self._message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        # PLAIN has a single message; the server's (empty) answer ends it.
        self.complete = True
        return None


def _saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


class ScramSaslClient:
    """client-first -> server-first, client-final -> server-final (verified)."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        client_nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.mechanism_name = mechanism.mechanism_name
        self._password = password
        self._nonce = client_nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self.complete = False

    def initial_response(self) -> bytes:
        return b"n,," + self._client_first_bare.encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._client_final(challenge.decode())
        self._verify_server_final(challenge.decode())
        return None

    def _client_final(self, server_first: str) -> bytes:
        fields = _attributes(server_first)
        nonce = fields.get("r", "")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslClientError("SCRAM server nonce does not extend the client nonce")
        salt = base64.b64decode(fields["s"])
        salted = self.mechanism.salted_password(self._password, salt, int(fields["i"]))
        # "biws" is base64("n,,"): no channel binding, no authorization id.
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        client_key = self.mechanism.hmac(salted, b"Client Key")
        signature = self.mechanism.hmac(self.mechanism.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = self.mechanism.hmac(salted, b"Server Key")
        self._server_signature = self.mechanism.hmac(server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: str) -> None:
        fields = _attributes(server_final)
        if "e" in fields:
            raise SaslClientError(f"SCRAM authentication failed: {fields['e']}")
        verifier = base64.b64decode(fields.get("v", ""))
        if not hmac.compare_digest(verifier, self._server_signature or b""):
            raise SaslClientError("SCRAM server signature does not match: not the real server")
        self.complete = True


def _attributes(message: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in message.split(",") if "=" in item)


def sasl_client(mechanism: str, username: str, password: str) -> PlainSaslClient | ScramSaslClient:
    if mechanism == "PLAIN":
        return PlainSaslClient(username, password)
    scram = ScramMechanism.from_name(mechanism)
    if scram is None:
        raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
    return ScramSaslClient(scram, username, password)
