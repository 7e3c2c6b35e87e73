"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and DescribeGroups at every advertised version,
against an in-process broker: kio requests in, kio responses out."""

from __future__ import annotations

import asyncio

import pytest
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode

from broker.apis.classic_groups import DESCRIBE_GROUPS as DESCRIBE
from broker.apis.classic_groups import HEARTBEAT, SPECS
from broker.apis.classic_groups import JOIN_GROUP as JOIN
from broker.apis.classic_groups import LEAVE_GROUP as LEAVE
from broker.apis.classic_groups import SYNC_GROUP as SYNC
from broker.client.connection import BrokerConnection
from broker.config import BrokerConfig
from broker.server.broker import Broker

VERSIONS = {spec.name: range(spec.min_version, spec.max_version + 1) for spec in SPECS}
NEWEST = {name: versions[-1] for name, versions in VERSIONS.items()}
METADATA = b"\x00\x01\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff\x00\x00\x00\x00"
SESSION = 6000


class Brokers:
    """In-process brokers on one log dir (a restart is a new one), with no initial rebalance
    delay (a new group's first rebalance would wait three seconds) and short sessions allowed."""

    def __init__(self, log_dir) -> None:
        self.log_dir = log_dir
        self.running: list[Broker] = []

    async def start(self) -> Broker:
        broker = Broker(
            BrokerConfig(
                {
                    "listeners": "PLAINTEXT://127.0.0.1:0",
                    "log.dirs": str(self.log_dir),
                    "metrics.listener": "",
                    "group.initial.rebalance.delay.ms": "0",
                    "group.min.session.timeout.ms": "100",
                }
            )
        )
        await broker.start()
        self.running.append(broker)
        return broker

    async def stop(self, broker: Broker) -> None:
        self.running.remove(broker)
        await broker.stop()


@pytest.fixture
async def brokers(tmp_path):
    b = Brokers(tmp_path / "kafka-logs")
    yield b
    for broker in list(b.running):
        await b.stop(broker)


@pytest.fixture
async def group_broker(brokers) -> Broker:
    return await brokers.start()


@pytest.fixture
async def client(group_broker):
    connection = await connect(group_broker)
    yield connection
    await connection.close()


@pytest.fixture
async def other(group_broker):
    """A second client: another member."""
    connection = await connect(group_broker, "fjord-test-2")
    yield connection
    await connection.close()


async def connect(broker: Broker, client_id: str = "fjord-test") -> BrokerConnection:
    host, port = broker.bound["PLAINTEXT"]
    return await BrokerConnection.open(host, port, client_id=client_id)


def join_request(
    v,
    member_id="",
    *,
    group="g",
    instance=None,
    metadata=METADATA,
    session=SESSION,
    rebalance=30000,
    protocol_type="consumer",
):
    protocol = req(JOIN, v, "JoinGroupRequestProtocol", name="range", metadata=metadata)
    return req(
        JOIN,
        v,
        "JoinGroupRequest",
        group_id=group,
        session_timeout=ms(session),
        rebalance_timeout=ms(rebalance),
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocols=(protocol,),
        reason=None,
    )


async def join(client, v=NEWEST["JoinGroup"], **kwargs):
    """Join as a new member (twice from v4: MEMBER_ID_REQUIRED first, unless static)."""
    response = await client.send(join_request(v, **kwargs))
    if response.error_code == ErrorCode.member_id_required:
        response = await client.send(join_request(v, response.member_id, **kwargs))
    return response


def sync_request(
    v,
    member_id,
    generation,
    assignments=(),
    *,
    group="g",
    instance=None,
    protocol_type=None,
    protocol_name=None,
):
    return req(
        SYNC,
        v,
        "SyncGroupRequest",
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=tuple(
            req(SYNC, v, "SyncGroupRequestAssignment", member_id=m, assignment=a)
            for m, a in assignments
        ),
    )


def heartbeat_request(v, member_id, generation, *, group="g", instance=None):
    return req(
        HEARTBEAT,
        v,
        "HeartbeatRequest",
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
    )


def describe_request(v, *groups, include_operations=False):
    return req(
        DESCRIBE,
        v,
        "DescribeGroupsRequest",
        groups=groups,
        include_authorized_operations=include_operations,
    )


async def stable_member(client, group="g", session=SESSION):
    joined = await join(client, group=group, session=session)
    synced = await client.send(
        sync_request(
            NEWEST["SyncGroup"],
            joined.member_id,
            joined.generation_id,
            [(joined.member_id, b"assignment")],
            group=group,
        )
    )
    assert synced.error_code == ErrorCode.none
    return joined


async def until_rebalancing(client, member) -> None:
    """Heartbeat until the broker reports the rebalance another member's JoinGroup started."""
    request = heartbeat_request(NEWEST["Heartbeat"], member.member_id, member.generation_id)
    while (await client.send(request)).error_code != ErrorCode.rebalance_in_progress:
        pass


async def two_members(client, other, session=SESSION):
    """`client` is the leader of a stable group when `other` joins; `other`'s JoinGroup
    returns once `client` has rejoined. Returns both JoinGroup responses of generation 2."""
    first = await stable_member(client, session=session)
    parked = asyncio.ensure_future(join(other))
    await until_rebalancing(client, first)
    leader = await client.send(join_request(NEWEST["JoinGroup"], first.member_id))
    return leader, await parked


@pytest.mark.parametrize("v", VERSIONS["JoinGroup"])
async def test_join_group(client, v):
    first = await client.send(join_request(v))
    if v >= 4:
        assert first.error_code == ErrorCode.member_id_required
        assert first.member_id.startswith("fjord-test-")
        first = await client.send(join_request(v, first.member_id))
    assert first.error_code == ErrorCode.none
    assert first.generation_id == 1 and first.leader == first.member_id
    assert first.protocol_name == "range"
    assert getattr(first, "protocol_type", "consumer") == "consumer"  # v7+
    (member,) = first.members
    assert member.member_id == first.member_id and member.metadata == METADATA
    assert not getattr(first, "skip_assignment", False)


@pytest.mark.parametrize("v", VERSIONS["JoinGroup"])
async def test_join_group_errors(client, v):
    unknown = await client.send(join_request(v, "nobody"))
    assert unknown.error_code == ErrorCode.unknown_member_id
    assert unknown.member_id == "nobody" and unknown.generation_id == -1
    assert unknown.protocol_name == ("" if v < 7 else None)
    short = await client.send(join_request(v, session=10))
    assert short.error_code == ErrorCode.invalid_session_timeout
    await join(client, v)
    other = await client.send(join_request(v, protocol_type="connect"))
    assert other.error_code == ErrorCode.inconsistent_group_protocol


@pytest.mark.parametrize("v", [v for v in VERSIONS["JoinGroup"] if v >= 5])
async def test_static_member_rejoins_without_a_rebalance(client, v):
    first = await join(client, v, instance="i1")
    await client.send(
        sync_request(
            NEWEST["SyncGroup"],
            first.member_id,
            first.generation_id,
            [(first.member_id, b"a")],
            instance="i1",
        )
    )
    again = await join(client, v, instance="i1")
    assert again.error_code == ErrorCode.none and again.member_id != first.member_id
    assert again.generation_id == first.generation_id
    # The leader keeps the assignment: v9 says so, older versions hear the old leader id.
    assert again.skip_assignment if v >= 9 else again.leader == first.member_id
    fenced = await client.send(
        heartbeat_request(NEWEST["Heartbeat"], first.member_id, first.generation_id, instance="i1")
    )
    assert fenced.error_code == ErrorCode.fenced_instance_id


@pytest.mark.parametrize("v", VERSIONS["SyncGroup"])
async def test_sync_group_waits_for_the_leader(client, other, v):
    leader, follower = await two_members(client, other)
    generation = leader.generation_id
    assert leader.leader == leader.member_id and len(leader.members) == 2
    parked = asyncio.ensure_future(other.send(sync_request(v, follower.member_id, generation)))
    leader_sync = await client.send(
        sync_request(
            v,
            leader.member_id,
            generation,
            [(leader.member_id, b"L"), (follower.member_id, b"F")],
            protocol_type="consumer",
            protocol_name="range",
        )
    )
    follower_sync = await parked
    assert (leader_sync.assignment, follower_sync.assignment) == (b"L", b"F")
    assert leader_sync.error_code == follower_sync.error_code == ErrorCode.none
    if v >= 5:
        assert (follower_sync.protocol_type, follower_sync.protocol_name) == ("consumer", "range")
        wrong = await client.send(
            sync_request(v, leader.member_id, generation, protocol_name="roundrobin")
        )
        assert wrong.error_code == ErrorCode.inconsistent_group_protocol
    stale = await client.send(sync_request(v, leader.member_id, generation - 1))
    assert stale.error_code == ErrorCode.illegal_generation


@pytest.mark.parametrize("v", VERSIONS["Heartbeat"])
async def test_heartbeat(client, v):
    member = await stable_member(client)
    ok = await client.send(heartbeat_request(v, member.member_id, member.generation_id))
    assert ok.error_code == ErrorCode.none
    stale = await client.send(heartbeat_request(v, member.member_id, 0))
    assert stale.error_code == ErrorCode.illegal_generation
    unknown = await client.send(heartbeat_request(v, "nobody", member.generation_id))
    assert unknown.error_code == ErrorCode.unknown_member_id


async def test_a_member_whose_session_ends_is_replaced(client, other):
    """The first member stops heartbeating and never rejoins: the newcomer's JoinGroup answers
    once that member's session has ended, with a generation of its own."""
    first = await stable_member(client, session=500)
    newcomer = asyncio.ensure_future(join(other))
    await until_rebalancing(client, first)
    alone = await newcomer
    assert alone.generation_id == first.generation_id + 1
    assert [m.member_id for m in alone.members] == [alone.member_id]
    gone = await client.send(
        heartbeat_request(NEWEST["Heartbeat"], first.member_id, first.generation_id)
    )
    assert gone.error_code == ErrorCode.unknown_member_id


@pytest.mark.parametrize("v", VERSIONS["LeaveGroup"])
async def test_leave_group(client, v):
    member = await stable_member(client)
    if v < 3:
        request = req(LEAVE, v, "LeaveGroupRequest", group_id="g", member_id=member.member_id)
        assert (await client.send(request)).error_code == ErrorCode.none
        again = await client.send(request)
        assert again.error_code == ErrorCode.unknown_member_id
    else:
        members = tuple(
            req(LEAVE, v, "MemberIdentity", member_id=m, group_instance_id=None, reason="bye")
            for m in (member.member_id, "nobody")
        )
        response = await client.send(
            req(LEAVE, v, "LeaveGroupRequest", group_id="g", members=members)
        )
        assert response.error_code == ErrorCode.none
        assert [(m.member_id, m.error_code) for m in response.members] == [
            (member.member_id, ErrorCode.none),
            ("nobody", ErrorCode.unknown_member_id),
        ]
    (group,) = (await client.send(describe_request(NEWEST["DescribeGroups"], "g"))).groups
    assert group.group_state == "Empty" and group.members == ()


@pytest.mark.parametrize("v", VERSIONS["DescribeGroups"])
async def test_describe_groups(client, v):
    member = await stable_member(client)
    response = await client.send(describe_request(v, "g", "missing"))
    described, missing = response.groups
    assert described.error_code == ErrorCode.none
    assert (described.group_state, described.protocol_type, described.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    (m,) = described.members
    assert m.member_id == member.member_id and m.client_id == "fjord-test"
    assert m.client_host == "/127.0.0.1"
    assert (m.member_metadata, m.member_assignment) == (METADATA, b"assignment")
    assert missing.group_state == "Dead" and missing.members == ()
    if v >= 6:
        assert missing.error_code == ErrorCode.group_id_not_found
        assert missing.error_message == "Group missing not found."
    else:
        assert missing.error_code == ErrorCode.none
    if v >= 3:
        assert described.authorized_operations == -(2**31)
        requested = await client.send(describe_request(v, "g", include_operations=True))
        assert requested.groups[0].authorized_operations > 0


async def test_a_stable_group_survives_a_restart(brokers, group_broker, client):
    leader, follower = await two_members(client, await connect(group_broker, "fjord-test-2"))
    await client.send(
        sync_request(
            NEWEST["SyncGroup"],
            leader.member_id,
            leader.generation_id,
            [(leader.member_id, b"L"), (follower.member_id, b"F")],
        )
    )
    await brokers.stop(group_broker)
    restarted = await connect(await brokers.start())
    try:
        (group,) = (await restarted.send(describe_request(NEWEST["DescribeGroups"], "g"))).groups
        assert group.group_state == "Stable"
        assert {m.member_id: m.member_assignment for m in group.members} == {
            leader.member_id: b"L",
            follower.member_id: b"F",
        }
        beat = await restarted.send(
            heartbeat_request(NEWEST["Heartbeat"], follower.member_id, follower.generation_id)
        )
        assert beat.error_code == ErrorCode.none
    finally:
        await restarted.close()
