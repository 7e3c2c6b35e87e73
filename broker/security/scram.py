"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer runs them.

The broker keeps only salt, iteration count, StoredKey and ServerKey: enough to check a
client's proof and to prove itself back, never enough to log in as the user.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from broker.security.errors import SaslAuthenticationError, SaslError


class ScramMechanism(Enum):
    """Name, hash and the int8 the admin APIs use for it (Kafka's ScramMechanism type)."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, mechanism_name: str, hash_name: str, type_id: int) -> None:
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.type_id = type_id

    @classmethod
    def from_type(cls, type_id: int) -> ScramMechanism | None:
        return next((m for m in cls if m.type_id == type_id), None)

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)

    def credential(self, salted_password: bytes, salt: bytes, iterations: int) -> ScramCredential:
        client_key = self.hmac(salted_password, b"Client Key")
        return ScramCredential(
            salt=salt,
            stored_key=self.hash(client_key),
            server_key=self.hmac(salted_password, b"Server Key"),
            iterations=iterations,
        )


# Kafka's ScramMechanism.minIterations (the RFC's recommendation, for both hashes) and the
# MAX_ITERATIONS AlterUserScramCredentials accepts.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


CredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
# Only gs2 header "n": Kafka's server offers no channel binding, like its ClientFirstMessage.
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel_binding>[A-Za-z0-9+/=]+),r=(?P<nonce>{_PRINTABLE})"
    rf"{_EXTENSIONS}),p=(?P<proof>[A-Za-z0-9+/=]+)"
)
_INVALID_CREDENTIALS = "Authentication failed: Invalid user credentials"


def username(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _extensions(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


class ScramSaslServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: CredentialLookup,
        server_nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._server_nonce = server_nonce
        self._step = self._client_first
        self.authorization_id: str | None = None
        self.complete = False

    def evaluate_response(self, response: bytes) -> bytes:
        return self._step(response)

    def _client_first(self, response: bytes) -> bytes:
        m = _CLIENT_FIRST.fullmatch(_text(response))
        if m is None:
            raise SaslError("Invalid SCRAM client first message")
        user = username(m["saslname"])
        # Delegation tokens (KIP-48's `tokenauth` extension) do not exist in Fjord: every token
        # id is unknown, as Kafka answers for one it does not hold.
        if _extensions(m["extensions"]).get("tokenauth", "").lower() == "true":
            raise SaslError(f"Token Authentication failed: Invalid tokenId : {user}")
        credential = self._credentials(user, self.mechanism)
        if credential is None:
            raise SaslError(_INVALID_CREDENTIALS)
        if m["authzid"] and username(m["authzid"]) != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise SaslError(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism.mechanism_name}"
            )
        self._gs2_header = response[: response.index(b"n=", 2)]
        self._client_first_bare = m["bare"]
        self._nonce = m["nonce"] + self._server_nonce()
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
            f"i={credential.iterations}"
        )
        self._credential = credential
        self._user = user
        self._step = self._client_final
        return self._server_first.encode()

    def _client_final(self, response: bytes) -> bytes:
        m = _CLIENT_FINAL.fullmatch(_text(response))
        if m is None:
            raise SaslError("Invalid SCRAM client final message")
        if m["nonce"] != self._nonce:
            raise SaslError("Invalid client nonce in the final client message.")
        if _b64(m["channel_binding"]) != self._gs2_header:
            raise SaslError("Invalid channel binding in the final client message.")
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, m["without_proof"])
        ).encode()
        mech, credential = self.mechanism, self._credential
        client_signature = mech.hmac(credential.stored_key, auth_message)
        proof = _b64(m["proof"])
        if len(proof) != len(client_signature):
            raise SaslError(_INVALID_CREDENTIALS)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(mech.hash(client_key), credential.stored_key):
            raise SaslError(_INVALID_CREDENTIALS)
        server_signature = mech.hmac(credential.server_key, auth_message)
        self.authorization_id = self._user
        self.complete = True
        self._step = self._done
        return b"v=" + base64.b64encode(server_signature)

    def _done(self, response: bytes) -> bytes:
        raise SaslError("Unexpected challenge in SASL server state COMPLETE")


def _text(response: bytes) -> str:
    try:
        return response.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError("Invalid SCRAM message: not UTF-8") from None


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SaslError("Invalid SCRAM message: bad base64") from None
