"""The consumer's sans-io parts without a broker: the fetch session handler (KIP-227's full and
incremental requests), the embedded consumer protocol and the classic assignors, the
subscription state, and KIP-848 reconciliation."""

from __future__ import annotations

import re
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from broker.client.consumer.assignors import (
    Subscription,
    assign_cooperative_sticky,
    assign_range,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from broker.client.consumer.consumer_coordinator import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Membership,
)
from broker.client.consumer.fetcher import FetchSessionHandler, FetchTarget
from broker.client.consumer.subscription_state import SubscriptionState
from broker.client.errors import IllegalStateError
from broker.client.models import TopicPartition as TP
from broker.coordinator import migration

A, B = uuid.uuid4(), uuid.uuid4()


def target(offset: int, topic_id: uuid.UUID = A) -> FetchTarget:
    return FetchTarget(topic_id, offset, 1024)


# -- fetch sessions ------------------------------------------------------------------------


def test_first_fetch_is_full_then_only_changes_are_sent():
    handler = FetchSessionHandler()
    wanted = {TP("a", 0): target(0), TP("a", 1): target(5)}
    first = handler.build(wanted)
    assert first.full and first.session_id == 0 and first.to_send == wanted
    assert handler.handle_response(first, ErrorCode.none, 77)
    assert (handler.session_id, handler.epoch) == (77, 1)

    # a moved on, b is new, a-1 unchanged: only a-0 and b-0 go out.
    wanted = {TP("a", 0): target(3), TP("a", 1): target(5), TP("b", 0): target(0, B)}
    second = handler.build(wanted)
    assert not second.full and (second.session_id, second.epoch) == (77, 1)
    assert second.to_send == {TP("a", 0): target(3), TP("b", 0): target(0, B)}
    assert second.to_forget == {}
    handler.handle_response(second, ErrorCode.none, 77)
    assert handler.epoch == 2

    third = handler.build({TP("b", 0): target(0, B)})
    assert third.to_send == {}
    assert set(third.to_forget) == {TP("a", 0), TP("a", 1)}
    assert third.epoch == 2


@pytest.mark.parametrize(
    "error", [ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch]
)
def test_session_errors_fall_back_to_a_full_fetch(error):
    handler = FetchSessionHandler()
    wanted = {TP("a", 0): target(0)}
    handler.handle_response(handler.build(wanted), ErrorCode.none, 9)
    incremental = handler.build(wanted)
    assert not incremental.full
    assert not handler.handle_response(incremental, error, 0)
    again = handler.build(wanted)
    assert again.full and again.session_id == 0 and again.to_send == wanted


def test_a_broker_without_a_session_gets_full_fetches():
    handler = FetchSessionHandler()
    wanted = {TP("a", 0): target(0)}
    request = handler.build(wanted)
    assert handler.handle_response(request, ErrorCode.none, 0)  # the data is still good
    assert handler.build(wanted).full


def test_epochs_wrap_to_one():
    handler = FetchSessionHandler()
    wanted = {TP("a", 0): target(0)}
    handler.handle_response(handler.build(wanted), ErrorCode.none, 5)
    handler.epoch = (1 << 31) - 1
    handler.handle_response(handler.build(wanted), ErrorCode.none, 5)
    assert handler.epoch == 1


# -- the embedded consumer protocol and the assignors ---------------------------------------


def test_subscription_and_assignment_encode_as_kafka_does():
    s = Subscription(("b", "a"), (TP("a", 1), TP("b", 0)), 4, "rack-1")
    data = encode_subscription(s)
    assert decode_subscription(data) == Subscription(
        ("a", "b"), (TP("a", 1), TP("b", 0)), 4, "rack-1"
    )
    # The broker's reading of the same bytes (what it shows in DescribeGroups).
    theirs = migration.decode_subscription(data)
    assert (theirs.version, theirs.topics, theirs.rack_id) == (3, ("a", "b"), "rack-1")
    assert theirs.owned_partitions == (("a", (1,)), ("b", (0,)))
    for version in range(4):
        encoded = encode_assignment([TP("b", 2), TP("a", 0)], version)
        assert decode_assignment(encoded) == [TP("a", 0), TP("b", 2)]
        assert migration.decode_assignment(encoded) == (("a", (0,)), ("b", (2,)))
    assert decode_assignment(b"") == []


def test_a_version_0_subscription_is_read():
    # version 0, topics ["a"], null user data: what old clients send.
    v0 = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01a" + b"\xff\xff\xff\xff"
    assert decode_subscription(v0) == Subscription(("a",))


def test_range_gives_contiguous_ranges_in_member_order():
    members = {"m2": Subscription(("t", "u")), "m1": Subscription(("t",))}
    result = assign_range(members, {"t": 5, "u": 2})
    assert result["m1"] == [TP("t", 0), TP("t", 1), TP("t", 2)]
    assert result["m2"] == [TP("t", 3), TP("t", 4), TP("u", 0), TP("u", 1)]


def test_cooperative_sticky_keeps_owners_and_holds_moves_for_the_next_generation():
    everything = tuple(TP("t", p) for p in range(6))
    members = {"m1": Subscription(("t",), everything, 3), "m2": Subscription(("t",))}
    first = assign_cooperative_sticky(members, {"t": 6})
    # m1 keeps half; the other half is revoked first, m2 gets nothing yet.
    assert len(first["m1"]) == 3 and set(first["m1"]) < set(everything)
    assert first["m2"] == []
    members = {
        "m1": Subscription(("t",), tuple(first["m1"]), 4),
        "m2": Subscription(("t",), (), 4),
    }
    second = assign_cooperative_sticky(members, {"t": 6})
    assert second["m1"] == first["m1"]
    assert set(second["m2"]) == set(everything) - set(first["m1"])


def test_cooperative_sticky_settles_a_doubly_claimed_partition_by_generation():
    members = {
        "old": Subscription(("t",), (TP("t", 0),), 1),
        "new": Subscription(("t",), (TP("t", 0),), 2),
    }
    result = assign_cooperative_sticky(members, {"t": 2})
    assert TP("t", 0) in result["new"]
    assert TP("t", 0) not in result["old"]


# -- the subscription state -----------------------------------------------------------------


def test_subscription_kinds_exclude_each_other():
    state = SubscriptionState()
    state.subscribe(["a"])
    with pytest.raises(IllegalStateError):
        state.assign_from_user([("a", 0)])
    state.unsubscribe()
    state.assign_from_user([("a", 0)])
    with pytest.raises(IllegalStateError):
        state.subscribe(["a"])


def test_patterns_match_whole_topic_names():
    state = SubscriptionState()
    state.subscribe(re.compile(r"orders-\d+"))
    assert state.subscribed_topics(["orders-1", "orders-1x", "xorders-2", "orders-22"]) == {
        "orders-1",
        "orders-22",
    }
    state.subscribe("^logs.*")
    assert state.pattern is not None and state.matches("logs-a")


def test_positions_resets_pauses_and_ranges():
    changes = []
    state = SubscriptionState("earliest")
    state.add_listener(lambda: changes.append(1))
    state.assign_from_user([("a", 0), ("a", 1)])
    assert state.missing_positions() == [TP("a", 0), TP("a", 1)] and state.fetchable() == []
    state.seek(TP("a", 0), 7)
    state.request_reset(TP("a", 1))
    assert state.needs_reset() == {TP("a", 1): "earliest"}
    assert state.fetchable() == [TP("a", 0)]
    state.pause([TP("a", 0)])
    assert state.fetchable() == [] and state.paused() == {TP("a", 0)}
    state.resume([TP("a", 0)])
    state.advance(TP("a", 0), 9, leader_epoch=3)
    assert state.consumed_offsets()[TP("a", 0)].offset == 9
    assert state.consumed_offsets()[TP("a", 0)].leader_epoch == 3
    assert changes  # every change told the fetcher

    ranged = SubscriptionState()
    ranged.assign_range(TP("a", 0), 70, 120)
    assert ranged.fetchable() == [TP("a", 0)]
    ranged.advance(TP("a", 0), 120)
    assert ranged.fetchable() == [] and ranged.partitions[TP("a", 0)].exhausted


def test_group_assignment_keeps_the_state_of_kept_partitions():
    state = SubscriptionState()
    state.subscribe(["a"])
    state.assign_from_group([TP("a", 0), TP("a", 1)])
    state.seek(TP("a", 0), 4)
    state.assign_from_group([TP("a", 0), TP("a", 2)])
    assert state.partitions[TP("a", 0)].position == 4
    assert state.assignment() == {TP("a", 0), TP("a", 2)}
    with pytest.raises(IllegalStateError):
        state.state(TP("a", 1))


# -- KIP-848 reconciliation -----------------------------------------------------------------


def assignment(**partitions_by_id):
    return SimpleNamespace(
        topic_partitions=[
            SimpleNamespace(topic_id=topic_id, partitions=ps)
            for topic_id, ps in partitions_by_id.values()
        ]
    )


def test_reconciliation_revokes_before_it_assigns_and_waits_for_unknown_topics():
    names = {A: "a"}
    m = Membership()
    assert m.member_epoch == 0 and m.member_id
    m.on_heartbeat("given-id", 1, assignment(x=(A, [0, 1]), y=(B, [0])))
    assert m.member_id == "given-id" and m.unresolved(names) == {B}
    step = m.reconcile(names)
    assert step.revoke == frozenset() and step.assign == {TP("a", 0), TP("a", 1)}
    m.owned |= step.assign
    assert m.target is not None  # b's id is still to be resolved

    names[B] = "b"
    step = m.reconcile(names)
    assert step.assign == {TP("b", 0)}
    m.owned |= step.assign
    assert m.target is None and m.reconcile(names) is None

    m.on_heartbeat(None, 2, assignment(x=(A, [1]), y=(B, [0, 1])))
    step = m.reconcile(names)
    assert step.revoke == {TP("a", 0)} and step.assign == {TP("b", 1)}
    assert m.member_id == "given-id"  # an absent id keeps the one the member has


def test_fenced_member_loses_everything_and_rejoins_with_epoch_0():
    m = Membership()
    m.on_heartbeat("id", 5, assignment(x=(A, [0])))
    m.owned = {TP("a", 0)}
    assert m.fenced() == {TP("a", 0)}
    assert (m.member_epoch, m.owned, m.member_id) == (0, set(), "id")


def test_leave_epochs():
    assert Membership().leave_epoch == LEAVE_EPOCH
    assert Membership("instance-1").leave_epoch == STATIC_LEAVE_EPOCH
