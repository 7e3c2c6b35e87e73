"""ElectLeaders, the partition reassignment APIs and DescribeTopicPartitions through the raw
protocol, answered as Kafka answers them for a cluster of one broker (node 1)."""

from __future__ import annotations

import pytest
from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode

PREFERRED, UNCLEAN = 0, 1


def elect(v, election_type, topics):
    parts = (
        None
        if topics is None
        else tuple(req(43, v, "TopicPartitions", topic=t, partitions=ps) for t, ps in topics)
    )
    return req(
        43,
        v,
        "ElectLeadersRequest",
        election_type=election_type,
        topic_partitions=parts,
        timeout=ms(5000),
    )


def results(response) -> dict:
    return {
        (r.topic, p.partition_id): (p.error_code, p.error_message)
        for r in response.replica_election_results
        for p in r.partition_result
    }


@pytest.mark.parametrize("v, election_type", [(0, PREFERRED), (1, PREFERRED), (2, UNCLEAN)])
async def test_no_election_is_ever_needed(broker, broker_client, v, election_type):
    await broker.create_topic("t", 2, {})
    response = await broker_client.send(elect(v, election_type, [("t", (0, 1, 5)), ("nope", (0,))]))
    assert results(response) == {
        ("t", 0): (
            ErrorCode.election_not_needed,
            "Leader election not needed for topic partition.",
        ),
        ("t", 1): (
            ErrorCode.election_not_needed,
            "Leader election not needed for topic partition.",
        ),
        ("t", 5): (ErrorCode.unknown_topic_or_partition, "No such partition as t-5"),
        ("nope", 0): (ErrorCode.unknown_topic_or_partition, "No such topic as nope"),
    }
    # Every partition: Kafka lists only those whose election was needed.
    everything = await broker_client.send(elect(v, election_type, None))
    assert everything.replica_election_results == ()


def reassign(v, name, partition, replicas, **fields):
    part = req(45, v, "ReassignablePartition", partition_index=partition, replicas=replicas)
    topic = req(45, v, "ReassignableTopic", name=name, partitions=(part,))
    return req(
        45, v, "AlterPartitionReassignmentsRequest", topics=(topic,), timeout=ms(5000), **fields
    )


@pytest.mark.parametrize(
    "name, replicas, code, message",
    [
        ("t", (1,), ErrorCode.none, None),  # the assignment it has: nothing to do
        ("t", None, ErrorCode.no_reassignment_in_progress, "No partition reassignment"),
        ("t", (), ErrorCode.invalid_replica_assignment, "an empty replica list"),
        ("t", (1, 2), ErrorCode.invalid_replica_assignment, "broker 2, but no such broker"),
        ("t", (1, 1), ErrorCode.invalid_replica_assignment, "broker 1 more than once"),
        ("nope", (1,), ErrorCode.unknown_topic_or_partition, "No such topic as nope"),
    ],
)
async def test_reassignments_take_only_this_broker(
    broker, broker_client, name, replicas, code, message
):
    await broker.create_topic("t", 1, {})
    for v in (0, 1):
        response = await broker_client.send(reassign(v, name, 0, replicas))
        assert response.error_code == ErrorCode.none
        [[partition]] = [t.partitions for t in response.responses]
        assert partition.error_code == code
        assert (partition.error_message is None) == (message is None)
        assert message is None or message in partition.error_message
    listed = await broker_client.send(
        req(46, 0, "ListPartitionReassignmentsRequest", topics=None, timeout=ms(5000))
    )
    assert (listed.error_code, listed.topics) == (ErrorCode.none, ())


def describe(names, limit, cursor=None):
    topics = tuple(req(75, 0, "TopicRequest", name=n) for n in names)
    return req(
        75,
        0,
        "DescribeTopicPartitionsRequest",
        topics=topics,
        response_partition_limit=limit,
        cursor=None
        if cursor is None
        else req(75, 0, "Cursor", topic_name=cursor[0], partition_index=cursor[1]),
    )


def pages(response) -> tuple[list, tuple | None]:
    got = [
        (t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in response.topics
    ]
    cursor = response.next_cursor
    return got, None if cursor is None else (cursor.topic_name, cursor.partition_index)


async def test_describe_topic_partitions_pages_with_its_cursor(broker, broker_client):
    for name, count in [("b", 2), ("a", 3), ("c", 1)]:
        await broker.create_topic(name, count, {})
    ok = ErrorCode.none
    seen, cursor = [], None
    while True:
        got, cursor = pages(await broker_client.send(describe([], 2, cursor)))
        seen.append(got)
        if cursor is None:
            break
    assert seen == [
        [("a", ok, [0, 1])],
        [("a", ok, [2]), ("b", ok, [0])],
        [("b", ok, [1]), ("c", ok, [0])],
    ]
    # A limit that ends with a topic points the cursor at the next topic's start.
    assert pages(await broker_client.send(describe([], 3))) == ([("a", ok, [0, 1, 2])], ("b", 0))
    response = await broker_client.send(describe(["c", "a"], 10))
    [a, c] = response.topics
    assert [p.leader_id for p in a.partitions] == [1, 1, 1]
    assert [p.replica_nodes for p in c.partitions] == [(1,)]
    assert a.topic_id == broker.image.topic("a").topic_id


async def test_describe_topic_partitions_names_what_it_cannot_describe(broker, broker_client):
    await broker.create_topic("a", 1, {})
    got, cursor = pages(await broker_client.send(describe(["a", "nope", "bad/name"], 10)))
    assert sorted(got) == [
        ("a", ErrorCode.none, [0]),
        ("bad/name", ErrorCode.invalid_topic_exception, []),
        ("nope", ErrorCode.unknown_topic_or_partition, []),
    ]
    # The cursor's topic must be among those asked for, and its partition not negative.
    got, _ = pages(await broker_client.send(describe(["a"], 10, cursor=("z", 0))))
    assert got == [("a", ErrorCode.invalid_request, [])]
    got, _ = pages(await broker_client.send(describe(["a"], 10, cursor=("a", -1))))
    assert got == [("a", ErrorCode.invalid_request, [])]


@pytest.mark.parametrize("limit", [0, -1])
async def test_a_limit_below_one_still_pages_one_partition(broker, broker_client, limit):
    await broker.create_topic("a", 2, {})
    got, cursor = pages(await broker_client.send(describe([], limit)))
    assert (got, cursor) == ([("a", ErrorCode.none, [0])], ("a", 1))


async def test_the_broker_caps_a_page_at_its_partition_limit(tmp_path):
    async with running_broker(tmp_path / "kafka-logs", max_request_partition_size_limit="2") as (
        broker,
        conn,
    ):
        await broker.create_topic("a", 5, {})
        got, cursor = pages(await conn.send(describe([], 100)))
        assert (got, cursor) == ([("a", ErrorCode.none, [0, 1])], ("a", 2))
