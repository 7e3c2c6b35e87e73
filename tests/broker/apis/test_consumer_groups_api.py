"""ConsumerGroupHeartbeat and ConsumerGroupDescribe over the wire, at every advertised version."""

from __future__ import annotations

import pytest
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode

from broker.apis.consumer_groups import SPECS
from broker.client.connection import BrokerConnection
from broker.config import BrokerConfig
from broker.coordinator import consumer_group
from broker.server.broker import Broker

HEARTBEAT, DESCRIBE = 68, 69
VERSIONS = {spec.key: range(spec.min_version, spec.max_version + 1) for spec in SPECS}


def heartbeat(version: int, member_id: str, member_epoch: int, group_id: str = "g", **fields):
    return req(
        HEARTBEAT,
        version,
        "ConsumerGroupHeartbeatRequest",
        group_id=group_id,
        member_id=member_id,
        member_epoch=member_epoch,
        instance_id=fields.pop("instance_id", None),
        rack_id=fields.pop("rack_id", None),
        rebalance_timeout=ms(fields.pop("rebalance_timeout_ms", -1)),
        subscribed_topic_names=fields.pop("subscribed_topic_names", None),
        subscribed_topic_regex=fields.pop("subscribed_topic_regex", None),
        server_assignor=fields.pop("server_assignor", None),
        topic_partitions=fields.pop("topic_partitions", None),
    )


def join(version: int, member_id: str, group_id: str = "g", **fields):
    fields.setdefault("subscribed_topic_names", ("orders",))
    return heartbeat(
        version, member_id, 0, group_id, rebalance_timeout_ms=30_000, topic_partitions=(), **fields
    )


def describe(version: int, *group_ids: str):
    return req(
        DESCRIBE,
        version,
        "ConsumerGroupDescribeRequest",
        group_ids=group_ids,
        include_authorized_operations=True,
    )


def owned(version: int, assignment) -> tuple:
    return tuple(
        req(HEARTBEAT, version, "TopicPartitions", topic_id=tp.topic_id, partitions=tp.partitions)
        for tp in assignment.topic_partitions
    )


@pytest.mark.parametrize("version", VERSIONS[HEARTBEAT])
async def test_members_join_share_the_partitions_and_leave(broker, broker_client, version):
    topic = await broker.create_topic("orders", 4, {})
    first = await broker_client.send(join(version, "member-a"))
    assert type(first).__version__ == version
    assert first.error_code == ErrorCode.none
    assert (first.member_id, first.member_epoch) == ("member-a", 1)
    assert first.heartbeat_interval == ms(5000)
    assert [(tp.topic_id, tp.partitions) for tp in first.assignment.topic_partitions] == [
        (topic.topic_id, (0, 1, 2, 3))
    ]

    second = await broker_client.send(join(version, "member-b", rack_id="r1"))
    assert (second.member_epoch, second.assignment.topic_partitions) == (2, ())

    # a revokes two partitions, then confirms; b gets them once they are free
    told = await broker_client.send(
        heartbeat(version, "member-a", 1, topic_partitions=owned(version, first.assignment))
    )
    assert told.member_epoch == 1 and len(told.assignment.topic_partitions[0].partitions) == 2
    confirmed = await broker_client.send(
        heartbeat(version, "member-a", 1, topic_partitions=owned(version, told.assignment))
    )
    assert (confirmed.member_epoch, confirmed.assignment) == (2, None)
    got = await broker_client.send(heartbeat(version, "member-b", 2, topic_partitions=()))
    assert len(got.assignment.topic_partitions[0].partitions) == 2

    left = await broker_client.send(heartbeat(version, "member-b", -1))
    assert (left.error_code, left.member_id, left.member_epoch) == (ErrorCode.none, "member-b", -1)
    fenced = await broker_client.send(heartbeat(version, "member-a", 7, topic_partitions=()))
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    assert fenced.error_message.startswith("The consumer group member has a greater member epoch")


async def test_v0_generates_the_member_id_and_v1_requires_one(broker, broker_client):
    await broker.create_topic("orders", 1, {})
    generated = await broker_client.send(join(0, ""))
    assert generated.error_code == ErrorCode.none and len(generated.member_id) == 22
    refused = await broker_client.send(join(1, ""))
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.invalid_request,
        "MemberId can't be empty.",
    )


async def test_v1_subscribes_by_regex(broker, broker_client, monkeypatch):
    # A created topic joins at the first heartbeat 10 s after the last resolution (Kafka's
    # REGEX_BATCH_REFRESH_MIN_INTERVAL_MS); here at once.
    monkeypatch.setattr(consumer_group, "REGEX_BATCH_REFRESH_MIN_INTERVAL_MS", -1)
    wanted = await broker.create_topic("orders-eu", 2, {})
    await broker.create_topic("payments", 2, {})
    response = await broker_client.send(
        join(1, "m", subscribed_topic_names=None, subscribed_topic_regex="orders-.*")
    )
    assert [tp.topic_id for tp in response.assignment.topic_partitions] == [wanted.topic_id]
    later = await broker.create_topic("orders-us", 1, {})
    again = await broker_client.send(heartbeat(1, "m", 1, topic_partitions=()))
    assert {tp.topic_id for tp in again.assignment.topic_partitions} == {
        wanted.topic_id,
        later.topic_id,
    }
    invalid = await broker_client.send(heartbeat(1, "m", 2, subscribed_topic_regex="(("))
    assert invalid.error_code == ErrorCode.invalid_regular_expression


async def test_unknown_assignor_is_refused(broker, broker_client):
    response = await broker_client.send(join(1, "m", server_assignor="sticky"))
    assert response.error_code == ErrorCode.unsupported_assignor
    assert response.member_id is None


@pytest.mark.parametrize("version", VERSIONS[DESCRIBE])
async def test_describe_shows_members_and_assignments(broker, broker_client, version):
    topic = await broker.create_topic("orders", 2, {})
    await broker_client.send(join(1, "m1", instance_id="i1", server_assignor="range"))
    response = await broker_client.send(describe(version, "g", "missing", ""))
    assert type(response).__version__ == version
    group, missing, empty = response.groups
    assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch) == (
        ErrorCode.none,
        "Stable",
        1,
        1,
    )
    assert group.assignor_name == "range"
    assert group.authorized_operations > 0
    (member,) = group.members
    assert (member.member_id, member.instance_id, member.member_epoch) == ("m1", "i1", 1)
    assert member.client_id == "fjord-test" and member.client_host == "/127.0.0.1"
    assert member.subscribed_topic_names == ("orders",)
    for assignment in (member.assignment, member.target_assignment):
        assert [
            (tp.topic_id, tp.topic_name, tp.partitions) for tp in assignment.topic_partitions
        ] == [(topic.topic_id, "orders", (0, 1))]
    if version >= 1:
        assert member.member_type == 1
    assert (missing.error_code, missing.error_message) == (
        ErrorCode.group_id_not_found,
        "Group missing not found.",
    )
    assert empty.error_code == ErrorCode.invalid_group_id


async def test_a_group_survives_a_broker_restart(tmp_path):
    def make() -> Broker:
        return Broker(
            BrokerConfig(
                {
                    "listeners": "PLAINTEXT://127.0.0.1:0",
                    "log.dirs": str(tmp_path),
                    "metrics.listener": "",
                }
            )
        )

    first = make()
    await first.start()
    await first.create_topic("orders", 3, {})
    conn = await BrokerConnection.open(*first.bound["PLAINTEXT"])
    await conn.send(join(1, "a"))
    await conn.send(join(1, "b"))
    before = (await conn.send(describe(1, "g"))).groups[0]
    await conn.close()
    await first.stop()

    second = make()
    await second.start()
    try:
        conn = await BrokerConnection.open(*second.bound["PLAINTEXT"])
        after = (await conn.send(describe(1, "g"))).groups[0]
        assert after == before
        # the members keep their epochs across the restart
        still = await conn.send(heartbeat(1, "a", 1, topic_partitions=()))
        assert (still.error_code, still.member_epoch) == (ErrorCode.none, 2)
        await conn.close()
    finally:
        await second.stop()


async def test_group_configs_are_honoured_by_the_coordinator(broker, broker_client):
    await broker.create_topic("foo", 2, {})
    await broker.set_group_configs(
        "tuned", {"consumer.heartbeat.interval.ms": "7000", "consumer.session.timeout.ms": "50000"}
    )
    response = await broker_client.send(
        join(1, "m1", group_id="tuned", subscribed_topic_names=("foo",))
    )
    assert response.error_code == ErrorCode.none
    assert response.heartbeat_interval.total_seconds() * 1000 == 7000
    default = await broker_client.send(
        join(1, "m2", group_id="plain", subscribed_topic_names=("foo",))
    )
    assert default.heartbeat_interval.total_seconds() * 1000 == 5000
