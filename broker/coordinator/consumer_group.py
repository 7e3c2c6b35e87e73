"""KIP-848 consumer groups: their state, rebuilt from `__consumer_offsets` records, and the
ConsumerGroupHeartbeat operation that changes it (Kafka's ConsumerGroup and the consumer-group
half of GroupMetadataManager).

A heartbeat does three things, each only when needed:
1. update the member; a new member or a changed subscription (or topic metadata) bumps the
   group epoch;
2. when the group epoch is ahead of the target assignment epoch, run the group's server-side
   assignor to compute a new target assignment;
3. reconcile this member's current assignment towards its target (reconciliation.py).

Regex subscriptions are resolved as Kafka 4.x resolves them (GroupMetadataManager's
maybeUpdateRegularExpressions and TopicRegexResolver, KIP-848 with KAFKA-18813 and
KAFKA-18961): per group, all its regexes at once, during the heartbeat of a member, and only
to the topics *that member's principal* may DESCRIBE. The result is state (a
ConsumerGroupRegularExpression record per regex), so a topic enters a subscription only
through a resolution that authorized it. A heartbeat resolves again when a member brings a
regex nobody had, when topics were created since the last resolution, or when the last one is
older than `regex_refresh_interval_ms` (Kafka's group.consumer.regex.refresh.interval.ms, ten
minutes): that is how ACL changes reach regex subscriptions, in Kafka as here. Resolutions of
a group are at least REGEX_BATCH_REFRESH_MIN_INTERVAL_MS apart. The coordinator stays sans-io:
the heartbeat brings the member's authorization as a function filtering topic names.

Operations only read the state and return records; `replay` applies them. Session and
rebalance timeouts are transient timers re-armed by `on_loaded` after a restart.
"""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker.coordinator.assignors import ASSIGNORS, Assignment, MemberSpec
from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.placement import everywhere
from broker.coordinator.reconciliation import (
    NO_OWNER,
    CurrentAssignment,
    MemberState,
    from_topic_partitions,
    reconcile,
    to_topic_partitions,
)
from broker.coordinator.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
)
from broker.coordinator.records import TopicMetadata as SubscribedTopic
from broker.coordinator.runtime import Record, Result, Timer, TimerKey
from broker.metadata.image import MetadataImage
from broker.regex import InvalidRegex, compile_regex

if TYPE_CHECKING:
    from broker.coordinator.migration import OnlineMigration

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# From this ConsumerGroupHeartbeat version on, the client generates its member id (KIP-1082).
CLIENT_GENERATED_MEMBER_ID_VERSION = 1
SESSION_TIMEOUT_CONFIG = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL_CONFIG = "consumer.heartbeat.interval.ms"
# Kafka's bounds on regex resolution: never twice within 10 s in a group, and again at the
# next heartbeat once the last one is older than group.consumer.regex.refresh.interval.ms.
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000
REGEX_REFRESH_INTERVAL_MS = 10 * 60 * 1000

# Of the topic names given, those the heartbeating member may DESCRIBE (its principal and
# host against the ACLs; all of them without an authorizer).
TopicFilter = Callable[[set[str]], set[str]]


class GroupError(Exception):
    """An operation refused with Kafka's error code and message; it writes nothing."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, version-independent. None means "unchanged since the last
    heartbeat" for every optional field, as in the protocol."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_partitions: Assignment | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, the member keeps what it has


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """A member: what it told the coordinator (the ConsumerGroupMemberMetadata record) and its
    current assignment (the ConsumerGroupCurrentMemberAssignment record)."""

    member_id: str
    metadata: ConsumerGroupMemberMetadataValue = field(
        default_factory=ConsumerGroupMemberMetadataValue
    )
    current: CurrentAssignment = field(default_factory=CurrentAssignment)

    @property
    def member_epoch(self) -> int:
        return self.current.member_epoch

    @property
    def instance_id(self) -> str | None:
        return self.metadata.instance_id

    @property
    def uses_classic_protocol(self) -> bool:
        """A member served through JoinGroup / SyncGroup / Heartbeat (online migration)."""
        return self.metadata.classic_member_metadata is not None


class ConsumerGroup:
    """The state of one consumer group, changed only by `replay` (through the manager)."""

    group_type = "consumer"
    protocol_type = "consumer"

    def __init__(self, group_id: str, image: MetadataImage) -> None:
        self.group_id = group_id
        self.image = image
        self.group_epoch = 0
        self.subscription_metadata: dict[str, SubscribedTopic] = {}  # by topic name
        self.assignment_epoch = 0
        self.target_assignment: dict[str, Assignment] = {}
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        # (topic id, partition) -> epoch of the member owning it (assigned or revoking)
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        # regex -> the topics it resolved to (authorized), when, and against which topics
        self.resolved_regexes: dict[str, ConsumerGroupRegularExpressionValue] = {}
        self.dead = False

    # -- the interface every group type offers the coordinator ---------------------------------

    @property
    def state_name(self) -> str:
        """Kafka's ConsumerGroupState."""
        if self.dead:
            return "Dead"
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(
            not m.current.is_reconciled_to(self.assignment_epoch) for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return set().union(*(self.member_topics(m) for m in self.members.values()))

    def validate_offset_commit(
        self, member_id: str, member_epoch: int, group_instance_id: str | None
    ) -> ErrorCode:
        # A negative epoch comes from the admin client or a consumer without group management:
        # it may commit only while no member could be consuming the partitions.
        if member_epoch < 0 and not self.members:
            return ErrorCode.none
        return self._validate_member_epoch(member_id, member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:  # OffsetFetch without a member (v9+)
            return ErrorCode.none
        return self._validate_member_epoch(member_id, member_epoch)

    def _validate_member_epoch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member.member_epoch != member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def tombstones(self) -> list[Record]:
        """The records deleting the whole group, in Kafka's order: each record stays valid to
        replay on its own (assignments go before the members they belong to)."""
        gid, members = self.group_id, sorted(self.members)
        return [
            *(Record(ConsumerGroupCurrentMemberAssignmentKey(gid, m), None) for m in members),
            *(Record(ConsumerGroupTargetAssignmentMemberKey(gid, m), None) for m in members),
            Record(ConsumerGroupTargetAssignmentMetadataKey(gid), None),
            *(Record(ConsumerGroupMemberMetadataKey(gid, m), None) for m in members),
            *(_regex_tombstone(gid, regex) for regex in sorted(self.resolved_regexes)),
            Record(ConsumerGroupPartitionMetadataKey(gid), None),
            Record(ConsumerGroupMetadataKey(gid), None),
        ]

    # -- derived views -------------------------------------------------------------------------

    def snapshot_records(self) -> list[Record]:
        """Records that rebuild this group from nothing, in replayable order (compaction)."""
        gid = self.group_id
        return [
            *(_member_metadata_record(gid, m) for m in self.members.values()),
            *(
                Record(ConsumerGroupRegularExpressionKey(gid, regex), value)
                for regex, value in sorted(self.resolved_regexes.items())
            ),
            _subscription_record(gid, self.subscription_metadata),
            _group_epoch_record(gid, self.group_epoch),
            *(
                _target_member_record(gid, member_id, assignment)
                for member_id, assignment in self.target_assignment.items()
            ),
            Record(
                ConsumerGroupTargetAssignmentMetadataKey(gid),
                ConsumerGroupTargetAssignmentMetadataValue(self.assignment_epoch),
            ),
            *(
                _current_assignment_record(gid, member_id, m.current)
                for member_id, m in self.members.items()
            ),
        ]

    def member_topics(
        self,
        member: ConsumerGroupMember,
        resolved: Mapping[str, ConsumerGroupRegularExpressionValue] | None = None,
    ) -> set[str]:
        """The topic names a member subscribes to: by name, or those its regex resolved to
        (`resolved`, or the group's resolutions) that still exist. A regex not resolved yet
        brings no topic."""
        topics = set(member.metadata.subscribed_topic_names)
        regex = member.metadata.subscribed_topic_regex
        if regex:
            value = (self.resolved_regexes if resolved is None else resolved).get(regex)
            if value is not None:
                topics.update(t for t in value.topics if self.image.topic(t) is not None)
        return topics

    def subscribed_regexes(self) -> Counter[str]:
        """How many members subscribe to each regex."""
        return Counter(
            m.metadata.subscribed_topic_regex
            for m in self.members.values()
            if m.metadata.subscribed_topic_regex
        )

    def last_regex_refresh_ms(self) -> int | None:
        """When the group's regexes were last resolved (None: never, or none is left)."""
        return max((v.timestamp for v in self.resolved_regexes.values()), default=None)

    def last_regex_version(self) -> int:
        return max((v.version for v in self.resolved_regexes.values()), default=-1)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), NO_OWNER)

    # -- replay --------------------------------------------------------------------------------

    def put_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._forget(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for topic_id, partitions in member.current.owned().items():
            for partition in partitions:
                if (topic_id, partition) in self.partition_epochs:
                    # Reconciliation never gives a partition before its owner released it.
                    raise ValueError(
                        f"group {self.group_id}: partition {topic_id}-{partition} is owned by two "
                        "members"
                    )
                self.partition_epochs[(topic_id, partition)] = member.member_epoch

    def remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._forget(member)

    def _forget(self, member: ConsumerGroupMember) -> None:
        """Drop what is indexed from a member: its partitions and its instance id."""
        for topic_id, partitions in member.current.owned().items():
            for partition in partitions:
                self.partition_epochs.pop((topic_id, partition), None)
        if self.static_members.get(member.instance_id or "") == member.member_id:
            del self.static_members[member.instance_id]


def compile_subscription(regex: str):
    """A subscription regex; Kafka's are RE2/J, matched against the whole topic name."""
    try:
        return compile_regex(regex)
    except InvalidRegex as e:
        raise GroupError(
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.",
        ) from e


def new_member_id() -> str:
    """A random member id in the form of Kafka's Uuid.toString (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ConsumerGroupManager:
    """Consumer groups of one coordinator: heartbeats, leaves, timeouts, metadata changes.

    `groups` is the coordinator's map of every group (classic ones too), shared; this manager
    adds and removes only ConsumerGroup entries, and only while replaying."""

    def __init__(
        self,
        groups: MutableMapping[str, object],
        timer: Timer,
        config: GroupCoordinatorConfig,
        image: MetadataImage,
        group_configs: Mapping[str, Mapping[str, str]],
    ) -> None:
        self.groups = groups
        self.timer = timer
        self.config = config
        self.image = image
        self.group_configs = group_configs
        # Set by the coordinator: converts groups between the two protocols (migration.py).
        self.migration: OnlineMigration | None = None
        self.regex_refresh_interval_ms = REGEX_REFRESH_INTERVAL_MS
        # Kafka's lastMetadataImageWithNewTopics: grows whenever topics are created; a
        # resolution made before (its record's version is smaller) must be redone.
        self.topics_version = 0
        self._known_topic_ids = {t.topic_id for t in image.topics()}

    # -- group configs -------------------------------------------------------------------------

    def session_timeout_ms(self, group_id: str) -> int:
        return self._group_config(
            group_id, SESSION_TIMEOUT_CONFIG, self.config.consumer_session_timeout_ms
        )

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_config(
            group_id, HEARTBEAT_INTERVAL_CONFIG, self.config.consumer_heartbeat_interval_ms
        )

    def _group_config(self, group_id: str, name: str, default: int) -> int:
        value = self.group_configs.get(group_id, {}).get(name)
        return int(value) if value is not None else default

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------------

    def heartbeat(
        self,
        request: HeartbeatRequest,
        now_ms: int,
        *,
        client_id: str,
        client_host: str,
        api_version: int,
        describable: TopicFilter | None = None,
    ) -> Result[HeartbeatResponse]:
        """`describable` filters topic names down to those the member may DESCRIBE: regexes
        resolved during this heartbeat keep only those. Without it nothing is resolved."""
        try:
            self._validate(request, api_version)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(request, now_ms)
            return self._heartbeat(request, now_ms, client_id, client_host, describable)
        except GroupError as e:
            return Result([], HeartbeatResponse(error_code=e.code, error_message=e.message))

    def _validate(self, request: HeartbeatRequest, api_version: int) -> None:
        def invalid(message: str) -> GroupError:
            return GroupError(ErrorCode.invalid_request, message)

        if (
            api_version >= CLIENT_GENERATED_MEMBER_ID_VERSION
            or request.member_epoch > 0
            or request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH
        ) and not request.member_id.strip():
            raise invalid("MemberId can't be empty.")
        for value, name in (
            (request.group_id, "GroupId"),
            (request.instance_id, "InstanceId"),
            (request.rack_id, "RackId"),
        ):
            if value is not None and not value.strip():
                raise invalid(f"{name} can't be empty.")
        if request.member_epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned_partitions is None or request.owned_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                    "(re-)joining."
                )
        elif request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif request.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        assignors = self.config.consumer_assignors
        if request.server_assignor is not None and request.server_assignor not in assignors:
            raise GroupError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(assignors)}.",
            )

    def _heartbeat(
        self,
        request: HeartbeatRequest,
        now_ms: int,
        client_id: str,
        client_host: str,
        describable: TopicFilter | None,
    ) -> Result[HeartbeatResponse]:
        records: list[Record] = []
        joining = request.member_epoch == 0
        group = self._group_for_heartbeat(request.group_id, joining, records, now_ms)
        self.check_capacity(group, request.member_id)
        member_id = request.member_id or new_member_id()
        member, replaced = self._member_for_heartbeat(group, member_id, request, records)
        updated = replace(
            member, metadata=_updated_metadata(member.metadata, request, client_id, client_host)
        )
        current = self.reconcile_member(
            group, member, updated, replaced, request.owned_partitions, records, now_ms, describable
        )
        self.arm_session_timeout(
            group.group_id, member_id, self.session_timeout_ms(group.group_id), now_ms
        )

        # The assignment goes out when the member sent its full state (joining, or recovering
        # from an error) or when it changed.
        full = joining or (
            request.rebalance_timeout_ms != -1
            and (
                request.subscribed_topic_names is not None
                or request.subscribed_topic_regex is not None
            )
            and request.owned_partitions is not None
        )
        changed = current.assigned_partitions != member.current.assigned_partitions
        return Result(
            records,
            HeartbeatResponse(
                member_id=member_id,
                member_epoch=current.member_epoch,
                heartbeat_interval_ms=self.heartbeat_interval_ms(group.group_id),
                assignment=current.assigned_partitions if full or changed else None,
            ),
        )

    def check_capacity(self, group: ConsumerGroup, member_id: str) -> None:
        if len(group.members) >= self.config.consumer_max_size and member_id not in group.members:
            raise GroupError(
                ErrorCode.group_max_size_reached,
                "The consumer group has reached its maximum capacity of "
                f"{self.config.consumer_max_size} members.",
            )

    def reconcile_member(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        replaced: str | None,
        owned: Assignment | None,
        records: list[Record],
        now_ms: int,
        describable: TopicFilter | None = None,
    ) -> CurrentAssignment:
        """The heart of a heartbeat, shared by the consumer protocol and by classic members of
        a consumer group (their JoinGroup): record the member's new metadata, resolve the
        group's regexes if due (with `describable`, the member's authorization), bump the group
        epoch if its subscription changed, compute a new target assignment when the group epoch
        moved past it, and move the member's assignment towards its target. `replaced` is the
        id of the static member `updated` takes over; `owned` what the member reported."""
        group_id, member_id, metadata = group.group_id, updated.member_id, updated.metadata

        # 1. The member and, if its subscription changed, the group epoch.
        bump = group.group_epoch == 0  # a new group moves away from epoch 0 at once
        if metadata != member.metadata:
            records.append(_member_metadata_record(group_id, updated))
            if metadata.subscribed_topic_regex:
                compile_subscription(metadata.subscribed_topic_regex)  # refuse an invalid one
            bump |= (metadata.subscribed_topic_names, metadata.subscribed_topic_regex) != (
                member.metadata.subscribed_topic_names,
                member.metadata.subscribed_topic_regex,
            )
        resolved, resolution_changed = self._update_regexes(
            group, member, updated, describable, records, now_ms
        )
        bump |= resolution_changed
        members = {m.member_id: m for m in group.members.values() if m.member_id != replaced}
        members[member_id] = updated
        group_epoch, subscription = group.group_epoch, group.subscription_metadata
        if bump:
            subscription = self.subscription_metadata(group, members.values(), resolved)
            if subscription != group.subscription_metadata:
                records.append(_subscription_record(group_id, subscription))
            group_epoch += 1
            records.append(_group_epoch_record(group_id, group_epoch))

        # 2. A new target assignment when the group epoch moved past it.
        targets_before = dict(group.target_assignment)
        if replaced is not None:
            targets_before[member_id] = targets_before.pop(replaced, {})
        if group_epoch > group.assignment_epoch:
            targets = self._target_assignment(
                group, members, targets_before, subscription, resolved
            )
            records += _target_assignment_records(group_id, group_epoch, targets, targets_before)
            target_epoch, target = group_epoch, targets.get(member_id, {})
        else:
            target_epoch, target = group.assignment_epoch, targets_before.get(member_id, {})

        # 3. Move this member's assignment towards its target.
        current = reconcile(updated.current, target_epoch, target, group.partition_epoch, owned)
        if current != updated.current:
            records.append(_current_assignment_record(group_id, member_id, current))
            self._arm_rebalance_timeout(
                group_id, member_id, current, metadata.rebalance_timeout_ms, now_ms
            )
        return current

    def _update_regexes(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        describable: TopicFilter | None,
        records: list[Record],
        now_ms: int,
    ) -> tuple[dict[str, ConsumerGroupRegularExpressionValue], bool]:
        """Kafka's maybeUpdateRegularExpressions: the group's regex resolutions once this
        member's subscription changed (a regex nobody else holds is dropped, a new one is due
        for resolution) and, when due, resolved again for this member's principal. Returns
        them and whether topics changed for a regex (the group epoch must move)."""
        group_id = group.group_id
        old = member.metadata.subscribed_topic_regex or ""
        new = updated.metadata.subscribed_topic_regex or ""
        counts = group.subscribed_regexes()
        resolved = dict(group.resolved_regexes)
        require_refresh = changed = False
        if old != new:
            if old and counts[old] == 1:  # its last subscriber moves away
                records.append(_regex_tombstone(group_id, old))
                resolved.pop(old, None)
            if new and counts[new] == 0:
                require_refresh = True  # compile_subscription validated it
            changed = bool(old)  # the old regex's topics leave the subscription
        if describable is None or (not require_refresh and not counts):
            # None: whoever calls cannot authorize for the member, so it resolves nothing.
            return resolved, changed
        last = group.last_regex_refresh_ms()
        if last is not None and now_ms <= last + REGEX_BATCH_REFRESH_MIN_INTERVAL_MS:
            return resolved, changed
        subscribed = counts.copy()
        if old:
            subscribed[old] -= 1
        if new:
            subscribed[new] += 1
        regexes = {r for r, n in subscribed.items() if n > 0}
        require_refresh |= bool(regexes - resolved.keys())  # unresolved ones
        require_refresh |= group.last_regex_version() < self.topics_version  # new topics
        require_refresh |= last is None or now_ms > last + self.regex_refresh_interval_ms
        if not (require_refresh and regexes):
            return resolved, changed
        for regex, value in self.resolve_regexes(regexes, describable, now_ms).items():
            before = resolved.get(regex)
            changed |= before is None or before.topics != value.topics
            resolved[regex] = value
            records.append(Record(ConsumerGroupRegularExpressionKey(group_id, regex), value))
        return resolved, changed

    def resolve_regexes(
        self, regexes: Iterable[str], describable: TopicFilter, now_ms: int
    ) -> dict[str, ConsumerGroupRegularExpressionValue]:
        """Kafka's TopicRegexResolver: the topics each regex matches in full, less those the
        member may not DESCRIBE (each topic asked about once, whatever the regexes)."""
        matched: dict[str, set[str]] = {regex: set() for regex in regexes}
        patterns = [(regex, compile_subscription(regex)) for regex in matched]
        for topic in self.image.topics():
            if topic.internal:
                continue
            for regex, pattern in patterns:
                if pattern.fullmatch(topic.name):
                    matched[regex].add(topic.name)
        allowed = describable(set().union(*matched.values()))
        matched = {regex: topics & allowed for regex, topics in matched.items()}
        return {
            regex: ConsumerGroupRegularExpressionValue(
                tuple(sorted(topics)), self.topics_version, now_ms
            )
            for regex, topics in matched.items()
        }

    def _group_for_heartbeat(
        self, group_id: str, create: bool, records: list[Record], now_ms: int
    ) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if group is None and create:
            return ConsumerGroup(group_id, self.image)  # it comes to exist when replayed
        if group is not None and create and group.is_empty():
            # An empty classic group (committed offsets, no members) simply changes type.
            records.append(Record(GroupMetadataKey(group_id), None))
            return ConsumerGroup(group_id, self.image)
        if group is not None and create and self.migration is not None:
            # A live classic group meets its first consumer-protocol member (online upgrade).
            upgraded = self.migration.upgrade(group, records, now_ms)
            if upgraded is not None:
                return upgraded
        if group is None:
            raise GroupError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        raise GroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")

    def _member_for_heartbeat(
        self, group: ConsumerGroup, member_id: str, request: HeartbeatRequest, records: list[Record]
    ) -> tuple[ConsumerGroupMember, str | None]:
        """The member this heartbeat is from, and the id of the static member it replaces."""
        joining = request.member_epoch == 0
        if request.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise _unknown_member(member_id, group.group_id)
                return ConsumerGroupMember(member_id), None
            _check_member_epoch(member, request)
            return member, None

        instance_id = request.instance_id
        existing = group.static_member(instance_id)
        if not joining:
            existing = _check_static_member(existing, instance_id, member_id)
            _check_member_epoch(existing, request)
            return existing, None
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id), None
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupError(
                ErrorCode.unreleased_instance_id,
                f"Static member {member_id} with instance id {instance_id} cannot join the group "
                f"because the instance id is owned by {existing.member_id} member.",
            )
        return replace_static_member(group, existing, member_id, records), existing.member_id

    def _leave(self, request: HeartbeatRequest, now_ms: int) -> Result[HeartbeatResponse]:
        group = self.consumer_group(request.group_id)
        response = HeartbeatResponse(member_id=request.member_id, member_epoch=request.member_epoch)
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise _unknown_member(request.member_id, group.group_id)
        else:
            member = _check_static_member(
                group.static_member(request.instance_id), request.instance_id, request.member_id
            )
            if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # A static member leaving temporarily keeps its partitions for the session
                # timeout: if it comes back in time, nothing moves.
                current = replace(
                    member.current,
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    partitions_pending_revocation={},
                )
                return Result(
                    [_current_assignment_record(group.group_id, member.member_id, current)],
                    replace(response, member_id=member.member_id),
                )
        return Result(self.fence_members(group, {member.member_id}, now_ms), response)

    # -- timers --------------------------------------------------------------------------------

    def member_session_timeout_ms(
        self, group_id: str, metadata: ConsumerGroupMemberMetadataValue
    ) -> int:
        """A classic member keeps the session timeout of its JoinGroup (the
        ClassicMemberMetadata of its record); the others have the group's."""
        classic = metadata.classic_member_metadata
        if classic is not None:
            return classic.session_timeout_ms
        return self.session_timeout_ms(group_id)

    def arm_session_timeout(
        self, group_id: str, member_id: str, timeout_ms: int, now_ms: int
    ) -> None:
        self.timer.schedule(
            session_key(group_id, member_id),
            now_ms + timeout_ms,
            lambda t: self.fence_if_member(group_id, member_id, None, t),
        )

    def _arm_rebalance_timeout(
        self,
        group_id: str,
        member_id: str,
        current: CurrentAssignment,
        rebalance_timeout_ms: int,
        now_ms: int,
    ) -> None:
        """A member asked to revoke partitions must do so within its rebalance timeout, or it is
        fenced so that the partitions can move on."""
        key = _rebalance_key(group_id, member_id)
        if current.state != MemberState.UNREVOKED_PARTITIONS:
            self.timer.cancel(key)
            return
        epoch = current.member_epoch

        self.timer.schedule(
            key,
            now_ms + rebalance_timeout_ms,
            lambda t: self.fence_if_member(group_id, member_id, epoch, t),
        )

    def fence_if_member(
        self, group_id: str, member_id: str, epoch: int | None, now_ms: int
    ) -> list[Record]:
        """The timer's work: fence the member if it is still there (and, for a rebalance
        timeout, still in the epoch it had to leave)."""
        group = self.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            return []
        member = group.members.get(member_id)
        if member is None or (epoch is not None and member.member_epoch != epoch):
            return []
        return self.fence_members(group, {member_id}, now_ms)

    def fence_members(
        self, group: ConsumerGroup, member_ids: set[str], now_ms: int
    ) -> list[Record]:
        """Remove members; their partitions become free for the others at the next epoch. When
        only classic members remain, the group may convert back to a classic group instead
        (online downgrade)."""
        for member_id in member_ids:
            self.cancel_timers(group.group_id, member_id)
        if self.migration is not None:
            downgrade = self.migration.downgrade(group, member_ids, now_ms)
            if downgrade is not None:
                return downgrade
        records = [
            r
            for member_id in sorted(member_ids)
            for r in _member_removal_records(group.group_id, member_id)
        ]
        others = [m for m in group.members.values() if m.member_id not in member_ids]
        still_subscribed = {m.metadata.subscribed_topic_regex for m in others}
        records += [
            _regex_tombstone(group.group_id, regex)
            for regex in sorted(group.resolved_regexes)
            if regex not in still_subscribed
        ]
        subscription = self.subscription_metadata(group, others)
        if subscription != group.subscription_metadata:
            records.append(_subscription_record(group.group_id, subscription))
        records.append(_group_epoch_record(group.group_id, group.group_epoch + 1))
        return records

    def cancel_timers(self, group_id: str, member_id: str) -> None:
        for key in (session_key, _rebalance_key, classic_join_key, classic_sync_key):
            self.timer.cancel(key(group_id, member_id))

    # -- target assignment ---------------------------------------------------------------------

    def subscription_metadata(
        self,
        group: ConsumerGroup,
        members: Iterable[ConsumerGroupMember],
        resolved: Mapping[str, ConsumerGroupRegularExpressionValue] | None = None,
    ) -> dict[str, SubscribedTopic]:
        """The existing topics the members subscribe to, with their ids and partition counts:
        what the assignor sees. A change to it (topic created, deleted, recreated, grown, or
        newly resolved for a regex) bumps the group epoch."""
        names = set().union(*(group.member_topics(m, resolved) for m in members))
        subscription = {}
        for name in sorted(names):
            topic = self.image.topic(name)
            if topic is not None:
                subscription[name] = SubscribedTopic(
                    topic_id=topic.topic_id, topic_name=name, num_partitions=topic.partitions
                )
        return subscription

    def _target_assignment(
        self,
        group: ConsumerGroup,
        members: Mapping[str, ConsumerGroupMember],
        targets_before: Mapping[str, Assignment],
        subscription: Mapping[str, SubscribedTopic],
        resolved: Mapping[str, ConsumerGroupRegularExpressionValue],
    ) -> dict[str, Assignment]:
        assignor = ASSIGNORS[self.assignor_name(members.values())]
        specs = {
            member_id: MemberSpec(
                subscribed_topic_ids=frozenset(
                    subscription[t].topic_id
                    for t in group.member_topics(m, resolved)
                    if t in subscription
                ),
                current=targets_before.get(member_id, {}),
            )
            for member_id, m in members.items()
        }
        counts = {t.topic_id: t.num_partitions for t in subscription.values()}
        return assignor(specs, counts)

    def assignor_name(self, members: Iterable[ConsumerGroupMember]) -> str:
        """The group's server assignor: the one most members asked for (ties broken by name),
        else the broker's default, the first of group.consumer.assignors."""
        counts = Counter(
            m.metadata.server_assignor
            for m in members
            if m.metadata.server_assignor in self.config.consumer_assignors
        )
        if not counts:
            return self.config.consumer_assignors[0]
        return min(counts, key=lambda name: (-counts[name], name))

    # -- metadata changes, describe ------------------------------------------------------------

    def on_metadata_change(self, now_ms: int) -> list[Record]:
        """Records for the groups whose subscribed topics changed (created, deleted, grown):
        their new subscription metadata and a group epoch bump, so the next heartbeat computes
        a new target assignment. A created topic joins regex subscriptions only when the
        regexes are resolved again, at a member's heartbeat, for that member's principal."""
        topic_ids = {t.topic_id for t in self.image.topics()}
        if topic_ids - self._known_topic_ids:
            self.topics_version = max(now_ms, self.topics_version + 1)
        self._known_topic_ids = topic_ids
        records: list[Record] = []
        for group in sorted(self._consumer_groups(), key=lambda g: g.group_id):
            subscription = self.subscription_metadata(group, group.members.values())
            if subscription != group.subscription_metadata:
                records += [
                    _subscription_record(group.group_id, subscription),
                    _group_epoch_record(group.group_id, group.group_epoch + 1),
                ]
        return records

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """The consumer group `group_id` (ConsumerGroupDescribe, leave); GroupError when there
        is none or it is a classic group."""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if group is None:
            raise GroupError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        raise GroupError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")

    def _consumer_groups(self) -> list[ConsumerGroup]:
        return [g for g in self.groups.values() if isinstance(g, ConsumerGroup)]

    # -- replay --------------------------------------------------------------------------------

    def replay(self, key: object, value: object | None) -> None:
        """Apply one consumer-group record. Tombstones for what no longer exists are no-ops
        (compaction may have removed what they delete)."""
        group_id = key.group_id  # type: ignore[attr-defined]
        group = self.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            if value is None:
                return
            group = self.groups[group_id] = ConsumerGroup(group_id, self.image)
        member_id = getattr(key, "member_id", None)
        match key:
            case ConsumerGroupMetadataKey() if value is None:
                group.dead = True
                del self.groups[group_id]
            case ConsumerGroupMetadataKey():
                group.group_epoch = value.epoch
            case ConsumerGroupPartitionMetadataKey():
                topics = value.topics if value is not None else ()
                group.subscription_metadata = {t.topic_name: t for t in topics}
            case ConsumerGroupTargetAssignmentMetadataKey():
                group.assignment_epoch = value.assignment_epoch if value is not None else -1
            case ConsumerGroupTargetAssignmentMemberKey() if value is None:
                group.target_assignment.pop(member_id, None)
            case ConsumerGroupTargetAssignmentMemberKey():
                group.target_assignment[member_id] = from_topic_partitions(value.topic_partitions)
            case ConsumerGroupMemberMetadataKey() if value is None:
                group.remove_member(member_id)
            case ConsumerGroupMemberMetadataKey():
                member = group.members.get(member_id) or ConsumerGroupMember(member_id)
                group.put_member(replace(member, metadata=value))
            case ConsumerGroupRegularExpressionKey() if value is None:
                group.resolved_regexes.pop(key.regular_expression, None)
            case ConsumerGroupRegularExpressionKey():
                group.resolved_regexes[key.regular_expression] = value
            case ConsumerGroupCurrentMemberAssignmentKey():
                member = group.members.get(member_id)
                if value is not None:
                    member = member or ConsumerGroupMember(member_id)
                    group.put_member(replace(member, current=CurrentAssignment.from_record(value)))
                elif member is not None:
                    # The member is on its way out: it owns nothing any more.
                    left = CurrentAssignment(LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH)
                    group.put_member(replace(member, current=left))
            case _:
                raise ValueError(f"not a consumer group record: {key!r}")

    def on_loaded(self, now_ms: int, in_scope: Callable[[str], bool] = everywhere) -> None:
        """After the groups `in_scope` were loaded: every member gets a fresh session (as Kafka
        does), and one that was revoking a fresh rebalance timeout. As Kafka's first metadata
        image does, the topics count as new: regexes are resolved again at the next
        heartbeat."""
        self._known_topic_ids = {t.topic_id for t in self.image.topics()}
        self.topics_version = max(
            now_ms,
            self.topics_version + 1,
            *(g.last_regex_version() + 1 for g in self._consumer_groups()),
        )
        for group in [g for g in self._consumer_groups() if in_scope(g.group_id)]:
            for member in group.members.values():
                self.arm_session_timeout(
                    group.group_id,
                    member.member_id,
                    self.member_session_timeout_ms(group.group_id, member.metadata),
                    now_ms,
                )
                self._arm_rebalance_timeout(
                    group.group_id,
                    member.member_id,
                    member.current,
                    member.metadata.rebalance_timeout_ms,
                    now_ms,
                )


# -- checks ------------------------------------------------------------------------------------


def _unknown_member(member_id: str, group_id: str) -> GroupError:
    return GroupError(
        ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}."
    )


def _check_static_member(
    member: ConsumerGroupMember | None, instance_id: str, member_id: str
) -> ConsumerGroupMember:
    if member is None:
        raise GroupError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
    if member.member_id != member_id:
        raise GroupError(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{member.member_id}.",
        )
    return member


def _check_member_epoch(member: ConsumerGroupMember, request: HeartbeatRequest) -> None:
    """Kafka's epoch check. A member may always rejoin with epoch 0 (KAFKA-19233); one that
    comes with its previous epoch and owns only assigned partitions just missed a response."""
    received, known = request.member_epoch, member.member_epoch
    if received == 0 or received == known:
        return
    if received > known:
        relation = "greater"
    elif received == member.current.previous_member_epoch and _is_subset(
        request.owned_partitions, member.current.assigned_partitions
    ):
        return
    else:
        relation = "smaller"
    raise GroupError(
        ErrorCode.fenced_member_epoch,
        f"The consumer group member has a {relation} member epoch ({received}) than the one "
        f"known by the group coordinator ({known}). The member must abandon all its "
        "partitions and rejoin.",
    )


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())


def _updated_metadata(
    metadata: ConsumerGroupMemberMetadataValue,
    request: HeartbeatRequest,
    client_id: str,
    client_host: str,
) -> ConsumerGroupMemberMetadataValue:
    """The member's metadata with what this heartbeat changed (None fields are unchanged)."""

    def pick(new, old):
        return old if new is None else new

    names = request.subscribed_topic_names
    return replace(
        metadata,
        instance_id=pick(request.instance_id, metadata.instance_id),
        rack_id=pick(request.rack_id, metadata.rack_id),
        client_id=client_id,
        client_host=client_host,
        # A subscription is a set: the order the client lists topics in changes nothing.
        subscribed_topic_names=(
            metadata.subscribed_topic_names if names is None else tuple(sorted(set(names)))
        ),
        subscribed_topic_regex=pick(
            request.subscribed_topic_regex, metadata.subscribed_topic_regex
        ),
        rebalance_timeout_ms=(
            metadata.rebalance_timeout_ms
            if request.rebalance_timeout_ms == -1
            else request.rebalance_timeout_ms
        ),
        server_assignor=pick(request.server_assignor, metadata.server_assignor),
        classic_member_metadata=None,
    )


# -- records -----------------------------------------------------------------------------------


def replace_static_member(
    group: ConsumerGroup, existing: ConsumerGroupMember, member_id: str, records: list[Record]
) -> ConsumerGroupMember:
    """A static instance comes back under a new member id, which takes over its subscription,
    target and partitions, so the group does not rebalance."""
    member = ConsumerGroupMember(
        member_id,
        existing.metadata,
        replace(existing.current, member_epoch=0, previous_member_epoch=0),
    )
    records += _member_removal_records(group.group_id, existing.member_id)
    records += [
        _member_metadata_record(group.group_id, member),
        _target_member_record(
            group.group_id, member_id, group.target_assignment.get(existing.member_id, {})
        ),
        _current_assignment_record(group.group_id, member_id, member.current),
    ]
    return member


def _member_metadata_record(group_id: str, member: ConsumerGroupMember) -> Record:
    return Record(ConsumerGroupMemberMetadataKey(group_id, member.member_id), member.metadata)


def _subscription_record(group_id: str, subscription: Mapping[str, SubscribedTopic]) -> Record:
    topics = tuple(subscription[name] for name in sorted(subscription))
    return Record(
        ConsumerGroupPartitionMetadataKey(group_id), ConsumerGroupPartitionMetadataValue(topics)
    )


def _regex_tombstone(group_id: str, regex: str) -> Record:
    return Record(ConsumerGroupRegularExpressionKey(group_id, regex), None)


def _group_epoch_record(group_id: str, epoch: int) -> Record:
    return Record(ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(epoch))


def _target_member_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    return Record(
        ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
        ConsumerGroupTargetAssignmentMemberValue(to_topic_partitions(assignment)),
    )


def _target_assignment_records(
    group_id: str,
    epoch: int,
    targets: Mapping[str, Assignment],
    targets_before: Mapping[str, Assignment],
) -> list[Record]:
    """Only the members whose target changed, then the new assignment epoch."""
    records = [
        _target_member_record(group_id, member_id, assignment)
        for member_id, assignment in sorted(targets.items())
        if assignment != targets_before.get(member_id, {})
    ]
    records.append(
        Record(
            ConsumerGroupTargetAssignmentMetadataKey(group_id),
            ConsumerGroupTargetAssignmentMetadataValue(epoch),
        )
    )
    return records


def _current_assignment_record(group_id: str, member_id: str, current: CurrentAssignment) -> Record:
    value: ConsumerGroupCurrentMemberAssignmentValue = current.to_record()
    return Record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), value)


def _member_removal_records(group_id: str, member_id: str) -> list[Record]:
    """Tombstones for a departing member, in the order its records are replayable."""
    return [
        Record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        Record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
        Record(ConsumerGroupMemberMetadataKey(group_id, member_id), None),
    ]


def session_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey("consumer-session-timeout", group_id, member_id)


def _rebalance_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey("consumer-rebalance-timeout", group_id, member_id)


def classic_join_key(group_id: str, member_id: str) -> TimerKey:
    """A classic member told to rejoin must send JoinGroup within its rebalance timeout."""
    return TimerKey("consumer-classic-join-timeout", group_id, member_id)


def classic_sync_key(group_id: str, member_id: str) -> TimerKey:
    """A classic member that joined must send SyncGroup within its rebalance timeout."""
    return TimerKey("consumer-classic-sync-timeout", group_id, member_id)
