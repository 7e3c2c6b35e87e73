"""Committed offsets of every group: commit, fetch, delete, expire (Kafka's OffsetMetadataManager).

State changes only through `replay` of OffsetCommit records and of end-transaction markers;
operations return those records.

A transactional offset commit (KIP-98's TxnOffsetCommit) writes the same OffsetCommit records,
in a transactional batch of the producer. Replayed, they are *pending*: OffsetFetch does not
see them until the producer's COMMIT marker on the same partition makes them committed; its
ABORT marker drops them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.coordinator.placement import everywhere
from broker.coordinator.records import ZERO_UUID, OffsetCommitKey, OffsetCommitValue
from broker.coordinator.runtime import Record

TopicPartition = tuple[str, int]
NO_OFFSET = -1
NO_PRODUCER_ID = -1
# The OffsetCommit record's metadata is a non-flexible string: an int16 length of UTF-8 bytes.
MAX_RECORD_METADATA_BYTES = 0x7FFF


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """One partition of an OffsetCommit, version-independent."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    topic_id: uuid.UUID = ZERO_UUID  # committed by id (v10): kept with the offset


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    # UNSTABLE_OFFSET_COMMIT when stable offsets were asked for and a transaction still holds
    # a pending offset of the partition: the consumer retries rather than start from an
    # offset that is about to change.
    error_code: ErrorCode = ErrorCode.none


UNSTABLE = CommittedOffset(NO_OFFSET, -1, "", ErrorCode.unstable_offset_commit)


@dataclass(frozen=True, slots=True)
class _Stored:
    value: OffsetCommitValue
    # Where its record came in the replay: log order within a partition, and a group never
    # spans partitions. When a commit marker meets a committed offset, the later record wins
    # (Kafka compares the records' log offsets), so a plain commit made after a transactional
    # one survives the transaction's commit.
    order: int


@dataclass(slots=True)
class _Transaction:
    """One producer's pending offsets, by group."""

    producer_epoch: int
    offsets: dict[str, dict[TopicPartition, _Stored]] = field(default_factory=dict)


def _other_topic(committed: uuid.UUID, topic_ids: Mapping[str, uuid.UUID] | None, topic: str):
    """Whether an offset committed under topic id `committed` belongs to a topic other than
    the one `topic_ids` names `topic` by (the zero id on either side: unknown, so no)."""
    expected = ZERO_UUID if topic_ids is None else topic_ids.get(topic, ZERO_UUID)
    return ZERO_UUID not in (committed, expected) and committed != expected


class OffsetManager:
    def __init__(self, metadata_max_bytes: int, retention_ms: int) -> None:
        self.metadata_max_bytes = metadata_max_bytes
        self.retention_ms = retention_ms
        self._offsets: dict[str, dict[TopicPartition, _Stored]] = {}
        self._pending: dict[int, _Transaction] = {}  # by producer id
        # group id -> producers holding pending offsets of it (Kafka's openTransactionsByGroup)
        self._open: dict[str, set[int]] = {}
        self._replayed = 0

    # -- replay --------------------------------------------------------------------------------

    def replay(
        self,
        key: OffsetCommitKey,
        value: OffsetCommitValue | None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> None:
        """Replay one OffsetCommit record; `producer_id` is that of a transactional batch."""
        group_id, tp = key.group_id, (key.topic, key.partition)
        order = self._replayed
        self._replayed += 1
        if value is None:
            # A tombstone (OffsetDelete, DeleteGroups, expiry) also drops what transactions
            # hold for the partition: their marker then has nothing left to apply there.
            group = self._offsets.get(group_id)
            if group is not None:
                group.pop(tp, None)
                if not group:
                    del self._offsets[group_id]
            for pid in list(self._open.get(group_id, ())):
                self._drop_pending(pid, group_id, tp)
        elif producer_id == NO_PRODUCER_ID:
            self._offsets.setdefault(group_id, {})[tp] = _Stored(value, order)
        else:
            txn = self._pending.setdefault(producer_id, _Transaction(producer_epoch))
            txn.producer_epoch = producer_epoch
            txn.offsets.setdefault(group_id, {})[tp] = _Stored(value, order)
            self._open.setdefault(group_id, set()).add(producer_id)

    def end_transaction(
        self, producer_id: int, commit: bool, in_scope: Callable[[str], bool] = everywhere
    ) -> None:
        """Replay the producer's COMMIT or ABORT marker for the groups `in_scope` (those of the
        partition that holds the marker: a producer may hold offsets on several)."""
        txn = self._pending.get(producer_id)
        if txn is None:
            return
        for group_id in [g for g in txn.offsets if in_scope(g)]:
            pending = txn.offsets.pop(group_id)
            self._close(group_id, producer_id)
            if not commit:
                continue
            committed = self._offsets.setdefault(group_id, {})
            for tp, stored in pending.items():
                current = committed.get(tp)
                if current is None or stored.order > current.order:
                    committed[tp] = stored
        if not txn.offsets:
            del self._pending[producer_id]

    def unload(self, in_scope: Callable[[str], bool]) -> None:
        """Forget the offsets, committed and pending, of the groups `in_scope`."""
        for group_id in [g for g in self._offsets if in_scope(g)]:
            del self._offsets[group_id]
        for group_id in [g for g in self._open if in_scope(g)]:
            for producer_id in self._open.pop(group_id):
                txn = self._pending[producer_id]
                del txn.offsets[group_id]
                if not txn.offsets:
                    del self._pending[producer_id]

    def _drop_pending(self, producer_id: int, group_id: str, tp: TopicPartition) -> None:
        txn = self._pending[producer_id]
        group = txn.offsets.get(group_id)
        if group is None or group.pop(tp, None) is None or group:
            return
        del txn.offsets[group_id]
        self._close(group_id, producer_id)
        if not txn.offsets:
            del self._pending[producer_id]

    def _close(self, group_id: str, producer_id: int) -> None:
        producers = self._open[group_id]
        producers.discard(producer_id)
        if not producers:
            del self._open[group_id]

    # -- operations ----------------------------------------------------------------------------

    def commit_records(
        self,
        group_id: str,
        partitions: Iterable[OffsetCommitRequest],
        now_ms: int,
        expire_timestamp: int = -1,
    ) -> tuple[list[Record], dict[TopicPartition, ErrorCode]]:
        """The records of a commit the group has already validated, and per-partition errors
        (metadata too large is refused per partition, as Kafka does). A transactional commit
        has the same records; the runtime writes them in the producer's batch."""
        records, errors = [], {}
        for p in partitions:
            tp = (p.topic, p.partition)
            metadata = p.metadata or ""
            if self._metadata_too_large(metadata):
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
                        topic_id=p.topic_id,
                    ),
                )
            )
        return records, errors

    def _metadata_too_large(self, metadata: str) -> bool:
        """Kafka measures `offset.metadata.max.bytes` against Java's String.length(): UTF-16
        code units, not UTF-8 bytes. The record stores the metadata as an int16-length string,
        so whatever the setting, more than 32767 UTF-8 bytes cannot be written (Kafka's
        serializer throws; refusing the partition says why)."""
        utf16_units = len(metadata.encode("utf-16-le")) // 2
        return (
            utf16_units > self.metadata_max_bytes
            or len(metadata.encode()) > MAX_RECORD_METADATA_BYTES
        )

    def fetch(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        require_stable: bool = False,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of `partitions` (None: every partition with one). With
        `require_stable`, a partition a transaction holds a pending offset of is UNSTABLE.
        `topic_ids` are those a fetch by id (v10) named its topics by: an offset committed by
        the id of another topic of the same name (deleted, then created again) is none, as
        Kafka's OffsetMetadataManager has it; one committed by name matches any id."""
        group = self._offsets.get(group_id, {})
        wanted = group.keys() if partitions is None else partitions
        result: dict[TopicPartition, CommittedOffset | None] = {}
        for tp in wanted:
            stored = group.get(tp)
            if require_stable and self.has_pending(group_id, tp):
                result[tp] = UNSTABLE
            elif stored is None or _other_topic(stored.value.topic_id, topic_ids, tp[0]):
                result[tp] = None
            else:
                value = stored.value
                result[tp] = CommittedOffset(value.offset, value.leader_epoch, value.metadata or "")
        return result

    def has_offsets(self, group_id: str) -> bool:
        """Whether the group has offsets, committed or pending: either keeps a group without
        members alive (Kafka's "simple" group)."""
        return bool(self._offsets.get(group_id)) or group_id in self._open

    def has_pending(self, group_id: str, tp: TopicPartition | None = None) -> bool:
        """Whether an ongoing transaction holds offsets of the group (of partition `tp`)."""
        producers = self._open.get(group_id)
        if not producers:
            return False
        return tp is None or any(tp in self._pending[p].offsets[group_id] for p in producers)

    def groups(self) -> list[str]:
        return list(dict.fromkeys([*self._offsets, *self._open]))

    def topics(self, group_id: str) -> set[str]:
        return {topic for topic, _ in self._offsets.get(group_id, {})}

    def delete_records(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> list[Record]:
        """Tombstones for the group's offsets of `partitions` (None: all of them), pending ones
        included, as Kafka's OffsetDelete and DeleteGroups do."""
        known = dict.fromkeys(self._offsets.get(group_id, {}))
        for producer_id in self._open.get(group_id, ()):
            known.update(dict.fromkeys(self._pending[producer_id].offsets[group_id]))
        wanted = list(known) if partitions is None else [tp for tp in partitions if tp in known]
        return [
            Record(OffsetCommitKey(group_id=group_id, topic=t, partition=p), None)
            for t, p in wanted
        ]

    def expired_records(
        self, group_id: str, now_ms: int, since_ms: int | None = None
    ) -> list[Record]:
        """Tombstones for offsets whose retention has passed. Kafka keeps offsets while the
        group is alive: the caller asks only for groups that are empty, passing `since_ms`, the
        time the group became empty (retention counts from the later of that and the commit).
        An offset an ongoing transaction is about to replace is kept until its marker."""
        group = self._offsets.get(group_id, {})
        expired = []
        for tp, stored in group.items():
            value = stored.value
            if value.expire_timestamp >= 0:
                dead = now_ms >= value.expire_timestamp
            else:
                base = max(value.commit_timestamp, since_ms or 0)
                dead = now_ms - base >= self.retention_ms
            if dead and not self.has_pending(group_id, tp):
                expired.append(tp)
        return self.delete_records(group_id, expired)
