"""Online migration between the classic and the consumer rebalance protocol (KIP-848,
"Supporting Online Consumer Group Upgrade"; Kafka's classicGroup*ToConsumerGroup,
convertToConsumerGroup and convertToClassicGroup).

- Upgrade: a live classic group of consumers whose first consumer-protocol member joins becomes
  a consumer group. Its members keep their last assignment, in the classic generation as their
  epoch; the newcomer bumps the group epoch, so each classic member's next Heartbeat answers
  REBALANCE_IN_PROGRESS and it rejoins.
- Mixed operation: a classic member of a consumer group is reconciled on its own, through the
  classic APIs. JoinGroup updates it like a ConsumerGroupHeartbeat would (subscription and owned
  partitions from its ConsumerProtocolSubscription) and answers its member epoch as the
  generation; SyncGroup hands it its current assignment as a ConsumerProtocolAssignment;
  Heartbeat asks it to rejoin whenever the consumer group has more for it (a newer epoch,
  partitions to revoke, or released partitions to collect).
- Downgrade: when members leave and only classic members remain, the group converts back to a
  classic group that starts a rebalance, with the target assignment as the members' assignment.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from broker.coordinator.assignors import Assignment
from broker.coordinator.classic_group import (
    CONSUMER_PROTOCOL_TYPE,
    FIRST_VERSION_REQUIRING_MEMBER_ID,
    ClassicGroup,
    ClassicGroupManager,
    JoinRequest,
    JoinResponse,
    LeaveResponse,
    LeftMember,
    MemberIdentity,
    Protocol,
    SyncRequest,
    SyncResponse,
    join_request_error,
    select_protocol,
)
from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupManager,
    ConsumerGroupMember,
    GroupError,
    classic_join_key,
    classic_sync_key,
    new_member_id,
    replace_static_member,
)
from broker.coordinator.reconciliation import NO_OWNER, CurrentAssignment, MemberState
from broker.coordinator.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMemberMetadataValue,
    GroupMetadataValue,
    MemberMetadata,
)
from broker.coordinator.runtime import Deferred, Record, Result, Timer
from broker.metadata.image import MetadataImage

UPGRADE_POLICIES = frozenset({"bidirectional", "upgrade"})
DOWNGRADE_POLICIES = frozenset({"bidirectional", "downgrade"})

# -- the embedded consumer protocol (ConsumerProtocolSubscription / ConsumerProtocolAssignment) --

# The newest versions Kafka 4.x knows; newer ones only append fields, so they are read as these.
LATEST_SUBSCRIPTION_VERSION = 3
LATEST_ASSIGNMENT_VERSION = 3

TopicPartitionList = tuple[tuple[str, tuple[int, ...]], ...]


class MalformedProtocol(ValueError):
    """Protocol metadata that is not the embedded consumer protocol."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: TopicPartitionList = ()
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _unpack(self, fmt: str) -> int:
        try:
            (value,) = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error as e:
            raise MalformedProtocol(str(e)) from e
        self.pos += struct.calcsize(fmt)
        return value

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def nullable_string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        if self.pos + size > len(self.data):
            raise MalformedProtocol("truncated string")
        try:
            value = self.data[self.pos : self.pos + size].decode()
        except UnicodeDecodeError as e:
            raise MalformedProtocol(str(e)) from e
        self.pos += size
        return value

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise MalformedProtocol("null string")
        return value

    def skip_nullable_bytes(self) -> None:
        size = self.int32()
        self.pos += max(size, 0)

    def array(self, read: Callable[[], object]) -> tuple:
        count = self.int32()
        if count > len(self.data) - self.pos:  # every element takes at least a byte
            raise MalformedProtocol("array longer than the data")
        return tuple(read() for _ in range(max(count, 0)))

    def topic_partitions(self) -> TopicPartitionList:
        return self.array(lambda: (self.string(), self.array(self.int32)))


def decode_subscription(metadata: bytes) -> Subscription:
    reader = _Reader(metadata)
    version = reader.int16()
    if version < 0:
        raise MalformedProtocol(f"version {version}")
    topics = reader.array(reader.string)
    reader.skip_nullable_bytes()  # user data: the client-side assignor's, of no use here
    owned = reader.topic_partitions() if version >= 1 else ()
    if version >= 2:
        reader.int32()  # generation id
    rack_id = reader.nullable_string() if version >= 3 else None
    return Subscription(version, topics, owned, rack_id)


def protocol_version(metadata: bytes) -> int:
    """The version a member writes its ConsumerProtocol metadata in: its assignment is written
    in the same one, as Kafka does."""
    return min(_Reader(metadata).int16(), LATEST_ASSIGNMENT_VERSION)


def decode_assignment(data: bytes) -> TopicPartitionList:
    """The partitions of a ConsumerProtocolAssignment; a member the leader has not assigned yet
    has none (empty bytes)."""
    if not data:
        return ()
    reader = _Reader(data)
    reader.int16()
    return reader.topic_partitions()


def encode_assignment(partitions: Mapping[str, Iterable[int]], version: int) -> bytes:
    out = [struct.pack(">hi", max(version, 0), len(partitions))]
    for topic, ps in sorted(partitions.items()):
        name = topic.encode()
        ps = sorted(ps)
        out.append(struct.pack(f">h{len(name)}si{len(ps)}i", len(name), name, len(ps), *ps))
    out.append(struct.pack(">i", -1))  # no user data
    return b"".join(out)


# -- the migration -----------------------------------------------------------------------------


class OnlineMigration:
    """Converts groups between the two protocols and serves classic members of consumer groups.
    The consumer group manager calls `upgrade` and `downgrade`; the coordinator routes the
    classic APIs of consumer groups here."""

    def __init__(
        self,
        classic: ClassicGroupManager,
        consumer: ConsumerGroupManager,
        config: GroupCoordinatorConfig,
        image: MetadataImage,
        timer: Timer,
    ) -> None:
        self.classic = classic
        self.consumer = consumer
        self.config = config
        self.image = image
        self.timer = timer

    # -- conversions ---------------------------------------------------------------------------

    def upgrade(
        self, group: ClassicGroup, records: list[Record], now_ms: int
    ) -> ConsumerGroup | None:
        """The consumer group a live classic group becomes, its records added to `records`;
        None when it cannot convert (policy, protocol type, size, or metadata that is not the
        consumer protocol): the heartbeat is then refused as Kafka does."""
        if (
            self.config.migration_policy not in UPGRADE_POLICIES
            or group.protocol_type != CONSUMER_PROTOCOL_TYPE
            or len(group.members) > self.config.consumer_max_size
        ):
            return None
        try:
            converted = self._from_classic_group(group)
        except ValueError:  # MalformedProtocol, or a partition assigned twice
            return None
        records += group.tombstones()
        records += converted.snapshot_records()
        for member in converted.members.values():
            session_ms = self.consumer.member_session_timeout_ms(group.group_id, member.metadata)
            self.consumer.arm_session_timeout(group.group_id, member.member_id, session_ms, now_ms)
        return converted

    def _from_classic_group(self, group: ClassicGroup) -> ConsumerGroup:
        """Kafka's ConsumerGroup.fromClassicGroup: every member Stable in the classic
        generation, owning (and targeted at) its last classic assignment. Raises ValueError
        when two members claim the same partition (no assignment to take over)."""
        if group.protocol_name is None:
            raise MalformedProtocol("the group never completed a generation")
        epoch = group.generation_id
        converted = ConsumerGroup(group.group_id, self.image)
        converted.group_epoch = converted.assignment_epoch = epoch
        for m in group.members.values():
            subscription = decode_subscription(m.metadata(group.protocol_name) or b"")
            assigned = self._by_topic_id(decode_assignment(m.assignment))
            metadata = ConsumerGroupMemberMetadataValue(
                instance_id=m.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                classic_member_metadata=_classic_member_metadata(m.session_timeout_ms, m.protocols),
            )
            current = CurrentAssignment(epoch, epoch, MemberState.STABLE, assigned)
            converted.put_member(ConsumerGroupMember(m.member_id, metadata, current))
            converted.target_assignment[m.member_id] = assigned
        converted.subscription_metadata = self.consumer.subscription_metadata(
            converted, converted.members.values()
        )
        return converted

    def downgrade(
        self, group: ConsumerGroup, leaving: set[str], now_ms: int
    ) -> list[Record] | None:
        """The records converting `group` to a classic group once `leaving` are gone, or None
        when it stays a consumer group: some remaining member uses the consumer protocol, none
        remains, the policy or group.max.size forbid it, or the members share no protocol."""
        remaining = [m for m in group.members.values() if m.member_id not in leaving]
        if (
            self.config.migration_policy not in DOWNGRADE_POLICIES
            or not remaining
            or not all(m.uses_classic_protocol for m in remaining)
            or len(remaining) > self.config.classic_max_size
        ):
            return None
        protocols = {m.member_id: _protocols(m) for m in remaining}
        if not set.intersection(*({p.name for p in ps} for ps in protocols.values())):
            return None
        protocol_name = select_protocol(list(protocols.values()))
        members = []
        for m in remaining:
            subscription = next(
                p.metadata for p in protocols[m.member_id] if p.name == protocol_name
            )
            target = group.target_assignment.get(m.member_id, {})
            members.append(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.metadata.client_id,
                    client_host=m.metadata.client_host,
                    rebalance_timeout=m.metadata.rebalance_timeout_ms,
                    session_timeout=m.metadata.classic_member_metadata.session_timeout_ms,
                    subscription=subscription,
                    assignment=encode_assignment(
                        self._by_topic_name(target), protocol_version(subscription)
                    ),
                )
            )
        value = GroupMetadataValue(
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            generation=group.group_epoch,
            protocol=protocol_name,
            leader=remaining[0].member_id,
            current_state_timestamp=now_ms,
            members=tuple(members),
        )
        for member_id in group.members:
            self.consumer.cancel_timers(group.group_id, member_id)
        return [
            *group.tombstones(),
            self.classic.downgraded(group.group_id, value, protocols, now_ms),
        ]

    # -- the classic APIs on a consumer group --------------------------------------------------

    def join_group(
        self, group: ConsumerGroup, request: JoinRequest, now_ms: int
    ) -> Result[Deferred[JoinResponse]]:
        response: Deferred[JoinResponse] = Deferred()
        records: list[Record] = []
        try:
            response.resolve(self._join(group, request, records, now_ms))
        except GroupError as e:
            records = []
            response.resolve(JoinResponse(e.code, request.member_id))
        return Result(records, response)

    def _join(
        self, group: ConsumerGroup, request: JoinRequest, records: list[Record], now_ms: int
    ) -> JoinResponse:
        error = join_request_error(request, self.config)
        if error is not ErrorCode.none:
            raise GroupError(error, "")
        member_id = request.member_id or new_member_id()
        self.consumer.check_capacity(group, member_id)
        if not self._supports_protocols(group, member_id, request):
            raise GroupError(ErrorCode.inconsistent_group_protocol, "")
        if (
            not request.member_id
            and request.group_instance_id is None
            and request.api_version >= FIRST_VERSION_REQUIRING_MEMBER_ID
        ):
            return JoinResponse(ErrorCode.member_id_required, member_id)
        try:
            subscription = decode_subscription(request.protocols[0].metadata)
        except MalformedProtocol as e:
            raise GroupError(ErrorCode.inconsistent_group_protocol, str(e)) from e

        member, replaced = self._member_for_join(group, member_id, request, records)
        updated = replace(member, metadata=_joined_metadata(member.metadata, request, subscription))
        owned = self._by_topic_id(subscription.owned_partitions)
        current = self.consumer.reconcile_member(
            group, member, updated, replaced, owned, records, now_ms
        )
        group_id = group.group_id
        self.consumer.arm_session_timeout(group_id, member_id, request.session_timeout_ms, now_ms)
        self.timer.cancel(classic_join_key(group_id, member_id))
        self._arm_fence(classic_sync_key, group_id, member_id, request.rebalance_timeout_ms, now_ms)
        # No leader: the assignment is the coordinator's, every member just syncs for its own.
        return JoinResponse(
            member_id=member_id,
            generation_id=current.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=request.protocols[0].name,
        )

    def _supports_protocols(
        self, group: ConsumerGroup, member_id: str, request: JoinRequest
    ) -> bool:
        """Kafka's supportsClassicProtocols: the consumer protocol type, and a protocol every
        other classic member supports too (so that a downgrade can select one)."""
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
            return False
        others = [
            {p.name for p in _protocols(m)}
            for m in group.members.values()
            if m.uses_classic_protocol and m.member_id != member_id
        ]
        return any(all(p.name in names for names in others) for p in request.protocols)

    def _member_for_join(
        self, group: ConsumerGroup, member_id: str, request: JoinRequest, records: list[Record]
    ) -> tuple[ConsumerGroupMember, str | None]:
        """The joining member (new, or known), and the id of the static member it replaces."""
        instance_id = request.group_instance_id
        existing = group.static_member(instance_id) if instance_id is not None else None
        if existing is None or existing.member_id == member_id:
            member = group.members.get(member_id)
            if member is None:
                return ConsumerGroupMember(member_id), None
            if not member.uses_classic_protocol:
                raise _not_classic(member_id)
            return member, None
        if request.member_id:
            raise GroupError(ErrorCode.fenced_instance_id, "")
        # A static member restarted: it takes over its instance's place without a rebalance.
        return replace_static_member(group, existing, member_id, records), existing.member_id

    def sync_group(
        self, group: ConsumerGroup, request: SyncRequest, now_ms: int
    ) -> Result[Deferred[SyncResponse]]:
        response: Deferred[SyncResponse] = Deferred()
        try:
            member = _classic_member(group, request.member_id, request.group_instance_id)
            _check_generation(member, request.generation_id)
            joined_with = _protocols(member)[0].name
            if request.protocol_type not in (None, CONSUMER_PROTOCOL_TYPE) or (
                request.protocol_name not in (None, joined_with)
            ):
                raise GroupError(ErrorCode.inconsistent_group_protocol, "")
            # A member revoking partitions has rejoined already: it gets what it keeps, revokes
            # the rest and rejoins for the new epoch (cooperative clients rejoin on their own).
            if group.group_epoch > member.member_epoch and (
                member.current.state != MemberState.UNREVOKED_PARTITIONS
            ):
                raise self._rejoin(group.group_id, member, now_ms)
        except GroupError as e:
            response.resolve(SyncResponse(e.code))
            return Result([], response)
        self.timer.cancel(classic_sync_key(group.group_id, member.member_id))
        self._arm_session(group.group_id, member, now_ms)
        response.resolve(
            SyncResponse(
                protocol_type=request.protocol_type,
                protocol_name=request.protocol_name,
                assignment=encode_assignment(
                    self._by_topic_name(member.current.assigned_partitions),
                    protocol_version(_protocols(member)[0].metadata),
                ),
            )
        )
        return Result([], response)

    def heartbeat(
        self,
        group: ConsumerGroup,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> Result[ErrorCode]:
        try:
            member = _classic_member(group, member_id, group_instance_id)
            _check_generation(member, generation_id)
            self._arm_session(group.group_id, member, now_ms)
            if self._must_rejoin(group, member):
                raise self._rejoin(group.group_id, member, now_ms)
        except GroupError as e:
            return Result([], e.code)
        return Result([], ErrorCode.none)

    def _must_rejoin(self, group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Whether the consumer group has news for a classic member, which only JoinGroup and
        SyncGroup deliver: a newer epoch, partitions to revoke, or partitions it waited for
        that are released now."""
        current = member.current
        if group.group_epoch > current.member_epoch:
            return True
        if current.state == MemberState.UNREVOKED_PARTITIONS:
            return True
        if current.state == MemberState.UNRELEASED_PARTITIONS:
            target = group.target_assignment.get(member.member_id, {})
            return not any(
                group.partition_epoch(topic_id, p) != NO_OWNER
                for topic_id, ps in target.items()
                for p in ps - current.assigned_partitions.get(topic_id, frozenset())
            )
        return False

    def _rejoin(self, group_id: str, member: ConsumerGroupMember, now_ms: int) -> GroupError:
        """REBALANCE_IN_PROGRESS: the member must rejoin within its rebalance timeout."""
        if not self.timer.is_scheduled(classic_join_key(group_id, member.member_id)):
            self._arm_fence(
                classic_join_key,
                group_id,
                member.member_id,
                member.metadata.rebalance_timeout_ms,
                now_ms,
            )
        return GroupError(ErrorCode.rebalance_in_progress, "")

    def leave_group(
        self, group: ConsumerGroup, identities: Iterable[MemberIdentity], now_ms: int
    ) -> Result[LeaveResponse]:
        leaving: set[str] = set()
        left = []
        for identity in identities:
            try:
                leaving.add(_leaving_member(group, identity).member_id)
                error = ErrorCode.none
            except GroupError as e:
                error = e.code
            left.append(LeftMember(identity.member_id, identity.group_instance_id, error))
        records = self.consumer.fence_members(group, leaving, now_ms) if leaving else []
        return Result(records, LeaveResponse(members=tuple(left)))

    # -- helpers -------------------------------------------------------------------------------

    def _arm_session(self, group_id: str, member: ConsumerGroupMember, now_ms: int) -> None:
        session_ms = self.consumer.member_session_timeout_ms(group_id, member.metadata)
        self.consumer.arm_session_timeout(group_id, member.member_id, session_ms, now_ms)

    def _arm_fence(
        self,
        key: Callable[[str, str], str],
        group_id: str,
        member_id: str,
        timeout_ms: int,
        now_ms: int,
    ) -> None:
        self.timer.schedule(
            key(group_id, member_id),
            now_ms + timeout_ms,
            lambda t: self.consumer.fence_if_member(group_id, member_id, None, t),
        )

    def _by_topic_id(self, partitions: TopicPartitionList) -> Assignment:
        """Topic names to ids; partitions of topics that no longer exist are dropped."""
        assignment: dict[uuid.UUID, frozenset[int]] = {}
        for name, ps in partitions:
            topic = self.image.topic(name)
            if topic is not None and ps:
                assignment[topic.topic_id] = assignment.get(topic.topic_id, frozenset()) | set(ps)
        return assignment

    def _by_topic_name(self, assignment: Assignment) -> dict[str, frozenset[int]]:
        names = {}
        for topic_id, ps in assignment.items():
            topic = self.image.topic_by_id(topic_id)
            if topic is not None:
                names[topic.name] = ps
        return names


def _protocols(member: ConsumerGroupMember) -> tuple[Protocol, ...]:
    classic = member.metadata.classic_member_metadata
    assert classic is not None
    return tuple(Protocol(p.name, p.metadata) for p in classic.supported_protocols)


def _classic_member_metadata(
    session_timeout_ms: int, protocols: Iterable[Protocol]
) -> ClassicMemberMetadata:
    return ClassicMemberMetadata(
        session_timeout_ms, tuple(ClassicProtocol(p.name, p.metadata) for p in protocols)
    )


def _joined_metadata(
    metadata: ConsumerGroupMemberMetadataValue, request: JoinRequest, subscription: Subscription
) -> ConsumerGroupMemberMetadataValue:
    """A classic member's metadata after its JoinGroup: the subscription comes from the first
    (preferred) protocol's ConsumerProtocolSubscription; a classic client resolves regexes
    itself, so it always subscribes by name."""
    return replace(
        metadata,
        instance_id=request.group_instance_id or metadata.instance_id,
        rack_id=subscription.rack_id or metadata.rack_id,
        client_id=request.client_id,
        client_host=request.client_host,
        subscribed_topic_names=tuple(sorted(set(subscription.topics))),
        subscribed_topic_regex=None,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        classic_member_metadata=_classic_member_metadata(
            request.session_timeout_ms, request.protocols
        ),
    )


def _not_classic(member_id: str) -> GroupError:
    return GroupError(
        ErrorCode.unknown_member_id, f"Member {member_id} does not use the classic protocol."
    )


def _classic_member(
    group: ConsumerGroup, member_id: str, instance_id: str | None
) -> ConsumerGroupMember:
    if instance_id is not None:
        member = group.static_member(instance_id)
        if member is not None and member.member_id != member_id:
            raise GroupError(ErrorCode.fenced_instance_id, "")
    else:
        member = group.members.get(member_id)
    if member is None:
        raise GroupError(ErrorCode.unknown_member_id, "")
    if not member.uses_classic_protocol:
        raise _not_classic(member_id)
    return member


def _leaving_member(group: ConsumerGroup, identity: MemberIdentity) -> ConsumerGroupMember:
    """The member a LeaveGroup names. An administrator removes a static member by its instance
    id alone, whatever its protocol."""
    if identity.member_id == "" and identity.group_instance_id is not None:
        member = group.static_member(identity.group_instance_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id, "")
        return member
    return _classic_member(group, identity.member_id, identity.group_instance_id)


def _check_generation(member: ConsumerGroupMember, generation_id: int) -> None:
    """A classic member's generation is its member epoch."""
    if generation_id != member.member_epoch:
        raise GroupError(ErrorCode.illegal_generation, "")
