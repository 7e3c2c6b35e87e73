"""Classic groups: Kafka's JoinGroup / SyncGroup / Heartbeat / LeaveGroup rebalance protocol.

What is persisted, and when (Kafka's model, which the runtime contract follows here):

- A GroupMetadata record marks a resting point of a group: written when the leader's assignment
  arrives (the group becomes Stable), when a rebalance ends with no member left (Empty), when a
  known static member rejoins a Stable group under a new member id, and when a group is created.
  Replaying a record moves the group to that resting point — Stable with the record's members
  and assignments, or Empty — and answers the SyncGroup requests parked for it. Start-up replays
  the same records.
- A rebalance in progress (which members rejoined, the generation being formed, the parked
  JoinGroup and SyncGroup responses) is soft state, as in Kafka: operations drive it directly,
  like Deferreds and timers, and a restart forgets it; the members then rejoin.
"""

from __future__ import annotations

import struct
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from kio.schema.errors import ErrorCode

from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.placement import everywhere
from broker.coordinator.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from broker.coordinator.runtime import Deferred, Record, Result, Timer, TimerKey

CONSUMER_PROTOCOL_TYPE = "consumer"
# Kafka's classicGroupNewMemberJoinTimeoutMs: a new member cannot heartbeat while its first
# JoinGroup is parked, so its session is this long instead.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
# JoinGroup v4+ (KIP-394): a member without an id gets one with MEMBER_ID_REQUIRED and rejoins.
FIRST_VERSION_REQUIRING_MEMBER_ID = 4
# JoinGroup v9+ (KIP-814): a static leader rejoining a Stable group skips the assignment.
FIRST_VERSION_SKIPPING_ASSIGNMENT = 9


class ClassicGroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = ClassicGroupState.EMPTY
PREPARING_REBALANCE = ClassicGroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


# -- requests and responses, in the protocol's terms but free of wire versions ----------------


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    api_version: int


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """A member as the leader sees it in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error: ErrorCode = ErrorCode.none
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error: ErrorCode = ErrorCode.none
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveResponse:
    error: ErrorCode = ErrorCode.none
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


# -- the group -------------------------------------------------------------------------------


class ClassicGroupMember:
    """A member and, while a rebalance is in progress, its parked JoinGroup (`join`) and
    SyncGroup (`sync`) responses."""

    __slots__ = (
        "assignment",
        "client_host",
        "client_id",
        "group_instance_id",
        "is_new",
        "join",
        "member_id",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "sync",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocols: tuple[Protocol, ...],
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocols = protocols
        self.assignment = assignment
        self.join: Deferred[JoinResponse] | None = None
        self.sync: Deferred[SyncResponse] | None = None
        # Joined during the current rebalance: its session can expire while its JoinGroup is
        # parked (members that rejoined before are covered by their parked request).
        self.is_new = False

    @classmethod
    def from_record(cls, m: MemberMetadata, protocol: str | None) -> ClassicGroupMember:
        """A member rebuilt from a record supports only the protocol the group selected, as after
        Kafka's own load; its next JoinGroup brings the full list."""
        return cls(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            # Records older than version 1 have no rebalance timeout: the session timeout it is.
            m.rebalance_timeout if m.rebalance_timeout != -1 else m.session_timeout,
            m.session_timeout,
            (Protocol(protocol, m.subscription),) if protocol is not None else (),
            m.assignment,
        )

    def metadata(self, protocol_name: str | None) -> bytes | None:
        return next((p.metadata for p in self.protocols if p.name == protocol_name), None)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        return next(p.name for p in self.protocols if p.name in candidates)

    def has_satisfied_heartbeat(self) -> bool:
        # A member parked in JoinGroup or SyncGroup is alive; its answer re-arms the timer.
        return not self.is_new and (self.join is not None or self.sync is not None)

    def complete_join(self, response: JoinResponse) -> bool:
        if self.join is None:
            return False
        join, self.join = self.join, None
        join.resolve(response)
        return True

    def complete_sync(self, response: SyncResponse) -> bool:
        if self.sync is None:
            return False
        sync, self.sync = self.sync, None
        sync.resolve(response)
        return True

    def to_record(self, protocol_name: str | None, assignment: bytes) -> MemberMetadata:
        return MemberMetadata(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout=self.rebalance_timeout_ms,
            session_timeout=self.session_timeout_ms,
            subscription=self.metadata(protocol_name) or b"",
            assignment=assignment,
        )


def select_protocol(protocol_lists: Sequence[tuple[Protocol, ...]]) -> str:
    """Kafka's vote: among the protocols every member supports, each member votes for its most
    preferred one; the most votes win (ties go to the protocol voted for first)."""
    candidates = set.intersection(*({p.name for p in ps} for ps in protocol_lists))
    votes = Counter(next(p.name for p in ps if p.name in candidates) for ps in protocol_lists)
    return votes.most_common(1)[0][0]


def decode_subscribed_topics(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription. Every version starts with version 0's
    layout (int16 version, then the topic array), so only that prefix is read, as Kafka does."""
    (count,) = struct.unpack_from(">i", metadata, 2)
    pos, topics = 6, []
    for _ in range(count):
        (size,) = struct.unpack_from(">h", metadata, pos)
        if size < 0 or pos + 2 + size > len(metadata):
            raise ValueError("truncated ConsumerProtocolSubscription")
        topics.append(metadata[pos + 2 : pos + 2 + size].decode())
        pos += 2 + size
    return topics


class ClassicGroup:
    group_type = "classic"

    def __init__(self, group_id: str, now_ms: int = -1) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.previous_state = DEAD
        self.state_timestamp = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_members: set[str] = set()  # told MEMBER_ID_REQUIRED, not yet rejoined
        self.pending_sync_members: set[str] = set()
        # During the initial rebalance, a new member extends the delay (Kafka's
        # InitialDelayedJoin).
        self.new_member_added = False
        # Computed at each new generation, as Kafka does: offset expiry and OffsetDelete ask.
        self._subscribed_topics: set[str] | None = None
        # The last record applied: all of this group that is durable (a rebalance in progress
        # is not, as in Kafka), and what compaction restates.
        self.persisted: GroupMetadataValue | None = None

    # -- the interface every group type offers the coordinator -----------------------------

    @property
    def state_name(self) -> str:
        return self.state.value

    def is_empty(self) -> bool:
        return self.state is EMPTY

    def subscribed_topics(self) -> set[str] | None:
        return self._subscribed_topics

    def validate_offset_commit(
        self, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode:
        if generation_id < 0 and self.state is EMPTY:
            return ErrorCode.none  # the admin client, or a consumer without group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self.validate_member(member_id, group_instance_id)
            if error is not ErrorCode.none:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif self.state is not EMPTY:
            return ErrorCode.unknown_member_id
        if self.state is COMPLETING_REBALANCE:
            # The member knows the new generation but not yet its assignment.
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def tombstones(self) -> list[Record]:
        return [Record(GroupMetadataKey(self.group_id), None)]

    def answer_parked(self, error: ErrorCode) -> None:
        """Answer every parked JoinGroup and SyncGroup with `error`: the coordinator let the
        group go, and NOT_COORDINATOR sends its members to the new one."""
        for member in self.members.values():
            member.complete_join(JoinResponse(error, member.member_id))
            member.complete_sync(SyncResponse(error))

    # -- membership ----------------------------------------------------------------------

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(
        self, member: ClassicGroupMember, protocol_type: str, join: Deferred[JoinResponse]
    ) -> None:
        if not self.members:
            self.protocol_type = protocol_type
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.join = join
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> ClassicGroupMember:
        """The member id of a rejoining static member changes; whoever still waits under the old
        id is fenced."""
        old = self.members.pop(old_member_id)
        old.complete_join(JoinResponse(ErrorCode.fenced_instance_id, member_id=old_member_id))
        old.complete_sync(SyncResponse(ErrorCode.fenced_instance_id))
        new = ClassicGroupMember(
            new_member_id,
            group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocols,
            old.assignment,
        )
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return new

    def update_member(
        self,
        member: ClassicGroupMember,
        request: JoinRequest,
        join: Deferred[JoinResponse],
    ) -> None:
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.join = join

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if known != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is EMPTY:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and any(
            all(name in {p.name for p in m.protocols} for m in self.members.values())
            for name in names
        )

    # -- rebalance -----------------------------------------------------------------------

    def transition_to(self, state: ClassicGroupState, now_ms: int) -> None:
        self.previous_state, self.state = self.state, state
        self.state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (STABLE, COMPLETING_REBALANCE, EMPTY)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Whether the group has a leader that rejoined, electing one if the old leader did not."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is None:
            return False
        if leader.join is not None:
            return True
        rejoined = next((m for m in self.members.values() if m.join is not None), None)
        if rejoined is None:
            return False
        self.leader_id = rejoined.member_id
        return True

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        self.protocol_name = select_protocol([m.protocols for m in self.members.values()])
        self._subscribed_topics = self._compute_subscribed_topics()
        self.transition_to(COMPLETING_REBALANCE, now_ms)
        self.pending_sync_members.clear()

    def joined_members(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name) or b"")
            for m in self.members.values()
        )

    def join_response(self, member_id: str) -> JoinResponse:
        """The current generation as `member_id` learns it; the leader also gets the members."""
        return JoinResponse(
            member_id=member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader_id or "",
            members=self.joined_members() if self.is_leader(member_id) else (),
        )

    def sync_response(self, member: ClassicGroupMember) -> SyncResponse:
        return SyncResponse(
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            assignment=member.assignment,
        )

    # -- records -------------------------------------------------------------------------

    def stable_record(self, assignments: Mapping[str, bytes], now_ms: int) -> Record:
        """The record of this generation with the leader's assignment."""
        return self.metadata_record(
            self.generation_id,
            self.leader_id,
            [
                m.to_record(self.protocol_name, assignments.get(m.member_id, b""))
                for m in self.members.values()
            ],
            now_ms,
        )

    def snapshot_records(self) -> list[Record]:
        """The records that rebuild this group's durable state from nothing (compaction)."""
        if self.persisted is None:
            return []
        return [Record(GroupMetadataKey(self.group_id), self.persisted)]

    def metadata_record(
        self,
        generation_id: int,
        leader_id: str | None,
        members: Iterable[MemberMetadata],
        now_ms: int,
    ) -> Record:
        members = tuple(members)
        return Record(
            GroupMetadataKey(self.group_id),
            GroupMetadataValue(
                protocol_type=self.protocol_type or "",
                generation=generation_id,
                protocol=self.protocol_name if members else None,
                leader=leader_id,
                current_state_timestamp=now_ms,
                members=members,
            ),
        )

    def apply(self, value: GroupMetadataValue) -> None:
        """Replay: move to the resting point the record describes, and hand the assignment to
        the members parked in SyncGroup (the leader's SyncGroup wrote this record)."""
        members: dict[str, ClassicGroupMember] = {}
        for m in value.members:
            member = self.members.get(m.member_id)
            # A live member keeps its full protocol list; one the record does not describe as it
            # is (a member first seen here, or an older record at start-up) is rebuilt from it.
            if member is None or member.metadata(value.protocol) != m.subscription:
                member = ClassicGroupMember.from_record(m, value.protocol)
            member.assignment = m.assignment
            members[m.member_id] = member
        self.members = members
        self.static_members = {
            m.group_instance_id: m.member_id
            for m in members.values()
            if m.group_instance_id is not None
        }
        self.protocol_type = value.protocol_type or None
        self.protocol_name = value.protocol
        self.generation_id = value.generation
        self.leader_id = value.leader
        self.transition_to(STABLE if members else EMPTY, value.current_state_timestamp)
        self._subscribed_topics = self._compute_subscribed_topics()
        self.persisted = value
        for member in members.values():
            member.complete_sync(self.sync_response(member))

    def _compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(decode_subscribed_topics(m.metadata(self.protocol_name) or b""))
        except (struct.error, ValueError, UnicodeDecodeError):
            return None  # not a ConsumerProtocol subscription: the topics are unknown
        return topics


# -- the manager: one method per request, the timer tasks, replay ---------------------------


def heartbeat_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey("heartbeat", group_id, member_id)


def join_key(group_id: str) -> TimerKey:
    return TimerKey("join", group_id)


def sync_key(group_id: str) -> TimerKey:
    return TimerKey("sync", group_id)


class ClassicGroupManager:
    """Runs the classic protocol over the coordinator's groups (shared with the other group
    types, keyed by group id). Every request method is an operation: `(request, now_ms)` in,
    `Result` out; JoinGroup and SyncGroup answer with a Deferred resolved when the rebalance
    gets there."""

    def __init__(self, groups: dict[str, object], timer: Timer, config: GroupCoordinatorConfig):
        self._groups = groups
        self._timer = timer
        self._config = config
        # A group created by a JoinGroup joins `groups` when its creation record is replayed.
        self._created: dict[str, ClassicGroup] = {}

    def group(self, group_id: str) -> ClassicGroup | None:
        group = self._groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    # -- JoinGroup ---------------------------------------------------------------------------

    def join_group(self, request: JoinRequest, now_ms: int) -> Result[Deferred[JoinResponse]]:
        response: Deferred[JoinResponse] = Deferred()
        records: list[Record] = []
        error = join_request_error(request, self._config)
        if error is not ErrorCode.none:
            response.resolve(JoinResponse(error, request.member_id))
        else:
            records = self._join(request, response, now_ms)
        return Result(records, response)

    def _join(self, request: JoinRequest, response: Deferred, now_ms: int) -> list[Record]:
        records: list[Record] = []
        group = self._groups.get(request.group_id)
        if group is not None and not isinstance(group, ClassicGroup):
            if not group.is_empty():
                # A consumer group's classic members are the consumer group's to serve.
                response.resolve(JoinResponse(ErrorCode.inconsistent_group_protocol))
                return []
            # An empty consumer group gives way to the classic group, as in Kafka.
            records += group.tombstones()
            group = None
        unknown_member = request.member_id == ""
        if group is None:
            if not unknown_member:
                response.resolve(JoinResponse(ErrorCode.unknown_member_id, request.member_id))
                return []
            # A group comes into being with its first JoinGroup; Kafka persists that at once.
            group = self._created[request.group_id] = ClassicGroup(request.group_id, now_ms)
            records.append(group.metadata_record(0, None, (), now_ms))
        if not self._accepts_joining_member(group, request.member_id):
            group.remove(request.member_id)
            response.resolve(JoinResponse(ErrorCode.group_max_size_reached))
        elif unknown_member:
            records += self._join_new_member(group, request, response, now_ms)
        else:
            records += self._join_known_member(group, request, response, now_ms)
        return records

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self._config.classic_max_size
        member = group.members.get(member_id)
        if group.state is PREPARING_REBALANCE:
            # Counting the members that rejoined (not the group size, which may be above a
            # lowered maximum) lets the last ones to rejoin be the ones turned away.
            awaiting = sum(m.join is not None for m in group.members.values())
            return (member is not None and member.join is not None) or awaiting < max_size
        if group.state in (COMPLETING_REBALANCE, STABLE):
            return member is not None or len(group.members) < max_size
        return True

    def _join_new_member(
        self, group: ClassicGroup, request: JoinRequest, response: Deferred, now_ms: int
    ) -> list[Record]:
        if not group.supports_protocols(request.protocol_type, _names(request.protocols)):
            response.resolve(JoinResponse(ErrorCode.inconsistent_group_protocol))
            return []
        instance_id = request.group_instance_id
        member_id = (
            f"{instance_id if instance_id is not None else request.client_id}-{uuid.uuid4()}"
        )
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None:
                return self._rejoin_static_member(
                    group, request, known, member_id, response, now_ms
                )
        elif request.api_version >= FIRST_VERSION_REQUIRING_MEMBER_ID:
            group.pending_members.add(member_id)
            self._schedule_heartbeat(group.group_id, member_id, now_ms + request.session_timeout_ms)
            response.resolve(JoinResponse(ErrorCode.member_id_required, member_id))
            return []
        return self._add_member_and_rebalance(group, request, member_id, response, now_ms)

    def _join_known_member(
        self, group: ClassicGroup, request: JoinRequest, response: Deferred, now_ms: int
    ) -> list[Record]:
        member_id = request.member_id
        if not group.supports_protocols(request.protocol_type, _names(request.protocols)):
            response.resolve(JoinResponse(ErrorCode.inconsistent_group_protocol, member_id))
            return []
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(group, request, member_id, response, now_ms)
        error = group.validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            response.resolve(JoinResponse(error, member_id))
            return []
        member = group.members[member_id]
        unchanged = member.protocols == request.protocols
        if (
            group.state is PREPARING_REBALANCE
            or (
                # The leader rejoining a Stable group asks for a rebalance (its consumer saw a
                # change the members' metadata does not show, such as new partitions).
                group.state is STABLE and group.is_leader(member_id)
            )
            or not unchanged
        ):
            group.update_member(member, request, response)
            return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        # The same metadata again (a lost JoinGroup response, say): the current generation.
        response.resolve(group.join_response(member_id))
        return []

    def _add_member_and_rebalance(
        self,
        group: ClassicGroup,
        request: JoinRequest,
        member_id: str,
        response: Deferred,
        now_ms: int,
    ) -> list[Record]:
        member = ClassicGroupMember(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            request.protocols,
        )
        member.is_new = True
        if group.state is PREPARING_REBALANCE and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member, request.protocol_type, response)
        self._schedule_heartbeat(group.group_id, member_id, now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS)
        return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _rejoin_static_member(
        self,
        group: ClassicGroup,
        request: JoinRequest,
        old_member_id: str,
        new_member_id: str,
        response: Deferred,
        now_ms: int,
    ) -> list[Record]:
        """A known static member joins without its member id (it restarted): it takes over its
        old identity under a new member id."""
        old = group.members[old_member_id]
        self._timer.cancel(heartbeat_key(group.group_id, old_member_id))
        self._schedule_heartbeat(group.group_id, new_member_id, now_ms + old.session_timeout_ms)
        if group.state is STABLE:
            others = [m.protocols for m in group.members.values() if m is not old]
            if select_protocol([*others, request.protocols]) == group.protocol_name:
                return self._replace_stable_static_member(
                    group, request, old, new_member_id, response, now_ms
                )
        member = group.replace_static_member(
            request.group_instance_id, old_member_id, new_member_id
        )
        group.update_member(member, request, response)
        if group.state is COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id already: start over.
            return self._prepare_rebalance(group, now_ms)
        return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _replace_stable_static_member(
        self,
        group: ClassicGroup,
        request: JoinRequest,
        old: ClassicGroupMember,
        new_member_id: str,
        response: Deferred,
        now_ms: int,
    ) -> list[Record]:
        """No rebalance: the record names the new member id and the answer is the current
        generation. Replay swaps the member in."""
        replacement = ClassicGroupMember(
            new_member_id,
            request.group_instance_id,
            old.client_id,
            old.client_host,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            request.protocols,
        )
        members = [replacement if m is old else m for m in group.members.values()]
        leader_id = new_member_id if group.is_leader(old.member_id) else group.leader_id
        record = group.metadata_record(
            group.generation_id,
            leader_id,
            [
                m.to_record(
                    group.protocol_name, old.assignment if m is replacement else m.assignment
                )
                for m in members
            ],
            now_ms,
        )
        reply = JoinResponse(
            member_id=new_member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            # Before v9 a static leader cannot be told to skip the assignment: it hears the old
            # leader id, so it follows, and the group keeps its assignment.
            leader=group.leader_id or "",
        )
        if request.api_version >= FIRST_VERSION_SKIPPING_ASSIGNMENT:
            is_leader = leader_id == new_member_id
            reply = replace(
                reply,
                leader=leader_id or "",
                skip_assignment=is_leader,
                members=tuple(
                    JoinedMember(m.member_id, m.group_instance_id, m.subscription)
                    for m in record.value.members
                )
                if is_leader
                else (),
            )
        response.resolve(reply)
        return [record]

    # -- the rebalance -------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(
        self, group: ClassicGroup, now_ms: int
    ) -> list[Record]:
        if group.can_rebalance():
            return self._prepare_rebalance(group, now_ms)
        return self._maybe_complete_join_phase(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> list[Record]:
        if group.state is COMPLETING_REBALANCE:
            # Members parked in SyncGroup rejoin.
            for member in group.members.values():
                member.assignment = b""
                if member.complete_sync(SyncResponse(ErrorCode.rebalance_in_progress)):
                    self._schedule_heartbeat(
                        group.group_id, member.member_id, now_ms + member.session_timeout_ms
                    )
        group.pending_sync_members.clear()
        self._timer.cancel(sync_key(group.group_id))
        initial = group.state is EMPTY
        if initial:
            delay_ms = self._config.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._schedule_initial_join(group.group_id, now_ms, delay_ms, remaining_ms)
        group.transition_to(PREPARING_REBALANCE, now_ms)
        if initial:
            return []
        if group.has_all_members_joined():
            return self._complete_join(group, now_ms)
        self._schedule_join(group, now_ms)
        return []

    def _schedule_join(self, group: ClassicGroup, now_ms: int) -> None:
        """The join phase ends at the rebalance timeout at the latest."""
        group_id = group.group_id
        self._timer.schedule(
            join_key(group_id),
            now_ms + group.rebalance_timeout_ms(),
            lambda t: self._complete_join_of(group_id, t),
        )

    def _schedule_initial_join(
        self, group_id: str, now_ms: int, delay_ms: int, remaining_ms: int
    ) -> None:
        self._timer.schedule(
            join_key(group_id),
            now_ms + delay_ms,
            lambda t: self._complete_initial_join(group_id, delay_ms, remaining_ms, t),
        )

    def _complete_initial_join(
        self, group_id: str, delay_ms: int, remaining_ms: int, now_ms: int
    ) -> list[Record]:
        """group.initial.rebalance.delay.ms: a new group waits for more members, again after
        each one that arrives, up to its rebalance timeout."""
        group = self.group(group_id)
        if group is None:
            return []
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            self._schedule_initial_join(
                group_id,
                now_ms,
                min(self._config.initial_rebalance_delay_ms, remaining_ms),
                max(remaining_ms - delay_ms, 0),
            )
            return []
        return self._complete_join(group, now_ms)

    def _complete_join_of(self, group_id: str, now_ms: int) -> list[Record]:
        group = self.group(group_id)
        return self._complete_join(group, now_ms) if group is not None else []

    def _maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> list[Record]:
        # The initial rebalance ends only when its delay runs out.
        if (
            group.state is PREPARING_REBALANCE
            and group.previous_state is not EMPTY
            and group.has_all_members_joined()
        ):
            return self._complete_join(group, now_ms)
        return []

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> list[Record]:
        """End the join phase: dynamic members that did not rejoin are out; the rest form the
        next generation, or the group is empty."""
        self._timer.cancel(join_key(group.group_id))
        for member in [m for m in group.members.values() if m.join is None]:
            if member.group_instance_id is None:
                group.remove(member.member_id)
                self._timer.cancel(heartbeat_key(group.group_id, member.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait for their sessions to expire.
            self._schedule_join(group, now_ms)
            return []
        if not group.members:
            # Replay makes the group Empty at the next generation.
            return [group.metadata_record(group.generation_id + 1, None, (), now_ms)]
        group.init_next_generation(now_ms)
        for member in group.members.values():
            member.complete_join(group.join_response(member.member_id))
            self._schedule_heartbeat(
                group.group_id, member.member_id, now_ms + member.session_timeout_ms
            )
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group_id, generation_id = group.group_id, group.generation_id
        self._timer.schedule(
            sync_key(group_id),
            now_ms + group.rebalance_timeout_ms(),
            lambda t: self._expire_pending_sync(group_id, generation_id, t),
        )
        return []

    def _expire_pending_sync(self, group_id: str, generation_id: int, now_ms: int) -> list[Record]:
        """Members that did not send SyncGroup within the rebalance timeout are out."""
        group = self.group(group_id)
        if (
            group is None
            or group.generation_id != generation_id
            or group.state not in (COMPLETING_REBALANCE, STABLE)
            or not group.pending_sync_members
        ):
            return []
        for member_id in list(group.pending_sync_members):
            group.remove(member_id)
            self._timer.cancel(heartbeat_key(group_id, member_id))
        return self._prepare_rebalance(group, now_ms)

    # -- sessions ------------------------------------------------------------------------

    def _schedule_heartbeat(self, group_id: str, member_id: str, deadline_ms: int) -> None:
        self._timer.schedule(
            heartbeat_key(group_id, member_id),
            deadline_ms,
            lambda t: self._expire_heartbeat(group_id, member_id, t),
        )

    def _expire_heartbeat(self, group_id: str, member_id: str, now_ms: int) -> list[Record]:
        group = self.group(group_id)
        if group is None:
            return []
        if member_id in group.pending_members:
            group.remove(member_id)
        else:
            member = group.members.get(member_id)
            if member is None or member.has_satisfied_heartbeat():
                return []
            self._evict(group, member)
            if group.state in (STABLE, COMPLETING_REBALANCE):
                return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        if group.state is PREPARING_REBALANCE and group.has_all_members_joined():
            return self._complete_join(group, now_ms)
        return []

    def _evict(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        """Remove a member; a JoinGroup it has parked learns it is unknown (and rejoins)."""
        self._timer.cancel(heartbeat_key(group.group_id, member.member_id))
        member.complete_join(JoinResponse(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    # -- SyncGroup ---------------------------------------------------------------------------

    def sync_group(self, request: SyncRequest, now_ms: int) -> Result[Deferred[SyncResponse]]:
        response: Deferred[SyncResponse] = Deferred()
        records = self._sync(request, response, now_ms)
        return Result(records, response)

    def _sync(self, request: SyncRequest, response: Deferred, now_ms: int) -> list[Record]:
        if not request.group_id:
            response.resolve(SyncResponse(ErrorCode.invalid_group_id))
            return []
        group = self.group(request.group_id)
        if group is None or group.is_empty():
            response.resolve(SyncResponse(ErrorCode.unknown_member_id))
            return []
        error = _sync_error(group, request)
        if error is not ErrorCode.none:
            response.resolve(SyncResponse(error))
        elif group.state is PREPARING_REBALANCE:
            response.resolve(SyncResponse(ErrorCode.rebalance_in_progress))
        elif group.state is COMPLETING_REBALANCE:
            member = group.members[request.member_id]
            member.sync = response
            self._received_sync(group, request.member_id)
            if group.is_leader(request.member_id):
                # Every parked SyncGroup is answered when the record is replayed.
                for m in group.members.values():
                    if m.sync is not None:
                        self._schedule_heartbeat(
                            group.group_id, m.member_id, now_ms + m.session_timeout_ms
                        )
                return [group.stable_record(request.assignments, now_ms)]
        else:
            self._received_sync(group, request.member_id)
            response.resolve(group.sync_response(group.members[request.member_id]))
        return []

    def _received_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._timer.cancel(sync_key(group.group_id))

    # -- Heartbeat ---------------------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> Result[ErrorCode]:
        if not group_id:
            return Result([], ErrorCode.invalid_group_id)
        group = self.group(group_id)
        if group is None:
            return Result([], ErrorCode.unknown_member_id)
        error = group.validate_member(member_id, group_instance_id)
        if error is ErrorCode.none and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        if error is not ErrorCode.none:
            return Result([], error)
        member = group.members[member_id]
        self._schedule_heartbeat(group_id, member_id, now_ms + member.session_timeout_ms)
        if group.state is PREPARING_REBALANCE:
            return Result([], ErrorCode.rebalance_in_progress)  # the member rejoins
        return Result([], ErrorCode.none)

    # -- LeaveGroup --------------------------------------------------------------------------

    def leave_group(
        self, group_id: str, members: Sequence[MemberIdentity], now_ms: int
    ) -> Result[LeaveResponse]:
        if not group_id:
            return Result([], LeaveResponse(ErrorCode.invalid_group_id))
        group = self.group(group_id)
        if group is None:
            return Result(
                [],
                LeaveResponse(
                    members=tuple(
                        LeftMember(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id)
                        for m in members
                    )
                ),
            )
        left = tuple(
            LeftMember(m.member_id, m.group_instance_id, self._leave(group, m)) for m in members
        )
        records: list[Record] = []
        if any(m.error is ErrorCode.none for m in left):
            if group.state in (STABLE, COMPLETING_REBALANCE):
                records = self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
            elif group.state is PREPARING_REBALANCE:
                records = self._maybe_complete_join_phase(group, now_ms)
        return Result(records, LeaveResponse(members=left))

    def _leave(self, group: ClassicGroup, identity: MemberIdentity) -> ErrorCode:
        member_id, instance_id = identity.member_id, identity.group_instance_id
        if member_id == "":
            # An administrator removes a static member by its instance id alone.
            member_id = group.static_members.get(instance_id) if instance_id is not None else None
            if member_id is None:
                return ErrorCode.unknown_member_id
        elif member_id in group.pending_members:
            group.remove(member_id)
            self._timer.cancel(heartbeat_key(group.group_id, member_id))
            return ErrorCode.none
        else:
            error = group.validate_member(member_id, instance_id)
            if error is not ErrorCode.none:
                return error
        self._evict(group, group.members[member_id])
        return ErrorCode.none

    # -- DescribeGroups ----------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.group(group_id)
        if group is None:
            message = (
                f"Group {group_id} is not a classic group."
                if group_id in self._groups
                else f"Group {group_id} not found."
            )
            return GroupDescription(
                group_id, DEAD.value, error=ErrorCode.group_id_not_found, error_message=message
            )
        # Metadata and the protocol are only shown for a Stable group, as Kafka does.
        stable = group.state is STABLE
        return GroupDescription(
            group_id,
            group.state_name,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=tuple(
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    (m.metadata(group.protocol_name) or b"") if stable else b"",
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )

    # -- replay and start-up -----------------------------------------------------------------

    def replay(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        group_id = key.group_id
        created = self._created.pop(group_id, None)
        if value is None:
            group = self.group(group_id)
            if group is not None:
                self._release(group)
                group.transition_to(DEAD, group.state_timestamp)
                del self._groups[group_id]
            return
        if created is not None:
            # The creation record of a group its JoinGroup has already started to fill.
            self._groups[group_id] = created
            return
        group = self.group(group_id)
        if group is None:
            group = self._groups[group_id] = ClassicGroup(group_id)
        group.apply(value)

    def _release(self, group: ClassicGroup) -> None:
        """A group going away (converted to a consumer group by an online upgrade): requests
        parked in it are told to rejoin, which they then do with the group's new type, and its
        timers stop."""
        for member in group.members.values():
            member.complete_join(JoinResponse(ErrorCode.rebalance_in_progress, member.member_id))
            member.complete_sync(SyncResponse(ErrorCode.rebalance_in_progress))
            self._timer.cancel(heartbeat_key(group.group_id, member.member_id))
        for member_id in group.pending_members:
            self._timer.cancel(heartbeat_key(group.group_id, member_id))
        self._timer.cancel(join_key(group.group_id))
        self._timer.cancel(sync_key(group.group_id))

    def downgraded(
        self,
        group_id: str,
        value: GroupMetadataValue,
        protocols: Mapping[str, tuple[Protocol, ...]],
        now_ms: int,
    ) -> Record:
        """The record of a consumer group converting back to a classic group (online
        downgrade), with the members' `protocols`. Like a group created by JoinGroup, the group
        joins `groups` when the record is replayed; it starts in a rebalance, so that every
        member rejoins and the leader assigns the partitions afresh."""
        group = ClassicGroup(group_id, now_ms)
        group.apply(value)
        for member in group.members.values():
            member.protocols = protocols[member.member_id]
            self._schedule_heartbeat(group_id, member.member_id, now_ms + member.session_timeout_ms)
        self._prepare_rebalance(group, now_ms)  # no member has rejoined yet: no records
        self._created[group_id] = group
        return Record(GroupMetadataKey(group_id), value)

    def on_loaded(self, now_ms: int, in_scope: Callable[[str], bool] = everywhere) -> None:
        """After loading the groups `in_scope`: every loaded member's session runs from now."""
        for group in [
            g for g in self._groups.values() if isinstance(g, ClassicGroup) and in_scope(g.group_id)
        ]:
            for member in group.members.values():
                self._schedule_heartbeat(
                    group.group_id, member.member_id, now_ms + member.session_timeout_ms
                )
            if len(group.members) > self._config.classic_max_size:
                # group.max.size was lowered: a rebalance lets the members commit and the
                # newest ones go.
                self._prepare_rebalance(group, now_ms)


def join_request_error(request: JoinRequest, config: GroupCoordinatorConfig) -> ErrorCode:
    """What any JoinGroup is checked for first, whatever the type of its group."""
    if not request.group_id:
        return ErrorCode.invalid_group_id
    if (
        not config.min_session_timeout_ms
        <= request.session_timeout_ms
        <= config.max_session_timeout_ms
    ):
        return ErrorCode.invalid_session_timeout
    return ErrorCode.none


def _names(protocols: Iterable[Protocol]) -> set[str]:
    return {p.name for p in protocols}


def _sync_error(group: ClassicGroup, request: SyncRequest) -> ErrorCode:
    error = group.validate_member(request.member_id, request.group_instance_id)
    if error is not ErrorCode.none:
        return error
    if request.generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    # SyncGroup v5+ names the protocol the member was told; it must be the group's.
    for asked, actual in (
        (request.protocol_type, group.protocol_type),
        (request.protocol_name, group.protocol_name),
    ):
        if asked is not None and actual is not None and asked != actual:
            return ErrorCode.inconsistent_group_protocol
    return ErrorCode.none
