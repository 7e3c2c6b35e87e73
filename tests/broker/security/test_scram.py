"""The SCRAM server against RFC 7677's SCRAM-SHA-256 exchange and against a client written
from RFC 5802, for both hashes; failures are refused as Kafka's ScramSaslServer refuses them."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from broker.security.errors import SaslAuthenticationError, SaslError
from broker.security.scram import ScramMechanism, ScramSaslServer

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def rfc7677_server() -> ScramSaslServer:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = SHA256.credential(SHA256.salted_password("pencil", salt, 4096), salt, 4096)
    credentials = {("user", SHA256): credential}
    return ScramSaslServer(
        SHA256,
        lambda user, mech: credentials.get((user, mech)),
        server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )


def test_rfc7677_sha256_exchange():
    server = rfc7677_server()
    server_first = server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert not server.complete
    server_final = server.evaluate_response(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


def test_rfc7677_wrong_proof_is_refused():
    server = rfc7677_server()
    server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslError):
        server.evaluate_response(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
            b"p=" + base64.b64encode(bytes(32))
        )
    assert not server.complete


def client_exchange(mechanism, server, user, password, authzid=""):
    """An RFC 5802 client: returns the server-final message and whether its signature holds."""
    gs2 = f"n,{'a=' + authzid if authzid else ''},".encode()
    bare = f"n={user},r=clientnonce".encode()
    server_first = server.evaluate_response(gs2 + bare)
    fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
    salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)
    without_proof = f"c={base64.b64encode(gs2).decode()},r={fields['r']}".encode()
    auth_message = bare + b"," + server_first + b"," + without_proof
    client_key = hmac.new(salted, b"Client Key", mechanism.hash_name).digest()
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    signature = hmac.new(stored_key, auth_message, mechanism.hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = server.evaluate_response(without_proof + b",p=" + base64.b64encode(proof))
    server_key = hmac.new(salted, b"Server Key", mechanism.hash_name).digest()
    expected = hmac.new(server_key, auth_message, mechanism.hash_name).digest()
    return final == b"v=" + base64.b64encode(expected)


def server_for(mechanism, users: dict[str, str], iterations=4096):
    creds = {
        u: mechanism.credential(
            mechanism.salted_password(p, b"salt-" + u.encode(), iterations),
            b"salt-" + u.encode(),
            iterations,
        )
        for u, p in users.items()
    }
    return ScramSaslServer(
        mechanism, lambda user, mech: creds.get(user) if mech is mechanism else None
    )


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_client_written_from_rfc5802_authenticates(mechanism):
    server = server_for(mechanism, {"alice": "alice-secret"})
    assert client_exchange(mechanism, server, "alice", "alice-secret")
    assert server.authorization_id == "alice"


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_wrong_password_and_unknown_user_are_refused(mechanism):
    with pytest.raises(SaslError):
        client_exchange(mechanism, server_for(mechanism, {"alice": "a"}), "alice", "b")
    with pytest.raises(SaslError):
        client_exchange(mechanism, server_for(mechanism, {"alice": "a"}), "bob", "a")


def test_escaped_user_names_and_matching_authzid():
    server = server_for(SHA256, {"a,b=c": "pw"})
    assert client_exchange(SHA256, server, "a=2Cb=3Dc", "pw", authzid="a=2Cb=3Dc")
    assert server.authorization_id == "a,b=c"


def test_a_different_authorization_id_is_refused_with_kafkas_message():
    server = server_for(SHA256, {"alice": "pw"})
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        server.evaluate_response(b"n,a=bob,n=alice,r=nonce")


def test_delegation_token_authentication_is_refused():
    server = server_for(SHA256, {"alice": "pw"})
    with pytest.raises(SaslError, match="Token Authentication failed"):
        server.evaluate_response(b"n,,n=alice,r=nonce,tokenauth=true")


def test_channel_binding_and_malformed_messages_are_refused():
    with pytest.raises(SaslError):
        server_for(SHA256, {"alice": "pw"}).evaluate_response(b"p=tls-unique,,n=alice,r=x")
    with pytest.raises(SaslError):
        server_for(SHA256, {"alice": "pw"}).evaluate_response(b"\xff\xfe")


def test_the_final_message_must_echo_the_whole_nonce():
    server = server_for(SHA256, {"alice": "pw"})
    server.evaluate_response(b"n,,n=alice,r=clientnonce")
    with pytest.raises(SaslError, match="nonce"):
        server.evaluate_response(b"c=biws,r=clientnonce,p=" + base64.b64encode(bytes(32)))


def test_credentials_below_the_minimum_iterations_are_refused():
    server = server_for(SHA256, {"alice": "pw"}, iterations=1000)
    with pytest.raises(SaslError, match="less than the minimum 4096"):
        server.evaluate_response(b"n,,n=alice,r=nonce")
