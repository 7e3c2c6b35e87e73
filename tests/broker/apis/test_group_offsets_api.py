"""Offsets and group administration at the protocol level: commits survive restarts (replayed
from __consumer_offsets), topics by id (v10), ListGroups/DeleteGroups/OffsetDelete, GROUP
configs."""

from __future__ import annotations

import uuid

from in_process_broker import running_broker
from kafka_requests import req
from kio.schema.errors import ErrorCode

from broker.client.connection import BrokerConnection


def _key(topic) -> str:
    """The topic of a response entry: its id from v10 on, before that its name."""
    return topic.topic_id if hasattr(topic, "topic_id") else topic.name


async def commit(conn: BrokerConnection, group: str, offsets: dict, generation=-1, v=9):
    """`offsets` by (topic, partition); a topic is a name, or from v10 on an id."""
    topics = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            req(
                8,
                v,
                "OffsetCommitRequestPartition",
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata=f"m{offset}",
            )
        )
    response = await conn.send(
        req(
            8,
            v,
            "OffsetCommitRequest",
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id="",
            group_instance_id=None,
            topics=tuple(
                req(8, v, "OffsetCommitRequestTopic", name=t, topic_id=t, partitions=tuple(ps))
                for t, ps in topics.items()
            ),
        )
    )
    return {
        (_key(t), p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


async def fetch(conn: BrokerConnection, group: str, topics=None, v=9, errors=False) -> dict:
    """Offsets by (topic, partition), a topic named as in `commit`; with `errors`, each
    partition's error code too."""
    wanted = (
        None
        if topics is None
        else tuple(
            req(9, v, "OffsetFetchRequestTopics", name=t, topic_id=t, partition_indexes=tuple(ps))
            for t, ps in topics.items()
        )
    )
    response = await conn.send(
        req(
            9,
            v,
            "OffsetFetchRequest",
            require_stable=False,
            groups=(
                req(
                    9,
                    v,
                    "OffsetFetchRequestGroup",
                    group_id=group,
                    member_id=None,
                    member_epoch=-1,
                    topics=wanted,
                ),
            ),
        )
    )
    [g] = response.groups
    assert g.error_code == ErrorCode.none
    return {
        (_key(t), p.partition_index): (p.committed_offset, p.metadata)
        + ((p.error_code,) if errors else ())
        for t in g.topics
        for p in t.partitions
    }


async def list_groups(conn: BrokerConnection) -> dict:
    response = await conn.send(req(16, 5, "ListGroupsRequest", states_filter=(), types_filter=()))
    return {g.group_id: (g.group_state, g.group_type) for g in response.groups}


NONE, UNKNOWN_ID = ErrorCode.none, ErrorCode.unknown_topic_id


async def test_offsets_committed_by_topic_id_are_seen_by_id_and_by_name(broker, broker_client):
    topic = await broker.create_topic("ids", 2, {})
    tid = topic.topic_id
    assert await commit(broker_client, "g", {(tid, 0): 5, (tid, 1): 7}, v=10) == {
        (tid, 0): NONE,
        (tid, 1): NONE,
    }
    by_id = {(tid, 0): (5, "m5"), (tid, 1): (7, "m7")}
    assert await fetch(broker_client, "g", {tid: [0, 1]}, v=10) == by_id
    assert await fetch(broker_client, "g", v=10) == by_id  # all offsets: named by id too
    assert await fetch(broker_client, "g", {"ids": [0, 1]}) == {
        ("ids", 0): (5, "m5"),
        ("ids", 1): (7, "m7"),
    }
    # A commit by name (v9) is one of the topic's, whatever its id.
    await commit(broker_client, "g", {("ids", 1): 8})
    assert await fetch(broker_client, "g", {tid: [1]}, v=10) == {(tid, 1): (8, "m8")}


async def test_a_topic_id_the_broker_does_not_know_is_unknown_topic_id(broker, broker_client):
    tid = (await broker.create_topic("known", 1, {})).topic_id
    unknown = uuid.uuid4()
    # The response names each topic by the id it was asked by, known or not; the zero id
    # (sent for a topic whose id the client lacks) names no topic either.
    errors = await commit(broker_client, "g", {(unknown, 0): 1, (tid, 0): 2}, v=10)
    assert errors == {(unknown, 0): UNKNOWN_ID, (tid, 0): NONE}
    zero = await commit(broker_client, "g", {(uuid.UUID(int=0), 0): 3}, v=10)
    assert list(zero.values()) == [UNKNOWN_ID]
    fetched = await fetch(broker_client, "g", {unknown: [0], tid: [0]}, v=10, errors=True)
    assert fetched == {(unknown, 0): (-1, "", UNKNOWN_ID), (tid, 0): (2, "m2", NONE)}


async def test_an_offset_committed_by_id_is_not_another_topic_of_the_same_name(tmp_path):
    """Kafka keeps the id with an offset committed by id (OffsetCommitValue version 4): a fetch
    by id leaves out an offset of a topic deleted and created again under its name; deleting
    the topic also deleted its offsets, so the name finds none either."""
    async with running_broker(tmp_path) as (broker, conn):
        old = (await broker.create_topic("again", 1, {})).topic_id
        assert await commit(conn, "g", {(old, 0): 9}, v=10) == {(old, 0): NONE}
        await broker.delete_topic("again")
        assert await fetch(conn, "g", v=10) == {}  # its id is gone: it cannot be named
        new = (await broker.create_topic("again", 1, {})).topic_id
    async with running_broker(tmp_path) as (_, conn):  # the id is read back from the log
        assert await fetch(conn, "g", {new: [0]}, v=10) == {(new, 0): (-1, "")}
        assert await fetch(conn, "g", {old: [0]}, v=10, errors=True) == {
            (old, 0): (-1, "", UNKNOWN_ID)
        }
        assert await fetch(conn, "g", {"again": [0]}) == {("again", 0): (-1, "")}
        # Committed again by the new id, the offset is the new topic's.
        await commit(conn, "g", {(new, 0): 4}, v=10)
        assert await fetch(conn, "g", {new: [0]}, v=10) == {(new, 0): (4, "m4")}


async def test_committed_offsets_survive_a_restart(tmp_path):
    async with running_broker(tmp_path) as (broker, conn):
        await broker.create_topic("t", 3, {})
        await broker.create_topic("u", 4, {})
        assert await commit(conn, "g1", {("t", 0): 5, ("t", 1): 9}) == {
            ("t", 0): ErrorCode.none,
            ("t", 1): ErrorCode.none,
        }
        await commit(conn, "g1", {("t", 0): 7})
        await commit(conn, "g2", {("u", 3): 1})

    async with running_broker(tmp_path) as (_, conn):
        assert await fetch(conn, "g1") == {("t", 0): (7, "m7"), ("t", 1): (9, "m9")}
        assert await fetch(conn, "g1", {"t": [1, 2]}) == {("t", 1): (9, "m9"), ("t", 2): (-1, "")}
        assert await list_groups(conn) == {"g1": ("Empty", "classic"), "g2": ("Empty", "classic")}


async def test_offsets_of_unknown_topics_and_partitions_are_refused(broker, broker_client):
    """As Kafka's KafkaApis: offsets of a topic or partition the cluster does not have would
    outlive it and greet a later topic of that name."""
    await broker.create_topic("t", 1, {})
    errors = await commit(broker_client, "g", {("t", 0): 1, ("t", 1): 2, ("ghost", 0): 3})
    assert errors == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.unknown_topic_or_partition,
        ("ghost", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert await fetch(broker_client, "g") == {("t", 0): (1, "m1")}


async def test_commit_with_a_generation_to_an_unknown_group_is_refused(broker, broker_client):
    await broker.create_topic("t", 1, {})
    errors = await commit(broker_client, "nobody", {("t", 0): 1}, generation=3)
    assert errors == {("t", 0): ErrorCode.group_id_not_found}
    errors = await commit(broker_client, "nobody", {("t", 0): 1}, generation=3, v=8)
    assert errors == {("t", 0): ErrorCode.illegal_generation}  # before v9, as Kafka


async def test_delete_groups_and_offset_delete(broker, broker_client):
    await broker.create_topic("t", 2, {})
    await commit(broker_client, "g", {("t", 0): 1, ("t", 1): 2})
    response = await broker_client.send(
        req(
            47,
            0,
            "OffsetDeleteRequest",
            group_id="g",
            topics=(
                req(
                    47,
                    0,
                    "OffsetDeleteRequestTopic",
                    name="t",
                    partitions=(req(47, 0, "OffsetDeleteRequestPartition", partition_index=0),),
                ),
            ),
        )
    )
    assert response.error_code == ErrorCode.none
    assert await fetch(broker_client, "g") == {("t", 1): (2, "m2")}
    response = await broker_client.send(
        req(42, 2, "DeleteGroupsRequest", groups_names=("g", "missing"))
    )
    assert {r.group_id: r.error_code for r in response.results} == {
        "g": ErrorCode.none,
        "missing": ErrorCode.group_id_not_found,
    }
    assert await fetch(broker_client, "g") == {}
    assert "g" not in await list_groups(broker_client)


async def test_group_configs_are_validated_stored_and_described(broker, broker_client):
    def alter(name, value):
        cfg = req(44, 1, "AlterableConfig", name=name, config_operation=0, value=value)
        res = req(
            44, 1, "AlterConfigsResource", resource_type=32, resource_name="g", configs=(cfg,)
        )
        return req(44, 1, "IncrementalAlterConfigsRequest", resources=(res,), validate_only=False)

    ok = await broker_client.send(alter("consumer.session.timeout.ms", "50000"))
    assert ok.responses[0].error_code == ErrorCode.none
    too_low = await broker_client.send(alter("consumer.session.timeout.ms", "1000"))
    assert too_low.responses[0].error_code == ErrorCode.invalid_config
    assert "group.consumer.min.session.timeout.ms" in too_low.responses[0].error_message
    described = await broker_client.send(
        req(
            32,
            4,
            "DescribeConfigsRequest",
            include_synonyms=False,
            include_documentation=False,
            resources=(
                req(
                    32,
                    4,
                    "DescribeConfigsResource",
                    resource_type=32,
                    resource_name="g",
                    configuration_keys=None,
                ),
            ),
        )
    )
    values = {c.name: (c.value, c.config_source) for c in described.results[0].configs}
    assert values == {
        "consumer.session.timeout.ms": ("50000", 8),
        "consumer.heartbeat.interval.ms": ("5000", 5),
    }
    assert broker.group_configs == {"g": {"consumer.session.timeout.ms": "50000"}}


async def test_consumer_offsets_partitions_compact_and_replay_the_same_state(tmp_path):
    # Small segments stand in for megabytes of commits: the cleaner takes whole segments only.
    small = {"offsets_topic_segment_bytes": "4096"}
    async with running_broker(tmp_path, **small) as (first, conn):
        await first.create_topic("t", 2, {})
        await first.create_topic("u", 1, {})
        for i in range(200):
            await commit(conn, "busy", {("t", 0): i, ("t", 1): 1000 + i})
        await commit(conn, "quiet", {("u", 0): 42})
        partition = first.group_coordinator.partition_for("busy")
        log_ = first.replica_manager.log("__consumer_offsets", partition)
        assert log_.config.compact
        before = log_.size_in_bytes
        assert await first.run_blocking(first.log_cleaner.clean_logs) >= 1
        assert log_.size_in_bytes < before / 4  # superseded commits are gone
        assert log_.log_start_offset == 0  # offsets stay; the cleaned part has holes
        state = {g: await fetch(conn, g) for g in ("busy", "quiet")}
        assert state == {
            "busy": {("t", 0): (199, "m199"), ("t", 1): (1199, "m1199")},
            "quiet": {("u", 0): (42, "m42")},
        }

    async with running_broker(tmp_path, **small) as (_, conn):
        assert {g: await fetch(conn, g) for g in ("busy", "quiet")} == state


async def test_internal_topics_of_older_log_dirs_are_handed_to_the_cleaner(tmp_path):
    """Before the log cleaner, the internal topics were kept forever (retention.ms=-1) and
    compacted by their coordinators."""
    async with running_broker(tmp_path) as (broker, _):
        for name in ("__consumer_offsets", "__transaction_state"):
            await broker.create_topic(name, 2, {"retention.ms": "-1"})
    async with running_broker(tmp_path) as (broker, _):
        for name in ("__consumer_offsets", "__transaction_state"):
            configs = broker.image.topic(name).configs
            assert configs == {"retention.ms": "-1", "cleanup.policy": "compact"}
            assert broker.replica_manager.log(name, 0).config.cleanup_policy == "compact"


async def test_offsets_of_a_deleted_topic_are_deleted_with_it(tmp_path):
    """As Kafka's onPartitionsDeleted: a topic created again under the name starts afresh,
    also after a restart (the tombstones are in __consumer_offsets)."""
    async with running_broker(tmp_path) as (broker, conn):
        await broker.create_topic("t", 2, {})
        await broker.create_topic("kept", 1, {})
        await commit(conn, "g", {("t", 0): 5, ("t", 1): 6, ("kept", 0): 7})
        await commit(conn, "h", {("t", 1): 8})
        await broker.delete_topic("t")
        await broker.create_topic("t", 2, {})
        assert await fetch(conn, "g") == {("kept", 0): (7, "m7")}
        assert await fetch(conn, "h") == {}
    async with running_broker(tmp_path) as (_, conn):
        assert await fetch(conn, "g") == {("kept", 0): (7, "m7")}
        assert await fetch(conn, "h") == {}
