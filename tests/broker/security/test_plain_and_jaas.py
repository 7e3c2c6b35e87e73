"""SASL/PLAIN (RFC 4616) and the JAAS config text its users come from."""

from __future__ import annotations

import pytest

from broker.security.errors import SaslAuthenticationError
from broker.security.jaas import JaasConfigError, parse_jaas_config
from broker.security.plain import PLAIN_LOGIN_MODULE, PlainSaslServer, plain_users

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
    '    username="admin" password="admin-secret"\n'
    '    user_admin="admin-secret" user_alice="alice;\\"quoted\\"" user_bob=bob-secret;'
)


def test_jaas_config_login_module_and_plain_users():
    module = parse_jaas_config(JAAS)
    assert (module.class_name, module.control_flag) == (PLAIN_LOGIN_MODULE, "required")
    assert module.options["username"] == "admin"
    assert plain_users(module) == {
        "admin": "admin-secret",
        "alice": 'alice;"quoted"',
        "bob": "bob-secret",
    }


@pytest.mark.parametrize(
    "text",
    [
        "",
        "org.example.Module required",  # no ';'
        "org.example.Module mandatory;",  # not a control flag
        "org.example.Module required user_a=;",
        "a.A required; b.B required;",  # Kafka takes exactly one module
    ],
)
def test_bad_jaas_configs_are_refused(text):
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)


def test_plain_authenticates_listed_users():
    server = PlainSaslServer({"alice": "alice-secret"})
    assert server.evaluate_response(b"\x00alice\x00alice-secret") == b""
    assert server.complete and server.authorization_id == "alice"
    server = PlainSaslServer({"alice": "alice-secret"})
    server.evaluate_response(b"alice\x00alice\x00alice-secret")
    assert server.authorization_id == "alice"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00alice\x00wrong", "Invalid username or password"),
        (b"\x00mallory\x00alice-secret", "Invalid username or password"),
        (b"alice\x00alice-secret", "expected 3 tokens, got 2"),
        (b"\x00\x00alice-secret", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"bob\x00alice\x00alice-secret", "authorization id that is different"),
    ],
)
def test_plain_refusals_carry_kafkas_messages(token, message):
    server = PlainSaslServer({"alice": "alice-secret"})
    with pytest.raises(SaslAuthenticationError, match=message):
        server.evaluate_response(token)
    assert not server.complete
