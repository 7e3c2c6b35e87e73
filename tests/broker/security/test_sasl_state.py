"""The SASL authenticator's states: what an unauthenticated connection may send when."""

from __future__ import annotations

import pytest

from broker.security.errors import SaslError
from broker.security.plain import PlainSaslServer
from broker.security.sasl import (
    IllegalSaslState,
    SaslServerAuthenticator,
    SaslState,
    UnsupportedSaslMechanism,
)

API_VERSIONS, HANDSHAKE, AUTHENTICATE, METADATA = 18, 17, 36, 3


def authenticator():
    return SaslServerAuthenticator(
        ["PLAIN"], lambda mechanism: PlainSaslServer({"alice": "alice-secret"})
    )


def test_versions_then_handshake_then_tokens():
    auth = authenticator()
    auth.check_request(API_VERSIONS)
    auth.api_versions_answered()
    auth.check_request(HANDSHAKE)
    auth.handshake(1, "PLAIN")
    auth.check_request(AUTHENTICATE)
    assert auth.authenticate(b"\x00alice\x00alice-secret") == b""
    assert auth.complete and auth.principal == "User:alice"


@pytest.mark.parametrize(
    "sequence",
    [
        [METADATA],
        [API_VERSIONS, API_VERSIONS],
        [AUTHENTICATE],
        [HANDSHAKE, HANDSHAKE],
        [HANDSHAKE, METADATA],
    ],
)
def test_anything_else_is_an_illegal_state(sequence):
    auth = authenticator()
    *allowed, refused = sequence
    for key in allowed:
        auth.check_request(key)
        if key == API_VERSIONS:
            auth.api_versions_answered()
        else:
            auth.handshake(1, "PLAIN")
    with pytest.raises(IllegalSaslState):
        auth.check_request(refused)
    assert auth.state is SaslState.FAILED


def test_v0_handshake_switches_to_raw_tokens():
    auth = authenticator()
    auth.handshake(0, "PLAIN")
    assert auth.raw_tokens
    with pytest.raises(IllegalSaslState):
        auth.check_request(AUTHENTICATE)


def test_unsupported_mechanism_and_failed_authentication_end_the_exchange():
    auth = authenticator()
    with pytest.raises(UnsupportedSaslMechanism):
        auth.handshake(1, "SCRAM-SHA-256")
    assert auth.state is SaslState.FAILED
    auth = authenticator()
    auth.handshake(1, "PLAIN")
    with pytest.raises(SaslError) as failure:
        auth.authenticate(b"\x00alice\x00nope")
    assert auth.state is SaslState.FAILED
    assert auth.failure_message(failure.value) == (
        "Authentication failed: Invalid username or password"
    )
