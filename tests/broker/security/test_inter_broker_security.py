"""How a broker of a cluster connects to the others (broker.security.listener's
inter_broker_security): inter.broker.listener.name, that listener's protocol, its TLS trust
and the broker's own SASL credentials from the listener's JAAS config."""

from __future__ import annotations

import ssl

import pytest
from tls_certificates import CertificateAuthority

from broker.config import BrokerConfig, ConfigError
from broker.security.listener import inter_broker_security

PLAIN = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret";'
)
SCRAM = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="scram-secret";'
)
LISTENERS = {
    "listeners": "CLIENT://:9092,INTERNAL://:9093",
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
}


def test_the_first_listener_unless_named():
    assert inter_broker_security(BrokerConfig()).protocol == "PLAINTEXT"
    config = BrokerConfig({**LISTENERS, "listener.name.internal.plain.sasl.jaas.config": PLAIN})
    assert config.inter_broker_listener == "CLIENT"
    assert inter_broker_security(config).protocol == "PLAINTEXT"
    named = BrokerConfig(
        {
            **LISTENERS,
            "inter.broker.listener.name": "internal",  # case-insensitive, as Kafka's
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": PLAIN,
        }
    )
    assert named.inter_broker_listener == "INTERNAL"
    security = inter_broker_security(named)
    assert (security.protocol, security.sasl_mechanism) == ("SASL_PLAINTEXT", "PLAIN")
    assert (security.username, security.password) == ("broker", "broker-secret")


def test_scram_credentials_come_from_the_listeners_scram_login_module():
    config = BrokerConfig(
        {
            **LISTENERS,
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.jaas.config": PLAIN,  # the broker-wide one is PLAIN's: not this one's
            "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM,
        }
    )
    security = inter_broker_security(config)
    assert security.sasl_mechanism == "SCRAM-SHA-512"
    assert (security.username, security.password) == ("broker", "scram-secret")


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"inter.broker.listener.name": "OTHER"},
            "must be a listener name defined in advertised.listeners.*CLIENT,INTERNAL",
        ),
        (
            {"inter.broker.listener.name": "INTERNAL"},  # SCRAM only: PLAIN is not enabled
            "must be included in sasl.enabled.mechanisms",
        ),
        (
            {"inter.broker.listener.name": "INTERNAL", "sasl.enabled.mechanisms": "PLAIN"},
            "neither listener.name.internal.plain.sasl.jaas.config nor sasl.jaas.config",
        ),
        (
            {
                "inter.broker.listener.name": "INTERNAL",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": PLAIN.replace('username="broker" ', ""),
            },
            "needs username and password options",
        ),
        (
            {
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
                "sasl.jaas.config": PLAIN,
            },
            "SASL/SCRAM-SHA-256 needs org.apache.kafka.common.security.scram.ScramLoginModule",
        ),
    ],
)
def test_a_broker_that_cannot_reach_the_others_does_not_start(props, message):
    with pytest.raises(ConfigError, match=message):
        inter_broker_security(BrokerConfig({**LISTENERS, **props}))


@pytest.mark.parametrize("algorithm", ["https", ""])
def test_tls_trusts_the_listeners_trust_store(tmp_path, algorithm):
    ca = CertificateAuthority()
    broker = ca.issue("CN=broker", server=True)
    (tmp_path / "ca.pem").write_text(ca.pem)
    config = BrokerConfig(
        {
            "listeners": "SSL://:9093",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.certificate.chain": broker.certificate,
            "listener.name.ssl.ssl.keystore.key": broker.key,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tmp_path / "ca.pem"),
            "ssl.endpoint.identification.algorithm": algorithm,
        }
    )
    context = inter_broker_security(config).ssl_context
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is bool(algorithm)
    # The trust store's CA alone, not the system's.
    assert [dict(rdn[0] for rdn in c["subject"]) for c in context.get_ca_certs()] == [
        {"commonName": "Fjord Test CA", "organizationName": "Fjord", "countryName": "NO"}
    ]
