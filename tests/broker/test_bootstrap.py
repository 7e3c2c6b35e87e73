"""python -m broker.bootstrap: a cluster's first SCRAM credentials and ACLs, written into the
store the brokers with the same properties use (here a lone broker's SQLite store)."""

from __future__ import annotations

import pytest

from broker.bootstrap import main, scram_credential
from broker.metadata.store import SqliteMetadataStore
from broker.security.operations import AclOperation, ResourceType
from broker.security.scram import ScramMechanism


def stored(log_dir):
    store = SqliteMetadataStore(log_dir)
    try:
        return store.scram_credentials(), store.acls()
    finally:
        store.close()


def test_credentials_and_acls_are_written_once_however_often_it_runs(tmp_path, capsys):
    argv = [
        "--override",
        f"log.dirs={tmp_path}",
        "--add-scram",
        "SCRAM-SHA-512=[name=fjord-control,password=control-secret,iterations=8192]",
        "--add-acl",
        "User:fjord-broker",
        "CLUSTER_ACTION",
        "CLUSTER",
        "kafka-cluster",
    ]

    assert main(argv) == 0
    assert main(argv) == 0

    credentials, acls = stored(tmp_path)
    credential = credentials[("fjord-control", "SCRAM-SHA-512")]
    mechanism = ScramMechanism.SCRAM_SHA_512
    salted = mechanism.salted_password("control-secret", credential.salt, 8192)
    assert mechanism.credential(salted, credential.salt, 8192) == credential
    assert [(a.entry.principal, a.entry.operation, a.pattern.resource_type) for a in acls] == [
        ("User:fjord-broker", AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    ]
    assert "control-secret" not in capsys.readouterr().out


def test_a_quoted_password_may_hold_commas_and_brackets():
    (user, mechanism), credential = scram_credential('SCRAM-SHA-256=[name=alice,password="a,b]c"]')

    assert (user, mechanism) == ("alice", "SCRAM-SHA-256")
    salted = ScramMechanism.SCRAM_SHA_256.salted_password("a,b]c", credential.salt, 4096)
    assert ScramMechanism.SCRAM_SHA_256.credential(salted, credential.salt, 4096) == credential


@pytest.mark.parametrize(
    "argv",
    [
        ["--add-scram", "SCRAM-SHA-1=[name=alice,password=alice-secret]"],
        ["--add-scram", "SCRAM-SHA-512=[password=alice-secret]"],
        ["--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=1]"],
        ["--add-acl", "alice", "WRITE", "TOPIC", "orders"],
        ["--add-acl", "User:alice", "SCRIBBLE", "TOPIC", "orders"],
    ],
)
def test_what_kafka_would_refuse_is_refused_without_showing_the_password(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as exited:
        main(["--override", f"log.dirs={tmp_path}", *argv])

    assert exited.value.code == 2
    assert "alice-secret" not in capsys.readouterr().err
    assert stored(tmp_path) == ({}, [])
