"""The metadata store brokers share in cluster mode: one PostgreSQL database, as ZooKeeper was
for Kafka, holding MetadataStore's state plus memberships, the controller lease, partition
registrations and a change feed. Safety rests on epochs checked in conditional writes; times
are the database's clock (clock_timestamp()), never a broker's."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from broker.metadata.cluster import BrokerRegistration, PartitionRegistration
from broker.metadata.image import MetadataImage, TopicMetadata
from broker.metadata.store import (
    ACL_COLUMNS,
    RELOAD_ALL,
    MetadataStoreUnavailable,
    acl_binding,
    acl_row,
    client_quota_rows,
    client_quotas_of,
    new_cluster_id,
    scram_rows,
)
from broker.quota.client_quotas import ClientQuotaEntity
from broker.security.acl import AclBinding
from broker.security.scram import ScramCredential

CHANNEL = "fjord_metadata"
KEPT_CHANGES = 100_000
# Any constant: it only has to be the same in every broker creating the schema.
_SCHEMA_LOCK = 0x666A6F72645F6D64
# The advisory lock class of brokers' liveness locks (the second key is the node id): each
# broker holds its own for as long as its session lives, so a broker process that died (its
# connection gone with it) is seen at once, not only once its lease runs out.
_LIVENESS_CLASS = 0x666A6F72


def _live(node_column: str) -> str:
    """SQL: whether the broker whose id is in `node_column` holds its liveness lock."""
    return (
        "EXISTS (SELECT FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted "
        f"AND l.classid = {_LIVENESS_CLASS} AND l.objid::bigint = {node_column} "
        "AND l.objsubid = 2 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
    )


_LIVE = _live("node_id")

SCHEMA = """
CREATE TABLE IF NOT EXISTS fjord_meta_cluster (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS fjord_meta_topics (
    name text PRIMARY KEY,
    topic_id uuid NOT NULL UNIQUE,
    partitions integer NOT NULL,
    configs jsonb NOT NULL DEFAULT '{}'
);
-- Keyed by topic id, not name: a registration belongs to one incarnation of a topic name.
CREATE TABLE IF NOT EXISTS fjord_meta_partitions (
    topic_id uuid NOT NULL REFERENCES fjord_meta_topics (topic_id) ON DELETE CASCADE,
    partition_index integer NOT NULL,
    replicas integer[] NOT NULL,
    isr integer[] NOT NULL,
    leader integer NOT NULL,
    leader_epoch integer NOT NULL,
    partition_epoch integer NOT NULL,
    adding_replicas integer[] NOT NULL DEFAULT '{}',
    removing_replicas integer[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (topic_id, partition_index)
);
-- CACHE 1: a cached range per session would hand out epochs out of order across brokers.
CREATE SEQUENCE IF NOT EXISTS fjord_meta_broker_epochs AS bigint CACHE 1;
CREATE TABLE IF NOT EXISTS fjord_meta_brokers (
    node_id integer PRIMARY KEY,
    broker_epoch bigint NOT NULL,
    endpoints jsonb NOT NULL,
    rack text,
    fenced boolean NOT NULL,
    in_controlled_shutdown boolean NOT NULL,
    lease_expires timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS fjord_meta_controller (
    single boolean PRIMARY KEY DEFAULT true CHECK (single),
    controller_id integer NOT NULL DEFAULT -1,
    controller_epoch integer NOT NULL DEFAULT 0,
    lease_expires timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO fjord_meta_controller DEFAULT VALUES ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS fjord_meta_broker_configs (name text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS fjord_meta_group_configs (group_id text PRIMARY KEY, configs jsonb NOT NULL);
-- As Kafka's UserScramCredentialRecord keeps them: never the password.
CREATE TABLE IF NOT EXISTS fjord_meta_scram_credentials (
    user_name text NOT NULL,
    mechanism text NOT NULL,
    salt bytea NOT NULL,
    stored_key bytea NOT NULL,
    server_key bytea NOT NULL,
    iterations integer NOT NULL,
    PRIMARY KEY (user_name, mechanism)
);
CREATE TABLE IF NOT EXISTS fjord_meta_acls (
    resource_type integer NOT NULL,
    resource_name text NOT NULL,
    pattern_type integer NOT NULL,
    principal text NOT NULL,
    host text NOT NULL,
    operation integer NOT NULL,
    permission_type integer NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                 permission_type)
);
-- Their epoch is fjord_meta_cluster's 'features.epoch'.
CREATE TABLE IF NOT EXISTS fjord_meta_finalized_features (name text PRIMARY KEY, level integer NOT NULL);
-- The entity is a JSON list of [type, name] pairs sorted by type, as SqliteMetadataStore's.
CREATE TABLE IF NOT EXISTS fjord_meta_client_quotas (
    entity text NOT NULL,
    key text NOT NULL,
    value double precision NOT NULL,
    PRIMARY KEY (entity, key)
);
-- The change feed. Writers take the next version by updating this one row, whose lock they
-- hold to commit, so versions are in commit order (a sequence's would not be). Rows of
-- fjord_meta_changes up to pruned_through are gone.
CREATE TABLE IF NOT EXISTS fjord_meta_feed (
    single boolean PRIMARY KEY DEFAULT true CHECK (single),
    version bigint NOT NULL DEFAULT 0,
    pruned_through bigint NOT NULL DEFAULT 0
);
INSERT INTO fjord_meta_feed DEFAULT VALUES ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS fjord_meta_changes (
    version bigint NOT NULL,
    entity text NOT NULL,
    key text NOT NULL,
    PRIMARY KEY (version, entity, key)
);
"""

_REGISTRATION_COLUMNS = (
    "replicas, isr, leader, leader_epoch, partition_epoch, adding_replicas, removing_replicas"
)
_SET_REGISTRATION = (
    "replicas = %s::int[], isr = %s::int[], leader = %s, leader_epoch = %s, "
    "partition_epoch = %s, adding_replicas = %s::int[], removing_replicas = %s::int[]"
)
# A lease of %s milliseconds from now, by the database's clock: brokers' clocks may differ.
_LEASE_END = "clock_timestamp() + %s * interval '1 millisecond'"
_BROKER_COLUMNS = "node_id, broker_epoch, endpoints, rack, fenced, in_controlled_shutdown"

# Changes that name every entity: the versions asked about are no longer kept.


class TopicExistsError(ValueError):
    """create_topic lost to a topic of the same name (another broker's, perhaps)."""


class PostgresMetadataStore:
    """ClusterMetadataStore on PostgreSQL. Calls block; all but wait_for_change share one
    connection and are meant for one thread, wait_for_change has a connection of its own for
    the thread that waits. A lost connection makes the call raise MetadataStoreUnavailable and
    the next one reconnect."""

    def __init__(
        self,
        url: str,
        *,
        kept_changes: int = KEPT_CHANGES,
        transaction_timeout_ms: int | None = None,
    ) -> None:
        self._url = url
        # A broker paused (or cut off) inside one of its transactions would hold the feed's
        # row lock, and with it every other broker's metadata writes, as long as the pause
        # lasts: PostgreSQL ends such a session after `transaction_timeout_ms`, freeing its
        # locks (its liveness lock too, so the broker is fenced), and waiting writers are
        # bounded by it as well.
        self._session_options = (
            f"-c idle_in_transaction_session_timeout={transaction_timeout_ms} "
            f"-c lock_timeout={transaction_timeout_ms}"
            if transaction_timeout_ms
            else ""
        )
        self._kept_changes = kept_changes
        info = conninfo_to_dict(url)
        self._where = f"{info.get('host', '')}:{info.get('port', 5432)}/{info.get('dbname', '')}"
        self._lock = threading.Lock()
        self._listen_lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._listener: psycopg.Connection | None = None
        self._closed = False
        with self._transaction() as cur:
            # Brokers starting together would race CREATE TABLE IF NOT EXISTS into a
            # unique violation on the catalogs.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            cur.execute(SCHEMA)
        # Listening from the start: a change committed before the first wait_for_change
        # still wakes it.
        try:
            listener = self._listen()
        except MetadataStoreUnavailable:
            self.close()
            raise
        with self._listen_lock:
            self._listener = listener

    # -- connections

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor]:
        with self._lock:
            if self._closed:
                raise MetadataStoreUnavailable(f"the metadata store at {self._where} is closed")
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(
                        self._url, autocommit=False, options=self._session_options
                    )
                with self._conn.transaction(), self._conn.cursor() as cur:
                    yield cur
            except psycopg.Error as exc:
                # Not only OperationalErrors lose the connection: the server ends a session
                # idle in a transaction past its timeout (a broker paused mid-write) with an
                # InternalError, 25P03.
                if not isinstance(exc, psycopg.OperationalError) and not self._conn.broken:
                    raise
                self._discard()
                raise MetadataStoreUnavailable(f"metadata store at {self._where}: {exc}") from exc

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _listen(self) -> psycopg.Connection:
        conn = None
        try:
            conn = psycopg.connect(self._url, autocommit=True)
            conn.execute(f"LISTEN {CHANNEL}")
        except psycopg.OperationalError as exc:
            if conn is not None:
                conn.close()
            raise MetadataStoreUnavailable(f"metadata store at {self._where}: {exc}") from exc
        return conn

    # -- change feed

    def _record(self, cur: psycopg.Cursor, changes: Iterable[tuple[str, str]]) -> None:
        """Give this transaction's changes the next version. After the transaction's other
        writes: the feed row's lock is held to commit, and taking it after them keeps it from
        being held while waiting for another row's."""
        version = cur.execute(
            "UPDATE fjord_meta_feed SET version = version + 1 RETURNING version"
        ).fetchone()[0]
        cur.executemany(
            "INSERT INTO fjord_meta_changes(version, entity, key) VALUES (%s, %s, %s)",
            [(version, entity, key) for entity, key in set(changes)],
        )
        # Delivered at commit, and only if it commits.
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(version)))
        if version % max(1, self._kept_changes // 10) == 0:
            floor = version - self._kept_changes
            cur.execute("DELETE FROM fjord_meta_changes WHERE version <= %s", (floor,))
            cur.execute(
                "UPDATE fjord_meta_feed SET pruned_through = greatest(pruned_through, %s)",
                (floor,),
            )

    def changes_since(self, version: int) -> tuple[int, set[tuple[str, str]]]:
        """The latest version and what changed after `version`; RELOAD_ALL among them when
        that history is no longer kept (or `version` is from another database's feed)."""
        with self._transaction() as cur:
            # One statement, one snapshot: every change up to the version it reads.
            rows = cur.execute(
                "SELECT f.version, f.pruned_through, c.entity, c.key FROM fjord_meta_feed f "
                "LEFT JOIN LATERAL (SELECT DISTINCT entity, key FROM fjord_meta_changes "
                "WHERE version > %s AND version <= f.version) c ON true",
                (version,),
            ).fetchall()
        latest, pruned_through = rows[0][0], rows[0][1]
        if version < pruned_through or version > latest:
            return latest, {RELOAD_ALL}
        return latest, {(entity, key) for _, _, entity, key in rows if entity is not None}

    def wait_for_change(self, timeout_s: float) -> bool:
        """Block until a change is committed (True) or `timeout_s` passes (False). True may
        be spurious (after a reconnection, when notifications may have been missed): callers
        ask changes_since, which is exact. close() waits for a wait in progress."""
        with self._listen_lock:
            if self._closed:
                return False
            if self._listener is None:
                self._listener = self._listen()
                return True
            try:
                woken = bool(list(self._listener.notifies(timeout=timeout_s, stop_after=1)))
                if woken:
                    # One wake-up for everything already delivered.
                    list(self._listener.notifies(timeout=0))
            except psycopg.OperationalError as exc:
                self._listener.close()
                self._listener = None
                raise MetadataStoreUnavailable(f"metadata store at {self._where}: {exc}") from exc
            return woken

    # -- MetadataStore

    def load(self, cluster_id: str | None) -> MetadataImage:
        with self._transaction() as cur:
            # Brokers starting together each offer an id; the first committed is everyone's.
            cur.execute(
                "INSERT INTO fjord_meta_cluster(key, value) VALUES ('cluster.id', %s) "
                "ON CONFLICT (key) DO NOTHING",
                (cluster_id or new_cluster_id(),),
            )
            stored = cur.execute(
                "SELECT value FROM fjord_meta_cluster WHERE key = 'cluster.id'"
            ).fetchone()[0]
            if cluster_id and stored != cluster_id:
                raise ValueError(
                    f"The cluster id {cluster_id} does not match the stored cluster id {stored} "
                    f"in the metadata store at {self._where}"
                )
            rows = cur.execute(
                "SELECT name, topic_id, partitions, configs FROM fjord_meta_topics"
            ).fetchall()
        return MetadataImage(stored, [TopicMetadata(*row) for row in rows])

    def create_topic(
        self, topic: TopicMetadata, assignments: dict[int, PartitionRegistration] | None = None
    ) -> None:
        """Raises TopicExistsError if the name is taken, by a broker that raced this one too."""
        with self._transaction() as cur:
            inserted = cur.execute(
                "INSERT INTO fjord_meta_topics(name, topic_id, partitions, configs) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO NOTHING RETURNING name",
                (topic.name, topic.topic_id, topic.partitions, Jsonb(topic.configs)),
            ).fetchone()
            if inserted is None:
                raise TopicExistsError(f"Topic '{topic.name}' already exists.")
            self._insert_registrations(cur, topic.topic_id, assignments or {})
            self._record(cur, [("topic", topic.name)])

    def delete_topic(self, name: str) -> None:
        with self._transaction() as cur:
            cur.execute("DELETE FROM fjord_meta_topics WHERE name = %s", (name,))
            if cur.rowcount:
                self._record(cur, [("topic", name)])

    def set_partitions(
        self,
        name: str,
        partitions: int,
        assignments: dict[int, PartitionRegistration] | None = None,
    ) -> None:
        """The new partition count, with the registrations of the partitions it adds."""
        with self._transaction() as cur:
            row = cur.execute(
                "UPDATE fjord_meta_topics SET partitions = %s WHERE name = %s RETURNING topic_id",
                (partitions, name),
            ).fetchone()
            if row is None:
                return
            self._insert_registrations(cur, row[0], assignments or {})
            self._record(cur, [("topic", name)])

    @staticmethod
    def _insert_registrations(
        cur: psycopg.Cursor, topic_id: uuid.UUID, assignments: dict[int, PartitionRegistration]
    ) -> None:
        cur.executemany(
            f"INSERT INTO fjord_meta_partitions(topic_id, partition_index, {_REGISTRATION_COLUMNS}) "
            "VALUES (%s, %s, %s::int[], %s::int[], %s, %s, %s, %s::int[], %s::int[])",
            [(topic_id, p, *_registration_params(r)) for p, r in assignments.items()],
        )

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        with self._transaction() as cur:
            cur.execute(
                "UPDATE fjord_meta_topics SET configs = %s WHERE name = %s", (Jsonb(configs), name)
            )
            if cur.rowcount:
                self._record(cur, [("topic", name)])

    def broker_configs(self) -> dict[str, str]:
        with self._transaction() as cur:
            return dict(cur.execute("SELECT name, value FROM fjord_meta_broker_configs"))

    def set_broker_configs(self, configs: dict[str, str]) -> None:
        with self._transaction() as cur:
            cur.execute("DELETE FROM fjord_meta_broker_configs")
            cur.executemany(
                "INSERT INTO fjord_meta_broker_configs(name, value) VALUES (%s, %s)",
                list(configs.items()),
            )
            self._record(cur, [("broker_configs", "")])

    def group_configs(self) -> dict[str, dict[str, str]]:
        with self._transaction() as cur:
            return dict(cur.execute("SELECT group_id, configs FROM fjord_meta_group_configs"))

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        with self._transaction() as cur:
            if configs:
                cur.execute(
                    "INSERT INTO fjord_meta_group_configs(group_id, configs) VALUES (%s, %s) "
                    "ON CONFLICT (group_id) DO UPDATE SET configs = excluded.configs",
                    (group_id, Jsonb(configs)),
                )
            else:
                cur.execute("DELETE FROM fjord_meta_group_configs WHERE group_id = %s", (group_id,))
            if cur.rowcount:
                self._record(cur, [("group_configs", group_id)])

    def acls(self) -> list[AclBinding]:
        with self._transaction() as cur:
            rows = cur.execute(f"SELECT {ACL_COLUMNS} FROM fjord_meta_acls").fetchall()
        return [acl_binding(*row) for row in rows]

    def add_acls(self, bindings: list[AclBinding]) -> None:
        self._acl_rows(
            f"INSERT INTO fjord_meta_acls({ACL_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            bindings,
        )

    def remove_acls(self, bindings: list[AclBinding]) -> None:
        where = " AND ".join(f"{c} = %s" for c in ACL_COLUMNS.split(", "))
        self._acl_rows(f"DELETE FROM fjord_meta_acls WHERE {where}", bindings)

    def _acl_rows(self, sql: str, bindings: list[AclBinding]) -> None:
        with self._transaction() as cur:
            cur.executemany(sql, [acl_row(b) for b in bindings])
            if cur.rowcount > 0:
                self._record(cur, [("acls", "")])

    def allocate_producer_ids(self, count: int) -> int:
        """Reserve the next `count` producer ids and return the first; the row's lock makes
        brokers allocating together get disjoint blocks."""
        with self._transaction() as cur:
            end = cur.execute(
                "INSERT INTO fjord_meta_cluster(key, value) "
                "VALUES ('producer.id.next.block', %s) ON CONFLICT (key) DO UPDATE "
                "SET value = (fjord_meta_cluster.value::bigint + %s)::text RETURNING value",
                (str(count), count),
            ).fetchone()[0]
        return int(end) - count

    def scram_credentials(self) -> dict[tuple[str, str], ScramCredential]:
        """Credentials by (user, mechanism name)."""
        with self._transaction() as cur:
            rows = cur.execute(
                "SELECT user_name, mechanism, salt, stored_key, server_key, iterations "
                "FROM fjord_meta_scram_credentials"
            ).fetchall()
        return {(user, mech): ScramCredential(*credential) for user, mech, *credential in rows}

    def alter_scram_credentials(
        self,
        upsertions: dict[tuple[str, str], ScramCredential],
        deletions: list[tuple[str, str]],
    ) -> None:
        """One AlterUserScramCredentials request's changes, all or none."""
        with self._transaction() as cur:
            cur.executemany(
                "DELETE FROM fjord_meta_scram_credentials WHERE user_name = %s AND mechanism = %s",
                deletions,
            )
            changed = max(cur.rowcount, 0)
            cur.executemany(
                "INSERT INTO fjord_meta_scram_credentials"
                "(user_name, mechanism, salt, stored_key, server_key, iterations) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (user_name, mechanism) DO UPDATE "
                "SET salt = excluded.salt, stored_key = excluded.stored_key, "
                "server_key = excluded.server_key, iterations = excluded.iterations",
                scram_rows(upsertions),
            )
            if changed or upsertions:
                self._record(cur, [("scram", "")])

    def finalized_features(self, defaults: dict[str, int]) -> tuple[dict[str, int], int]:
        """The finalized levels and their epoch; a store without them is finalized at
        `defaults`, epoch 0, first (Kafka's bootstrap at format time)."""
        names, levels = list(defaults), list(defaults.values())
        with self._transaction() as cur:
            # Brokers starting together may both find none: the first to commit wins, the
            # other's rows conflict and are dropped.
            cur.execute(
                "INSERT INTO fjord_meta_finalized_features(name, level) "
                "SELECT * FROM unnest(%s::text[], %s::int[]) "
                "WHERE NOT EXISTS (SELECT FROM fjord_meta_finalized_features) "
                "ON CONFLICT (name) DO NOTHING",
                (names, levels),
            )
            if cur.rowcount > 0:
                cur.execute(
                    "INSERT INTO fjord_meta_cluster(key, value) VALUES ('features.epoch', '0') "
                    "ON CONFLICT (key) DO NOTHING"
                )
                self._record(cur, [("features", "")])
            # A statement of its own, so it sees the rows of the broker that won.
            finalized = dict(cur.execute("SELECT name, level FROM fjord_meta_finalized_features"))
            row = cur.execute(
                "SELECT value FROM fjord_meta_cluster WHERE key = 'features.epoch'"
            ).fetchone()
        return finalized, int(row[0]) if row else 0

    def set_finalized_features(self, levels: dict[str, int], epoch: int) -> None:
        with self._transaction() as cur:
            cur.executemany(
                "INSERT INTO fjord_meta_finalized_features(name, level) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET level = excluded.level",
                list(levels.items()),
            )
            cur.execute(
                "INSERT INTO fjord_meta_cluster(key, value) VALUES ('features.epoch', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(epoch),),
            )
            self._record(cur, [("features", "")])

    def client_quotas(self) -> dict[ClientQuotaEntity, dict[str, float]]:
        with self._transaction() as cur:
            rows = cur.execute("SELECT entity, key, value FROM fjord_meta_client_quotas").fetchall()
        return client_quotas_of(rows)

    def alter_client_quotas(
        self, changes: dict[ClientQuotaEntity, dict[str, float | None]]
    ) -> None:
        """One AlterClientQuotas request's changes (None removes a key), all or none."""
        removals, upserts = client_quota_rows(changes)
        with self._transaction() as cur:
            cur.executemany(
                "DELETE FROM fjord_meta_client_quotas WHERE entity = %s AND key = %s", removals
            )
            changed = max(cur.rowcount, 0)
            cur.executemany(
                "INSERT INTO fjord_meta_client_quotas(entity, key, value) VALUES (%s, %s, %s) "
                "ON CONFLICT (entity, key) DO UPDATE SET value = excluded.value",
                upserts,
            )
            if changed or upserts:
                self._record(cur, [("quotas", "")])

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._discard()
        with self._listen_lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None

    # -- reads of cluster state

    def topic(self, name: str) -> tuple[TopicMetadata, dict[int, PartitionRegistration]] | None:
        with self._transaction() as cur:
            rows = cur.execute(
                f"SELECT t.name, t.topic_id, t.partitions, t.configs, p.partition_index, "
                f"{_qualified('p', _REGISTRATION_COLUMNS)} FROM fjord_meta_topics t "
                "LEFT JOIN fjord_meta_partitions p USING (topic_id) WHERE t.name = %s",
                (name,),
            ).fetchall()
        if not rows:
            return None
        return TopicMetadata(*rows[0][:4]), _registrations(row[4:] for row in rows)

    def partitions(self) -> dict[str, dict[int, PartitionRegistration]]:
        """Every topic's partition registrations, by topic name (a topic without any maps to
        an empty dict)."""
        with self._transaction() as cur:
            rows = cur.execute(
                f"SELECT t.name, p.partition_index, {_qualified('p', _REGISTRATION_COLUMNS)} "
                "FROM fjord_meta_topics t LEFT JOIN fjord_meta_partitions p USING (topic_id)"
            ).fetchall()
        by_topic: dict[str, list[tuple]] = {}
        for name, *registration in rows:
            by_topic.setdefault(name, []).append(registration)
        return {name: _registrations(regs) for name, regs in by_topic.items()}

    def brokers(self) -> dict[int, BrokerRegistration]:
        with self._transaction() as cur:
            rows = cur.execute(f"SELECT {_BROKER_COLUMNS} FROM fjord_meta_brokers").fetchall()
        return {
            node_id: BrokerRegistration(
                node_id,
                epoch,
                {listener: (host, port) for listener, (host, port) in endpoints.items()},
                rack,
                fenced,
                in_controlled_shutdown,
            )
            for node_id, epoch, endpoints, rack, fenced, in_controlled_shutdown in rows
        }

    def controller(self) -> tuple[int, int]:
        """(controller id, controller epoch); the id is -1 when no broker ever claimed the
        lease or the last holder resigned it. An expired lease still names its holder."""
        with self._transaction() as cur:
            return cur.execute(
                "SELECT controller_id, controller_epoch FROM fjord_meta_controller"
            ).fetchone()

    # -- membership

    def register_broker(self, registration: BrokerRegistration, session_timeout_ms: int) -> int:
        """(Re-)register a starting broker with a lease of `session_timeout_ms`; returns its
        new broker epoch, greater than any given before to any broker. It starts fenced, as
        in KRaft: the controller unfences it once it is out of every ISR it was in, so a
        broker back with less data (an emptied disk) must catch up before it is in sync."""
        endpoints = {name: [host, port] for name, (host, port) in registration.endpoints.items()}
        with self._transaction() as cur:
            epoch = cur.execute(
                f"INSERT INTO fjord_meta_brokers({_BROKER_COLUMNS}, lease_expires) "
                "VALUES (%s, nextval('fjord_meta_broker_epochs'), %s, %s, true, false, "
                f"{_LEASE_END}) "
                "ON CONFLICT (node_id) DO UPDATE SET broker_epoch = excluded.broker_epoch, "
                "endpoints = excluded.endpoints, rack = excluded.rack, fenced = true, "
                "in_controlled_shutdown = false, lease_expires = excluded.lease_expires "
                "RETURNING broker_epoch",
                (registration.node_id, Jsonb(endpoints), registration.rack, session_timeout_ms),
            ).fetchone()[0]
            self._hold_liveness_lock(cur, registration.node_id)
            self._record(cur, [("brokers", "")])
        return epoch

    def _hold_liveness_lock(self, cur: psycopg.Cursor, node_id: int) -> None:
        """Take the broker's liveness lock if this session does not hold it yet (a new
        connection after a lost one does not). A try: a paused former process of the node may
        still hold it, and then the lease alone tells liveness until it is gone."""
        # Advisory locks are re-entrant: taking it at every heartbeat would stack them.
        held = cur.execute(
            "SELECT FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' "
            f"AND classid = {_LIVENESS_CLASS} AND objid::bigint = %s AND objsubid = 2",
            (node_id,),
        ).fetchone()
        if held is None:
            cur.execute("SELECT pg_try_advisory_lock(%s, %s)", (_LIVENESS_CLASS, node_id))

    def heartbeat(self, node_id: int, broker_epoch: int, session_timeout_ms: int) -> bool:
        """Extend the broker's lease; False if it has registered again since `broker_epoch`
        (or never did)."""
        with self._transaction() as cur:
            self._hold_liveness_lock(cur, node_id)
            return _extend_lease(
                cur,
                "fjord_meta_brokers",
                "node_id",
                "broker_epoch",
                node_id,
                broker_epoch,
                session_timeout_ms,
            )

    def broker_alive(self, node_id: int) -> bool:
        """Whether broker `node_id`'s process holds its liveness lock: its session lives."""
        with self._transaction() as cur:
            return cur.execute(f"SELECT {_live('%s')}", (node_id,)).fetchone()[0]

    def begin_controlled_shutdown(self, node_id: int, broker_epoch: int) -> bool:
        with self._transaction() as cur:
            return self._set_broker_flag(cur, "in_controlled_shutdown", node_id, broker_epoch, True)

    def _set_broker_flag(
        self, cur: psycopg.Cursor, column: str, node_id: int, broker_epoch: int, value: bool
    ) -> bool:
        """Set a flag of the broker's registration at `broker_epoch` (a change only if it was
        not so already); False if the broker has registered again since, or never did."""
        row = cur.execute(
            f"SELECT {column} FROM fjord_meta_brokers "
            "WHERE node_id = %s AND broker_epoch = %s FOR UPDATE",
            (node_id, broker_epoch),
        ).fetchone()
        if row is None:
            return False
        if row[0] != value:
            cur.execute(
                f"UPDATE fjord_meta_brokers SET {column} = %s WHERE node_id = %s", (value, node_id)
            )
            self._record(cur, [("brokers", "")])
        return True

    # -- the controller

    def claim_controller(self, node_id: int, broker_epoch: int, lease_ms: int) -> int | None:
        """Take the controller lease if no one holds it (or its holder's process is gone),
        for a broker registered at `broker_epoch`, within its own lease and not shutting down (fenced is allowed: the
        controller is who unfences brokers, itself included); returns the new controller epoch,
        or None. Of brokers claiming together one wins: the others' updates wait on the row
        and find it taken."""
        with self._transaction() as cur:
            row = cur.execute(
                "UPDATE fjord_meta_controller SET controller_id = %(node)s, "
                "controller_epoch = controller_epoch + 1, "
                "lease_expires = clock_timestamp() + %(lease)s * interval '1 millisecond' "
                "WHERE (controller_id = -1 OR lease_expires <= clock_timestamp() "
                # A controller whose process died frees its liveness lock at once: its lease
                # need not be waited out.
                f"OR NOT {_live('controller_id')}) "
                "AND EXISTS (SELECT FROM fjord_meta_brokers WHERE node_id = %(node)s "
                "AND broker_epoch = %(epoch)s AND NOT in_controlled_shutdown "
                "AND lease_expires > clock_timestamp()) "
                "RETURNING controller_epoch",
                {"node": node_id, "epoch": broker_epoch, "lease": lease_ms},
            ).fetchone()
            if row is None:
                return None
            self._record(cur, [("controller", "")])
            return row[0]

    def renew_controller(self, node_id: int, controller_epoch: int, lease_ms: int) -> bool:
        """Extend the lease if it is still this claim's. An expired lease no one has claimed
        since is extended too: the epoch, not the clock, tells whether it changed hands."""
        with self._transaction() as cur:
            return _extend_lease(
                cur,
                "fjord_meta_controller",
                "controller_id",
                "controller_epoch",
                node_id,
                controller_epoch,
                lease_ms,
            )

    def resign_controller(self, node_id: int, controller_epoch: int) -> None:
        with self._transaction() as cur:
            cur.execute(
                "UPDATE fjord_meta_controller SET controller_id = -1, lease_expires = '-infinity' "
                "WHERE controller_id = %s AND controller_epoch = %s",
                (node_id, controller_epoch),
            )
            if cur.rowcount:
                self._record(cur, [("controller", "")])

    def lapsed_brokers(self) -> list[tuple[int, int]]:
        """(node id, broker epoch) of unfenced brokers whose lease has expired or whose
        process is gone (its liveness lock free)."""
        with self._transaction() as cur:
            return cur.execute(
                "SELECT node_id, broker_epoch FROM fjord_meta_brokers "
                f"WHERE NOT fenced AND (lease_expires <= clock_timestamp() OR NOT {_LIVE}) "
                "ORDER BY node_id"
            ).fetchall()

    def renewed_brokers(self) -> list[tuple[int, int]]:
        """(node id, broker epoch) of fenced brokers within their lease again and not shutting
        down: the ones to unfence."""
        with self._transaction() as cur:
            return cur.execute(
                "SELECT node_id, broker_epoch FROM fjord_meta_brokers "
                "WHERE fenced AND NOT in_controlled_shutdown "
                f"AND lease_expires > clock_timestamp() AND {_LIVE} ORDER BY node_id"
            ).fetchall()

    @staticmethod
    def _is_controller(cur: psycopg.Cursor, controller: tuple[int, int]) -> bool:
        """Whether `controller` (id, epoch) holds the lease, and keep it so until commit: the
        share lock makes a claim wait for this transaction."""
        return (
            cur.execute(
                "SELECT FROM fjord_meta_controller "
                "WHERE controller_id = %s AND controller_epoch = %s FOR SHARE",
                controller,
            ).fetchone()
            is not None
        )

    def set_broker_fenced(
        self, controller: tuple[int, int], node_id: int, broker_epoch: int, fenced: bool
    ) -> bool:
        """The controller fences or unfences a broker at `broker_epoch`; False (nothing
        changed) if `controller` no longer holds the lease or the broker registered again."""
        with self._transaction() as cur:
            return self._is_controller(cur, controller) and self._set_broker_flag(
                cur, "fenced", node_id, broker_epoch, fenced
            )

    def controller_alter_partitions(
        self,
        controller: tuple[int, int],
        changes: list[tuple[str, int, int, PartitionRegistration]],
    ) -> list[bool]:
        """Write each (topic, partition, expected partition epoch, new registration) whose
        stored partition epoch is the expected one, as given; whether each applied. None
        applies if `controller` no longer holds the lease."""
        with self._transaction() as cur:
            if not self._is_controller(cur, controller):
                return [False] * len(changes)
            applied, touched = [], set()
            for topic, partition, expected, new in changes:
                cur.execute(
                    f"UPDATE fjord_meta_partitions p SET {_SET_REGISTRATION} "
                    "FROM fjord_meta_topics t WHERE t.name = %s AND p.topic_id = t.topic_id "
                    "AND p.partition_index = %s AND p.partition_epoch = %s",
                    (*_registration_params(new), topic, partition, expected),
                )
                applied.append(cur.rowcount == 1)
                if cur.rowcount == 1:
                    touched.add(("topic", topic))
            if touched:
                self._record(cur, touched)
            return applied

    # -- the leader's ISR changes

    def alter_partition(
        self,
        topic: str,
        partition: int,
        expected_partition_epoch: int,
        new: PartitionRegistration,
        broker_epochs: Mapping[int, int] | None = None,
    ) -> tuple[bool, PartitionRegistration | None]:
        """The leader's ISR change (Kafka's AlterPartition): applies iff the stored partition
        epoch is the expected one, `new` differs from the stored registration in its ISR
        and partition epoch only (a leader cannot change leadership or replicas), and every
        replica it adds to the ISR is eligible (KIP-841, INELIGIBLE_REPLICA): registered,
        unfenced, not shutting down, at the broker epoch the leader saw it fetch with
        (`broker_epochs`; -1 or absent: not checked), and alive (its liveness lock held). The
        leader's view of the brokers may lag the controller's, and a broker fenced meanwhile
        must not be taken back into the ISR the controller took it out of; nor one whose
        process is gone, which the controller takes out of every ISR a round before fencing
        it (a fetch it sent before dying may reach the leader after that). Returns whether
        it applied and the registration now stored (None: no such partition)."""
        replicas, _, leader, leader_epoch, _, adding, removing = _registration_params(new)
        epochs = broker_epochs or {}
        with self._transaction() as cur:
            row = cur.execute(
                f"UPDATE fjord_meta_partitions p SET {_SET_REGISTRATION} "
                "FROM fjord_meta_topics t WHERE t.name = %s AND p.topic_id = t.topic_id "
                "AND p.partition_index = %s AND p.partition_epoch = %s "
                "AND p.leader = %s AND p.leader_epoch = %s AND p.replicas = %s::int[] "
                "AND p.adding_replicas = %s::int[] AND p.removing_replicas = %s::int[] "
                "AND NOT EXISTS (SELECT FROM unnest(%s::int[], %s::bigint[]) j (node_id, epoch) "
                "WHERE j.node_id <> ALL (p.isr) AND NOT EXISTS (SELECT FROM fjord_meta_brokers b "
                "WHERE b.node_id = j.node_id AND NOT b.fenced AND NOT b.in_controlled_shutdown "
                f"AND j.epoch IN (-1, b.broker_epoch) AND {_live('b.node_id')})) "
                f"RETURNING {_qualified('p', _REGISTRATION_COLUMNS)}",
                (
                    *_registration_params(new),
                    topic,
                    partition,
                    expected_partition_epoch,
                    leader,
                    leader_epoch,
                    replicas,
                    adding,
                    removing,
                    list(new.isr),
                    [epochs.get(r, -1) for r in new.isr],
                ),
            ).fetchone()
            if row is not None:
                self._record(cur, [("topic", topic)])
                return True, _registration(row)
            row = cur.execute(
                f"SELECT {_qualified('p', _REGISTRATION_COLUMNS)} FROM fjord_meta_partitions p "
                "JOIN fjord_meta_topics t USING (topic_id) "
                "WHERE t.name = %s AND p.partition_index = %s",
                (topic, partition),
            ).fetchone()
        return False, None if row is None else _registration(row)


def _qualified(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in columns.split(", "))


def _registration_params(r: PartitionRegistration) -> tuple:
    return (
        list(r.replicas),
        list(r.isr),
        r.leader,
        r.leader_epoch,
        r.partition_epoch,
        list(r.adding_replicas),
        list(r.removing_replicas),
    )


def _registration(row: tuple) -> PartitionRegistration:
    replicas, isr, leader, leader_epoch, partition_epoch, adding, removing = row
    return PartitionRegistration(
        tuple(replicas),
        tuple(isr),
        leader,
        leader_epoch,
        partition_epoch,
        tuple(adding),
        tuple(removing),
    )


def _registrations(rows: Iterable[tuple]) -> dict[int, PartitionRegistration]:
    """By partition, from (partition, registration columns...) rows; a LEFT JOIN's row of
    nulls (a topic without registrations) gives none."""
    return {row[0]: _registration(row[1:]) for row in rows if row[0] is not None}


def _extend_lease(
    cur: psycopg.Cursor,
    table: str,
    id_column: str,
    epoch_column: str,
    id_: int,
    epoch: int,
    lease_ms: int,
) -> bool:
    """Extend the lease of `table`'s row held by (id_, epoch); whether it still is."""
    cur.execute(
        f"UPDATE {table} SET lease_expires = {_LEASE_END} "
        f"WHERE {id_column} = %s AND {epoch_column} = %s",
        (lease_ms, id_, epoch),
    )
    return cur.rowcount == 1
