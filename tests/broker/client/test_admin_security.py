"""How the AdminClient connects: TLS, SASL (PLAIN, SCRAM-SHA-256/512) over SaslHandshake v1 and
SaslAuthenticate, API version negotiation, and retries across a lost connection."""

from __future__ import annotations

import contextlib
import ssl

import pytest
from in_process_broker import running_broker
from kio.schema.errors import ErrorCode
from tls_certificates import CertificateAuthority

from broker.apis.registry import API_SPECS
from broker.client import AdminClient
from broker.client.errors import KafkaAdminError
from broker.client.models import NewTopic
from broker.client.sasl import SaslClientError, ScramSaslClient
from broker.client.session import Security, client_versions
from broker.config import BrokerConfig
from broker.security.scram import ScramMechanism, ScramSaslServer
from broker.server.broker import Broker

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
)


@contextlib.asynccontextmanager
async def security_broker(tmp_path, listeners: str, **props: str):
    b = Broker(
        BrokerConfig(
            {
                "listeners": listeners,
                "log.dirs": str(tmp_path / "kafka-logs"),
                "metrics.listener": "",
                **props,
            }
        )
    )
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


def bootstrap(b: Broker, listener: str) -> str:
    host, port = b.bound[listener]
    return f"{host}:{port}"


def principals(b: Broker, listener: str) -> set[str]:
    return {c.principal for c in b.connections if c.listener == listener}


async def test_sasl_plaintext_with_scram_and_plain(tmp_path):
    listeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    props = {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": PLAIN_JAAS,
    }
    async with security_broker(tmp_path, listeners, **props) as b:
        async with AdminClient(bootstrap(b, "PLAINTEXT")) as admin:
            await admin.upsert_user_scram_credential("bob", "bob-secret", "SCRAM-SHA-256")
            await admin.upsert_user_scram_credential("carol", "carol-secret", "SCRAM-SHA-512")

        for mechanism, user, password in [
            ("SCRAM-SHA-256", "bob", "bob-secret"),
            ("SCRAM-SHA-512", "carol", "carol-secret"),
            ("PLAIN", "alice", "alice-secret"),
        ]:
            security = Security("SASL_PLAINTEXT", None, mechanism, user, password)
            async with AdminClient(bootstrap(b, "SASL_PLAINTEXT"), security) as admin:
                await admin.create_topics([NewTopic(f"by-{user}", 1)])
                assert f"by-{user}" in {t.name for t in await admin.list_topics()}
                assert principals(b, "SASL_PLAINTEXT") == {f"User:{user}"}

        wrong = Security("SASL_PLAINTEXT", None, "SCRAM-SHA-256", "bob", "guess")
        with pytest.raises(KafkaAdminError) as e:
            async with AdminClient(bootstrap(b, "SASL_PLAINTEXT"), wrong):
                pass
        assert e.value.name == "SASL_AUTHENTICATION_FAILED"
        # bob has no SCRAM-SHA-512 credential.
        other_hash = Security("SASL_PLAINTEXT", None, "SCRAM-SHA-512", "bob", "bob-secret")
        with pytest.raises(KafkaAdminError) as e:
            async with AdminClient(bootstrap(b, "SASL_PLAINTEXT"), other_hash):
                pass
        assert e.value.code == ErrorCode.sasl_authentication_failed


async def test_a_mechanism_the_listener_does_not_enable(tmp_path):
    async with security_broker(tmp_path, "SASL_PLAINTEXT://127.0.0.1:0") as b:
        security = Security("SASL_PLAINTEXT", None, "PLAIN", "alice", "alice-secret")
        with pytest.raises(KafkaAdminError) as e:
            async with AdminClient(bootstrap(b, "SASL_PLAINTEXT"), security):
                pass
        assert e.value.name == "UNSUPPORTED_SASL_MECHANISM"
        assert "SCRAM-SHA-512" in e.value.message


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    (d / "ca.crt").write_text(ca.pem)
    server = ca.issue("CN=localhost,O=Fjord,C=NO", server=True)
    (d / "server.pem").write_text(server.key + server.certificate)
    return d


async def test_ssl_and_sasl_ssl(tmp_path, pki):
    listeners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
    props = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "server.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki / "ca.crt"),
    }
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    async with security_broker(tmp_path, listeners, **props) as b:
        async with AdminClient(bootstrap(b, "SSL"), Security("SSL", context)) as admin:
            await admin.upsert_user_scram_credential("dave", "dave-secret")
            assert (await admin.describe_cluster()).cluster_id == b.image.cluster_id
        security = Security("SASL_SSL", context, "SCRAM-SHA-512", "dave", "dave-secret")
        async with AdminClient(bootstrap(b, "SASL_SSL"), security) as admin:
            (described,) = (await admin.describe_cluster()).brokers
            assert (described.host, described.port) == b.bound["SASL_SSL"]
            await admin.create_topics([NewTopic("over-tls", 2)])
            (topic,) = await admin.describe_topics(["over-tls"])
            assert len(topic.partitions) == 2  # ListOffsets went over a second TLS session
            assert principals(b, "SASL_SSL") == {"User:dave"}


def test_security_settings_are_checked_up_front():
    with pytest.raises(ValueError, match="ssl_context"):
        Security("SSL")
    with pytest.raises(ValueError, match="username"):
        Security("SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256")
    with pytest.raises(ValueError, match="security protocol"):
        Security("KERBEROS")


async def test_versions_are_the_highest_both_sides_speak(broker):
    async with AdminClient(bootstrap(broker, "PLAINTEXT")) as admin:
        session = await admin.any_session()
        for api_key in (2, 3, 8, 9, 19, 32, 36, 60, 69):
            spec = API_SPECS[api_key]
            expected = min(spec.max_version, client_versions(api_key)[-1])
            assert session.version(api_key) == expected
        # OffsetCommit: the broker serves v10 (topics by id), the client names topics (v9).
        assert client_versions(8)[-1] < API_SPECS[8].max_version
        assert session.version(8) == 9
        with pytest.raises(KafkaAdminError) as e:
            session.version(1000)
        assert e.value.name == "UNSUPPORTED_VERSION"


async def test_operations_survive_a_lost_connection(tmp_path):
    async with running_broker(tmp_path / "kafka-logs") as (b, _):
        async with AdminClient(bootstrap(b, "PLAINTEXT")) as admin:
            await admin.create_topics([NewTopic("kept", 1)])
            for connection in list(b.connections):
                connection.close()
            assert [t.name for t in await admin.list_topics()] == ["kept"]
            assert (await admin.describe_topics(["kept"]))[0].partitions[0].high_watermark == 0


def test_scram_client_against_the_brokers_server():
    credential = ScramMechanism.SCRAM_SHA_256.credential(
        ScramMechanism.SCRAM_SHA_256.salted_password("pw", b"salt", 4096), b"salt", 4096
    )

    def lookup(user, mechanism):
        return credential if user == "a,b=c" else None

    server = ScramSaslServer(ScramMechanism.SCRAM_SHA_256, lookup)
    client = ScramSaslClient(ScramMechanism.SCRAM_SHA_256, "a,b=c", "pw")
    client_final = client.evaluate_challenge(server.evaluate_response(client.initial_response()))
    assert client.evaluate_challenge(server.evaluate_response(client_final)) is None
    assert client.complete and server.complete

    # A server that does not know the password cannot prove itself.
    impostor = ScramSaslClient(ScramMechanism.SCRAM_SHA_256, "a,b=c", "pw", client_nonce="n1")
    impostor.initial_response()
    impostor.evaluate_challenge(b"r=n1server,s=c2FsdA==,i=4096")
    with pytest.raises(SaslClientError, match="signature"):
        impostor.evaluate_challenge(b"v=AAAA")
    with pytest.raises(SaslClientError, match="nonce"):
        ScramSaslClient(ScramMechanism.SCRAM_SHA_256, "u", "pw", "n2").evaluate_challenge(
            b"r=other,s=c2FsdA==,i=4096"
        )


async def test_retriable_errors_are_retried_a_bounded_number_of_times(broker):
    async with AdminClient(bootstrap(broker, "PLAINTEXT"), retries=2, retry_backoff_ms=1) as admin:
        attempts = []

        async def loading():
            attempts.append(1)
            if len(attempts) < 3:
                raise KafkaAdminError.from_code(ErrorCode.coordinator_load_in_progress)
            return "loaded"

        assert await admin.retrying(loading) == "loaded" and len(attempts) == 3

        attempts.clear()

        async def not_coordinator():
            attempts.append(1)
            raise KafkaAdminError.from_code(ErrorCode.not_coordinator)

        with pytest.raises(KafkaAdminError) as e:
            await admin.retrying(not_coordinator)
        assert e.value.name == "NOT_COORDINATOR" and len(attempts) == 3

        attempts.clear()

        async def refused():
            attempts.append(1)
            raise KafkaAdminError.from_code(ErrorCode.group_authorization_failed)

        with pytest.raises(KafkaAdminError):
            await admin.retrying(refused)
        assert len(attempts) == 1
