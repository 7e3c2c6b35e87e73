"""DescribeUserScramCredentials and AlterUserScramCredentials: Kafka's validation and error
codes, salted hashes only in the store, credentials surviving a restart."""

from __future__ import annotations

import sqlite3

from in_process_broker import running_broker
from kio.schema.errors import ErrorCode
from scram_requests import SHA256, SHA512, alter, deletion, describe, upsertion

NONE = (ErrorCode.none, None)


def infos(response) -> dict:
    return {
        r.user: (r.error_code, tuple((c.mechanism, c.iterations) for c in r.credential_infos))
        for r in response.results
    }


async def test_create_describe_and_delete_credentials(broker, broker_client):
    assert (await describe(broker_client)).results == ()
    created = await alter(
        broker_client,
        [upsertion("alice", "a", SHA256), upsertion("bob", "b", SHA512, iterations=8192)],
    )
    assert created == {"alice": NONE, "bob": NONE}
    assert await alter(broker_client, [upsertion("alice", "a2", SHA512)]) == {"alice": NONE}
    everyone = await describe(broker_client)
    assert everyone.error_code == ErrorCode.none
    assert infos(everyone) == {
        "alice": (ErrorCode.none, ((SHA256, 4096), (SHA512, 4096))),
        "bob": (ErrorCode.none, ((SHA512, 8192),)),
    }
    assert await alter(broker_client, deletions=[deletion("alice", SHA256)]) == {"alice": NONE}
    assert infos(await describe(broker_client, "alice"))["alice"][1] == ((SHA512, 4096),)


async def test_describe_unknown_and_duplicate_users(broker, broker_client):
    await alter(broker_client, [upsertion("alice", "a")])
    response = await describe(broker_client, "alice", "ghost", "twice", "twice")
    results = {r.user: (r.error_code, r.error_message) for r in response.results}
    assert len(response.results) == 3
    assert results["ghost"] == (
        ErrorCode.resource_not_found,
        "Attempt to describe a user credential that does not exist: ghost",
    )
    assert results["twice"] == (
        ErrorCode.duplicate_resource,
        "Cannot describe SCRAM credentials for the same user twice in a single request: twice",
    )
    assert results["alice"] == NONE


async def test_alter_validation_as_kafkas_scram_control_manager(broker, broker_client):
    results = await alter(
        broker_client,
        [
            upsertion("few", "p", iterations=4095),
            upsertion("many", "p", iterations=16385),
            upsertion("", "p"),
            upsertion("mech", "p", mechanism=3),
            upsertion("nosalt", "p", salt=b""),
            upsertion("nopassword", ""),
            upsertion("twice", "p"),
            upsertion("twice", "q", SHA256),
            upsertion("ok", "p", iterations=16384),
        ],
        [deletion("ghost"), deletion("both")],
    )
    unacceptable = ErrorCode.unacceptable_credential
    assert results == {
        "few": (unacceptable, "Too few iterations"),
        "many": (unacceptable, "Too many iterations"),
        "": (unacceptable, "Username must not be empty"),
        "mech": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "nosalt": (unacceptable, "Salt must not be empty"),
        "nopassword": (unacceptable, "Salted password must not be empty"),
        "twice": (
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        ),
        "ghost": (
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        ),
        "both": (
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        ),
        "ok": NONE,
    }
    assert set(infos(await describe(broker_client))) == {"ok"}


async def test_credentials_are_stored_hashed_and_survive_a_restart(tmp_path):
    log_dir = tmp_path / "kafka-logs"
    async with running_broker(log_dir) as (_, conn):
        await alter(conn, [upsertion("alice", "alice-secret", SHA256, salt=b"NaCl")])
    rows = sqlite3.connect(log_dir / "fjord-metadata.sqlite3").execute(
        "SELECT * FROM scram_credentials"
    )
    [row] = list(rows)
    assert row[:3] == ("alice", "SCRAM-SHA-256", b"NaCl")
    assert b"alice-secret" not in b"".join(v for v in row if isinstance(v, bytes))
    async with running_broker(log_dir) as (b, conn):
        assert infos(await describe(conn)) == {"alice": (ErrorCode.none, ((SHA256, 4096),))}
        assert b.scram_credentials[("alice", "SCRAM-SHA-256")].iterations == 4096
