"""Replica placement for new partitions: the striped placer, and hand-made assignments with
the checks Kafka's controller makes of them (broker.controller.placement)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.controller.placement import (
    PlacementError,
    assigned_replicas,
    assignment_problem,
    place_replicas,
    replication_problem,
    unusable_assignment,
)


@given(
    brokers=st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True),
    data=st.data(),
)
def test_place_replicas_stripes_replicas_and_leadership_evenly(brokers, data):
    replication = data.draw(st.integers(1, len(brokers)), label="replication")
    partitions = data.draw(st.integers(1, 60), label="partitions")
    first = data.draw(st.integers(0, 30), label="first_partition")
    placed = place_replicas(brokers, partitions, replication, first)
    assert sorted(placed) == list(range(first, first + partitions))
    ordered = sorted(brokers)
    for r in placed.values():
        assert len(r.replicas) == replication and len(set(r.replicas)) == replication
        assert set(r.replicas) <= set(brokers)
        # New partitions are empty: every replica is in sync, the first leads.
        assert r.isr == r.replicas and r.leader == r.preferred_leader == r.replicas[0]
        assert (r.leader_epoch, r.partition_epoch) == (0, 0)
        assert (r.adding_replicas, r.removing_replicas) == ((), ())
        # The followers are the brokers after the leader.
        at = ordered.index(r.leader)
        assert r.replicas == tuple(ordered[(at + i) % len(ordered)] for i in range(replication))
    # Leaders go round the brokers, partition after partition.
    for index in range(first, first + partitions - 1):
        at = ordered.index(placed[index].leader)
        assert placed[index + 1].leader == ordered[(at + 1) % len(ordered)]
    # So every broker leads (and is the n-th replica of) as many partitions as any other, +-1.
    for position in range(replication):
        counts = Counter(r.replicas[position] for r in placed.values())
        per_broker = [counts[b] for b in brokers]
        assert max(per_broker) - min(per_broker) <= 1


def test_place_replicas_refuses_more_replicas_than_brokers():
    with pytest.raises(PlacementError, match="only 2 broker"):
        place_replicas([1, 2], 1, 3)
    with pytest.raises(PlacementError, match="only 0 broker"):
        place_replicas([], 1, 1)


def test_assigned_replicas_are_in_sync_where_usable_and_led_by_the_first_usable():
    placed = assigned_replicas([(3, 1, 2), (2, 3)], usable={1, 2}, first_partition=4)
    assert sorted(placed) == [4, 5]
    assert placed[4].replicas == (3, 1, 2) and placed[4].isr == (1, 2)
    assert placed[4].leader == 1 and placed[4].preferred_leader == 3
    assert placed[5].replicas == (2, 3) and placed[5].isr == (2,) and placed[5].leader == 2
    with pytest.raises(PlacementError, match="partition 5 are fenced"):
        assigned_replicas([(1,), (3,)], usable={1, 2}, first_partition=4)


@pytest.mark.parametrize(
    ("replicas", "replication", "problem"),
    [
        ((), None, "an empty replica list"),
        ((1, 9), None, "broker 9, but no such broker is registered"),
        ((2, 1, 2), None, "the broker 2 more than once"),
        (
            (1, 2),
            3,
            "a partition with 2 replica(s), but this is not consistent with previous "
            "partitions, which have 3 replica(s)",
        ),
        ((2, 1), 2, None),
        ((3,), None, None),
    ],
)
def test_assignment_problem(replicas, replication, problem):
    found = assignment_problem(replicas, {1, 2, 3}, replication)
    assert found is None if problem is None else problem in found


def test_unusable_assignment_names_the_first_partition_without_a_usable_replica():
    assert unusable_assignment([(1, 2), (3,)], usable={2}) == (
        "All brokers specified in the manual partition assignment for partition 1 are fenced "
        "or in controlled shutdown."
    )
    assert unusable_assignment([(1, 2)], usable={2}) is None


def test_replication_problem():
    assert "larger than 0" in replication_problem(0, 3)
    assert "factor of 4 cannot be reached because only 3 broker(s)" in replication_problem(4, 3)
    assert replication_problem(3, 3) is None
