"""Authentication with real clients against a broker process with PLAINTEXT, SASL_PLAINTEXT,
SASL_SSL and SSL listeners: SCRAM users created the Kafka way (AlterUserScramCredentials from
confluent-kafka's AdminClient on the PLAINTEXT listener, whose User:ANONYMOUS is a super
user), confluent-kafka and kafka-python producing and consuming over SCRAM-SHA-512 and over
SASL_SSL, wrong passwords refused, and mutual TLS principals as the authorizer sees them."""

from __future__ import annotations

import pytest
from broker_process import BrokerProcess, free_port
from compat_support import topic_name, wait_until
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import errors as kafka_errors
from tls_certificates import CertificateAuthority

pytestmark = pytest.mark.timeout(180)

ALICE_DN = "CN=alice,OU=eng,O=Fjord,C=NO"
PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_pat="pat-secret";'
)


class SecureBroker:
    def __init__(self, process: BrokerProcess, ports: dict[str, int], pki) -> None:
        self.process = process
        self.ports = ports
        self.pki = pki

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def secure_broker_process(tmp_path_factory, clients: dict[str, str], *overrides) -> SecureBroker:
    """A broker process, not yet started, with Kafka's StandardAuthorizer and PLAINTEXT,
    SASL_PLAINTEXT, SASL_SSL and SSL (client certificates required) listeners on loopback; a
    throwaway CA in pki/ca.crt, and pki/<name>.crt and .key for each client {name: subject}."""
    pki = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    (pki / "ca.crt").write_text(ca.pem)
    server = ca.issue("CN=localhost,O=Fjord,C=NO", server=True)
    (pki / "server.pem").write_text(server.key + server.certificate)
    for name, subject in clients.items():
        ca.issue(subject).write(pki, name)
    process = BrokerProcess(tmp_path_factory.mktemp("kafka-logs"))
    ports = {"PLAINTEXT": process.port}
    ports.update({name: free_port() for name in ("SASL_PLAINTEXT", "SASL_SSL", "SSL")})
    process.overrides = [
        "listeners=" + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={pki / 'server.pem'}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={pki / 'ca.crt'}",
        "listener.name.ssl.ssl.client.auth=required",
        *overrides,
    ]
    return SecureBroker(process, ports, pki)


def scram_user(
    name: str, password: bytes, mechanism=ScramMechanism.SCRAM_SHA_512, iterations: int = 8192
) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(name, ScramCredentialInfo(mechanism, iterations), password)


def create_users(settings: dict, *upsertions: UserScramCredentialUpsertion) -> None:
    """AlterUserScramCredentials from confluent-kafka's AdminClient (kept alive until the
    results arrive: a destroyed client fails its futures)."""
    admin = AdminClient(settings)
    futures = admin.alter_user_scram_credentials(list(upsertions))
    for future in futures.values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    broker = secure_broker_process(
        tmp_path_factory,
        {"alice": ALICE_DN, "mallory": "CN=mallory,O=Elsewhere,C=NO"},
        f"super.users=User:ANONYMOUS;User:alice;User:pat;User:carol;User:{ALICE_DN}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
    )
    process = broker.process.start()
    create_users(
        {"bootstrap.servers": process.bootstrap},
        scram_user("alice", b"alice-secret"),
        scram_user("carol", b"carol-secret", ScramMechanism.SCRAM_SHA_256, 4096),
    )
    yield broker
    assert process.stop() == 0, "".join(process.output)


def confluent_settings(broker: SecureBroker, listener: str, **extra) -> dict:
    settings = {"bootstrap.servers": broker.bootstrap(listener), **extra}
    if listener in ("SSL", "SASL_SSL"):
        settings["ssl.ca.location"] = str(broker.pki / "ca.crt")
    return {"security.protocol": listener, **settings}


def kafka_python_settings(broker: SecureBroker, listener: str, **extra) -> dict:
    settings = {"bootstrap_servers": broker.bootstrap(listener), **extra}
    if listener in ("SSL", "SASL_SSL"):
        settings["ssl_cafile"] = str(broker.pki / "ca.crt")
    return {"security_protocol": listener, **settings}


def confluent_round_trip(settings: dict, topic: str, n: int = 20) -> list[bytes]:
    producer = Producer(settings)
    for i in range(n):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            **settings,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values = []
    try:
        while len(values) < n:
            msg = consumer.poll(30)
            assert msg is not None, f"no message after {values}"
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def kafka_python_round_trip(settings: dict, topic: str, n: int = 20) -> list[bytes]:
    producer = KafkaProducer(**settings)
    for i in range(n):
        producer.send(topic, f"m{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=topic,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=30000,
        **settings,
    )
    values = []
    try:
        for msg in consumer:
            values.append(msg.value)
            if len(values) == n:
                break
    finally:
        consumer.close()
    return values


EXPECTED = [f"m{i}".encode() for i in range(20)]


def test_confluent_kafka_scram_sha512_over_sasl_plaintext(secure_broker):
    settings = confluent_settings(
        secure_broker,
        "SASL_PLAINTEXT",
        **{
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        },
    )
    assert confluent_round_trip(settings, topic_name("sasl-ck")) == EXPECTED


def test_kafka_python_scram_sha512_over_sasl_plaintext(secure_broker):
    settings = kafka_python_settings(
        secure_broker,
        "SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
    )
    assert kafka_python_round_trip(settings, topic_name("sasl-kp")) == EXPECTED


def test_confluent_kafka_plain_over_sasl_ssl(secure_broker):
    settings = confluent_settings(
        secure_broker,
        "SASL_SSL",
        **{"sasl.mechanism": "PLAIN", "sasl.username": "pat", "sasl.password": "pat-secret"},
    )
    assert confluent_round_trip(settings, topic_name("sasl-ssl-ck")) == EXPECTED


def test_kafka_python_scram_sha256_over_sasl_ssl(secure_broker):
    settings = kafka_python_settings(
        secure_broker,
        "SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="carol",
        sasl_plain_password="carol-secret",
    )
    assert kafka_python_round_trip(settings, topic_name("sasl-ssl-kp")) == EXPECTED


def test_confluent_kafka_wrong_password_is_an_authentication_error(secure_broker):
    errors: list[KafkaError] = []
    settings = confluent_settings(
        secure_broker,
        "SASL_PLAINTEXT",
        **{
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "nope",
            "error_cb": errors.append,
        },
    )
    producer = Producer(settings)
    wait_until(lambda: producer.poll(0.2) is not None and errors, what="an error callback")
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()


def test_kafka_python_wrong_password_is_an_authentication_error(secure_broker, caplog):
    """kafka-python keeps retrying a bootstrap whose authentication failed until
    bootstrap_timeout_ms, logging each SaslAuthenticationFailedError on the way."""
    with pytest.raises(kafka_errors.KafkaTimeoutError):
        KafkaProducer(
            bootstrap_servers=secure_broker.bootstrap("SASL_PLAINTEXT"),
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password="wrong",
            bootstrap_timeout_ms=5000,
        )
    failures = [r for r in caplog.records if "SaslAuthenticationFailedError" in r.getMessage()]
    assert failures, "kafka-python never saw SASL_AUTHENTICATION_FAILED"
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in failures[0].getMessage()


def _create_user(settings: dict, user: str) -> None:
    create_users(settings, scram_user(user, b"secret", ScramMechanism.SCRAM_SHA_256, 4096))


def mtls_settings(broker: SecureBroker, who: str) -> dict:
    """confluent-kafka on the SSL listener with the client certificate pki/<who>.crt."""
    return confluent_settings(
        broker,
        "SSL",
        **{
            "ssl.certificate.location": str(broker.pki / f"{who}.crt"),
            "ssl.key.location": str(broker.pki / f"{who}.key"),
        },
    )


def test_mutual_tls_principal_is_the_certificate_dn(secure_broker):
    """AlterUserScramCredentials needs ALTER on the cluster: User:CN=alice,OU=eng,O=Fjord,C=NO
    is a super user, User:CN=mallory,O=Elsewhere,C=NO is nobody. (Not DescribeUserScram-
    Credentials: confluent-kafka 2.16.1 corrupts its heap on that API's top-level error.)"""
    _create_user(mtls_settings(secure_broker, "alice"), "dave")
    with pytest.raises(KafkaException) as failure:
        _create_user(mtls_settings(secure_broker, "mallory"), "eve")
    assert failure.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    settings = mtls_settings(secure_broker, "alice")
    assert confluent_round_trip(settings, topic_name("mtls-ck")) == EXPECTED
