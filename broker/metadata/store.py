"""Durable cluster metadata. `MetadataStore` is the interface; `SqliteMetadataStore` is the
embedded implementation kept beside the logs. Calls block: the broker runs them in its
metadata thread, never on the event loop."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Protocol

from broker.metadata.image import MetadataImage, TopicMetadata

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
"""


class MetadataStore(Protocol):
    def load(self, cluster_id: str | None) -> MetadataImage: ...
    def create_topic(self, topic: TopicMetadata) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def set_partitions(self, name: str, partitions: int) -> None: ...
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    def broker_configs(self) -> dict[str, str]: ...
    def set_broker_configs(self, configs: dict[str, str]) -> None: ...
    def group_configs(self) -> dict[str, dict[str, str]]: ...
    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None: ...
    def allocate_producer_ids(self, count: int) -> int: ...
    def close(self) -> None: ...


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
            stored = cluster_id or _new_cluster_id()
            self._write("INSERT INTO cluster(key, value) VALUES ('cluster.id', ?)", (stored,))
        with self._lock:
            rows = self._db.execute("SELECT name, topic_id, partitions, configs FROM topics")
            topics = [
                TopicMetadata(name, uuid.UUID(tid), partitions, json.loads(configs))
                for name, tid, partitions, configs in rows
            ]
        return MetadataImage(stored, topics)

    def create_topic(self, topic: TopicMetadata) -> None:
        self._write(
            "INSERT INTO topics(name, topic_id, partitions, configs) VALUES (?, ?, ?, ?)",
            (topic.name, str(topic.topic_id), topic.partitions, json.dumps(topic.configs)),
        )

    def delete_topic(self, name: str) -> None:
        self._write("DELETE FROM topics WHERE name = ?", (name,))

    def set_partitions(self, name: str, partitions: int) -> None:
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

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _new_cluster_id() -> str:
    """Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
