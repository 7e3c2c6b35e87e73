"""Online migration between the classic and the consumer protocol, sans-io: the real
GroupCoordinator, every record encoded, decoded and replayed. Classic clients behave like the
Java client with the cooperative-sticky assignor: they report what they own when they join, keep
only what SyncGroup gives them, and rejoin when Heartbeat says REBALANCE_IN_PROGRESS."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode
from test_consumer_group import GROUP, Cluster, Consumer, state

from broker.coordinator.classic_group import (
    ClassicGroup,
    JoinRequest,
    MemberIdentity,
    Protocol,
    SyncRequest,
)
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.migration import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from broker.coordinator.records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
)

SESSION, REBALANCE = 10_000, 30_000


def subscription(topics: tuple[str, ...], owned: dict[str, set[int]]) -> bytes:
    """A ConsumerProtocolSubscription v1 (topics, no user data, owned partitions)."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">ii", -1, len(owned))
    for t, ps in sorted(owned.items()):
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out


class ClassicConsumer:
    """A classic-protocol client of the same coordinator."""

    def __init__(self, cluster: Cluster, topics: tuple[str, ...] = ("foo",)) -> None:
        self.cluster = cluster
        self.topics = topics
        self.member_id = ""
        self.generation = -1
        self.owned: dict[str, set[int]] = {}
        self.join_response = None

    def join(self):
        """Send JoinGroup (twice for a new member: MEMBER_ID_REQUIRED); the parked Deferred."""
        request = JoinRequest(
            GROUP,
            self.member_id,
            None,
            "classic",
            "/127.0.0.1",
            SESSION,
            REBALANCE,
            "consumer",
            (Protocol("cooperative-sticky", subscription(self.topics, self.owned)),),
            9,
        )
        deferred = self.cluster.run(self.cluster.coordinator.join_group(request, self.cluster.now))
        if deferred.done and deferred.value.error == ErrorCode.member_id_required:
            self.member_id = deferred.value.member_id
            return self.join()
        deferred.add_callback(self._joined)
        return deferred

    def _joined(self, response) -> None:
        assert response.error == ErrorCode.none, response
        self.generation = response.generation_id
        self.join_response = response

    def sync(self, assignments: dict[str, bytes] | None = None):
        request = SyncRequest(
            GROUP, self.member_id, None, self.generation, "consumer", None, assignments or {}
        )
        deferred = self.cluster.run(self.cluster.coordinator.sync_group(request, self.cluster.now))
        deferred.add_callback(self._synced)
        return deferred

    def _synced(self, response) -> None:
        if response.error == ErrorCode.none:
            self.owned = {t: set(ps) for t, ps in decode_assignment(response.assignment)}

    def heartbeat(self) -> ErrorCode:
        return self.cluster.run(
            self.cluster.coordinator.heartbeat(
                GROUP, self.member_id, None, self.generation, self.cluster.now
            )
        )

    def leave(self):
        return self.cluster.run(
            self.cluster.coordinator.leave_group(
                GROUP, [MemberIdentity(self.member_id, None)], self.cluster.now
            )
        )

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def classic_rebalance(cluster: Cluster, members: list[ClassicConsumer]) -> None:
    """Everyone (re)joins a classic group, the leader assigns `foo` round robin, all sync."""
    joins = [m.join() for m in members]
    # group.initial.rebalance.delay.ms=0: each member that arrived extends the delay once more.
    for _ in members:
        cluster.advance(0)
    assert all(j.done for j in joins)
    leader = next(m for m in members if m.member_id == m.join_response.leader)
    partitions = cluster.image.topic("foo").partitions
    plan = {
        m.member_id: {"foo": set(range(i, partitions, len(members)))} for i, m in enumerate(members)
    }
    version = 1
    assignments = {mid: encode_assignment(a, version) for mid, a in plan.items()}
    syncs = [m.sync(assignments if m is leader else None) for m in members if m is not leader]
    syncs.append(leader.sync(assignments))
    assert all(s.done and s.value.error == ErrorCode.none for s in syncs)


def settle(cluster: Cluster, classics: list[ClassicConsumer], consumers: list[Consumer]) -> None:
    """Run every member's loop until the consumer group is Stable and nobody must rejoin."""
    for _ in range(20):
        for c in consumers:
            c.poll()
        quiet = True
        for m in classics:
            if m.heartbeat() == ErrorCode.rebalance_in_progress:
                quiet = False
                join = m.join()
                assert join.done and join.value.error == ErrorCode.none
                sync = m.sync()
                assert sync.done
        if quiet and cluster.group().state_name == "Stable":
            return
    raise AssertionError(f"the group did not settle: {cluster.group().state_name}")


def assert_complete_and_disjoint(cluster: Cluster, classics, consumers) -> None:
    names = {t.topic_id: t.name for t in cluster.image.topics()}
    owned = [tp for m in classics for tp in m.partitions()]
    owned += [(names[t], p) for c in consumers for t, p in c.partitions()]
    assert len(owned) == len(set(owned)), "a partition is consumed by two members"
    assert set(owned) == {("foo", p) for p in range(6)}


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster(initial_rebalance_delay_ms=0)
    c.create_topic("foo", 6)
    return c


@pytest.fixture
def classic_group(cluster) -> list[ClassicConsumer]:
    members = [ClassicConsumer(cluster), ClassicConsumer(cluster)]
    classic_rebalance(cluster, members)
    assert isinstance(cluster.group(), ClassicGroup) and cluster.group().state_name == "Stable"
    return members


def test_the_embedded_consumer_protocol_round_trips():
    metadata = subscription(("a", "b"), {"a": {2, 1}})
    decoded = decode_subscription(metadata)
    assert (decoded.version, decoded.topics) == (1, ("a", "b"))
    assert decoded.owned_partitions == (("a", (1, 2)),)
    assignment = encode_assignment({"b": {3, 0}, "a": {1}}, 3)
    assert decode_assignment(assignment) == (("a", (1,)), ("b", (0, 3)))


def test_a_consumer_protocol_member_upgrades_a_live_classic_group(cluster, classic_group):
    a, b = classic_group
    c = Consumer(cluster, "c")
    c.join()
    group = cluster.group()
    assert isinstance(group, ConsumerGroup)
    # Kafka's conversion: the classic group's tombstone, then the consumer group's records.
    tombstone = cluster.log.index(
        next(r for r in cluster.log if r.key == GroupMetadataKey(GROUP) and r.value is None)
    )
    assert isinstance(cluster.log[tombstone + 1].key, ConsumerGroupMemberMetadataKey)
    # The classic members keep their partitions in the classic generation, as classic members.
    for m in (a, b):
        member = group.members[m.member_id]
        assert member.uses_classic_protocol
        assert member.metadata.classic_member_metadata.session_timeout_ms == SESSION
        assert member.metadata.subscribed_topic_names == ("foo",)
        assert member.member_epoch == 1
    assert group.group_epoch == 2
    assert not c.owned, "c waits until the classic members release partitions"
    # Each classic member is asked to rejoin, and the group converges.
    assert a.heartbeat() == ErrorCode.rebalance_in_progress
    settle(cluster, [a, b], [c])
    assert all(m.partitions() for m in (a, b)) and c.partitions()
    assert_complete_and_disjoint(cluster, [a, b], [c])
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_classic_members_join_a_consumer_group(cluster):
    c = Consumer(cluster, "c")
    c.join()
    d = ClassicConsumer(cluster)
    join = d.join()
    assert join.value.error == ErrorCode.none and join.value.leader == ""
    assert join.value.protocol_name == "cooperative-sticky"
    settle(cluster, [d], [c])
    assert d.partitions() and c.partitions()
    assert_complete_and_disjoint(cluster, [d], [c])
    # Classic members answer with classic errors.
    stale = d.generation - 1
    d.generation, generation = stale, d.generation
    assert d.heartbeat() == ErrorCode.illegal_generation
    d.generation = generation
    # A classic member leaving hands its partitions over; the group stays a consumer group.
    assert d.leave().members[0].error == ErrorCode.none
    settle(cluster, [], [c])
    assert isinstance(cluster.group(), ConsumerGroup)
    assert len(c.partitions()) == 6
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_a_classic_members_session_is_its_own(cluster):
    Consumer(cluster, "c").join()
    d = ClassicConsumer(cluster)
    d.join()
    cluster.advance(SESSION + 1)
    assert d.member_id not in cluster.group().members


def test_the_last_consumer_protocol_member_leaving_downgrades_the_group(cluster, classic_group):
    a, b = classic_group
    c = Consumer(cluster, "c")
    c.join()
    settle(cluster, [a, b], [c])
    epoch = cluster.group().group_epoch
    c.leave()
    group = cluster.group()
    assert isinstance(group, ClassicGroup)
    assert group.state_name == "PreparingRebalance"
    assert group.generation_id == epoch and group.protocol_name == "cooperative-sticky"
    # The consumer group's tombstones come first, then the classic group's record.
    assert cluster.log[-1].key == GroupMetadataKey(GROUP)
    assert cluster.log[-2] == type(cluster.log[-2])(ConsumerGroupMetadataKey(GROUP), None)
    # The members carry their target assignment over.
    assert all(decode_assignment(m.assignment) for m in group.members.values())
    # Their next heartbeat sends them back to JoinGroup; a classic rebalance follows.
    assert a.heartbeat() in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation)
    classic_rebalance(cluster, [a, b])
    assert group.state_name == "Stable"
    assert_complete_and_disjoint(cluster, [a, b], [])
    replayed = cluster.replayed().groups[GROUP]
    assert isinstance(replayed, ClassicGroup) and replayed.persisted == group.persisted


def test_a_fenced_consumer_protocol_member_downgrades_the_group(cluster, classic_group):
    """The consumer-protocol member stops heartbeating; the classic members keep theirs up."""
    a, b = classic_group
    c = Consumer(cluster, "c")
    c.join()
    settle(cluster, [a, b], [c])
    for _ in range(20):
        if isinstance(cluster.group(), ClassicGroup):
            break
        assert a.heartbeat() == b.heartbeat() == ErrorCode.none
        cluster.advance(SESSION // 2)
    assert isinstance(cluster.group(), ClassicGroup)
    assert a.heartbeat() == ErrorCode.rebalance_in_progress
    assert set(cluster.group().members) == {a.member_id, b.member_id}


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_the_migration_policy_can_forbid_the_upgrade(policy, classic_group, cluster):
    cluster.coordinator.migration.config = cluster.config = type(cluster.config)(
        **{**cluster.config.__dict__, "migration_policy": policy}
    )
    response = cluster.heartbeat(
        "c", 0, rebalance_timeout_ms=1, owned_partitions={}, subscribed_topic_names=("foo",)
    )
    assert response.error_code == ErrorCode.group_id_not_found
    assert isinstance(cluster.group(), ClassicGroup)


def test_the_migration_policy_can_forbid_the_downgrade(cluster, classic_group):
    a, b = classic_group
    c = Consumer(cluster, "c")
    c.join()
    settle(cluster, [a, b], [c])
    cluster.coordinator.migration.config = type(cluster.config)(
        **{**cluster.config.__dict__, "migration_policy": "upgrade"}
    )
    c.leave()
    assert isinstance(cluster.group(), ConsumerGroup)
    settle(cluster, [a, b], [])
    assert_complete_and_disjoint(cluster, [a, b], [])


def test_a_consumer_group_with_foreign_partitions_is_not_taken_over(cluster, classic_group):
    """Metadata that is not the consumer protocol keeps the classic group as it is."""
    group = cluster.group()
    member = next(iter(group.members.values()))
    member.assignment = b"\x00"
    response = cluster.heartbeat(
        "c", 0, rebalance_timeout_ms=1, owned_partitions={}, subscribed_topic_names=("foo",)
    )
    assert response.error_code == ErrorCode.group_id_not_found
