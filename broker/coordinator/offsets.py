"""Committed offsets of every group: commit, fetch, delete, expire (Kafka's OffsetMetadataManager).

State changes only through `replay` of OffsetCommit records; operations return those records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.coordinator.records import OffsetCommitKey, OffsetCommitValue
from broker.coordinator.runtime import Record

TopicPartition = tuple[str, int]
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """One partition of an OffsetCommit, version-independent."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str


class OffsetManager:
    def __init__(self, metadata_max_bytes: int, retention_ms: int) -> None:
        self.metadata_max_bytes = metadata_max_bytes
        self.retention_ms = retention_ms
        self._offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}

    # -- replay --------------------------------------------------------------------------------

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        tp = (key.topic, key.partition)
        if value is None:
            group = self._offsets.get(key.group_id)
            if group is not None:
                group.pop(tp, None)
                if not group:
                    del self._offsets[key.group_id]
        else:
            self._offsets.setdefault(key.group_id, {})[tp] = value

    # -- operations ----------------------------------------------------------------------------

    def commit_records(
        self,
        group_id: str,
        partitions: Iterable[OffsetCommitRequest],
        now_ms: int,
        expire_timestamp: int = -1,
    ) -> tuple[list[Record], dict[TopicPartition, ErrorCode]]:
        """The records of a commit the group has already validated, and per-partition errors
        (metadata too large is refused per partition, as Kafka does)."""
        records, errors = [], {}
        for p in partitions:
            tp = (p.topic, p.partition)
            metadata = p.metadata or ""
            if len(metadata.encode()) > self.metadata_max_bytes:
                errors[tp] = ErrorCode.offset_metadata_too_large
                continue
            errors[tp] = ErrorCode.none
            records.append(
                Record(
                    OffsetCommitKey(group_id=group_id, topic=p.topic, partition=p.partition),
                    OffsetCommitValue(
                        offset=p.offset,
                        leader_epoch=p.leader_epoch,
                        metadata=metadata,
                        commit_timestamp=now_ms,
                        expire_timestamp=expire_timestamp,
                    ),
                )
            )
        return records, errors

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of `partitions` (None: every partition with one)."""
        group = self._offsets.get(group_id, {})
        wanted = group.keys() if partitions is None else partitions
        result: dict[TopicPartition, CommittedOffset | None] = {}
        for tp in wanted:
            value = group.get(tp)
            result[tp] = (
                CommittedOffset(value.offset, value.leader_epoch, value.metadata or "")
                if value is not None
                else None
            )
        return result

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._offsets.get(group_id))

    def groups(self) -> list[str]:
        return list(self._offsets)

    def topics(self, group_id: str) -> set[str]:
        return {topic for topic, _ in self._offsets.get(group_id, {})}

    def delete_records(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> list[Record]:
        """Tombstones for the group's offsets of `partitions` (None: all of them)."""
        group = self._offsets.get(group_id, {})
        wanted = list(group) if partitions is None else [tp for tp in partitions if tp in group]
        return [
            Record(OffsetCommitKey(group_id=group_id, topic=t, partition=p), None)
            for t, p in wanted
        ]

    def expired_records(
        self, group_id: str, now_ms: int, since_ms: int | None = None
    ) -> list[Record]:
        """Tombstones for offsets whose retention has passed. Kafka keeps offsets while the
        group is alive: the caller asks only for groups that are empty, passing `since_ms`, the
        time the group became empty (retention counts from the later of that and the commit)."""
        group = self._offsets.get(group_id, {})
        expired = []
        for tp, value in group.items():
            if value.expire_timestamp >= 0:
                dead = now_ms >= value.expire_timestamp
            else:
                base = max(value.commit_timestamp, since_ms or 0)
                dead = now_ms - base >= self.retention_ms
            if dead:
                expired.append(tp)
        return self.delete_records(group_id, expired)

    def snapshot_records(self, group_id: str) -> list[Record]:
        """The records that rebuild this group's offsets from nothing (for compaction)."""
        return [
            Record(OffsetCommitKey(group_id=group_id, topic=t, partition=p), value)
            for (t, p), value in self._offsets.get(group_id, {}).items()
        ]
