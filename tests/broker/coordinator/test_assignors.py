"""The server-side assignors: complete, disjoint, balanced and sticky, on any input."""

from __future__ import annotations

import uuid
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from broker.coordinator.assignors import MemberSpec, range_assign, uniform_assign

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def groups(draw, homogeneous: bool):
    """(members, partition counts): random subscriptions and random (even invalid, overlapping
    or stale) current assignments, as a coordinator may hand over after topic changes."""
    counts = {t: draw(st.integers(0, 12)) for t in TOPICS}
    member_ids = draw(
        st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=7, unique=True)
    )
    shared = frozenset(draw(st.sets(st.sampled_from(TOPICS), min_size=1)))
    members = {}
    for member_id in member_ids:
        subscribed = shared if homogeneous else frozenset(draw(st.sets(st.sampled_from(TOPICS))))
        current = {
            t: frozenset(draw(st.sets(st.integers(0, 14), max_size=6)))
            for t in draw(st.sets(st.sampled_from(TOPICS), max_size=3))
        }
        members[member_id] = MemberSpec(subscribed, current)
    return members, counts


def partitions_of(assignment) -> list[tuple[uuid.UUID, int]]:
    return [(t, p) for t, ps in assignment.items() for p in ps]


def assert_valid(members, counts, result) -> None:
    """Every partition of a subscribed topic goes to exactly one of its subscribers."""
    assert set(result) == set(members)
    owned = Counter(tp for a in result.values() for tp in partitions_of(a))
    expected = {
        (t, p)
        for spec in members.values()
        for t in spec.subscribed_topic_ids
        for p in range(counts[t])
    }
    assert set(owned) == expected, "complete, and nothing else"
    assert all(n == 1 for n in owned.values()), "disjoint"
    for member_id, assignment in result.items():
        assert set(assignment) <= members[member_id].subscribed_topic_ids
        assert all(ps for ps in assignment.values()), "no empty topic entries"


def valid_current(members, counts, member_id) -> set[tuple[uuid.UUID, int]]:
    spec = members[member_id]
    return {
        (t, p)
        for t, p in partitions_of(spec.current)
        if t in spec.subscribed_topic_ids and p < counts[t]
    }


def with_current(members, result):
    return {m: MemberSpec(spec.subscribed_topic_ids, result[m]) for m, spec in members.items()}


@given(groups(homogeneous=True))
def test_uniform_with_identical_subscriptions_is_balanced_within_one(group):
    members, counts = group
    result = uniform_assign(members, counts)
    assert_valid(members, counts, result)
    loads = [len(partitions_of(a)) for a in result.values()]
    assert max(loads) - min(loads) <= 1


@given(groups(homogeneous=False))
def test_uniform_with_different_subscriptions_cannot_be_improved_by_one_move(group):
    members, counts = group
    result = uniform_assign(members, counts)
    assert_valid(members, counts, result)
    load = {m: len(partitions_of(a)) for m, a in result.items()}
    for giver, assignment in result.items():
        for receiver, spec in members.items():
            if load[receiver] < load[giver] - 1:
                assert not set(assignment) & spec.subscribed_topic_ids, (giver, receiver)


@given(groups(homogeneous=True))
def test_uniform_keeps_every_member_up_to_its_fair_share(group):
    members, counts = group
    result = uniform_assign(members, counts)
    fair_share = sum(len(partitions_of(a)) for a in result.values()) // len(members)
    for member_id, assignment in result.items():
        kept = valid_current(members, counts, member_id) & set(partitions_of(assignment))
        # A member keeps its partitions up to the fair share, unless another member earlier in
        # id order claimed the same ones in an overlapping current assignment.
        claimed_before = {
            tp
            for other in members
            if other < member_id
            for tp in valid_current(members, counts, other)
        }
        mine = valid_current(members, counts, member_id) - claimed_before
        assert len(kept) >= min(len(mine), fair_share)


@given(groups(homogeneous=False))
def test_uniform_is_stable_on_its_own_output(group):
    members, counts = group
    result = uniform_assign(members, counts)
    assert uniform_assign(with_current(members, result), counts) == result


@given(groups(homogeneous=False))
def test_range_gives_each_subscriber_its_quota_of_each_topic(group):
    members, counts = group
    result = range_assign(members, counts)
    assert_valid(members, counts, result)
    for topic_id, count in counts.items():
        subscribers = [m for m, s in members.items() if topic_id in s.subscribed_topic_ids]
        if not subscribers:
            continue
        quota = count // len(subscribers)
        sizes = Counter(len(result[m].get(topic_id, ())) for m in subscribers)
        assert set(sizes) <= {quota, quota + 1}
        assert sizes[quota + 1] == count % len(subscribers)


@given(groups(homogeneous=False))
def test_range_is_sticky_up_to_the_quota_and_stable_on_its_own_output(group):
    members, counts = group
    result = range_assign(members, counts)
    for topic_id, count in counts.items():
        subscribers = [m for m, s in members.items() if topic_id in s.subscribed_topic_ids]
        for member_id in subscribers:
            quota = count // len(subscribers)
            mine = {p for t, p in valid_current(members, counts, member_id) if t == topic_id}
            claimed = {
                p
                for other in subscribers
                if other < member_id
                for t, p in valid_current(members, counts, other)
                if t == topic_id
            }
            kept = (mine - claimed) & result[member_id].get(topic_id, frozenset())
            assert len(kept) >= min(len(mine - claimed), quota)
    assert range_assign(with_current(members, result), counts) == result


def test_range_from_scratch_hands_out_contiguous_ranges_in_member_id_order():
    t1, t2 = TOPICS[:2]
    members = {m: MemberSpec(frozenset({t1, t2})) for m in ("c", "a", "b")}
    result = range_assign(members, {t1: 7, t2: 3})
    assert result == {
        "a": {t1: frozenset({0, 1, 2}), t2: frozenset({0})},
        "b": {t1: frozenset({3, 4}), t2: frozenset({1})},
        "c": {t1: frozenset({5, 6}), t2: frozenset({2})},
    }


def test_uniform_moves_only_what_a_new_member_needs():
    topic = TOPICS[0]
    before = {
        "a": MemberSpec(frozenset({topic}), {topic: frozenset({0, 1, 2})}),
        "b": MemberSpec(frozenset({topic}), {topic: frozenset({3, 4, 5})}),
        "c": MemberSpec(frozenset({topic})),
    }
    result = uniform_assign(before, {topic: 6})
    assert len(result["c"][topic]) == 2
    assert result["a"][topic] <= {0, 1, 2} and result["b"][topic] <= {3, 4, 5}
