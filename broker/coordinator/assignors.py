"""Server-side partition assignors of KIP-848 consumer groups: `uniform` and `range`.

An assignor is a pure function from the members (their subscribed topic ids and their current
*target* assignment, the sticky input) and the partition counts of the subscribed topics to the
new target assignment of every member. The coordinator persists that target and reconciles each
member towards it incrementally (see reconciliation.py); the assignor never sees owned
partitions or epochs.

Inputs are sanitized the same way for both assignors: a current partition is kept only if the
topic still exists, the partition is still below the partition count, the member is still
subscribed to the topic and no member earlier in member-id order claimed it. Everything is
ordered by member id, topic id and partition, so the same input always yields the same output.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TopicId = uuid.UUID
Assignment = Mapping[TopicId, frozenset[int]]
TopicPartition = tuple[TopicId, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of a member."""

    subscribed_topic_ids: frozenset[TopicId]
    current: Assignment = field(default_factory=dict)  # the member's current target assignment


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[TopicId, int]], dict[str, Assignment]]


def uniform_assign(
    members: Mapping[str, MemberSpec], partition_counts: Mapping[TopicId, int]
) -> dict[str, Assignment]:
    """Kafka's UniformAssignor: spread partitions evenly over their subscribers while moving as
    few as possible. With identical subscriptions every member ends with floor or ceil of
    partitions/members; otherwise no partition could move to a subscriber holding at least two
    fewer partitions than its owner.

    1. Every member keeps its valid current partitions.
    2. Unowned partitions go, topic by topic (topics with the fewest subscribers first, as they
       have the fewest choices), to the least loaded subscriber.
    3. While a subscriber holds at least two fewer partitions than an owner of the topic, a
       partition moves from the most loaded such owner to the least loaded such subscriber.
       Moving from the most loaded member first is what keeps movements minimal.
    """
    owners = _valid_current(members, partition_counts)
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp, member_id in owners.items():
        owned[member_id].add(tp)
    subscribers = _subscribers(members, partition_counts)

    def least_loaded(candidates: list[str]) -> str:
        return min(candidates, key=lambda m: (len(owned[m]), m))

    for topic_id in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        for partition in range(partition_counts[topic_id]):
            if (topic_id, partition) not in owners:
                owned[least_loaded(subscribers[topic_id])].add((topic_id, partition))

    while (move := _best_move(owned, subscribers, least_loaded)) is not None:
        tp, giver, receiver = move
        owned[giver].remove(tp)
        owned[receiver].add(tp)
    return {m: _as_assignment(tps) for m, tps in owned.items()}


def _best_move(owned, subscribers, least_loaded) -> tuple[TopicPartition, str, str] | None:
    """The partition to move next: from the most loaded member that can give one, to the least
    loaded subscriber that holds at least two fewer; None when balanced."""
    for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
        load = len(owned[giver])
        best: tuple[str, TopicId] | None = None
        for topic_id in sorted({t for t, _ in owned[giver]}):
            receiver = least_loaded(subscribers[topic_id])
            if len(owned[receiver]) < load - 1 and (
                best is None or (len(owned[receiver]), receiver) < (len(owned[best[0]]), best[0])
            ):
                best = (receiver, topic_id)
        if best is not None:
            receiver, topic_id = best
            partition = max(p for t, p in owned[giver] if t == topic_id)
            return (topic_id, partition), giver, receiver
    return None


def range_assign(
    members: Mapping[str, MemberSpec], partition_counts: Mapping[TopicId, int]
) -> dict[str, Assignment]:
    """Kafka's server-side RangeAssignor: topic by topic, the subscribers in member-id order
    each get a quota of floor(partitions/subscribers), the first `partitions % subscribers` of
    them one more. A member first keeps its lowest current partitions up to its quota (so
    co-partitioned topics stay aligned across members); the partitions left over are handed out
    in ascending contiguous ranges."""
    current: dict[tuple[str, TopicId], list[int]] = {}
    for (topic_id, partition), member_id in sorted(
        _valid_current(members, partition_counts).items()
    ):
        current.setdefault((member_id, topic_id), []).append(partition)
    result: dict[str, dict[TopicId, set[int]]] = {m: {} for m in members}
    for topic_id, subscribers in sorted(_subscribers(members, partition_counts).items()):
        count = partition_counts[topic_id]
        quota, extra = divmod(count, len(subscribers))
        kept: set[int] = set()
        unfilled: list[tuple[str, int]] = []  # (member, partitions still owed below the quota)
        for member_id in subscribers:
            mine = current.get((member_id, topic_id), [])
            keep = mine[:quota]
            if len(mine) > quota and extra > 0:
                extra -= 1  # this member keeps one more and takes one of the extra slots
                keep = mine[: quota + 1]
            else:
                unfilled.append((member_id, quota - len(keep)))
            kept.update(keep)
            result[member_id][topic_id] = set(keep)
        free = iter(p for p in range(count) if p not in kept)
        for member_id, owed in unfilled:
            if extra > 0:
                owed, extra = owed + 1, extra - 1
            result[member_id][topic_id].update(next(free) for _ in range(owed))
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in result.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": range_assign}


def _subscribers(
    members: Mapping[str, MemberSpec], partition_counts: Mapping[TopicId, int]
) -> dict[TopicId, list[str]]:
    """Existing topics with at least one subscriber, to their subscribers in member-id order."""
    subscribers: dict[TopicId, list[str]] = {}
    for member_id in sorted(members):
        for topic_id in members[member_id].subscribed_topic_ids:
            if partition_counts.get(topic_id, 0) > 0:
                subscribers.setdefault(topic_id, []).append(member_id)
    return subscribers


def _valid_current(
    members: Mapping[str, MemberSpec], partition_counts: Mapping[TopicId, int]
) -> dict[TopicPartition, str]:
    """The current partitions an assignor may keep where they are, to their member."""
    owners: dict[TopicPartition, str] = {}
    for member_id in sorted(members):
        spec = members[member_id]
        for topic_id, partitions in spec.current.items():
            if topic_id not in spec.subscribed_topic_ids:
                continue
            count = partition_counts.get(topic_id, 0)
            for partition in partitions:
                if partition < count:
                    owners.setdefault((topic_id, partition), member_id)
    return owners


def _as_assignment(tps: set[TopicPartition]) -> Assignment:
    by_topic: dict[TopicId, set[int]] = {}
    for topic_id, partition in tps:
        by_topic.setdefault(topic_id, set()).add(partition)
    return {t: frozenset(ps) for t, ps in by_topic.items()}
