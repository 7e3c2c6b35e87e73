"""Authentication on SASL_PLAINTEXT, SASL_SSL and SSL listeners of an in-process broker:
the SASL state machine (SaslHandshake v0 and v1, SaslAuthenticate), SCRAM and PLAIN, and the
principals connections end up with."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import ssl
import struct

import pytest
from kafka_requests import req
from kio.schema.errors import ErrorCode
from scram_requests import SHA256, alter, describe, upsertion
from tls_certificates import CertificateAuthority

from broker.client.connection import BrokerConnection, ConnectionClosed
from broker.config import BrokerConfig, ConfigError
from broker.protocol import codec
from broker.security.scram import ScramMechanism
from broker.server.broker import Broker

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_bob="bob-secret";'
)


@contextlib.asynccontextmanager
async def security_broker(tmp_path, listeners: str, **props: str):
    config = {
        "listeners": listeners,
        "log.dirs": str(tmp_path / "kafka-logs"),
        "metrics.listener": "",
        **props,
    }
    b = Broker(BrokerConfig(config))
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


async def connect(b: Broker, listener: str, ssl_context=None) -> BrokerConnection:
    host, port = b.bound[listener]
    return await BrokerConnection.open(host, port, "fjord-test", ssl=ssl_context)


def authenticate(v: int, token: bytes):
    return req(36, v, "SaslAuthenticateRequest", auth_bytes=token)


def handshake(v: int, mechanism: str):
    return req(17, v, "SaslHandshakeRequest", mechanism=mechanism)


async def scram_login(conn, user, password, mechanism="SCRAM-SHA-512", v=2):
    """Client side of RFC 5802 over SaslAuthenticate; returns the last response."""
    h = "sha512" if mechanism.endswith("512") else "sha256"
    response = await conn.send(handshake(1, mechanism))
    assert response.error_code == ErrorCode.none
    bare = f"n={user},r=fjordclientnonce".encode()
    first = await conn.send(authenticate(v, b"n,," + bare))
    if first.error_code != ErrorCode.none:
        return first
    fields = dict(i.split("=", 1) for i in first.auth_bytes.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        h, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    without_proof = f"c=biws,r={fields['r']}".encode()
    auth_message = bare + b"," + first.auth_bytes + b"," + without_proof
    client_key = hmac.new(salted, b"Client Key", h).digest()
    signature = hmac.new(hashlib.new(h, client_key).digest(), auth_message, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = await conn.send(authenticate(v, without_proof + b",p=" + base64.b64encode(proof)))
    if final.error_code == ErrorCode.none:
        server_key = hmac.new(salted, b"Server Key", h).digest()
        expected = hmac.new(server_key, auth_message, h).digest()
        assert final.auth_bytes == b"v=" + base64.b64encode(expected)
    return final


API_VERSIONS = req(
    18, 3, "ApiVersionsRequest", client_software_name="fjord-test", client_software_version="1"
)


def principals(b: Broker, listener: str) -> set[str]:
    return {c.principal for c in b.connections if c.listener == listener}


METADATA = req(
    3,
    12,
    "MetadataRequest",
    topics=None,
    allow_auto_topic_creation=False,
    include_topic_authorized_operations=False,
)


async def test_scram_users_created_on_plaintext_log_in_on_sasl_plaintext(tmp_path):
    listeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    async with security_broker(tmp_path, listeners) as b:
        admin = await connect(b, "PLAINTEXT")
        assert await alter(admin, [upsertion("alice", "alice-secret")]) == {
            "alice": (ErrorCode.none, None)
        }
        conn = await connect(b, "SASL_PLAINTEXT")
        versions = await conn.send(API_VERSIONS)
        keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2) and keys[50] == keys[51] == (0, 0)
        final = await scram_login(conn, "alice", "alice-secret")
        assert (final.error_code, final.error_message) == (ErrorCode.none, None)
        assert final.session_lifetime.total_seconds() == 0
        metadata = await conn.send(METADATA)
        assert metadata.cluster_id == b.image.cluster_id
        assert principals(b, "SASL_PLAINTEXT") == {"User:alice"}
        assert principals(b, "PLAINTEXT") == {"User:ANONYMOUS"}
        # Once authenticated, the SASL requests are an illegal state, answered, not fatal.
        again = await conn.send(authenticate(2, b"n,,n=alice,r=x"))
        assert again.error_code == ErrorCode.illegal_sasl_state
        assert (await conn.send(handshake(1, "PLAIN"))).error_code == ErrorCode.illegal_sasl_state
        assert (await conn.send(METADATA)).cluster_id == b.image.cluster_id
        for c in (admin, conn):
            await c.close()


async def test_a_failed_connection_stays_open_for_the_authentication_delay(tmp_path):
    """KIP-306: the answer comes at once, the close only after
    connection.failed.authentication.delay.ms (here longer than the test)."""
    async with security_broker(
        tmp_path,
        "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **{"connection.failed.authentication.delay.ms": "600000"},
    ) as b:
        conn = await connect(b, "SASL_PLAINTEXT")
        final = await scram_login(conn, "nobody", "secret", "SCRAM-SHA-256")
        assert final.error_code == ErrorCode.sasl_authentication_failed
        assert not conn.closed and principals(b, "SASL_PLAINTEXT") == {"User:ANONYMOUS"}
        # Anything it sends now is out of place: that closes it at once.
        with pytest.raises(ConnectionClosed):
            await conn.send(METADATA)
        await conn.wait_closed()


async def test_wrong_password_gets_sasl_authentication_failed_and_a_closed_connection(tmp_path):
    async with security_broker(
        tmp_path, "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    ) as b:
        admin = await connect(b, "PLAINTEXT")
        await alter(admin, [upsertion("alice", "alice-secret", SHA256)])
        for user, password in [("alice", "wrong"), ("nobody", "alice-secret")]:
            conn = await connect(b, "SASL_PLAINTEXT")
            final = await scram_login(conn, user, password, "SCRAM-SHA-256", v=1)
            assert final.error_code == ErrorCode.sasl_authentication_failed
            assert final.error_message == (
                "Authentication failed during authentication due to invalid credentials with "
                "SASL mechanism SCRAM-SHA-256"
            )
            await conn.wait_closed()
            assert conn.closed
        # SHA-512 has no credential for alice: only SHA-256 was created.
        conn = await connect(b, "SASL_PLAINTEXT")
        final = await scram_login(conn, "alice", "alice-secret", "SCRAM-SHA-512")
        assert final.error_code == ErrorCode.sasl_authentication_failed
        await admin.close()


async def test_requests_before_authentication_close_the_connection(tmp_path):
    async with security_broker(tmp_path, "SASL_PLAINTEXT://127.0.0.1:0") as b:
        conn = await connect(b, "SASL_PLAINTEXT")
        with pytest.raises(ConnectionClosed):
            await conn.send(METADATA)
        # After the handshake, only SaslAuthenticate; a second ApiVersions is refused too.
        conn = await connect(b, "SASL_PLAINTEXT")
        await conn.send(API_VERSIONS)
        with pytest.raises(ConnectionClosed):
            await conn.send(API_VERSIONS)
        conn = await connect(b, "SASL_PLAINTEXT")
        assert (await conn.send(handshake(1, "SCRAM-SHA-256"))).error_code == ErrorCode.none
        with pytest.raises(ConnectionClosed):
            await conn.send(handshake(1, "SCRAM-SHA-256"))


async def test_unsupported_mechanism_lists_the_enabled_ones_then_closes(tmp_path):
    async with security_broker(tmp_path, "SASL_PLAINTEXT://127.0.0.1:0") as b:
        conn = await connect(b, "SASL_PLAINTEXT")
        response = await conn.send(handshake(1, "GSSAPI"))
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert response.mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
        await conn.wait_closed()


async def test_sasl_requests_on_a_plaintext_listener_are_an_illegal_state(broker, broker_client):
    response = await broker_client.send(handshake(1, "PLAIN"))
    assert response.error_code == ErrorCode.illegal_sasl_state
    response = await broker_client.send(authenticate(2, b"\x00alice\x00alice-secret"))
    assert response.error_code == ErrorCode.illegal_sasl_state


async def test_plain_per_listener_jaas_and_mechanisms_with_a_custom_listener_name(tmp_path):
    async with security_broker(
        tmp_path,
        "CLIENT://127.0.0.1:0",
        **{
            "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT",
            "listener.name.client.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.client.plain.sasl.jaas.config": PLAIN_JAAS,
        },
    ) as b:
        conn = await connect(b, "CLIENT")
        response = await conn.send(handshake(1, "SCRAM-SHA-512"))
        assert response.mechanisms == ("PLAIN",)
        await conn.wait_closed()
        conn = await connect(b, "CLIENT")
        assert (await conn.send(handshake(1, "PLAIN"))).error_code == ErrorCode.none
        ok = await conn.send(authenticate(0, b"\x00bob\x00bob-secret"))
        assert ok.error_code == ErrorCode.none
        assert principals(b, "CLIENT") == {"User:bob"}
        conn = await connect(b, "CLIENT")
        await conn.send(handshake(1, "PLAIN"))
        failed = await conn.send(authenticate(2, b"\x00bob\x00alice-secret"))
        assert failed.error_code == ErrorCode.sasl_authentication_failed
        assert failed.error_message == "Authentication failed: Invalid username or password"
        await conn.wait_closed()


async def _frame(reader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def test_sasl_handshake_v0_carries_raw_tokens(tmp_path):
    async with security_broker(
        tmp_path,
        "SASL_PLAINTEXT://127.0.0.1:0",
        **{"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS},
    ) as b:
        reader, writer = await asyncio.open_connection(*b.bound["SASL_PLAINTEXT"])

        def send(payload: bytes) -> None:
            writer.write(struct.pack(">i", len(payload)) + payload)

        send(codec.encode_request(handshake(0, "PLAIN"), 7, "raw"))
        _, response = codec.decode_response(await _frame(reader), 17, 0)
        assert (response.error_code, response.mechanisms) == (ErrorCode.none, ("PLAIN",))
        send(b"\x00alice\x00alice-secret")  # no request header: a bare token
        assert await _frame(reader) == b""
        send(codec.encode_request(METADATA, 8, "raw"))
        correlation_id, metadata = codec.decode_response(await _frame(reader), 3, 12)
        assert (correlation_id, metadata.cluster_id) == (8, b.image.cluster_id)
        assert principals(b, "SASL_PLAINTEXT") == {"User:alice"}
        writer.close()
        # A wrong password after a v0 handshake can only be answered by closing.
        reader, writer = await asyncio.open_connection(*b.bound["SASL_PLAINTEXT"])
        send(codec.encode_request(handshake(0, "PLAIN"), 1, "raw"))
        await _frame(reader)
        send(b"\x00alice\x00oops")
        assert await reader.read() == b""
        writer.close()


async def test_plain_without_a_jaas_config_stops_the_broker(tmp_path):
    with pytest.raises(ConfigError, match="plain.sasl.jaas.config"):
        Broker(
            BrokerConfig(
                {
                    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                    "sasl.enabled.mechanisms": "PLAIN",
                    "log.dirs": str(tmp_path),
                }
            )
        )


# -- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    (d / "ca.crt").write_text(ca.pem)
    server = ca.issue("CN=localhost,O=Fjord,C=NO", server=True)
    (d / "server.pem").write_text(server.key + server.certificate)
    alice = ca.issue("CN=alice,OU=eng,O=Fjord,C=NO")
    alice.write(d, "alice")
    return d, ca, server


def client_context(d, with_cert: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    if with_cert:
        ctx.load_cert_chain(d / "alice.crt", d / "alice.key")
    return ctx


def tls_props(d, **extra):
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(d / "server.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(d / "ca.crt"),
        **extra,
    }


async def test_mutual_tls_principal_is_the_certificates_distinguished_name(tmp_path, pki):
    d, _, _ = pki
    async with security_broker(
        tmp_path, "SSL://127.0.0.1:0", **tls_props(d, **{"ssl.client.auth": "requested"})
    ) as b:
        with_cert = await connect(b, "SSL", client_context(d))
        assert (await with_cert.send(METADATA)).cluster_id == b.image.cluster_id
        assert principals(b, "SSL") == {"User:CN=alice,OU=eng,O=Fjord,C=NO"}
        await with_cert.close()
        anonymous = await connect(b, "SSL", client_context(d, with_cert=False))
        await anonymous.send(METADATA)
        assert "User:ANONYMOUS" in principals(b, "SSL")
        await anonymous.close()


async def test_principal_mapping_rules_and_required_client_auth(tmp_path, pki):
    d, _, _ = pki
    props = tls_props(
        d,
        **{
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=eng.*$/$1/U,DEFAULT",
        },
    )
    async with security_broker(tmp_path, "SSL://127.0.0.1:0", **props) as b:
        conn = await connect(b, "SSL", client_context(d))
        await conn.send(METADATA)
        assert principals(b, "SSL") == {"User:ALICE"}
        await conn.close()
        with pytest.raises((ssl.SSLError, ConnectionError, ConnectionClosed)):
            refused = await connect(b, "SSL", client_context(d, with_cert=False))
            await refused.send(METADATA)


async def test_sasl_ssl_with_pem_text_and_scram(tmp_path, pki):
    d, ca, server = pki
    props = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": server.certificate,
        "ssl.keystore.key": server.key,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": ca.pem,
        "ssl.client.auth": "required",  # KIP-684: not for SASL_SSL unless listener-prefixed
    }
    listeners = "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
    async with security_broker(tmp_path, listeners, **props) as b:
        admin = await connect(b, "PLAINTEXT")
        await alter(admin, [upsertion("carol", "carol-secret", SHA256)])
        conn = await connect(b, "SASL_SSL", client_context(d, with_cert=False))
        final = await scram_login(conn, "carol", "carol-secret", "SCRAM-SHA-256")
        assert final.error_code == ErrorCode.none
        assert principals(b, "SASL_SSL") == {"User:carol"}
        for c in (admin, conn):
            await c.close()


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"ssl.keystore.location": "/nonexistent"}, "PEM only"),
        ({"ssl.keystore.type": "PEM", "ssl.truststore.type": "PEM"}, "needs ssl.keystore"),
        (
            {
                "ssl.keystore.type": "PEM",
                "ssl.truststore.type": "PEM",
                "ssl.keystore.location": "/nonexistent.pem",
            },
            "Cannot load",
        ),
    ],
)
def test_bad_tls_settings_stop_the_broker(tmp_path, props, message):
    with pytest.raises(ConfigError, match=message):
        Broker(BrokerConfig({"listeners": "SSL://127.0.0.1:0", "log.dirs": str(tmp_path), **props}))


def test_encrypted_pem_key_needs_ssl_key_password(tmp_path, pki):
    d, ca, _ = pki
    pem = ca.issue("CN=localhost", server=True, password=b"hunter2")
    (tmp_path / "server.pem").write_text(pem.key + pem.certificate)
    props = {
        "listeners": "SSL://127.0.0.1:0",
        "log.dirs": str(tmp_path),
        "ssl.keystore.type": "PEM",
        "ssl.truststore.type": "PEM",
        "ssl.keystore.location": str(tmp_path / "server.pem"),
    }
    Broker(BrokerConfig({**props, "ssl.key.password": "hunter2"}))
    with pytest.raises(ConfigError):
        Broker(BrokerConfig({**props, "ssl.key.password": "wrong"}))


async def test_describe_configs_hides_password_values(tmp_path):
    props = {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS}
    async with security_broker(tmp_path, "PLAINTEXT://127.0.0.1:0", **props) as b:
        conn = await connect(b, "PLAINTEXT")
        resource = req(
            32,
            4,
            "DescribeConfigsResource",
            resource_type=4,
            resource_name="1",
            configuration_keys=("sasl.jaas.config", "sasl.enabled.mechanisms"),
        )
        response = await conn.send(
            req(
                32,
                4,
                "DescribeConfigsRequest",
                resources=(resource,),
                include_synonyms=False,
                include_documentation=False,
            )
        )
        configs = {c.name: (c.value, c.is_sensitive) for c in response.results[0].configs}
        assert configs == {
            "sasl.jaas.config": (None, True),
            "sasl.enabled.mechanisms": ("PLAIN", False),
        }
        await conn.close()


async def test_credential_apis_need_cluster_describe_and_alter(tmp_path):
    """With an authorizer, only principals allowed on the cluster see or change credentials:
    here the SASL user alice (a super user), not the anonymous PLAINTEXT client."""
    props = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:alice",
    }
    listeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    async with security_broker(tmp_path, listeners, **props) as b:
        mech = ScramMechanism.SCRAM_SHA_512
        salted = mech.salted_password("alice-secret", b"salt", 4096)
        await b.alter_scram_credentials(
            {("alice", mech.mechanism_name): mech.credential(salted, b"salt", 4096)}, []
        )
        anonymous = await connect(b, "PLAINTEXT")
        refused = await describe(anonymous, "alice")
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.cluster_authorization_failed,
            "Cluster authorization failed.",
        )
        assert [(r.user, r.error_code) for r in refused.results] == [
            ("alice", ErrorCode.cluster_authorization_failed)
        ]
        assert await alter(anonymous, [upsertion("bob", "b")]) == {
            "bob": (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
        }
        alice = await connect(b, "SASL_PLAINTEXT")
        assert (await scram_login(alice, "alice", "alice-secret")).error_code == ErrorCode.none
        assert await alter(alice, [upsertion("bob", "b")]) == {"bob": (ErrorCode.none, None)}
        assert {r.user for r in (await describe(alice)).results} == {"alice", "bob"}
        for c in (anonymous, alice):
            await c.close()


async def test_frames_before_authentication_are_bounded(tmp_path):
    props = {
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
        "sasl.server.max.receive.size": "1024",
    }
    async with security_broker(tmp_path, "SASL_PLAINTEXT://127.0.0.1:0", **props) as b:
        conn = await connect(b, "SASL_PLAINTEXT")
        with pytest.raises(ConnectionClosed):
            await conn.send(handshake(1, "P" * 2000))
        conn = await connect(b, "SASL_PLAINTEXT")
        await conn.send(handshake(1, "PLAIN"))
        await conn.send(authenticate(2, b"\x00alice\x00alice-secret"))
        names = tuple(
            req(3, 12, "MetadataRequestTopic", name=f"t{i:04}", topic_id=None) for i in range(200)
        )
        big = req(
            3,
            12,
            "MetadataRequest",
            topics=names,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        assert len((await conn.send(big)).topics) == 200
        await conn.close()
