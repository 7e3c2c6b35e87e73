"""Durable cluster metadata. `MetadataStore` is the interface; `SqliteMetadataStore` is the
embedded implementation kept beside the logs. Calls block: the broker runs them in its
metadata thread, never on the event loop."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from broker.metadata.cluster import BrokerRegistration, PartitionRegistration
from broker.metadata.image import MetadataImage, TopicMetadata
from broker.quota.client_quotas import ClientQuotaEntity
from broker.security.acl import AccessControlEntry, AclBinding, ResourcePattern
from broker.security.operations import AclOperation, AclPermissionType, PatternType, ResourceType
from broker.security.scram import ScramCredential

SCHEMA = """
CREATE TABLE IF NOT EXISTS cluster (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    topic_id TEXT NOT NULL UNIQUE,
    partitions INTEGER NOT NULL,
    configs TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS broker_configs (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS group_configs (group_id TEXT PRIMARY KEY, configs TEXT NOT NULL);
-- SCRAM credentials as Kafka's UserScramCredentialRecord keeps them: never the password.
CREATE TABLE IF NOT EXISTS scram_credentials (
    user TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    salt BLOB NOT NULL,
    stored_key BLOB NOT NULL,
    server_key BLOB NOT NULL,
    iterations INTEGER NOT NULL,
    PRIMARY KEY (user, mechanism)
);
CREATE TABLE IF NOT EXISTS acls (
    resource_type INTEGER NOT NULL,
    resource_name TEXT NOT NULL,
    pattern_type INTEGER NOT NULL,
    principal TEXT NOT NULL,
    host TEXT NOT NULL,
    operation INTEGER NOT NULL,
    permission_type INTEGER NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                 permission_type)
);
-- Finalized feature levels (KIP-584), level 0 included; their epoch is cluster's
-- 'features.epoch'. A store from before this table gets the default levels at its next start.
CREATE TABLE IF NOT EXISTS finalized_features (name TEXT PRIMARY KEY, level INTEGER NOT NULL);
-- Client quotas as Kafka's ClientQuotaRecord keeps them: the entity is a JSON list of
-- [type, name] pairs sorted by type, a null name being the type's default entity.
CREATE TABLE IF NOT EXISTS client_quotas (
    entity TEXT NOT NULL,
    key TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (entity, key)
);
"""


class MetadataStore(Protocol):
    def load(self, cluster_id: str | None) -> MetadataImage: ...
    def create_topic(
        self, topic: TopicMetadata, assignments: dict[int, PartitionRegistration] | None = None
    ) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def set_partitions(
        self,
        name: str,
        partitions: int,
        assignments: dict[int, PartitionRegistration] | None = None,
    ) -> None: ...
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    def broker_configs(self) -> dict[str, str]: ...
    def set_broker_configs(self, configs: dict[str, str]) -> None: ...
    def group_configs(self) -> dict[str, dict[str, str]]: ...
    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None: ...
    def allocate_producer_ids(self, count: int) -> int: ...
    def scram_credentials(self) -> dict[tuple[str, str], ScramCredential]: ...
    def alter_scram_credentials(
        self,
        upsertions: dict[tuple[str, str], ScramCredential],
        deletions: list[tuple[str, str]],
    ) -> None: ...
    def acls(self) -> list[AclBinding]: ...
    def add_acls(self, bindings: list[AclBinding]) -> None: ...
    def remove_acls(self, bindings: list[AclBinding]) -> None: ...
    def finalized_features(self, defaults: dict[str, int]) -> tuple[dict[str, int], int]: ...
    def set_finalized_features(self, levels: dict[str, int], epoch: int) -> None: ...
    def client_quotas(self) -> dict[ClientQuotaEntity, dict[str, float]]: ...
    def alter_client_quotas(
        self, changes: dict[ClientQuotaEntity, dict[str, float | None]]
    ) -> None: ...
    def close(self) -> None: ...


# In a change feed: every entity may have changed (the feed was pruned); re-read it all.
RELOAD_ALL = ("all", "")


class MetadataStoreUnavailable(Exception):
    """The shared store could not be reached; the call changed nothing or is unknown to have
    (a commit whose answer was lost): callers retry by re-reading, never by assuming."""


class ClusterMetadataStore(MetadataStore, Protocol):
    """The store several brokers share (cluster mode). Besides MetadataStore's state it keeps
    the brokers' registrations and leases, the controller lease, every partition's
    registration, and a change feed: each committed change has a version, strictly increasing
    in commit order, naming what changed as (entity, key) pairs:

        ("topic", name)           the topic row and its partitions' registrations
        ("brokers", "")           broker registrations (not lease renewals)
        ("controller", "")        the controller lease changed hands
        ("acls", "") ("scram", "") ("quotas", "") ("broker_configs", "") ("features", "")
        ("group_configs", group_id)

    Lease times are the database's clock, never a broker's. Conditional writes return whether
    they applied; a refused one changed nothing."""

    # -- change feed
    def changes_since(self, version: int) -> tuple[int, set[tuple[str, str]]]: ...
    def wait_for_change(self, timeout_s: float) -> bool: ...
    # -- reads of cluster state
    def topic(self, name: str) -> tuple[TopicMetadata, dict[int, PartitionRegistration]] | None: ...
    def partitions(self) -> dict[str, dict[int, PartitionRegistration]]: ...
    def brokers(self) -> dict[int, BrokerRegistration]: ...
    def controller(self) -> tuple[int, int]: ...
    # -- membership
    def register_broker(self, registration: BrokerRegistration, session_timeout_ms: int) -> int: ...
    def heartbeat(self, node_id: int, broker_epoch: int, session_timeout_ms: int) -> bool: ...
    def begin_controlled_shutdown(self, node_id: int, broker_epoch: int) -> bool: ...
    def broker_alive(self, node_id: int) -> bool: ...
    # -- the controller
    def claim_controller(self, node_id: int, broker_epoch: int, lease_ms: int) -> int | None: ...
    def renew_controller(self, node_id: int, controller_epoch: int, lease_ms: int) -> bool: ...
    def resign_controller(self, node_id: int, controller_epoch: int) -> None: ...
    def lapsed_brokers(self) -> list[tuple[int, int]]: ...
    def renewed_brokers(self) -> list[tuple[int, int]]: ...
    def set_broker_fenced(
        self, controller: tuple[int, int], node_id: int, broker_epoch: int, fenced: bool
    ) -> bool: ...
    def controller_alter_partitions(
        self,
        controller: tuple[int, int],
        changes: list[tuple[str, int, int, PartitionRegistration]],
    ) -> list[bool]: ...
    # -- the leader's ISR changes (Kafka's AlterPartition)
    def alter_partition(
        self,
        topic: str,
        partition: int,
        expected_partition_epoch: int,
        new: PartitionRegistration,
        broker_epochs: Mapping[int, int] | None = None,
    ) -> tuple[bool, PartitionRegistration | None]: ...


class SqliteMetadataStore:
    FILENAME = "fjord-metadata.sqlite3"

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / self.FILENAME
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a topic the broker acknowledged as created survives a power cut too.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def _write(self, sql: str, params: tuple = ()) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(sql, params)

    def load(self, cluster_id: str | None) -> MetadataImage:
        with self._lock:
            row = self._db.execute("SELECT value FROM cluster WHERE key='cluster.id'").fetchone()
        stored = row[0] if row else None
        if stored and cluster_id and stored != cluster_id:
            raise ValueError(
                f"The cluster id {cluster_id} does not match the stored cluster id {stored} "
                f"in {self.path}"
            )
        if not stored:
            stored = cluster_id or new_cluster_id()
            self._write("INSERT INTO cluster(key, value) VALUES ('cluster.id', ?)", (stored,))
        with self._lock:
            rows = self._db.execute("SELECT name, topic_id, partitions, configs FROM topics")
            topics = [
                TopicMetadata(name, uuid.UUID(tid), partitions, json.loads(configs))
                for name, tid, partitions, configs in rows
            ]
        return MetadataImage(stored, topics)

    def create_topic(self, topic: TopicMetadata, assignments=None) -> None:
        # One broker: every partition is its own, so there is no registration to keep.
        self._write(
            "INSERT INTO topics(name, topic_id, partitions, configs) VALUES (?, ?, ?, ?)",
            (topic.name, str(topic.topic_id), topic.partitions, json.dumps(topic.configs)),
        )

    def delete_topic(self, name: str) -> None:
        self._write("DELETE FROM topics WHERE name = ?", (name,))

    def set_partitions(self, name: str, partitions: int, assignments=None) -> None:
        self._write("UPDATE topics SET partitions = ? WHERE name = ?", (partitions, name))

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._write("UPDATE topics SET configs = ? WHERE name = ?", (json.dumps(configs), name))

    def broker_configs(self) -> dict[str, str]:
        with self._lock:
            return dict(self._db.execute("SELECT name, value FROM broker_configs"))

    def set_broker_configs(self, configs: dict[str, str]) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM broker_configs")
            self._db.executemany(
                "INSERT INTO broker_configs(name, value) VALUES (?, ?)", list(configs.items())
            )

    def group_configs(self) -> dict[str, dict[str, str]]:
        with self._lock:
            rows = self._db.execute("SELECT group_id, configs FROM group_configs")
            return {group_id: json.loads(configs) for group_id, configs in rows}

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        if configs:
            self._write(
                "INSERT INTO group_configs(group_id, configs) VALUES (?, ?) "
                "ON CONFLICT(group_id) DO UPDATE SET configs = excluded.configs",
                (group_id, json.dumps(configs)),
            )
        else:
            self._write("DELETE FROM group_configs WHERE group_id = ?", (group_id,))

    def acls(self) -> list[AclBinding]:
        with self._lock:
            rows = self._db.execute(f"SELECT {ACL_COLUMNS} FROM acls").fetchall()
        return [acl_binding(*row) for row in rows]

    def add_acls(self, bindings: list[AclBinding]) -> None:
        self._acl_rows("INSERT OR IGNORE INTO acls({c}) VALUES (?, ?, ?, ?, ?, ?, ?)", bindings)

    def remove_acls(self, bindings: list[AclBinding]) -> None:
        where = " AND ".join(f"{c} = ?" for c in ACL_COLUMNS.split(", "))
        self._acl_rows(f"DELETE FROM acls WHERE {where}", bindings)

    def _acl_rows(self, sql: str, bindings: list[AclBinding]) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(sql.format(c=ACL_COLUMNS), [acl_row(b) for b in bindings])

    def allocate_producer_ids(self, count: int) -> int:
        """Reserve the next `count` producer ids and return the first. Durable before it
        returns, so a restarted broker never hands out an id twice."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute(
                "SELECT value FROM cluster WHERE key='producer.id.next.block'"
            ).fetchone()
            first = int(row[0]) if row else 0
            self._db.execute(
                "INSERT INTO cluster(key, value) VALUES ('producer.id.next.block', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(first + count),),
            )
            return first

    def scram_credentials(self) -> dict[tuple[str, str], ScramCredential]:
        """Credentials by (user, mechanism name)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT user, mechanism, salt, stored_key, server_key, iterations "
                "FROM scram_credentials"
            )
            return {
                (user, mechanism): ScramCredential(salt, stored_key, server_key, iterations)
                for user, mechanism, salt, stored_key, server_key, iterations in rows
            }

    def alter_scram_credentials(
        self,
        upsertions: dict[tuple[str, str], ScramCredential],
        deletions: list[tuple[str, str]],
    ) -> None:
        """One AlterUserScramCredentials request's changes, all or none."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "DELETE FROM scram_credentials WHERE user = ? AND mechanism = ?", deletions
            )
            self._db.executemany(
                "INSERT INTO scram_credentials"
                "(user, mechanism, salt, stored_key, server_key, iterations) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(user, mechanism) DO UPDATE SET "
                "salt = excluded.salt, stored_key = excluded.stored_key, "
                "server_key = excluded.server_key, iterations = excluded.iterations",
                scram_rows(upsertions),
            )

    def finalized_features(self, defaults: dict[str, int]) -> tuple[dict[str, int], int]:
        """The finalized levels and their epoch; a store without them is finalized at
        `defaults`, epoch 0, first (Kafka's bootstrap at format time)."""
        with self._lock:
            levels = dict(self._db.execute("SELECT name, level FROM finalized_features"))
            row = self._db.execute(
                "SELECT value FROM cluster WHERE key='features.epoch'"
            ).fetchone()
        if not levels:
            self.set_finalized_features(defaults, 0)
            return dict(defaults), 0
        return levels, int(row[0]) if row else 0

    def set_finalized_features(self, levels: dict[str, int], epoch: int) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT INTO finalized_features(name, level) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET level = excluded.level",
                list(levels.items()),
            )
            self._db.execute(
                "INSERT INTO cluster(key, value) VALUES ('features.epoch', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(epoch),),
            )

    def client_quotas(self) -> dict[ClientQuotaEntity, dict[str, float]]:
        with self._lock:
            rows = self._db.execute("SELECT entity, key, value FROM client_quotas").fetchall()
        return client_quotas_of(rows)

    def alter_client_quotas(self, changes: dict[ClientQuotaEntity, dict[str, float | None]]):
        """One AlterClientQuotas request's changes (None removes a key), all or none."""
        removals, upserts = client_quota_rows(changes)
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("DELETE FROM client_quotas WHERE entity = ? AND key = ?", removals)
            self._db.executemany(
                "INSERT INTO client_quotas(entity, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT(entity, key) DO UPDATE SET value = excluded.value",
                upserts,
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


def scram_rows(upsertions: dict[tuple[str, str], ScramCredential]) -> list[tuple]:
    """(user, mechanism, salt, stored key, server key, iterations) rows to upsert."""
    return [
        (user, mech, c.salt, c.stored_key, c.server_key, c.iterations)
        for (user, mech), c in upsertions.items()
    ]


def client_quotas_of(rows) -> dict[ClientQuotaEntity, dict[str, float]]:
    """Quotas by entity from stored (entity as JSON, key, value) rows."""
    quotas: dict[ClientQuotaEntity, dict[str, float]] = {}
    for entity, key, value in rows:
        pairs = tuple((entity_type, name) for entity_type, name in json.loads(entity))
        quotas.setdefault(ClientQuotaEntity(pairs), {})[key] = value
    return quotas


def client_quota_rows(
    changes: dict[ClientQuotaEntity, dict[str, float | None]],
) -> tuple[list[tuple[str, str]], list[tuple[str, str, float]]]:
    """One AlterClientQuotas request's changes as (entity, key) rows to remove and (entity,
    key, value) rows to upsert."""
    removals, upserts = [], []
    for entity, values in changes.items():
        name = json.dumps(entity.entries)
        for key, value in values.items():
            if value is None:
                removals.append((name, key))
            else:
                upserts.append((name, key, value))
    return removals, upserts


ACL_COLUMNS = (
    "resource_type, resource_name, pattern_type, principal, host, operation, permission_type"
)


def acl_row(b: AclBinding) -> tuple:
    p, e = b.pattern, b.entry
    return (
        int(p.resource_type),
        p.name,
        int(p.pattern_type),
        e.principal,
        e.host,
        int(e.operation),
        int(e.permission_type),
    )


def acl_binding(resource_type, name, pattern_type, principal, host, operation, permission):
    return AclBinding(
        ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)),
        AccessControlEntry(principal, host, AclOperation(operation), AclPermissionType(permission)),
    )


def new_cluster_id() -> str:
    """Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
