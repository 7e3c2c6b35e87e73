"""The group coordinator: classic and consumer-protocol groups and their committed offsets.

It owns the shared state — the groups by id, the timer, the offsets — routes each replayed
record to the part that owns it, routes the classic APIs by group type (a consumer group serves
its classic members itself, migration.py), and implements the operations that span group types:
offset commit/fetch/delete (transactional commits included), listing and deleting groups,
offset expiry. The protocols themselves live in classic_group.py and consumer_group.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.coordinator.classic_group import (
    ClassicGroup,
    ClassicGroupManager,
    JoinRequest,
    JoinResponse,
    LeaveResponse,
    MemberIdentity,
    SyncRequest,
    SyncResponse,
)
from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.consumer_group import ConsumerGroup, ConsumerGroupManager
from broker.coordinator.migration import OnlineMigration
from broker.coordinator.offsets import (
    NO_PRODUCER_ID,
    OffsetCommitRequest,
    OffsetManager,
    TopicPartition,
)
from broker.coordinator.placement import everywhere, partition_for
from broker.coordinator.records import GroupMetadataKey, OffsetCommitKey
from broker.coordinator.runtime import Deferred, Record, Result, Timer, TimerKey
from broker.metadata.image import MetadataImage

OFFSETS_EXPIRY_TIMER = TimerKey("offsets-expiry")


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


class GroupCoordinator:
    def __init__(
        self,
        config: GroupCoordinatorConfig,
        image: MetadataImage,
        group_configs: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.config = config
        self.image = image
        self.groups: dict[str, object] = {}
        self.timer = Timer()
        # Dynamic GROUP configs (consumer.session.timeout.ms, ...) by group id; the broker
        # keeps them in its metadata store and updates this mapping in place.
        self.group_configs: dict[str, dict[str, str]] = (
            group_configs if group_configs is not None else {}
        )
        self.offsets = OffsetManager(config.offset_metadata_max_bytes, config.offsets_retention_ms)
        self.classic = ClassicGroupManager(self.groups, self.timer, config)
        self.consumer = ConsumerGroupManager(
            self.groups, self.timer, config, image, self.group_configs
        )
        self.migration = OnlineMigration(self.classic, self.consumer, config, image, self.timer)
        self.consumer.migration = self.migration

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_partitions)

    # -- replay --------------------------------------------------------------------------------

    def replay(
        self, record: Record, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1
    ) -> None:
        """Replay one record; `producer_id` and `producer_epoch` are those of a transactional
        batch (only transactional offset commits are written in one)."""
        key = record.key
        if isinstance(key, OffsetCommitKey):
            self.offsets.replay(key, record.value, producer_id, producer_epoch)
        elif isinstance(key, GroupMetadataKey):
            self.classic.replay(key, record.value)
        else:
            self.consumer.replay(key, record.value)

    def replay_end_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """Replay the producer's COMMIT (`commit`) or ABORT marker on `partition` of
        `__consumer_offsets`: its pending offsets of the groups placed there become committed
        or are dropped."""
        self.offsets.end_transaction(producer_id, commit, self._in_partitions({partition}))

    def on_loaded(self, now_ms: int, partitions: Collection[int] | None = None) -> None:
        """After replaying `partitions` (every partition when None): re-arm their members'
        session timers, and offset expiry if it is not running yet. Once for all the
        partitions loaded together: each call looks at every group."""
        in_scope = everywhere if partitions is None else self._in_partitions(partitions)
        self.classic.on_loaded(now_ms, in_scope)
        self.consumer.on_loaded(now_ms, in_scope)
        if not self.timer.is_scheduled(OFFSETS_EXPIRY_TIMER):
            self.timer.schedule(
                OFFSETS_EXPIRY_TIMER,
                now_ms + self.config.offsets_retention_check_interval_ms,
                self._expire_offsets,
            )

    def unload(self, partitions: Collection[int]) -> None:
        """Forget the groups of `partitions` and their offsets, as Kafka's coordinator does
        when another broker becomes their leader: their timers stop and their parked
        requests answer NOT_COORDINATOR."""
        in_scope = self._in_partitions(partitions)
        gone = [g for g in self.groups if in_scope(g)]
        for group_id in gone:
            group = self.groups.pop(group_id)
            if isinstance(group, ClassicGroup):
                group.answer_parked(ErrorCode.not_coordinator)
        self.timer.cancel_groups(set(gone))
        self.offsets.unload(in_scope)

    def _in_partitions(self, partitions: Collection[int]):
        return lambda group_id: self.partition_for(group_id) in partitions

    # -- the classic APIs ----------------------------------------------------------------------

    def join_group(self, request: JoinRequest, now_ms: int) -> Result[Deferred[JoinResponse]]:
        group = self.groups.get(request.group_id)
        # An empty consumer group gives way to a classic group (the classic manager's case).
        if isinstance(group, ConsumerGroup) and not group.is_empty():
            return self.migration.join_group(group, request, now_ms)
        return self.classic.join_group(request, now_ms)

    def sync_group(self, request: SyncRequest, now_ms: int) -> Result[Deferred[SyncResponse]]:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            return self.migration.sync_group(group, request, now_ms)
        return self.classic.sync_group(request, now_ms)

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> Result[ErrorCode]:
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return self.migration.heartbeat(
                group, member_id, group_instance_id, generation_id, now_ms
            )
        return self.classic.heartbeat(group_id, member_id, group_instance_id, generation_id, now_ms)

    def leave_group(
        self, group_id: str, members: list[MemberIdentity], now_ms: int
    ) -> Result[LeaveResponse]:
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return self.migration.leave_group(group, members, now_ms)
        return self.classic.leave_group(group_id, members, now_ms)

    # -- offsets -------------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_or_epoch: int,
        group_instance_id: str | None,
        partitions: list[OffsetCommitRequest],
        now_ms: int,
        api_version: int,
        expire_timestamp: int = -1,
    ) -> Result[dict[TopicPartition, ErrorCode]]:
        group = self.groups.get(group_id)
        if group is None:
            # A negative generation comes from the admin client or a consumer without group
            # management: its offsets are accepted and form a "simple" group.
            if generation_or_epoch >= 0:
                error = (
                    ErrorCode.group_id_not_found
                    if api_version >= 9
                    else ErrorCode.illegal_generation
                )
                return Result([], {(p.topic, p.partition): error for p in partitions})
        else:
            error = group.validate_offset_commit(member_id, generation_or_epoch, group_instance_id)
            if error != ErrorCode.none:
                return Result([], {(p.topic, p.partition): error for p in partitions})
        records, errors = self.offsets.commit_records(
            group_id, partitions, now_ms, expire_timestamp
        )
        return Result(records, errors)

    def txn_offset_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        now_ms: int,
    ) -> Result[dict[TopicPartition, ErrorCode]]:
        """TxnOffsetCommit: `offsets` maps each partition to (offset, leader epoch, metadata).
        The records are those of a plain commit; run through the runtime's
        `run_transactional(group_id, producer_id, producer_epoch, ...)` they are written in the
        producer's transactional batch and stay pending until its marker. The producer fields
        are not checked here: the log fences stale epochs when the batch is appended."""
        group = self.groups.get(group_id)
        if group is None:
            # Unknown group without a generation: a producer's sendOffsetsToTransaction with
            # only a group id. Its offsets form a "simple" group, as a plain commit's do.
            error = ErrorCode.none if generation_id < 0 else ErrorCode.illegal_generation
        else:
            error = _validate_txn_offset_commit(group, member_id, generation_id, group_instance_id)
        if error != ErrorCode.none:
            return Result([], {tp: error for tp in offsets})
        partitions = [
            OffsetCommitRequest(topic, partition, offset, leader_epoch, metadata)
            for (topic, partition), (offset, leader_epoch, metadata) in offsets.items()
        ]
        records, errors = self.offsets.commit_records(group_id, partitions, now_ms)
        return Result(records, errors)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
        require_stable: bool = False,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
    ):
        """(error, offsets by partition); consumer groups validate the member epoch (v9+).
        With `require_stable` (OffsetFetch v7+, read_committed consumers) a partition with a
        pending transactional offset comes back as UNSTABLE (error UNSTABLE_OFFSET_COMMIT).
        `topic_ids`: the ids a fetch by id (v10) named its topics by (OffsetManager.fetch)."""
        group = self.groups.get(group_id)
        if group is not None and member_epoch >= 0:
            error = group.validate_offset_fetch(member_id, member_epoch)
            if error != ErrorCode.none:
                return error, {}
        return ErrorCode.none, self.offsets.fetch(group_id, partitions, require_stable, topic_ids)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> Result[tuple[ErrorCode, dict[TopicPartition, ErrorCode]]]:
        group = self.groups.get(group_id)
        if group is None and not self.offsets.has_offsets(group_id):
            return Result([], (ErrorCode.group_id_not_found, {}))
        subscribed: set[str] = set()
        if group is not None and not group.is_empty():
            if group.protocol_type != "consumer":
                return Result([], (ErrorCode.non_empty_group, {}))
            subscribed = group.subscribed_topics() or set()
        errors = {
            tp: (ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none)
            for tp in partitions
        }
        deletable = [tp for tp, e in errors.items() if e == ErrorCode.none]
        return Result(self.offsets.delete_records(group_id, deletable), (ErrorCode.none, errors))

    def on_topic_deleted(self, topic: str) -> list[Record]:
        """Tombstones for every group's offsets of a deleted topic (Kafka's
        onPartitionsDeleted): they would otherwise greet a later topic of that name."""
        records: list[Record] = []
        for group_id in self.offsets.groups():
            if topic in self.offsets.topics(group_id):
                gone = [tp for tp in self.offsets.fetch(group_id, None) if tp[0] == topic]
                records += self.offsets.delete_records(group_id, gone)
        return records

    def _expire_offsets(self, now_ms: int) -> list[Record]:
        records: list[Record] = []
        for group_id in self.offsets.groups():
            group = self.groups.get(group_id)
            if group is not None and not group.is_empty():
                continue  # offsets of a live group are kept
            expired = self.offsets.expired_records(group_id, now_ms)
            records += expired
            if (
                group is not None
                and expired
                and len(expired) == len(self.offsets.fetch(group_id, None))
                and not self.offsets.has_pending(group_id)
            ):
                # An empty group whose last offsets expired; one an ongoing transaction
                # commits offsets to stays until the transaction ends.
                records += group.tombstones()
        self.timer.schedule(
            OFFSETS_EXPIRY_TIMER,
            now_ms + self.config.offsets_retention_check_interval_ms,
            self._expire_offsets,
        )
        return records

    # -- groups --------------------------------------------------------------------------------

    def list_groups(
        self, states: set[str] | None = None, types: set[str] | None = None
    ) -> list[ListedGroup]:
        listed = [
            ListedGroup(g.group_id, g.protocol_type or "", g.state_name, g.group_type)
            for g in self.groups.values()
        ]
        known = set(self.groups)
        # Offsets committed without group management make a "simple" classic group.
        listed += [
            ListedGroup(g, "", "Empty", "classic") for g in self.offsets.groups() if g not in known
        ]
        return [
            g
            for g in listed
            if (not states or g.state.lower() in states)
            and (not types or g.group_type.lower() in types)
        ]

    def delete_groups(self, group_ids: list[str]) -> Result[dict[str, ErrorCode]]:
        records: list[Record] = []
        errors: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None and not self.offsets.has_offsets(group_id):
                errors[group_id] = ErrorCode.group_id_not_found
            elif group is not None and not group.is_empty():
                errors[group_id] = ErrorCode.non_empty_group
            else:
                errors[group_id] = ErrorCode.none
                records += self.offsets.delete_records(group_id)
                if group is not None:
                    records += group.tombstones()
        return Result(records, errors)

    def describe_state(self, group_id: str):
        """The group object, or None when only offsets (or nothing) exist under this id."""
        return self.groups.get(group_id)


def _validate_txn_offset_commit(
    group, member_id: str, generation_id: int, group_instance_id: str | None
) -> ErrorCode:
    """Kafka's validation of a TxnOffsetCommit against an existing group: that of OffsetCommit,
    except that the member fields are checked only when given (TxnOffsetCommit v0-v2 has
    none), a member may commit while its group completes a rebalance, and a stale member
    epoch is an ILLEGAL_GENERATION (the error transactional producers know)."""
    if generation_id < 0 and not member_id and group_instance_id is None:
        return ErrorCode.none
    error = group.validate_offset_commit(member_id, generation_id, group_instance_id)
    if error == ErrorCode.rebalance_in_progress:
        return ErrorCode.none
    if error == ErrorCode.stale_member_epoch:
        return ErrorCode.illegal_generation
    return error
