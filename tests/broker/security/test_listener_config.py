"""Listener names, listener.security.protocol.map and listener.name.<l>. overrides."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.security.listener import listener_security

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="a-secret";'


def test_kafkas_default_map_and_custom_listener_names():
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093,CLIENT://:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "CLIENT:SASL_PLAINTEXT",
            "listener.name.client.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.client.plain.sasl.jaas.config": JAAS,
        }
    )
    assert listener_security(config, "PLAINTEXT").protocol == "PLAINTEXT"
    default = listener_security(config, "SASL_PLAINTEXT")
    assert default.sasl_mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    client = listener_security(config, "CLIENT")
    assert (client.sasl_mechanisms, client.plain_users) == (("PLAIN",), {"a": "a-secret"})
    assert BrokerConfig().listener_security_protocols() == {
        p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    }


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "CLIENT://:9094"}, "no security protocol defined for listener CLIENT"),
        ({"listener.security.protocol.map": "A:TLS"}, "is not LISTENER_NAME:PROTOCOL"),
        ({"listener.name.client.log.dirs": "/x"}, "Unknown configuration"),
        ({"listener.name.client.gssapi.sasl.jaas.config": JAAS}, "Unknown configuration"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "String must be one of"),
        ({"ssl.client.auth": "maybe"}, "String must be one of"),
        ({"ssl.principal.mapping.rules": "RULE:x"}, "Invalid rule"),
        ({"listener.name.x.plain.sasl.jaas.config": "Broken required"}, r"\[hidden\]"),
    ],
)
def test_bad_security_settings_are_refused(props, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(props)
