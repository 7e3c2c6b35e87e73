"""The classic group protocol as a state machine: requests and timers in, records and responses
out, time passed explicitly. Every record goes through the `__consumer_offsets` codec and is
replayed, as the runtime does; "restart" replays the whole log into a fresh manager."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator.classic_group import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    ClassicGroupManager,
    JoinRequest,
    JoinResponse,
    MemberIdentity,
    Protocol,
    SyncRequest,
    decode_subscribed_topics,
)
from broker.coordinator.config import GroupCoordinatorConfig
from broker.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    decode_record,
    encode_record,
)
from broker.coordinator.runtime import Deferred, Record, Timer

SESSION, REBALANCE, DELAY = 10_000, 30_000, 3_000


def subscription(*topics: str, version: int = 1) -> bytes:
    """A ConsumerProtocolSubscription as Java clients write it (v1: topics, user data, owned
    partitions)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">ii", -1, 0)


RANGE = (Protocol("range", subscription("t")),)


class Coordinator:
    """The runtime contract without sockets or a log file: an operation's records are encoded,
    kept and replayed before its response is looked at; due timers run the same way."""

    def __init__(self, log: list[Record] | None = None, **config) -> None:
        config.setdefault("initial_rebalance_delay_ms", DELAY)
        self.config = GroupCoordinatorConfig(**config)
        self.groups: dict[str, object] = {}
        self.timer = Timer()
        self.manager = ClassicGroupManager(self.groups, self.timer, self.config)
        self.now = 1_000_000
        self.log: list[Record] = []
        for record in log or ():
            self.apply([record])

    def apply(self, records: list[Record]) -> None:
        for record in records:
            replayed = decode_record(*encode_record(record))
            self.log.append(replayed)
            self.manager.replay(replayed.key, replayed.value)

    def run(self, op):
        result = op(self.now)
        self.apply(result.records)
        return result.response

    def advance(self, ms: int) -> None:
        self.now += ms
        for _, task in self.timer.expire(self.now):
            self.apply(task(self.now))

    def end_initial_rebalance(self) -> None:
        """Members that joined after the first extend the initial delay once more."""
        self.advance(DELAY)
        self.advance(DELAY)

    def restart(self, **config) -> Coordinator:
        fresh = Coordinator(self.log, **{**self.config.__dict__, **config})
        fresh.now = self.now
        fresh.manager.on_loaded(fresh.now)
        return fresh

    # -- requests ----------------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        protocols: tuple[Protocol, ...] = RANGE,
        protocol_type: str = "consumer",
        session: int = SESSION,
        rebalance: int = REBALANCE,
        version: int = 9,
        client_id: str = "client",
    ) -> Deferred[JoinResponse]:
        request = JoinRequest(
            group,
            member_id,
            instance,
            client_id,
            "/127.0.0.1",
            session,
            rebalance,
            protocol_type,
            protocols,
            version,
        )
        return self.run(lambda now: self.manager.join_group(request, now))

    def new_member(self, **kwargs) -> str:
        """A v4+ member's first JoinGroup: MEMBER_ID_REQUIRED hands out its id."""
        response = self.join(**kwargs).value
        assert response.error == ErrorCode.member_id_required
        return response.member_id

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ):
        request = SyncRequest(
            group,
            member_id,
            instance,
            generation,
            protocol_type,
            protocol_name,
            assignments or {},
        )
        return self.run(lambda now: self.manager.sync_group(request, now))

    def heartbeat(self, member_id: str, generation: int, *, instance=None, group="g"):
        return self.run(
            lambda now: self.manager.heartbeat(group, member_id, instance, generation, now)
        )

    def leave(self, *members: tuple[str, str | None], group: str = "g"):
        identities = [MemberIdentity(m, i) for m, i in members]
        return self.run(lambda now: self.manager.leave_group(group, identities, now))

    def state(self, group: str = "g") -> str:
        g = self.manager.group(group)
        return g.state_name if g is not None else "Dead"

    def joined_group(self, n: int, **join_kwargs) -> tuple[list[str], int]:
        """n members through the join phase of a new group (CompletingRebalance); returns their
        ids, the leader first, and the generation."""
        ids = [self.new_member(**join_kwargs) for _ in range(n)]
        joins = [self.join(i, **join_kwargs) for i in ids]
        self.end_initial_rebalance()
        leader = joins[0].value.leader
        ids.sort(key=lambda i: i != leader)
        return ids, joins[0].value.generation_id

    def stable_group(self, n: int, **join_kwargs) -> tuple[list[str], int]:
        """n members joined and synced, each assigned its own id; ids (leader first) and
        generation."""
        ids, generation = self.joined_group(n, **join_kwargs)
        group = join_kwargs.get("group", "g")
        syncs = [
            self.sync(i, generation, {m: m.encode() for m in ids}, group=group)
            for i in reversed(ids)
        ]
        assert all(s.value.error == ErrorCode.none for s in syncs)
        assert self.state(group) == "Stable"
        return ids, generation


def last_group_record(c: Coordinator) -> GroupMetadataValue:
    return [r.value for r in c.log if isinstance(r.key, GroupMetadataKey)][-1]


# -- joining ---------------------------------------------------------------------------------


def test_first_join_without_member_id_gets_one_and_creates_the_group():
    c = Coordinator()
    response = c.join(client_id="app").value
    assert response.error == ErrorCode.member_id_required
    assert response.member_id.startswith("app-")
    # The group exists from now on, persisted as an empty group.
    assert c.state() == "Empty"
    assert c.log == [
        Record(
            GroupMetadataKey("g"),
            GroupMetadataValue(protocol_type="", generation=0, current_state_timestamp=c.now),
        )
    ]


def test_joins_before_v4_are_admitted_without_a_second_round_trip():
    c = Coordinator()
    join = c.join(version=3)
    assert not join.done and c.state() == "PreparingRebalance"
    c.end_initial_rebalance()
    assert join.value.error == ErrorCode.none and join.value.member_id.startswith("client-")
    assert join.value.leader == join.value.member_id


def test_initial_rebalance_waits_for_the_delay_and_extends_it_while_members_arrive():
    c = Coordinator()
    a = c.new_member()
    join_a = c.join(a)
    c.advance(DELAY - 1)
    b = c.new_member()
    join_b = c.join(b)
    c.advance(1)  # the first delay ran out, but b arrived: wait once more
    c.advance(DELAY - 1)
    assert not join_a.done
    c.advance(1)
    assert join_a.done and join_b.done
    leader, follower = join_a.value, join_b.value
    assert leader.generation_id == follower.generation_id == 1
    assert leader.leader == follower.leader == a
    assert leader.protocol_type == "consumer" and leader.protocol_name == "range"
    assert {m.member_id for m in leader.members} == {a, b}
    assert all(m.metadata == RANGE[0].metadata for m in leader.members)
    assert follower.members == ()
    assert c.state() == "CompletingRebalance"


def test_initial_delay_never_exceeds_the_rebalance_timeout():
    c = Coordinator()
    first = c.join(c.new_member(rebalance=3 * DELAY), rebalance=3 * DELAY)
    waited = 0
    while not first.done:  # a new member in every delay
        c.join(c.new_member(rebalance=3 * DELAY), rebalance=3 * DELAY)
        c.advance(DELAY)
        waited += DELAY
    assert waited == 3 * DELAY


def test_protocol_is_chosen_by_vote_among_those_every_member_supports():
    c = Coordinator()

    def protocols(*names):
        return tuple(Protocol(n, n.encode()) for n in names)

    a = c.new_member(protocols=protocols("roundrobin", "range"))
    b = c.new_member(protocols=protocols("range", "roundrobin", "sticky"))
    d = c.new_member(protocols=protocols("range", "roundrobin"))
    joins = [
        c.join(a, protocols=protocols("roundrobin", "range")),
        c.join(b, protocols=protocols("range", "roundrobin", "sticky")),
        c.join(d, protocols=protocols("range", "roundrobin")),
    ]
    c.end_initial_rebalance()
    assert {j.value.protocol_name for j in joins} == {"range"}
    # A newcomer must support a protocol all the members support.
    assert c.join(protocols=protocols("sticky")).value.error == (
        ErrorCode.inconsistent_group_protocol
    )


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [("connect", RANGE), ("consumer", (Protocol("sticky", b""),))],
)
def test_inconsistent_protocols_are_refused(protocol_type, protocols):
    c = Coordinator()
    c.stable_group(1)
    response = c.join(protocol_type=protocol_type, protocols=protocols).value
    assert response.error == ErrorCode.inconsistent_group_protocol


def test_an_empty_group_needs_a_protocol_type_and_protocols():
    c = Coordinator()
    assert c.join(protocol_type="").value.error == ErrorCode.inconsistent_group_protocol
    assert c.join(protocols=()).value.error == ErrorCode.inconsistent_group_protocol


@pytest.mark.parametrize("session", [5_999, 1_800_001])
def test_session_timeout_must_be_within_the_broker_bounds(session):
    c = Coordinator()
    response = c.join("m", session=session).value
    assert response == JoinResponse(ErrorCode.invalid_session_timeout, "m")
    assert c.log == []


def test_requests_need_a_group_id():
    c = Coordinator()
    assert c.join(group="").value.error == ErrorCode.invalid_group_id
    assert c.sync("m", 1, group="").value.error == ErrorCode.invalid_group_id
    assert c.heartbeat("m", 1, group="") == ErrorCode.invalid_group_id
    assert c.leave(("m", None), group="").error == ErrorCode.invalid_group_id


def test_unknown_members_of_unknown_groups():
    c = Coordinator()
    assert c.join("someone").value == JoinResponse(ErrorCode.unknown_member_id, "someone")
    assert c.sync("someone", 1).value.error == ErrorCode.unknown_member_id
    assert c.heartbeat("someone", 1) == ErrorCode.unknown_member_id
    left = c.leave(("someone", None)).members
    assert [m.error for m in left] == [ErrorCode.unknown_member_id]
    assert c.log == []


def test_group_max_size():
    c = Coordinator(classic_max_size=2)
    (a, b), _ = c.stable_group(2)
    assert c.join().value.error == ErrorCode.group_max_size_reached
    # During a rebalance the places go to whoever (re)joins first: b comes too late.
    c.join(a)
    c.join(c.new_member())
    assert c.join(b).value.error == ErrorCode.group_max_size_reached
    assert b not in c.manager.group("g").members


# -- syncing ---------------------------------------------------------------------------------


def test_followers_wait_for_the_leaders_assignment_which_is_persisted():
    c = Coordinator()
    (a, b), generation = c.joined_group(2)
    follower_sync = c.sync(b, generation)
    assert not follower_sync.done
    log_size = len(c.log)
    leader_sync = c.sync(a, generation, {a: b"A", b: b"B"})
    assert leader_sync.value.assignment == b"A"
    assert follower_sync.value.assignment == b"B"
    assert follower_sync.value.protocol_name == "range"
    assert c.state() == "Stable"
    (record,) = c.log[log_size:]
    assert record.value.generation == generation and record.value.leader == a
    assert record.value.protocol == "range" and record.value.protocol_type == "consumer"
    assert [(m.member_id, m.assignment, m.subscription) for m in record.value.members] == [
        (a, b"A", RANGE[0].metadata),
        (b, b"B", RANGE[0].metadata),
    ]
    # Stable: a late SyncGroup gets the stored assignment at once.
    assert c.sync(b, generation).value.assignment == b"B"


def test_members_the_leader_left_out_get_an_empty_assignment():
    c = Coordinator()
    (a, b), generation = c.joined_group(2)
    c.sync(a, generation, {a: b"A", "stranger": b"X"})
    assert c.sync(b, generation).value.assignment == b""
    assert [m.member_id for m in last_group_record(c).members] == [a, b]


def test_sync_errors():
    c = Coordinator()
    (a, b), generation = c.stable_group(2)
    assert c.sync(a, generation + 1).value.error == ErrorCode.illegal_generation
    assert c.sync("x", generation).value.error == ErrorCode.unknown_member_id
    assert c.sync(a, generation, instance="i").value.error == ErrorCode.unknown_member_id
    mismatch = c.sync(a, generation, protocol_type="connect", protocol_name="range").value
    assert mismatch.error == ErrorCode.inconsistent_group_protocol
    assert c.sync(a, generation, protocol_name="roundrobin").value.error == (
        ErrorCode.inconsistent_group_protocol
    )
    ok = c.sync(a, generation, protocol_type="consumer", protocol_name="range").value
    assert ok.error == ErrorCode.none and ok.assignment == a.encode()
    c.join(a)  # the leader rejoins: a rebalance
    assert c.sync(a, generation).value.error == ErrorCode.rebalance_in_progress


def test_a_rebalance_during_the_sync_phase_sends_parked_followers_back_to_join():
    c = Coordinator()
    (a, b), generation = c.joined_group(2)
    parked = c.sync(b, generation)
    c.join(c.new_member())  # a newcomer
    assert parked.value.error == ErrorCode.rebalance_in_progress
    assert c.state() == "PreparingRebalance"


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout():
    c = Coordinator()
    (a, b), generation = c.joined_group(2)
    c.sync(a, generation, {a: b"A", b: b"B"})
    for _ in range(REBALANCE // (SESSION // 2)):  # b heartbeats but never sends SyncGroup
        c.advance(SESSION // 2)
        c.heartbeat(a, generation)
        c.heartbeat(b, generation)
    assert c.state() == "PreparingRebalance"
    assert set(c.manager.group("g").members) == {a}
    rejoin = c.join(a)
    assert rejoin.value.generation_id == generation + 1


# -- heartbeats and sessions ---------------------------------------------------------------


def test_heartbeats_keep_a_member_alive_and_report_rebalances():
    c = Coordinator()
    (a, b), generation = c.stable_group(2)
    for _ in range(3):
        c.advance(SESSION - 1)
        assert c.heartbeat(a, generation) == ErrorCode.none
        assert c.heartbeat(b, generation) == ErrorCode.none
    assert c.heartbeat(a, generation - 1) == ErrorCode.illegal_generation
    assert c.heartbeat("x", generation) == ErrorCode.unknown_member_id
    c.join(c.new_member())
    assert c.heartbeat(a, generation) == ErrorCode.rebalance_in_progress


def test_a_member_whose_session_expires_is_removed_and_the_group_rebalances():
    c = Coordinator()
    (a, b), generation = c.stable_group(2)
    c.advance(SESSION - 1)
    c.heartbeat(a, generation)
    c.advance(1)  # b's session ends
    assert c.state() == "PreparingRebalance"
    assert c.heartbeat(b, generation) == ErrorCode.unknown_member_id
    rejoin = c.join(a)  # every remaining member rejoined: the next generation at once
    assert rejoin.value.generation_id == generation + 1
    assert [m.member_id for m in rejoin.value.members] == [a]


def test_members_that_do_not_rejoin_before_the_rebalance_timeout_are_removed():
    c = Coordinator()
    (a, b), generation = c.stable_group(2)
    c.advance(SESSION - 1)
    rejoin = c.join(b, protocols=(Protocol("range", b"new"),))  # new metadata: a rebalance
    c.heartbeat(b, generation)
    assert not rejoin.done
    for _ in range(REBALANCE // (SESSION // 2)):
        c.advance(SESSION // 2)
        c.heartbeat(a, generation)  # a keeps heartbeating but never rejoins
    assert rejoin.done
    assert rejoin.value.leader == b and [m.member_id for m in rejoin.value.members] == [b]
    assert c.heartbeat(a, generation) == ErrorCode.unknown_member_id


def test_the_last_member_to_go_leaves_an_empty_group_persisted_at_the_next_generation():
    c = Coordinator()
    (a,), generation = c.stable_group(1)
    c.advance(SESSION)
    assert c.state() == "Empty"
    empty = last_group_record(c)
    assert empty.generation == generation + 1 and empty.members == () and empty.leader is None
    assert empty.protocol is None and empty.protocol_type == "consumer"


def test_pending_members_that_never_rejoin_expire():
    c = Coordinator()
    pending = c.new_member()
    c.advance(SESSION)
    assert c.join(pending).value.error == ErrorCode.unknown_member_id


def test_a_new_member_parked_in_join_group_expires_after_the_new_member_timeout():
    # It cannot heartbeat while its first JoinGroup is parked (its client may be gone): it is
    # dropped after the new-member join timeout, not the (here much longer) rebalance timeout.
    long = 10 * NEW_MEMBER_JOIN_TIMEOUT_MS
    c = Coordinator()
    (a,), generation = c.stable_group(1, rebalance=long)
    newcomer = c.join(c.new_member(rebalance=long), rebalance=long)
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // (SESSION // 2)):
        c.advance(SESSION // 2)
        assert c.heartbeat(a, generation) == ErrorCode.rebalance_in_progress
    assert newcomer.value == JoinResponse(ErrorCode.unknown_member_id)
    assert set(c.manager.group("g").members) == {a}


# -- leaving ---------------------------------------------------------------------------------


def test_leave_group_batch_by_member_and_instance_ids():
    c = Coordinator()
    a = c.new_member()
    joins = [c.join(a), c.join(instance="s1"), c.join(instance="s2")]
    c.end_initial_rebalance()
    ids = [j.value.member_id for j in joins]
    c.sync(ids[0], joins[0].value.generation_id, {})
    response = c.leave((a, None), ("", "s1"), (ids[2], "s1"), ("ghost", None), ("", "unknown"))
    assert [m.error for m in response.members] == [
        ErrorCode.none,
        ErrorCode.none,
        ErrorCode.unknown_member_id,  # s1 is gone by now
        ErrorCode.unknown_member_id,
        ErrorCode.unknown_member_id,
    ]
    assert [m.member_id for m in response.members] == [a, "", ids[2], "ghost", ""]
    assert set(c.manager.group("g").members) == {ids[2]}
    assert c.leave(("impostor", "s2")).members[0].error == ErrorCode.fenced_instance_id
    c.leave((ids[2], "s2"))
    assert c.state() == "Empty" and last_group_record(c).members == ()


def test_a_member_leaving_during_the_join_phase_lets_it_complete():
    c = Coordinator()
    (a, b), generation = c.stable_group(2)
    rejoin = c.join(a)
    c.leave((b, None))
    assert rejoin.value.generation_id == generation + 1


def test_a_pending_member_may_leave():
    c = Coordinator()
    pending = c.new_member()
    assert c.leave((pending, None)).members[0].error == ErrorCode.none
    assert c.join(pending).value.error == ErrorCode.unknown_member_id


# -- static membership ---------------------------------------------------------------------


def test_a_static_member_restarting_in_a_stable_group_takes_its_place_without_rebalance():
    c = Coordinator()
    joins = [c.join(instance="s1"), c.join(instance="s2")]
    c.end_initial_rebalance()
    first = {j.value.member_id: j.value for j in joins}
    generation = joins[0].value.generation_id
    leader = joins[0].value.leader
    for member_id in first:
        c.sync(member_id, generation, {m: m.encode() for m in first}, instance=None)
    follower_id = next(m for m in first if m != leader)
    follower_instance = "s2" if joins[1].value.member_id == follower_id else "s1"
    rejoin = c.join(instance=follower_instance, client_id="restarted").value
    assert rejoin.error == ErrorCode.none
    assert rejoin.member_id != follower_id and rejoin.member_id.startswith(follower_instance)
    assert rejoin.generation_id == generation and rejoin.leader == leader
    assert c.state() == "Stable"
    record = last_group_record(c)
    assert record.generation == generation
    assert {m.member_id for m in record.members} == {leader, rejoin.member_id}
    # It keeps its assignment; its old incarnation is fenced.
    assert c.sync(rejoin.member_id, generation, instance=follower_instance).value.assignment == (
        follower_id.encode()
    )
    assert c.heartbeat(follower_id, generation, instance=follower_instance) == (
        ErrorCode.fenced_instance_id
    )
    assert c.heartbeat(rejoin.member_id, generation, instance=follower_instance) == ErrorCode.none


@pytest.mark.parametrize("version", [5, 9])
def test_a_static_leader_restarting_keeps_the_assignment(version):
    c = Coordinator()
    joins = [c.join(instance="s1", version=version), c.join(instance="s2", version=version)]
    c.end_initial_rebalance()
    old_leader = joins[0].value.leader
    generation = joins[0].value.generation_id
    for j in joins:
        c.sync(j.value.member_id, generation, {j.value.member_id: b"x" for j in joins})
    instance = "s1" if joins[0].value.member_id == old_leader else "s2"
    rejoin = c.join(instance=instance, version=version).value
    assert c.state() == "Stable" and rejoin.generation_id == generation
    assert c.manager.group("g").leader_id == rejoin.member_id
    if version >= 9:
        # The leader is told who it is and that the assignment stands.
        assert rejoin.leader == rejoin.member_id and rejoin.skip_assignment
        assert {m.member_id for m in rejoin.members} == set(c.manager.group("g").members)
    else:
        # Older clients hear the old leader id: they follow and do not reassign.
        assert rejoin.leader == old_leader and not rejoin.skip_assignment
        assert rejoin.members == ()


def test_a_static_member_restarting_with_other_protocols_causes_a_rebalance():
    c = Coordinator()
    first = c.join(instance="s1")
    c.end_initial_rebalance()
    generation = first.value.generation_id
    c.sync(first.value.member_id, generation, {})
    rejoin = c.join(instance="s1", protocols=(Protocol("roundrobin", b""), RANGE[0]))
    assert rejoin.value.generation_id == generation + 1
    assert rejoin.value.protocol_name == "roundrobin"


def test_a_static_member_rejoining_during_a_rebalance_fences_its_old_request():
    c = Coordinator()
    old = c.join(instance="s1")
    new = c.join(instance="s1")
    assert old.value.error == ErrorCode.fenced_instance_id
    c.end_initial_rebalance()
    assert new.value.error == ErrorCode.none and new.value.leader == new.value.member_id


def test_static_members_that_do_not_rejoin_stay_until_their_session_ends():
    c = Coordinator()
    joins = [c.join(instance="s1"), c.join(c.new_member())]
    c.end_initial_rebalance()
    static_id = joins[0].value.member_id
    dynamic_id = joins[1].value.member_id
    generation = joins[0].value.generation_id
    for j in joins:
        c.sync(j.value.member_id, generation, {})
    rejoin = c.join(dynamic_id, protocols=(Protocol("range", b"new"),))
    for _ in range(REBALANCE // (SESSION // 2)):  # the static member heartbeats, no more
        c.advance(SESSION // 2)
        c.heartbeat(static_id, generation, instance="s1")
    assert rejoin.value.generation_id == generation + 1
    assert {m.member_id for m in rejoin.value.members} == {static_id, dynamic_id}


# -- persistence -----------------------------------------------------------------------------


def test_restart_rebuilds_a_stable_group_and_rearms_the_sessions():
    c = Coordinator()
    (a, b), generation = c.stable_group(2)
    c = c.restart()
    group = c.manager.group("g")
    assert c.state() == "Stable" and group.generation_id == generation and group.leader_id == a
    assert {m: group.members[m].assignment for m in group.members} == {a: a.encode(), b: b.encode()}
    assert c.sync(b, generation).value.assignment == b.encode()
    assert c.heartbeat(a, generation) == ErrorCode.none
    # Nobody heartbeats any more: both sessions end and the group is empty.
    c.advance(SESSION)
    assert c.state() == "Empty"
    assert c.restart().state() == "Empty"


def test_restart_forgets_a_rebalance_in_progress():
    c = Coordinator()
    (a, b), generation = c.stable_group(2)
    c.join(a)
    c = c.restart()
    assert c.state() == "Stable" and c.manager.group("g").generation_id == generation


def test_restart_applies_the_latest_record_of_each_group():
    c = Coordinator()
    (a,), _ = c.stable_group(1, protocols=RANGE)
    c.join(a, protocols=(Protocol("roundrobin", b"rr"), RANGE[0]))
    c.leave((a, None))
    (b,), generation = c.stable_group(1, protocols=(Protocol("roundrobin", b"rr"),))
    c = c.restart()
    group = c.manager.group("g")
    assert list(group.members) == [b] and group.protocol_name == "roundrobin"
    assert group.generation_id == generation


def test_an_oversized_group_rebalances_after_restart():
    c = Coordinator()
    (a, b), generation = c.stable_group(2)
    c = c.restart(classic_max_size=1)
    assert c.state() == "PreparingRebalance"
    c.join(a)
    assert c.join(b).value.error == ErrorCode.group_max_size_reached


def test_tombstones_delete_the_group():
    c = Coordinator()
    c.stable_group(1)
    c.leave((next(iter(c.manager.group("g").members)), None))
    c.apply(c.manager.group("g").tombstones())
    assert c.manager.group("g") is None and "g" not in c.groups
    assert c.restart().manager.group("g") is None


# -- what the offsets code and DescribeGroups see ---------------------------------------------


def test_offset_commit_validation():
    c = Coordinator()
    c.join(c.new_member())  # a group being formed
    c.end_initial_rebalance()
    group = c.manager.group("g")
    (a,) = group.members
    assert group.validate_offset_commit(a, 1, None) == ErrorCode.rebalance_in_progress
    c.sync(a, 1, {})
    assert group.validate_offset_commit(a, 1, None) == ErrorCode.none
    assert group.validate_offset_commit(a, 0, None) == ErrorCode.illegal_generation
    assert group.validate_offset_commit("x", 1, None) == ErrorCode.unknown_member_id
    assert group.validate_offset_commit(a, 1, "i") == ErrorCode.unknown_member_id
    assert group.validate_offset_commit("", -1, None) == ErrorCode.unknown_member_id
    c.leave((a, None))
    assert group.validate_offset_commit("", -1, None) == ErrorCode.none
    assert group.validate_offset_commit(a, 1, None) == ErrorCode.unknown_member_id


def test_static_offset_commit_of_a_fenced_instance():
    c = Coordinator()
    joins = [c.join(instance="s1")]
    c.end_initial_rebalance()
    old = joins[0].value.member_id
    c.sync(old, 1, {})
    c.join(instance="s1")
    assert c.manager.group("g").validate_offset_commit(old, 1, "s1") == (
        ErrorCode.fenced_instance_id
    )


def test_subscribed_topics_come_from_the_members_subscriptions():
    c = Coordinator()
    a = c.new_member(protocols=(Protocol("range", subscription("t1", "t2")),))
    b = c.new_member(protocols=(Protocol("range", subscription("t2", "t3", version=3)),))
    group_joins = [
        c.join(a, protocols=(Protocol("range", subscription("t1", "t2")),)),
        c.join(b, protocols=(Protocol("range", subscription("t2", "t3", version=3)),)),
    ]
    assert c.manager.group("g").subscribed_topics() is None  # no generation yet
    c.end_initial_rebalance()
    assert group_joins[0].done
    assert c.manager.group("g").subscribed_topics() == {"t1", "t2", "t3"}
    assert c.restart().manager.group("g").subscribed_topics() is None  # not yet stable
    c.sync(a, 1, {})
    assert c.restart().manager.group("g").subscribed_topics() == {"t1", "t2", "t3"}


def test_subscribed_topics_are_unknown_for_other_protocol_types_or_bad_metadata():
    c = Coordinator()
    c.stable_group(1, protocol_type="connect", protocols=(Protocol("default", b"x"),))
    assert c.manager.group("g").subscribed_topics() is None
    c.stable_group(1, group="h", protocols=(Protocol("range", b"\x00\x00\x00\x00\x00\x09"),))
    assert c.manager.group("h").subscribed_topics() is None
    assert decode_subscribed_topics(subscription()) == []


def test_describe_groups():
    c = Coordinator()
    missing = c.manager.describe_group("nope")
    assert missing.state == "Dead" and missing.error == ErrorCode.group_id_not_found
    assert missing.error_message == "Group nope not found."
    (a, _), _ = c.stable_group(2)
    described = c.manager.describe_group("g")
    assert described.state == "Stable" and described.protocol_data == "range"
    assert described.protocol_type == "consumer" and described.error == ErrorCode.none
    member = described.members[0]
    assert member.member_id == a and member.client_id == "client"
    assert member.client_host == "/127.0.0.1"
    assert member.metadata == RANGE[0].metadata and member.assignment == a.encode()
    c.join(a)
    rebalancing = c.manager.describe_group("g")
    assert rebalancing.state == "PreparingRebalance" and rebalancing.protocol_data == ""
    assert rebalancing.members[0].metadata == b""


def test_snapshot_records_restate_the_durable_group():
    c = Coordinator()
    c.stable_group(3)
    group = c.manager.group("g")
    restated = Coordinator(log=group.snapshot_records())
    again = restated.manager.group("g")
    assert (again.state_name, again.generation_id, again.leader_id, again.protocol_name) == (
        group.state_name,
        group.generation_id,
        group.leader_id,
        group.protocol_name,
    )
    assert {m: x.assignment for m, x in again.members.items()} == {
        m: x.assignment for m, x in group.members.items()
    }
