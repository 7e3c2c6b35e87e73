"""How one member's current assignment moves towards its target (Kafka's CurrentAssignmentBuilder).

KIP-848 has no stop-the-world rebalance: each member is reconciled on its own heartbeats. A
partition moving from A to B is first taken out of A's assignment (A is asked to revoke it and
stays in its epoch until its heartbeat no longer reports it), and only then given to B, who
meanwhile waits for it in the new epoch. Members whose partitions do not move go straight to the
new epoch. The states:

- STABLE: the member holds (part of) its target and has nothing to revoke.
- UNREVOKED_PARTITIONS: the member must revoke partitions before it may enter a newer epoch.
- UNRELEASED_PARTITIONS: the member is in the target epoch but some of its target partitions are
  still owned by others; it gets them on a later heartbeat once they are released.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from broker.coordinator.assignors import Assignment
from broker.coordinator.records import ConsumerGroupCurrentMemberAssignmentValue, TopicPartitions

# The epoch of a partition no member owns (Kafka's currentPartitionEpoch answer).
NO_OWNER = -1


class MemberState(IntEnum):
    """Kafka's MemberState, with its record values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """A member's epoch and the partitions it may use (the ConsumerGroupCurrentMemberAssignment
    record). Empty topics never appear in the assignments, so equal states compare equal."""

    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == target_epoch

    def owned(self) -> Assignment:
        """Partitions the member may still hold: assigned or not yet revoked."""
        return union(self.assigned_partitions, self.partitions_pending_revocation)

    def to_record(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            assigned_partitions=to_topic_partitions(self.assigned_partitions),
            partitions_pending_revocation=to_topic_partitions(self.partitions_pending_revocation),
        )

    @classmethod
    def from_record(cls, value: ConsumerGroupCurrentMemberAssignmentValue) -> CurrentAssignment:
        return cls(
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState(value.state),
            assigned_partitions=from_topic_partitions(value.assigned_partitions),
            partitions_pending_revocation=from_topic_partitions(
                value.partitions_pending_revocation
            ),
        )


PartitionEpoch = Callable[[uuid.UUID, int], int]


def reconcile(
    current: CurrentAssignment,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Assignment | None,
) -> CurrentAssignment:
    """The member's next state. `partition_epoch` answers the epoch of the member currently
    owning a partition (NO_OWNER when free); `owned` is what the member reported owning in this
    heartbeat, None when it did not say (then nothing counts as revoked)."""
    if current.state == MemberState.UNREVOKED_PARTITIONS and _owns_any(
        owned, current.partitions_pending_revocation
    ):
        return current  # still waiting for the member to revoke
    if current.state == MemberState.STABLE and current.member_epoch == target_epoch:
        return current

    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    newly_assigned: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in target.keys() | current.assigned_partitions.keys():
        wanted = target.get(topic_id, frozenset())
        held = current.assigned_partitions.get(topic_id, frozenset())
        pending = wanted - held
        # A partition still owned by another member cannot be given yet. One this member is
        # itself revoking is not "another member's": it can take it back at once.
        own_revoking = current.partitions_pending_revocation.get(topic_id, frozenset())
        free = frozenset(
            p for p in pending if p in own_revoking or partition_epoch(topic_id, p) == NO_OWNER
        )
        unreleased |= free != pending
        _put(assigned, topic_id, held & wanted)
        _put(revoking, topic_id, held - wanted)
        _put(newly_assigned, topic_id, free)

    if revoking and _owns_any(owned, revoking):
        # Revoke first, in the current epoch; the new partitions come after the member
        # confirms the revocation.
        return CurrentAssignment(
            member_epoch=current.member_epoch,
            previous_member_epoch=current.member_epoch,  # as Kafka's updateMemberEpoch does
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=assigned,
            partitions_pending_revocation=revoking,
        )
    return CurrentAssignment(
        member_epoch=target_epoch,
        previous_member_epoch=current.member_epoch,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        assigned_partitions=union(assigned, newly_assigned),
    )


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & ps for topic_id, ps in partitions.items())


def _put(assignment: dict[uuid.UUID, frozenset[int]], topic_id: uuid.UUID, ps: frozenset[int]):
    if ps:
        assignment[topic_id] = ps


def union(a: Assignment, b: Assignment) -> Assignment:
    return {t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in a.keys() | b.keys()}


def to_topic_partitions(assignment: Assignment) -> tuple[TopicPartitions, ...]:
    return tuple(
        TopicPartitions(topic_id=t, partitions=tuple(sorted(ps)))
        for t, ps in sorted(assignment.items())
        if ps
    )


def from_topic_partitions(tps: tuple[TopicPartitions, ...]) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in tps if tp.partitions}
