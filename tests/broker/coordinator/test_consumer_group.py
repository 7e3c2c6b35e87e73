"""KIP-848 consumer groups, sans-io: the real GroupCoordinator, records replayed as the runtime
does, time passed in by hand. Simulated consumers behave like the Java client: they report what
they own and adopt each assignment they receive."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.consumer_group import (
    REGEX_BATCH_REFRESH_MIN_INTERVAL_MS,
    ConsumerGroup,
    ConsumerGroupManager,
    HeartbeatRequest,
    HeartbeatResponse,
    session_key,
)
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.reconciliation import MemberState
from broker.coordinator.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    decode_record,
    encode_record,
)
from broker.coordinator.runtime import Record, Result
from broker.metadata.image import MetadataImage, TopicMetadata

GROUP = "g"
REBALANCE_TIMEOUT_MS = 30_000


class Cluster:
    """A coordinator over a metadata image; every record is encoded, decoded and replayed, and
    kept to rebuild a second coordinator from."""

    def __init__(self, **config) -> None:
        self.image = MetadataImage("cluster")
        self.config = GroupCoordinatorConfig(**config)
        self.coordinator = GroupCoordinator(self.config, self.image)
        self.group_configs = self.coordinator.group_configs
        self.log: list[Record] = []
        self.now = 1_000_000
        # The topics the heartbeating member may DESCRIBE (None: all, as without an authorizer)
        self.describable: set[str] | None = None

    @property
    def consumer(self) -> ConsumerGroupManager:
        return self.coordinator.consumer

    def group(self, group_id: str = GROUP) -> ConsumerGroup:
        return self.coordinator.groups[group_id]

    def create_topic(self, name: str, partitions: int) -> uuid.UUID:
        topic_id = uuid.uuid4()
        self.image.put(TopicMetadata(name, topic_id, partitions))
        self.apply(self.consumer.on_metadata_change(self.now))
        return topic_id

    def delete_topic(self, name: str) -> None:
        self.image.remove(name)
        self.apply(self.consumer.on_metadata_change(self.now))

    def apply(self, records: list[Record]) -> None:
        for record in records:
            record = decode_record(*encode_record(record))
            self.coordinator.replay(record)
            self.log.append(record)

    def run(self, result: Result):
        self.apply(result.records)
        return result.response

    def heartbeat(self, member_id: str, member_epoch: int, **fields) -> HeartbeatResponse:
        request = HeartbeatRequest(GROUP, member_id, member_epoch, **fields)
        return self.run(
            self.consumer.heartbeat(
                request,
                self.now,
                client_id="client",
                client_host="/127.0.0.1",
                api_version=1,
                describable=self._describable,
            )
        )

    def _describable(self, names: set[str]) -> set[str]:
        return set(names) if self.describable is None else names & self.describable

    def advance(self, ms: int) -> None:
        """Let time pass and run the timers that came due, as the runtime does."""
        self.now += ms
        for _key, task in self.coordinator.timer.expire(self.now):
            self.apply(task(self.now))

    def replayed(self) -> GroupCoordinator:
        fresh = GroupCoordinator(self.config, self.image)
        for record in self.log:
            fresh.replay(record)
        return fresh


class Consumer:
    """A consumer-protocol client: joins with epoch 0, reports its partitions, adopts every
    assignment it is sent (revoking whatever is no longer in it)."""

    def __init__(self, cluster: Cluster, member_id: str, **subscription) -> None:
        self.cluster = cluster
        self.member_id = member_id
        self.subscription = subscription or {"subscribed_topic_names": ("foo",)}
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}

    def join(self) -> HeartbeatResponse:
        response = self.cluster.heartbeat(
            self.member_id,
            0,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            owned_partitions={},
            **self.subscription,
        )
        return self._adopt(response)

    def poll(self, **fields) -> HeartbeatResponse:
        fields.setdefault("owned_partitions", self.owned)
        return self._adopt(self.cluster.heartbeat(self.member_id, self.epoch, **fields))

    def leave(self, epoch: int = -1) -> HeartbeatResponse:
        return self.cluster.heartbeat(
            self.member_id, epoch, instance_id=self.subscription.get("instance_id")
        )

    def _adopt(self, response: HeartbeatResponse) -> HeartbeatResponse:
        assert response.error_code == ErrorCode.none, response
        self.epoch = response.member_epoch
        if response.assignment is not None:
            self.owned = dict(response.assignment)
        return response

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def state(coordinator: GroupCoordinator) -> dict:
    """Everything a consumer group holds, to compare a live coordinator with a replayed one."""
    return {
        group_id: (
            g.group_epoch,
            g.assignment_epoch,
            g.subscription_metadata,
            g.target_assignment,
            g.members,
            g.static_members,
            g.partition_epochs,
            g.resolved_regexes,
            g.state_name,
        )
        for group_id, g in coordinator.groups.items()
        if isinstance(g, ConsumerGroup)
    }


def assert_no_partition_owned_twice(*consumers: Consumer) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for c in consumers:
        assert not seen & c.partitions(), "a partition is consumed by two members"
        seen |= c.partitions()


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster()
    c.create_topic("foo", 6)
    return c


def test_first_member_creates_the_group_and_gets_every_partition(cluster):
    a = Consumer(cluster, "a")
    response = a.join()

    group = cluster.group()
    assert (response.member_id, response.member_epoch) == ("a", 1)
    assert response.heartbeat_interval_ms == 5000
    assert len(a.partitions()) == 6
    assert (group.group_epoch, group.assignment_epoch, group.state_name) == (1, 1, "Stable")
    assert [type(r.key) for r in cluster.log] == [
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupPartitionMetadataKey,
        ConsumerGroupMetadataKey,
        ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupCurrentMemberAssignmentKey,
    ]
    # A heartbeat that changes nothing writes nothing and sends no assignment.
    before = len(cluster.log)
    assert a.poll(owned_partitions=None).assignment is None
    assert len(cluster.log) == before


def test_a_third_member_gets_partitions_only_after_their_owners_revoke_them(cluster):
    a, b = Consumer(cluster, "a"), Consumer(cluster, "b")
    a.join()
    b.join()
    a.poll()  # a is told to revoke what b is to get...
    a.poll()  # ...and confirms it has
    b.poll()
    assert (len(a.partitions()), len(b.partitions())) == (3, 3)
    assert cluster.group().state_name == "Stable"
    a_before, b_before = a.partitions(), b.partitions()

    c = Consumer(cluster, "c")
    c.join()
    group = cluster.group()
    assert group.group_epoch == 3 and c.epoch == 3
    assert c.partitions() == set(), "c waits until a and b release its partitions"
    assert group.members["c"].current.state == MemberState.UNRELEASED_PARTITIONS
    assert group.state_name == "Reconciling"

    a.poll()
    assert a.epoch == 2, "a stays in its epoch until it has revoked"
    assert group.members["a"].current.state == MemberState.UNREVOKED_PARTITIONS
    assert len(a.partitions()) == 2 and a.partitions() < a_before, "a keeps the rest"
    assert_no_partition_owned_twice(a, b, c)

    c.poll()
    assert c.partitions() == set(), "b has not revoked yet; a's revocation is unconfirmed"

    a.poll()  # a's heartbeat no longer reports the revoked partition
    assert a.epoch == 3 and group.members["a"].current.state == MemberState.STABLE
    c.poll()
    assert len(c.partitions()) == 1 and c.epoch == 3
    assert_no_partition_owned_twice(a, b, c)

    b.poll()
    b.poll()
    c.poll()
    assert len(c.partitions()) == 2 and b.partitions() < b_before
    assert_no_partition_owned_twice(a, b, c)
    assert [len(x.partitions()) for x in (a, b, c)] == [2, 2, 2]
    assert group.state_name == "Stable"
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_epochs_are_checked_and_a_lost_response_is_forgiven(cluster):
    a = Consumer(cluster, "a")
    a.join()
    b = Consumer(cluster, "b")
    b.join()
    a.poll()  # a moves from epoch 1 to 2 after revoking... in two steps
    a.poll()
    assert a.epoch == 2

    too_new = cluster.heartbeat("a", 3, owned_partitions=a.owned)
    assert too_new.error_code == ErrorCode.fenced_member_epoch
    assert "greater member epoch" in too_new.error_message
    too_old = cluster.heartbeat("a", 1, owned_partitions={**a.owned, uuid.uuid4(): frozenset({0})})
    assert too_old.error_code == ErrorCode.fenced_member_epoch
    # The previous epoch with a subset of the assignment: the response bumping the epoch
    # was lost, the member gets it again.
    again = cluster.heartbeat("a", 1, owned_partitions=a.owned)
    assert (again.error_code, again.member_epoch) == (ErrorCode.none, 2)
    # A fenced member rejoins with epoch 0 under the same id and keeps its partitions.
    rejoin = cluster.heartbeat(
        "a",
        0,
        rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
        owned_partitions={},
        subscribed_topic_names=("foo",),
    )
    assert (rejoin.error_code, rejoin.member_epoch) == (ErrorCode.none, 2)
    assert rejoin.assignment == a.owned

    unknown = cluster.heartbeat("nobody", 2, owned_partitions={})
    assert unknown.error_code == ErrorCode.unknown_member_id
    missing = cluster.run(
        cluster.consumer.heartbeat(
            HeartbeatRequest("other", "a", 1),
            cluster.now,
            client_id="c",
            client_host="h",
            api_version=1,
        )
    )
    assert missing.error_code == ErrorCode.group_id_not_found


@pytest.mark.parametrize(
    ("fields", "api_version", "message"),
    [
        ({"member_id": ""}, 1, "MemberId can't be empty."),
        ({"instance_id": " "}, 1, "InstanceId can't be empty."),
        ({"rebalance_timeout_ms": -1}, 1, "RebalanceTimeoutMs must be provided in first request."),
        ({"owned_partitions": None}, 1, "TopicPartitions must be empty when (re-)joining."),
        ({"subscribed_topic_names": None}, 1, "Either SubscribedTopicNames or"),
        ({"member_epoch": -2}, 1, "InstanceId can't be null."),
        ({"member_epoch": -3}, 1, "MemberEpoch is invalid."),
    ],
)
def test_invalid_requests_are_refused_without_records(cluster, fields, api_version, message):
    request = {
        "group_id": GROUP,
        "member_id": "m",
        "member_epoch": 0,
        "rebalance_timeout_ms": 1000,
        "subscribed_topic_names": ("foo",),
        "owned_partitions": {},
        **fields,
    }
    before = len(cluster.log)
    response = cluster.run(
        cluster.consumer.heartbeat(
            HeartbeatRequest(**request),
            cluster.now,
            client_id="c",
            client_host="h",
            api_version=api_version,
        )
    )
    assert response.error_code == ErrorCode.invalid_request
    assert response.error_message.startswith(message)
    assert len(cluster.log) == before


def test_version_0_lets_the_coordinator_choose_the_member_id(cluster):
    response = cluster.run(
        cluster.consumer.heartbeat(
            HeartbeatRequest(
                GROUP,
                "",
                0,
                rebalance_timeout_ms=1000,
                subscribed_topic_names=("foo",),
                owned_partitions={},
            ),
            cluster.now,
            client_id="c",
            client_host="h",
            api_version=0,
        )
    )
    assert response.error_code == ErrorCode.none
    assert len(response.member_id) == 22 and response.member_id in cluster.group().members


def test_unknown_assignor_and_full_group_are_refused():
    cluster = Cluster(consumer_max_size=1)
    cluster.create_topic("foo", 2)
    a = Consumer(cluster, "a")
    a.join()
    wrong = Consumer(cluster, "b", subscribed_topic_names=("foo",), server_assignor="sticky")
    response = cluster.heartbeat(
        "b", 0, rebalance_timeout_ms=1, owned_partitions={}, **wrong.subscription
    )
    assert response.error_code == ErrorCode.unsupported_assignor
    assert response.error_message == (
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range."
    )
    full = cluster.heartbeat(
        "b", 0, rebalance_timeout_ms=1, owned_partitions={}, subscribed_topic_names=("foo",)
    )
    assert full.error_code == ErrorCode.group_max_size_reached
    assert a.poll(owned_partitions=None).error_code == ErrorCode.none


def test_the_range_assignor_is_used_when_members_ask_for_it(cluster):
    # b joins first and keeps the lowest partitions up to its quota: range is sticky too.
    members = [
        Consumer(cluster, m, subscribed_topic_names=("foo",), server_assignor="range")
        for m in ("b", "a")
    ]
    for m in members:
        m.join()
    for _ in range(3):
        for m in members:
            m.poll()
    foo = cluster.image.topic("foo").topic_id
    assert cluster.group().target_assignment == {
        "a": {foo: frozenset({3, 4, 5})},
        "b": {foo: frozenset({0, 1, 2})},
    }


def test_regex_subscriptions_follow_topic_creation_and_deletion(cluster):
    foo2 = cluster.create_topic("foo-2", 2)
    cluster.create_topic("bar", 3)
    a = Consumer(cluster, "a", subscribed_topic_regex="foo.*")
    a.join()
    foo = cluster.image.topic("foo").topic_id
    assert a.owned == {foo: frozenset(range(6)), foo2: frozenset({0, 1})}

    # As in Kafka, a new topic joins at the first heartbeat that may resolve the regexes again
    # (10 s after the last resolution), for the principal of the member sending it.
    foo3 = cluster.create_topic("foo-3", 1)
    assert cluster.group().state_name == "Stable"
    a.poll()
    assert foo3 not in a.owned
    cluster.advance(REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1)
    a.poll()
    assert cluster.group().resolved_regexes["foo.*"].topics == ("foo", "foo-2", "foo-3")
    a.poll()
    assert a.owned[foo3] == frozenset({0})

    cluster.delete_topic("foo-2")
    a.poll()
    a.poll()
    assert set(a.owned) == {foo, foo3}
    assert cluster.group().subscribed_topics() == {"foo", "foo-3"}

    bad = cluster.heartbeat("a", a.epoch, subscribed_topic_regex="(")
    assert bad.error_code == ErrorCode.invalid_regular_expression
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_partition_growth_is_assigned(cluster):
    a = Consumer(cluster, "a")
    a.join()
    foo = cluster.image.topic("foo")
    cluster.image.put(TopicMetadata("foo", foo.topic_id, 8))
    cluster.apply(cluster.consumer.on_metadata_change(cluster.now))
    a.poll()
    assert a.owned == {foo.topic_id: frozenset(range(8))}


def test_a_leaving_member_hands_its_partitions_over(cluster):
    a, b = Consumer(cluster, "a"), Consumer(cluster, "b")
    for _ in range(2):
        a.join() if a.epoch == 0 else a.poll()
        b.join() if b.epoch == 0 else b.poll()
    a.poll()
    response = b.leave()
    assert (response.member_id, response.member_epoch) == ("b", -1)
    group = cluster.group()
    assert set(group.members) == {"a"} and "b" not in group.target_assignment
    a.poll()
    assert len(a.partitions()) == 6
    assert cluster.heartbeat("b", 3, owned_partitions={}).error_code == ErrorCode.unknown_member_id

    a.leave()
    assert cluster.group().state_name == "Empty"
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_a_static_member_can_bounce_without_a_rebalance(cluster):
    a = Consumer(cluster, "a1", subscribed_topic_names=("foo",), instance_id="i")
    b = Consumer(cluster, "b")
    a.join()
    b.join()
    a.poll()
    a.poll()
    b.poll()
    epoch, owned = cluster.group().group_epoch, a.owned

    impostor = cluster.heartbeat(
        "a2",
        0,
        rebalance_timeout_ms=1,
        owned_partitions={},
        subscribed_topic_names=("foo",),
        instance_id="i",
    )
    assert impostor.error_code == ErrorCode.unreleased_instance_id
    wrong_id = cluster.heartbeat("a2", -2, instance_id="i")
    assert wrong_id.error_code == ErrorCode.fenced_instance_id

    left = a.leave(epoch=-2)
    assert (left.member_id, left.member_epoch) == ("a1", -2)
    assert cluster.group().members["a1"].member_epoch == -2

    back = Consumer(cluster, "a2", subscribed_topic_names=("foo",), instance_id="i")
    back.join()
    group = cluster.group()
    assert back.owned == owned and back.epoch == epoch
    assert group.group_epoch == epoch, "no rebalance"
    assert set(group.members) == {"a2", "b"} and group.static_members == {"i": "a2"}
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_an_expired_session_fences_the_member(cluster):
    cluster.group_configs[GROUP] = {
        "consumer.session.timeout.ms": "50000",
        "consumer.heartbeat.interval.ms": "7000",
    }
    a, b = Consumer(cluster, "a"), Consumer(cluster, "b")
    a.join()
    assert b.join().heartbeat_interval_ms == 7000
    a.poll()
    b.poll()
    cluster.advance(49_000)
    b.poll()
    cluster.advance(1_000)  # a's session (50 s from its last heartbeat) expires, not b's
    assert set(cluster.group().members) == {"b"}
    b.poll()
    assert len(b.partitions()) == 6
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_a_member_that_does_not_revoke_in_time_is_fenced(cluster):
    a, b = Consumer(cluster, "a"), Consumer(cluster, "b")
    a.join()
    cluster.advance(1)
    b.join()
    # a is asked to revoke but keeps reporting every partition
    cluster.heartbeat("a", 1, owned_partitions=a.owned)
    assert cluster.group().members["a"].current.state == MemberState.UNREVOKED_PARTITIONS
    cluster.heartbeat("b", b.epoch, owned_partitions={})
    cluster.advance(REBALANCE_TIMEOUT_MS)
    assert set(cluster.group().members) == {"b"}


def test_replay_restores_the_timers(cluster):
    a = Consumer(cluster, "a")
    a.join()
    fresh = cluster.replayed()
    fresh.on_loaded(cluster.now)
    assert fresh.timer.deadline(session_key(GROUP, "a")) == cluster.now + 45_000


def test_offset_commits_and_fetches_are_checked_against_member_epochs(cluster):
    a = Consumer(cluster, "a")
    a.join()
    group = cluster.group()
    assert group.validate_offset_commit("a", 1, None) == ErrorCode.none
    assert group.validate_offset_commit("a", 0, None) == ErrorCode.stale_member_epoch
    assert group.validate_offset_commit("x", 1, None) == ErrorCode.unknown_member_id
    assert group.validate_offset_commit("", -1, None) == ErrorCode.unknown_member_id
    assert group.validate_offset_fetch(None, -1) == ErrorCode.none
    assert group.validate_offset_fetch("a", 2) == ErrorCode.stale_member_epoch
    a.leave()
    assert group.validate_offset_commit("", -1, None) == ErrorCode.none
    assert (group.group_type, group.protocol_type, group.is_empty()) == (
        "consumer",
        "consumer",
        True,
    )


def test_tombstones_delete_the_group(cluster):
    a = Consumer(cluster, "a")
    a.join()
    group = cluster.group()
    cluster.apply(group.tombstones())
    assert GROUP not in cluster.coordinator.groups and group.state_name == "Dead"
    assert state(cluster.replayed()) == {}


def test_an_empty_classic_group_becomes_a_consumer_group(cluster):
    cluster.apply([Record(GroupMetadataKey(GROUP), GroupMetadataValue("consumer", generation=4))])
    assert cluster.coordinator.groups[GROUP].group_type == "classic"
    Consumer(cluster, "a").join()
    assert cluster.log[-7] == Record(GroupMetadataKey(GROUP), None)
    assert cluster.group().group_type == "consumer"
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_a_live_classic_group_is_not_taken_over(cluster):
    member = MemberMetadata("classic-1", client_id="c", client_host="h", session_timeout=10_000)
    value = GroupMetadataValue("consumer", 1, "range", "classic-1", members=(member,))
    cluster.apply([Record(GroupMetadataKey(GROUP), value)])
    response = cluster.heartbeat(
        "a", 0, rebalance_timeout_ms=1, owned_partitions={}, subscribed_topic_names=("foo",)
    )
    assert (response.error_code, response.error_message) == (
        ErrorCode.group_id_not_found,
        f"Group {GROUP} is not a consumer group.",
    )


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(st.sampled_from(["join", "poll", "leave", "grow"]), st.integers(0, 4)),
        max_size=40,
    )
)
def test_any_sequence_of_changes_never_gives_a_partition_to_two_members(steps):
    cluster = Cluster()
    cluster.create_topic("foo", 4)
    cluster.create_topic("bar", 3)
    subscriptions = [("foo",), ("foo", "bar"), ("bar",)]
    consumers: dict[int, Consumer] = {}
    for action, n in steps:
        if action == "join" and n not in consumers:
            topics = subscriptions[n % len(subscriptions)]
            assignor = ("uniform", "range")[n % 2]
            consumers[n] = Consumer(
                cluster, f"m{n}", subscribed_topic_names=topics, server_assignor=assignor
            )
            consumers[n].join()
        elif action == "poll" and n in consumers:
            consumers[n].poll()
        elif action == "leave" and n in consumers:
            consumers.pop(n).leave()
        elif action == "grow":
            topic = cluster.image.topic(("foo", "bar")[n % 2])
            cluster.image.put(TopicMetadata(topic.name, topic.topic_id, topic.partitions + 1))
            cluster.apply(cluster.consumer.on_metadata_change(cluster.now))
        assert_no_partition_owned_twice(*consumers.values())

    # Left alone, the members converge on their targets within a few heartbeats each: every
    # subscribed partition is consumed by exactly one member.
    for _ in range(4):
        for c in consumers.values():
            c.poll()
    if consumers:
        group = cluster.group()
        assert group.state_name == "Stable"
        assert all(
            c.owned == group.target_assignment.get(c.member_id, {}) for c in consumers.values()
        )
        subscribed = {
            t for c in consumers.values() for t in c.subscription["subscribed_topic_names"]
        }
        expected = {
            (cluster.image.topic(t).topic_id, p)
            for t in subscribed
            for p in range(cluster.image.topic(t).partitions)
        }
        assert set().union(*(c.partitions() for c in consumers.values())) == expected
    assert state(cluster.replayed()) == state(cluster.coordinator)


def test_snapshot_records_rebuild_the_group(cluster):
    a, b = Consumer(cluster, "a"), Consumer(cluster, "b")
    a.join()
    b.join()
    a.poll()  # mid-reconciliation: a still revokes what b is waiting for
    fresh = GroupCoordinator(cluster.config, cluster.image)
    for record in cluster.group().snapshot_records():
        fresh.replay(decode_record(*encode_record(record)))
    assert state(fresh) == state(cluster.coordinator)


def test_a_group_session_timeout_config_decides_when_members_are_fenced(cluster):
    cluster.group_configs[GROUP] = {"consumer.session.timeout.ms": "50000"}
    a = Consumer(cluster, "a")
    a.join()
    cluster.advance(45_001)  # past the broker default, within the group's own timeout
    assert "a" in cluster.group().members
    cluster.advance(5_000)
    assert "a" not in cluster.group().members
