"""The controller's decisions about partitions (broker.controller.elections): ISR and leader
changes as brokers come and go, preferred and unclean elections, reassignments and the
placement of new partitions, as functions of a metadata image."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.controller.elections import (
    cancel_reassignment,
    changed_registration,
    partition_changes,
    preferred_election,
    preferred_leader_changes,
    reassign,
    reassignment_changes,
    unclean_election,
)
from broker.metadata.cluster import NO_LEADER, BrokerRegistration, PartitionRegistration
from broker.metadata.image import MetadataImage, TopicMetadata


def broker(node_id: int, *, fenced: bool = False, shutting_down: bool = False):
    return BrokerRegistration(
        node_id, 100 + node_id, fenced=fenced, in_controlled_shutdown=shutting_down
    )


def image_of(brokers, **topics: dict[int, PartitionRegistration]) -> MetadataImage:
    image = MetadataImage("cluster")
    for name, registrations in topics.items():
        image.put(TopicMetadata(name, uuid.uuid4(), len(registrations)), registrations)
    image.brokers = {b.node_id: b for b in brokers}
    return image


def up(*nodes: int) -> list[BrokerRegistration]:
    return [broker(n) for n in nodes]


def reg(replicas, isr=None, leader=None, *, leader_epoch=4, partition_epoch=9, **reassigning):
    isr = replicas if isr is None else isr
    leader = replicas[0] if leader is None else leader
    return PartitionRegistration(
        tuple(replicas), tuple(isr), leader, leader_epoch, partition_epoch, **reassigning
    )


# -- partition_changes / changed_registration ---------------------------------------------------


@pytest.mark.parametrize("gone", [broker(2, fenced=True), broker(2, shutting_down=True)])
def test_an_unusable_follower_leaves_the_isr(gone):
    r = reg((1, 2, 3))
    image = image_of([broker(1), gone, broker(3)], orders={0: r})
    assert list(partition_changes(image)) == [
        ("orders", 0, 9, replace(r, isr=(1, 3), partition_epoch=10))
    ]


@pytest.mark.parametrize("gone", [broker(1, fenced=True), broker(1, shutting_down=True)])
def test_an_unusable_leader_is_replaced_by_the_first_in_sync_replica_in_replica_order(gone):
    r = reg((1, 2, 3), isr=(1, 3, 2))
    image = image_of([gone, broker(2), broker(3)], orders={0: r})
    assert list(partition_changes(image)) == [
        ("orders", 0, 9, replace(r, isr=(3, 2), leader=2, leader_epoch=5, partition_epoch=10))
    ]


def test_a_broker_gone_but_not_yet_fenced_is_left_as_a_fenced_one_would_be():
    """The controller moves leadership off a broker whose process is gone before it fences
    it (cluster_runtime), so the image still shows it usable then."""
    r = reg((1, 2, 3), isr=(1, 3, 2))
    image = image_of(up(1, 2, 3), orders={0: r})
    fenced = image_of([broker(1, fenced=True), broker(2), broker(3)], orders={0: r})
    assert list(partition_changes(image)) == []
    assert (
        list(partition_changes(image, gone={1}))
        == list(partition_changes(fenced))
        == [("orders", 0, 9, replace(r, isr=(3, 2), leader=2, leader_epoch=5, partition_epoch=10))]
    )


def test_a_broker_not_registered_is_not_usable():
    r = reg((1, 2))
    assert changed_registration(r, {1}) == replace(r, isr=(1,), partition_epoch=10)
    assert list(partition_changes(image_of(up(1), orders={0: r}))) == [
        ("orders", 0, 9, replace(r, isr=(1,), partition_epoch=10))
    ]


def test_nothing_changes_while_every_replica_is_usable():
    image = image_of(
        up(1, 2, 3),
        orders={0: reg((1, 2, 3)), 1: reg((2, 3, 1), isr=(2, 3))},
        clicks={0: reg((3,))},
    )
    assert list(partition_changes(image)) == []


def test_the_last_member_of_the_isr_stays_and_the_partition_waits_for_it():
    r = reg((1, 2, 3), isr=(2,), leader=2)
    offline = changed_registration(r, {1, 3})
    assert offline == replace(r, leader=NO_LEADER, leader_epoch=5, partition_epoch=10)
    assert offline.offline
    # Out-of-sync replicas are never elected (unclean.leader.election.enable is false).
    assert changed_registration(offline, {1, 3}) is None
    # The last in-sync replica back: it leads again.
    assert changed_registration(offline, {2}) == replace(
        offline, leader=2, leader_epoch=6, partition_epoch=11
    )


def test_an_isr_losing_every_member_at_once_keeps_its_last():
    r = reg((1, 2, 3), isr=(1, 3, 2), leader=1)
    assert changed_registration(r, set()) == replace(
        r, isr=(2,), leader=NO_LEADER, leader_epoch=5, partition_epoch=10
    )


def test_partition_changes_covers_every_topic_and_partition():
    image = image_of(
        [broker(1), broker(2, fenced=True), broker(3)],
        orders={0: reg((1, 2)), 1: reg((3, 1)), 2: reg((2, 3))},
        clicks={0: reg((2,))},
    )
    changes = {(t, i): (epoch, new) for t, i, epoch, new in partition_changes(image)}
    assert set(changes) == {("orders", 0), ("orders", 2), ("clicks", 0)}
    assert changes["orders", 0] == (9, reg((1, 2), isr=(1,), partition_epoch=10))
    assert changes["orders", 2] == (
        9,
        reg((2, 3), isr=(3,), leader=3, leader_epoch=5, partition_epoch=10),
    )
    assert changes["clicks", 0][1].offline and changes["clicks", 0][1].isr == (2,)


def test_unclean_leader_election_enable_elects_out_of_the_isr_where_set():
    image = image_of(
        [broker(1), broker(2, fenced=True), broker(3)],
        strict={0: reg((1, 2), isr=(2,), leader=2)},
        lenient={
            0: reg((1, 2), isr=(2,), leader=2),  # its in-sync leader gone: 1 takes over
            1: reg((3, 2), isr=(2,), leader=NO_LEADER),  # already offline: 3 takes over
            2: reg((2, 3), isr=(2, 3), leader=2),  # an in-sync replica is left: clean
            3: reg((2,), isr=(2,), leader=NO_LEADER),  # no replica usable: it waits
        },
    )
    asked = []

    def allowed(topic):
        asked.append(topic.name)
        return topic.name == "lenient"

    changes = {(t, i): new for t, i, _, new in partition_changes(image, allowed)}
    assert sorted(set(asked)) == ["lenient", "strict"]
    assert changes["strict", 0].offline  # the default: the partition waits for broker 2
    assert changes["lenient", 0] == reg(
        (1, 2), isr=(1,), leader=1, leader_epoch=5, partition_epoch=10
    )
    assert changes["lenient", 1] == reg(
        (3, 2), isr=(3,), leader=3, leader_epoch=5, partition_epoch=10
    )
    assert changes["lenient", 2] == reg(
        (2, 3), isr=(3,), leader=3, leader_epoch=5, partition_epoch=10
    )
    assert ("lenient", 3) not in changes
    # Without the setting every partition changes as before.
    assert [new.offline for t, i, _, new in partition_changes(image) if i in (0, 1)] == [True, True]


@st.composite
def registrations(draw):
    """A partition as the controller may find it: an ISR of its replicas, led by one of the
    ISR or by none."""
    replicas = draw(st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True))
    leader = draw(st.sampled_from([*isr, NO_LEADER]))
    epochs = draw(st.tuples(st.integers(0, 50), st.integers(0, 50)))
    return PartitionRegistration(tuple(replicas), tuple(isr), leader, *epochs)


@given(r=registrations(), usable=st.sets(st.integers(0, 6)))
def test_changed_registration_elects_only_usable_in_sync_replicas(r, usable):
    new = changed_registration(r, usable)
    after = r if new is None else new
    in_sync = [m for m in r.isr if m in usable]
    # Usable members stay, unusable ones leave, unless none is left: then the last stays.
    assert after.isr == (tuple(in_sync) or r.isr[-1:])
    if after.leader != NO_LEADER:
        assert after.leader in after.isr and after.leader in usable
        assert after.leader in r.isr and after.leader in r.replicas
    assert (after.leader == NO_LEADER) == (not in_sync)
    if r.leader in in_sync:
        assert after.leader == r.leader  # a usable in-sync leader keeps its leadership
    elif in_sync:
        assert after.leader == next(m for m in r.replicas if m in in_sync)
    assert after.replicas == r.replicas
    if new is not None:
        assert new.partition_epoch == r.partition_epoch + 1
        assert new.leader_epoch == r.leader_epoch + (new.leader != r.leader)
        assert new != r
    # What it decides is stable: applied again, nothing more to do.
    assert changed_registration(after, usable) is None


# -- preferred leaders --------------------------------------------------------------------------


def test_preferred_election_reasons():
    assert preferred_election(reg((1, 2, 3)), {1, 2, 3}) == "not needed"
    assert preferred_election(reg((1, 2, 3), leader=2), {1, 2, 3}) is None
    assert preferred_election(reg((1, 2, 3), isr=(2, 3), leader=2), {1, 2, 3}) == "not available"
    assert preferred_election(reg((1, 2, 3), leader=2), {2, 3}) == "not available"


def test_preferred_leader_changes_move_leadership_back_where_possible():
    image = image_of(
        [broker(1), broker(2), broker(3), broker(4, shutting_down=True)],
        orders={
            0: reg((1, 2, 3)),  # already led by its preferred replica
            1: reg((1, 2, 3), leader=2),  # moves back to 1
            2: reg((1, 2, 3), isr=(2, 3), leader=2),  # 1 out of sync
            3: reg((4, 2, 3), leader=2),  # 4 shutting down
            4: reg((3, 1, 2), leader=1),  # being changed otherwise
        },
    )
    exclude = [("orders", 4, 9, reg((3, 1, 2), isr=(3, 1), leader=1, partition_epoch=10))]
    r = image.partition("orders", 1)
    assert preferred_leader_changes(image, exclude) == [
        ("orders", 1, 9, replace(r, leader=1, leader_epoch=5, partition_epoch=10))
    ]
    assert [(t, i) for t, i, _, _ in preferred_leader_changes(image)] == [
        ("orders", 1),
        ("orders", 4),
    ]


# -- unclean election ---------------------------------------------------------------------------


def test_unclean_election_takes_any_usable_replica():
    offline = reg((1, 2, 3), isr=(3,), leader=NO_LEADER)
    assert unclean_election(offline, {2}) == replace(
        offline, isr=(2,), leader=2, leader_epoch=5, partition_epoch=10
    )
    assert unclean_election(offline, {1, 2}).leader == 1  # replica order
    assert unclean_election(offline, {4, 5}) is None
    assert unclean_election(offline, set()) is None


def test_unclean_election_prefers_a_usable_in_sync_replica():
    offline = reg((1, 2, 3), isr=(3,), leader=NO_LEADER)
    assert unclean_election(offline, {1, 2, 3}) == replace(
        offline, leader=3, leader_epoch=5, partition_epoch=10
    )
    # The first usable in-sync replica in replica order; the ISR keeps its usable members.
    two_in_sync = reg((1, 2, 3), isr=(3, 2), leader=NO_LEADER)
    assert unclean_election(two_in_sync, {1, 2, 3}) == replace(
        two_in_sync, leader=2, leader_epoch=5, partition_epoch=10
    )
    assert unclean_election(two_in_sync, {1, 3}) == replace(
        two_in_sync, isr=(3,), leader=3, leader_epoch=5, partition_epoch=10
    )


# -- reassignments ------------------------------------------------------------------------------


def test_reassign_adds_the_new_replicas_beside_the_old_ones():
    r = reg((1, 2, 3))
    moving = reassign(r, (2, 3, 4))
    assert moving == replace(
        r,
        replicas=(2, 3, 4, 1),
        adding_replicas=(4,),
        removing_replicas=(1,),
        partition_epoch=10,
    )
    # ISR, leader and leader epoch stay until it completes.
    assert (moving.isr, moving.leader, moving.leader_epoch) == ((1, 2, 3), 1, 4)
    assert reassign(r, (4, 5, 6)).replicas == (4, 5, 6, 1, 2, 3)
    assert reassign(r, (1, 2, 3, 4)).removing_replicas == ()
    # Only the order changing: nothing to add or remove.
    assert reassign(r, (3, 1, 2)) == replace(r, replicas=(3, 1, 2), partition_epoch=10)


def test_a_new_target_replaces_a_reassignment_in_progress():
    moving = reassign(reg((1, 2, 3)), (2, 3, 4))
    again = reassign(moving, (2, 3, 5))
    # It starts from every current replica: 4, being added, is now removed like 1 (Kafka's
    # changePartitionReassignment takes all of the partition's replicas as the current ones).
    assert again == replace(
        moving,
        replicas=(2, 3, 5, 4, 1),
        adding_replicas=(5,),
        removing_replicas=(4, 1),
        partition_epoch=11,
    )
    # Back to the replicas it had: what was being added is removed, nothing is added.
    back = reassign(moving, (1, 2, 3))
    assert (back.replicas, back.adding_replicas, back.removing_replicas) == (
        (1, 2, 3, 4),
        (),
        (4,),
    )


@pytest.mark.parametrize("leader", [1, 4])
def test_a_new_target_never_leaves_the_isr_or_the_leader_outside_the_replicas(leader):
    moving = reassign(reg((1, 2, 3)), (1, 2, 4))
    # 4 caught up and joined the ISR; it may even have become leader meanwhile.
    caught_up = replace(moving, isr=(1, 2, 3, 4), leader=leader, partition_epoch=11)
    again = reassign(caught_up, (1, 2, 5))
    assert set(again.isr) <= set(again.replicas)
    assert again.leader in again.replicas
    assert (again.adding_replicas, again.removing_replicas) == ((5,), (4, 3))
    assert (again.isr, again.leader, again.leader_epoch) == (caught_up.isr, leader, 4)


def test_cancel_reassignment_goes_back_to_the_old_replicas():
    moving = replace(reassign(reg((1, 2, 3)), (2, 3, 4)), isr=(1, 2, 3, 4), partition_epoch=11)
    # The adding replicas leave; the others keep the order they have (as Kafka's
    # PartitionReassignmentRevert: the old order is not restored).
    # The leader stays, in a new leader epoch: the adding replicas' fetches are fenced.
    assert cancel_reassignment(moving, {1, 2, 3, 4}) == replace(
        moving,
        replicas=(2, 3, 1),
        isr=(1, 2, 3),
        adding_replicas=(),
        removing_replicas=(),
        leader_epoch=5,
        partition_epoch=12,
    )


def test_cancel_reassignment_moves_leadership_off_an_adding_replica():
    moving = replace(
        reassign(reg((1, 2, 3)), (4, 2, 3)), isr=(4, 3, 2), leader=4, partition_epoch=11
    )
    cancelled = cancel_reassignment(moving, {1, 2, 3, 4})
    assert (cancelled.replicas, cancelled.isr) == ((2, 3, 1), (3, 2))
    assert cancelled.leader == 2  # the first in-sync old replica, in replica order
    assert cancelled.leader_epoch == moving.leader_epoch + 1
    assert cancelled.partition_epoch == moving.partition_epoch + 1
    assert (cancelled.adding_replicas, cancelled.removing_replicas) == ((), ())
    # Only usable replicas are elected: the next in-sync one, or none (the ISR stays, for
    # partition_changes to elect from when one comes back).
    assert cancel_reassignment(moving, {1, 3, 4}).leader == 3
    none_usable = cancel_reassignment(moving, {1, 4})
    assert (none_usable.leader, none_usable.isr) == (NO_LEADER, (3, 2))
    assert none_usable.leader_epoch == moving.leader_epoch + 1


def test_cancel_reassignment_never_elects_an_out_of_sync_replica():
    moving = replace(
        reassign(reg((1, 2, 3)), (4, 5, 6)), isr=(4,), leader=4, leader_epoch=6, partition_epoch=12
    )
    # Only adding replicas are in sync: reverting would be an unclean election, refused.
    assert cancel_reassignment(moving, {1, 2, 3, 4, 5, 6}) is None
    # One old replica in sync: it is all the ISR keeps, and it leads.
    one_old = replace(moving, isr=(4, 2), partition_epoch=13)
    cancelled = cancel_reassignment(one_old, {1, 2, 3, 4, 5, 6})
    assert (cancelled.replicas, cancelled.isr, cancelled.leader) == ((1, 2, 3), (2,), 2)
    assert cancelled.leader_epoch == 7


def test_reassignment_waits_for_every_adding_replica_to_be_in_sync():
    moving = replace(reassign(reg((1, 2, 3)), (3, 4, 5)), isr=(1, 2, 3, 4))
    assert reassignment_changes(image_of(up(1, 2, 3, 4, 5), orders={0: moving})) == []


def test_reassignment_waits_for_every_target_replica_to_be_in_sync():
    """Kafka's rule: the whole target in the ISR, the replicas it keeps as well as the new
    ones (a kept replica out of sync would leave the partition less replicated than asked)."""
    moving = replace(reassign(reg((1, 2, 3)), (2, 3, 4)), isr=(1, 2, 4))
    image = image_of(up(1, 2, 3, 4), orders={0: moving})
    assert reassignment_changes(image) == []
    image.set_registration("orders", 0, replace(moving, isr=(1, 2, 4, 3)))
    [(_, _, _, done)] = reassignment_changes(image)
    assert (done.replicas, done.isr) == ((2, 3, 4), (2, 4, 3))


def test_a_reassignment_completes_when_its_new_replicas_are_in_sync():
    moving = replace(reassign(reg((1, 2, 3)), (2, 3, 4)), isr=(1, 2, 3, 4), leader=2)
    image = image_of(up(1, 2, 3, 4), orders={0: moving, 1: reg((1, 2, 3))})
    assert reassignment_changes(image) == [
        (
            "orders",
            0,
            moving.partition_epoch,
            replace(
                moving,
                replicas=(2, 3, 4),
                isr=(2, 3, 4),
                adding_replicas=(),
                removing_replicas=(),
                # The leader stays, in a new leader epoch: 1's fetches are fenced.
                leader_epoch=moving.leader_epoch + 1,
                partition_epoch=moving.partition_epoch + 1,
            ),
        )
    ]


def test_a_completed_reassignment_moves_leadership_off_a_removed_leader():
    moving = replace(reassign(reg((1, 2, 3)), (4, 3, 2)), isr=(1, 2, 3, 4), leader=1)
    image = image_of([broker(1), broker(2), broker(3, fenced=True), broker(4)], t={0: moving})
    [(_, _, expected, done)] = reassignment_changes(image)
    assert expected == moving.partition_epoch
    assert (done.replicas, done.isr) == ((4, 3, 2), (2, 3, 4))
    assert done.leader == 4  # the first in-sync usable new replica, in target order
    assert done.leader_epoch == moving.leader_epoch + 1
    assert done.partition_epoch == moving.partition_epoch + 1
    # With 4 unusable as well, the next in target order that is usable: 3 is fenced.
    image.brokers[4] = broker(4, fenced=True)
    [(_, _, _, done)] = reassignment_changes(image)
    assert done.leader == 2
    # None usable: the partition is left without a leader, for partition_changes to elect.
    image.brokers[2] = broker(2, shutting_down=True)
    [(_, _, _, done)] = reassignment_changes(image)
    assert done.leader == NO_LEADER and done.isr == (2, 3, 4)


def test_a_reassignment_that_only_adds_completes_once_they_are_in_sync():
    moving = reassign(reg((1, 2)), (1, 2, 3))
    image = image_of(up(1, 2, 3), t={0: moving})
    assert reassignment_changes(image) == []
    image.set_registration("t", 0, replace(moving, isr=(1, 2, 3)))
    [(_, _, _, done)] = reassignment_changes(image)
    assert (done.replicas, done.isr, done.leader) == ((1, 2, 3), (1, 2, 3), 1)
    assert (done.adding_replicas, done.removing_replicas) == ((), ())
    # No replica leaves, but the completion is a leader-epoch change all the same.
    assert done.leader_epoch == moving.leader_epoch + 1


def test_a_reassignment_never_completes_into_an_empty_isr():
    shrinking = replace(reassign(reg((1, 2, 3)), (1, 2)), isr=(3,), leader=3)
    image = image_of(up(1, 2, 3), t={0: shrinking})
    assert reassignment_changes(image) == []
    image.set_registration("t", 0, replace(shrinking, isr=(3, 1)))
    assert reassignment_changes(image) == []
    # The whole target in sync: the removed leader hands over to the first kept replica.
    image.set_registration("t", 0, replace(shrinking, isr=(3, 2, 1)))
    [(_, _, _, done)] = reassignment_changes(image)
    assert (done.replicas, done.isr, done.leader) == ((1, 2), (2, 1), 1)


@pytest.mark.parametrize("how", ["complete", "cancel"])
def test_removing_replicas_bumps_the_leader_epoch(how):
    if how == "complete":
        moving = replace(reassign(reg((1, 2, 3)), (1, 2, 4)), isr=(1, 2, 3, 4))
        [(_, _, _, new)] = reassignment_changes(image_of(up(1, 2, 3, 4), t={0: moving}))
    else:
        moving = reassign(reg((1, 2, 3)), (1, 2, 4))
        new = cancel_reassignment(moving, {1, 2, 3, 4})
    assert new.leader == moving.leader
    assert new.leader_epoch == moving.leader_epoch + 1
    assert new.partition_epoch == moving.partition_epoch + 1


@given(
    r=registrations(),
    target=st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True),
    data=st.data(),
)
def test_a_reassignment_keeps_the_isr_and_the_leader_among_the_replicas(r, target, data):
    """Started, then (after some ISR changes) completed or cancelled: the ISR is never empty
    or outside the replicas, the leader is an in-sync replica or none, removed replicas are
    fenced by a new leader epoch, and no out-of-sync replica is ever elected."""
    moving = reassign(r, tuple(target))
    assert set(moving.replicas) == set(target) | set(r.replicas)
    assert moving.adding_replicas == tuple(m for m in target if m not in r.replicas)
    assert set(moving.removing_replicas) == set(r.replicas) - set(target)
    assert (moving.isr, moving.leader, moving.leader_epoch) == (r.isr, r.leader, r.leader_epoch)
    assert moving.partition_epoch == r.partition_epoch + 1
    # Followers join and leave the ISR; the leader (if any) is one of them.
    isr = tuple(data.draw(st.lists(st.sampled_from(moving.replicas), min_size=1, unique=True)))
    leader = data.draw(st.sampled_from([*isr, NO_LEADER]))
    moving = replace(moving, isr=isr, leader=leader, partition_epoch=moving.partition_epoch + 1)
    usable = data.draw(st.sets(st.integers(0, 6)))

    def check(new, replicas):
        assert new.replicas == replicas and (new.adding_replicas, new.removing_replicas) == ((), ())
        assert new.isr and set(new.isr) <= set(replicas) and set(new.isr) <= set(moving.isr)
        assert new.leader == NO_LEADER or new.leader in new.isr
        assert (new.leader_epoch, new.partition_epoch) == (
            moving.leader_epoch + 1,
            moving.partition_epoch + 1,
        )
        if moving.leader in replicas:
            assert new.leader == moving.leader
        else:
            in_sync = [m for m in replicas if m in new.isr and m in usable]
            assert new.leader == (in_sync[0] if in_sync else NO_LEADER)

    old = tuple(m for m in moving.replicas if m not in moving.adding_replicas)
    cancelled = cancel_reassignment(moving, usable)
    assert (cancelled is None) == (not set(old) & set(isr))
    if cancelled is not None:
        check(cancelled, old)

    image = image_of([broker(n, fenced=n not in usable) for n in range(7)], t={0: moving})
    changes = reassignment_changes(image)
    reassigning = bool(moving.adding_replicas or moving.removing_replicas)
    assert bool(changes) == (reassigning and set(target) <= set(isr))
    if changes:
        [(name, index, expected, done)] = changes
        assert (name, index, expected) == ("t", 0, moving.partition_epoch)
        check(done, tuple(target))
