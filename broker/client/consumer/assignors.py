"""Client-side assignors of the classic protocol and the embedded consumer protocol they speak.

A classic group's leader gets every member's ConsumerProtocolSubscription (topics, owned
partitions, generation, rack) in its JoinGroup response and answers each member's
ConsumerProtocolAssignment in SyncGroup. The encodings are Kafka's (versions 0-3, newer
versions only append fields), so confluent-kafka and Java members share a group with ours.

- `range` (eager): topic by topic, the subscribers in member-id order get contiguous ranges,
  the first `partitions % subscribers` one more: the server-side range assignor with nothing
  to keep, as the classic RangeAssignor is not sticky.
- `cooperative-sticky`: members keep what they own while the load stays balanced (the
  server-side uniform assignor, whose stickiness is the same), then, as Kafka's cooperative
  protocol wants, a partition that changes owner is left out of this generation's assignment:
  the old owner revokes it and rejoins, and the next rebalance gives it to the new one.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_entity_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from broker.client.models import TopicPartition
from broker.coordinator.assignors import MemberSpec, range_assign, uniform_assign

PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = ASSIGNMENT_VERSION = 3
RANGE, COOPERATIVE_STICKY = "range", "cooperative-sticky"
_VERSION = struct.Struct(">h")


@dataclass(frozen=True)
class Subscription:
    """A member's ConsumerProtocolSubscription."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    user_data: bytes | None = None


@cache
def _schema(name: str, version: int) -> Any:
    return load_entity_module(f"consumer_protocol_{name}", version, EntityType.data)


def _by_topic(module: Any, partitions: tuple[TopicPartition, ...] | list) -> tuple:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return tuple(module.TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in topics.items())


def _flatten(topic_partitions: tuple) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(tp.topic, p) for tp in topic_partitions for p in tp.partitions)


def _encode(name: str, version: int, entity: Any) -> bytes:
    buf = io.BytesIO()
    buf.write(_VERSION.pack(version))
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _decode(name: str, data: bytes) -> tuple[int, Any]:
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise ValueError(f"consumer protocol {name} version {version}")
    module = _schema(name, min(version, 3))
    entity, _ = entity_reader(getattr(module, f"ConsumerProtocol{name.title()}"))(data, 2)
    return version, entity


def encode_subscription(subscription: Subscription) -> bytes:
    m = _schema("subscription", SUBSCRIPTION_VERSION)
    return _encode(
        "subscription",
        SUBSCRIPTION_VERSION,
        m.ConsumerProtocolSubscription(
            topics=tuple(sorted(subscription.topics)),
            user_data=subscription.user_data,
            owned_partitions=_by_topic(m, subscription.owned_partitions),
            generation_id=subscription.generation_id,
            rack_id=subscription.rack_id,
        ),
    )


def decode_subscription(data: bytes) -> Subscription:
    version, s = _decode("subscription", data)
    return Subscription(
        tuple(s.topics),
        _flatten(s.owned_partitions) if version >= 1 else (),
        s.generation_id if version >= 2 else -1,
        s.rack_id if version >= 3 else None,
        s.user_data,
    )


def encode_assignment(partitions: list[TopicPartition], version: int = ASSIGNMENT_VERSION) -> bytes:
    """In the member's own subscription version (capped at ours), as Kafka's leader writes it."""
    version = max(0, min(version, ASSIGNMENT_VERSION))
    m = _schema("assignment", version)
    return _encode(
        "assignment",
        version,
        m.ConsumerProtocolAssignment(assigned_partitions=_by_topic(m, partitions), user_data=None),
    )


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """A member the leader has not assigned anything may get empty bytes."""
    if not data:
        return []
    _, a = _decode("assignment", data)
    return sorted(_flatten(a.assigned_partitions))


def subscription_version(data: bytes) -> int:
    return _VERSION.unpack_from(data)[0]


# -- the assignors ---------------------------------------------------------------------------

Assign = Callable[[Mapping[str, Subscription], Mapping[str, int]], dict[str, list[TopicPartition]]]


def assign_range(
    members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    specs = {m: MemberSpec(frozenset(s.topics)) for m, s in members.items()}
    return _as_lists(range_assign(specs, partition_counts))


def assign_cooperative_sticky(
    members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    owners = _current_owners(members)
    current: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for (topic, partition), member_id in owners.items():
        current[member_id].setdefault(topic, set()).add(partition)
    specs = {
        m: MemberSpec(frozenset(s.topics), {t: frozenset(ps) for t, ps in current[m].items()})
        for m, s in members.items()
    }
    target = _as_lists(uniform_assign(specs, partition_counts))
    # A partition still owned by another member waits for its revocation (next generation).
    return {m: [tp for tp in tps if owners.get(tp, m) == m] for m, tps in target.items()}


def _current_owners(members: Mapping[str, Subscription]) -> dict[TopicPartition, str]:
    """Who owns what, as claimed: a partition claimed by several members stays with the one of
    the newest generation (the others missed a rebalance); a tie gives it to none."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member_id, s in members.items():
        for tp in s.owned_partitions:
            claims.setdefault(TopicPartition(*tp), []).append((s.generation_id, member_id))
    owners = {}
    for tp, claimants in claims.items():
        newest = max(g for g, _ in claimants)
        holders = [m for g, m in claimants if g == newest]
        if len(holders) == 1:
            owners[tp] = holders[0]
    return owners


def _as_lists(assignment: Mapping[str, Mapping[str, frozenset[int]]]) -> dict[str, list]:
    return {
        m: sorted(TopicPartition(t, p) for t, ps in topics.items() for p in ps)
        for m, topics in assignment.items()
    }


ASSIGNORS: dict[str, Assign] = {RANGE: assign_range, COOPERATIVE_STICKY: assign_cooperative_sticky}
COOPERATIVE = frozenset({COOPERATIVE_STICKY})
