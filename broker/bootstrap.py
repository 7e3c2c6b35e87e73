"""python -m broker.bootstrap [server.properties] [--override key=value ...]
    [--add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]' ...]
    [--add-acl PRINCIPAL OPERATION RESOURCE_TYPE NAME ...]

The first principals of a secured cluster, written into the metadata store the brokers with
these properties use, before they start or while they run: what Kafka's `kafka-storage format
--add-scram` does for a new KRaft cluster. With an authorizer and no anonymous super user,
nobody could create them through the brokers: the control plane's SCRAM credentials (its
principal being the super user) and the inter-broker principal's credentials and its
CLUSTER_ACTION ACL come from here. Running it again sets the passwords anew (new salts) and
adds only the missing ACLs.
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from pathlib import Path

from broker.config import ConfigError, read_broker_config
from broker.metadata.postgres_store import PostgresMetadataStore
from broker.metadata.store import MetadataStoreUnavailable, SqliteMetadataStore
from broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    InvalidAclError,
    ResourcePattern,
)
from broker.security.operations import AclOperation, AclPermissionType, PatternType, ResourceType
from broker.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramMechanism

# kafka-storage's syntax: MECHANISM=[name=...,password=...,iterations=...], values optionally
# in double quotes (then they may hold commas).
_SCRAM = re.compile(r"(?P<mechanism>[\w-]+)=\[(?P<fields>.*)\]")
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,]*)(?:,|$)')


def scram_credential(spec: str) -> tuple[tuple[str, str], ScramCredential]:
    """((user, mechanism name), credential) from one --add-scram; ValueError naming what is
    wrong, never the password."""
    match = _SCRAM.fullmatch(spec.strip())
    mechanism = ScramMechanism.from_name(match["mechanism"]) if match else None
    if match is None or mechanism is None:
        raise ValueError(
            "--add-scram expects SCRAM-SHA-256=[name=...,password=...] or SCRAM-SHA-512=[...]"
        )
    fields = {
        key: value[1:-1].replace('\\"', '"') if value.startswith('"') else value
        for key, value in _FIELD.findall(match["fields"])
    }
    name, password = fields.get("name"), fields.get("password")
    if not name or not password:
        raise ValueError(f"--add-scram {mechanism.mechanism_name} needs a name and a password")
    iterations = int(fields.get("iterations", MIN_ITERATIONS))
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}")
    salt = secrets.token_bytes(32)
    salted = mechanism.salted_password(password, salt, iterations)
    return (name, mechanism.mechanism_name), mechanism.credential(salted, salt, iterations)


def allow_acl(principal: str, operation: str, resource_type: str, name: str) -> AclBinding:
    """An ALLOW ACL from any host on a LITERAL resource; ValueError when Kafka would refuse it."""
    try:
        binding = AclBinding(
            ResourcePattern(ResourceType[resource_type.upper()], name, PatternType.LITERAL),
            AccessControlEntry(
                principal, "*", AclOperation[operation.upper()], AclPermissionType.ALLOW
            ),
        )
    except KeyError as e:
        raise ValueError(f"--add-acl: unknown {e}") from None
    try:
        binding.validate()
    except InvalidAclError as e:
        raise ValueError(f"--add-acl: {e}") from None
    return binding


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.bootstrap",
        description="Write a cluster's first SCRAM credentials and ACLs into its metadata store.",
    )
    parser.add_argument("properties", nargs="?", type=Path, help="the brokers' server.properties")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--add-scram",
        action="append",
        default=[],
        metavar="MECHANISM=[name=...,password=...]",
        help="a user's SCRAM credential, as kafka-storage format takes it (repeatable)",
    )
    parser.add_argument(
        "--add-acl",
        action="append",
        default=[],
        nargs=4,
        metavar=("PRINCIPAL", "OPERATION", "RESOURCE_TYPE", "NAME"),
        help="an ALLOW ACL on a literal resource, from any host (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        credentials = dict(scram_credential(spec) for spec in args.add_scram)
        acls = [allow_acl(*acl) for acl in args.add_acl]
    except ValueError as e:
        parser.error(str(e))
    try:
        config = read_broker_config(args.properties, args.override)
    except (ConfigError, OSError) as e:
        print(f"fjord: invalid configuration: {e}", file=sys.stderr)
        return 2
    url = config["metadata.store.url"]
    try:
        store = PostgresMetadataStore(url) if url else SqliteMetadataStore(config.log_dirs[0])
    except MetadataStoreUnavailable as e:
        print(f"fjord: {e}", file=sys.stderr)
        return 1
    try:
        if credentials:
            store.alter_scram_credentials(credentials, [])
        if acls:
            store.add_acls(acls)
    finally:
        store.close()
    for user, mechanism in credentials:
        print(f"fjord: {mechanism} credential of {user} set")
    for acl in acls:
        print(
            f"fjord: {acl.entry.principal} may {acl.entry.operation.name} "
            f"{acl.pattern.resource_type.name} {acl.pattern.name}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
