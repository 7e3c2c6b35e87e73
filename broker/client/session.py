"""A connection ready for requests: TLS, SASL authentication and API version negotiation.

`open_session` does what a Kafka client does on a new connection: ApiVersions first (allowed
before authentication), then SaslHandshake v1 and SaslAuthenticate rounds on SASL listeners;
every later request is built at the highest version both kio's schemas and the broker support.
"""

from __future__ import annotations

import dataclasses
import ssl
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from broker.client.connection import BrokerConnection
from broker.client.errors import KafkaAdminError, check
from broker.client.sasl import SaslClientError, sasl_client
from broker.config import SECURITY_PROTOCOLS

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

# The oldest version whose layout the client's requests are written for: below these a
# request's shape differs (OffsetFetch v8 batches groups, FindCoordinator v4 batches keys,
# ListOffsets v2 has the isolation level, Metadata v1 tells "all topics" from "none").
MIN_VERSIONS = {2: 2, 9: 8, 10: 4, 3: 1}
# The newest version the client's requests are written for: OffsetCommit and OffsetFetch v10
# name topics by id, and the client names them (Kafka's own builders keep to v9 too unless
# every topic's id is known). Produce v12, EndTxn v5 and TxnOffsetCommit v5 are transaction
# version 2 (KIP-890 part 2), which the producer does not speak: it keeps to version 1's
# protocol (AddPartitionsToTxn, AddOffsetsToTxn, one epoch across transactions), which a
# cluster at either level serves, as the Java client does when it does not turn version 2 on.
# AddPartitionsToTxn v4+ is the brokers' own form (transaction_verification.py).
MAX_VERSIONS = {0: 11, 8: 9, 9: 9, 24: 3, 26: 4, 28: 4}


@dataclass(frozen=True)
class Security:
    """Kafka's client settings: security.protocol, the TLS context for SSL and SASL_SSL,
    sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and the user's credentials."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security protocol must be one of {SECURITY_PROTOCOLS}")
        if self.protocol.endswith("SSL") and self.ssl_context is None:
            raise ValueError(f"{self.protocol} needs an ssl_context")
        if self.protocol.startswith("SASL") and (self.username is None or self.password is None):
            raise ValueError(f"{self.protocol} needs a username and a password")


@cache
def client_versions(api_key: int) -> range:
    if api_key not in api_key_map:
        return range(0)
    versions = schema_name_map[api_key_map[api_key]]
    newest = min(max(versions), MAX_VERSIONS.get(api_key, max(versions)))
    return range(max(min(versions), MIN_VERSIONS.get(api_key, 0)), newest + 1)


@cache
def _request_class(api_key: int, version: int, class_name: str) -> tuple[type, frozenset[str]]:
    """The class and its field names, looked up once: kio's module lookup costs several
    times the entity itself, and a producer builds a few entities per Produce request."""
    cls = getattr(load_payload_module(api_key, version, EntityType.request), class_name)
    return cls, frozenset(f.name for f in dataclasses.fields(cls))


def entity(api_key: int, version: int, class_name: str, **fields: Any) -> Any:
    """A kio request entity of that version, from fields named as in the newest one: fields
    the version does not have are left out."""
    cls, names = _request_class(api_key, version, class_name)
    return cls(**{k: v for k, v in fields.items() if k in names})


class Session:
    """A BrokerConnection with the versions negotiated for it."""

    def __init__(self, connection: BrokerConnection, broker_versions: dict[int, range]) -> None:
        self.connection = connection
        self.broker_versions = broker_versions

    def version(self, api_key: int, ours: range | None = None) -> int:
        """The newest version of `api_key` both the broker and `ours` (by default every
        version this client speaks) have; UNSUPPORTED_VERSION (KafkaAdminError) when none."""
        if ours is None:
            ours = client_versions(api_key)
        theirs = self.broker_versions.get(api_key)
        common = range(max(ours.start, theirs.start), min(ours.stop, theirs.stop)) if theirs else ()
        if not common:
            raise KafkaAdminError.from_code(
                ErrorCode.unsupported_version,
                f"the broker serves no version of api key {api_key} this client speaks",
            )
        return common[-1]

    def request(self, api_key: int, class_name: str, **fields: Any) -> Any:
        return entity(api_key, self.version(api_key), class_name, **fields)

    async def send(self, request: Any) -> Any:
        return await self.connection.send(request)

    @property
    def closed(self) -> bool:
        return self.connection.closed

    async def close(self) -> None:
        await self.connection.close()


async def open_session(
    host: str, port: int, security: Security, client_id: str = "fjord-admin"
) -> Session:
    connection = await BrokerConnection.open(host, port, client_id, ssl=security.ssl_context)
    try:
        session = Session(connection, await _api_versions(connection))
        if security.protocol.startswith("SASL"):
            await _authenticate(session, security)
    except BaseException:
        await connection.close()
        raise
    return session


async def _api_versions(connection: BrokerConnection) -> dict[int, range]:
    # v3 carries the client's software name; a broker that does not know it answers
    # UNSUPPORTED_VERSION in a v0 body (KIP-511), so v0 is the fallback.
    for version in (3, 0):
        request = entity(
            API_VERSIONS,
            version,
            "ApiVersionsRequest",
            client_software_name="fjord-client",
            client_software_version="1",
        )
        response = await connection.send(request)
        if response.error_code == ErrorCode.none:
            return {k.api_key: range(k.min_version, k.max_version + 1) for k in response.api_keys}
    raise KafkaAdminError.from_code(response.error_code, "ApiVersions failed")


async def _authenticate(session: Session, security: Security) -> None:
    mechanism = sasl_client(security.sasl_mechanism, security.username, security.password)
    handshake = await session.send(
        entity(SASL_HANDSHAKE, 1, "SaslHandshakeRequest", mechanism=mechanism.mechanism_name)
    )
    check(handshake.error_code, f"mechanisms enabled: {', '.join(handshake.mechanisms)}")
    token: bytes | None = mechanism.initial_response()
    while token is not None:
        response = await session.send(
            session.request(SASL_AUTHENTICATE, "SaslAuthenticateRequest", auth_bytes=token)
        )
        check(response.error_code, response.error_message)
        try:
            token = mechanism.evaluate_challenge(response.auth_bytes)
        except SaslClientError as e:
            raise KafkaAdminError.from_code(ErrorCode.sasl_authentication_failed, str(e)) from e
