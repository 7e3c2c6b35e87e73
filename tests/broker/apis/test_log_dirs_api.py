"""DescribeLogDirs at the protocol level, against an in-process broker: every log dir answered,
partition sizes as on disk, null topics against named ones, the v4 volume sizes, and the
DESCRIBE on the cluster it needs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from in_process_broker import running_broker
from kafka_requests import produce_request, req
from kio.schema.errors import ErrorCode
from test_acls_api import acl, secured_broker

from broker.apis.registry import API_SPECS
from broker.records.batch import build_batch
from broker.security.acl import CLUSTER_NAME
from broker.security.operations import AclOperation, ResourceType

SPEC = API_SPECS[35]
VERSIONS = range(SPEC.min_version, SPEC.max_version + 1)
NEWEST = SPEC.max_version


def describe_log_dirs(topics: dict[str, list[int]] | None, v: int = NEWEST):
    """All partitions for None, else the named ones."""
    named = (
        None
        if topics is None
        else tuple(
            req(35, v, "DescribableLogDirTopic", topic=name, partitions=tuple(parts))
            for name, parts in topics.items()
        )
    )
    return req(35, v, "DescribeLogDirsRequest", topics=named)


def described(result) -> dict[str, dict[int, int]]:
    """A log dir's result as topic -> partition -> size."""
    return {
        t.name: {p.partition_index: p.partition_size for p in t.partitions} for t in result.topics
    }


def size_on_disk(log_dir: Path, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (log_dir / f"{topic}-{partition}").glob("*.log"))


def records(n: int) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(b"k%d" % i, bytes(100), [], now + i) for i in range(n)])


@pytest.mark.parametrize("v", VERSIONS)
async def test_partition_sizes_grow_with_produce_and_match_the_segment_files(
    broker, broker_client, v
):
    await broker.create_topic("sizes", 2, {})
    [log_dir] = broker.config.log_dirs
    response = await broker_client.send(describe_log_dirs(None, v))
    assert type(response).__version__ == v
    [result] = response.results
    assert result.error_code == ErrorCode.none
    assert result.log_dir == str(log_dir.absolute())
    assert described(result) == {"sizes": {0: 0, 1: 0}}

    for _ in range(2):
        produced = await broker_client.send(produce_request("sizes", records(5)))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
    [result] = (await broker_client.send(describe_log_dirs(None, v))).results
    sizes = described(result)["sizes"]
    assert sizes[0] == size_on_disk(log_dir, "sizes", 0) > 2 * 5 * 100
    assert sizes[1] == 0
    for topic in result.topics:
        for p in topic.partitions:
            assert (p.offset_lag, p.is_future_key) == (0, False)
    if v >= 3:
        assert response.error_code == ErrorCode.none
    else:
        assert not hasattr(response, "error_code")


async def test_only_the_named_partitions_this_broker_has_are_described(broker, broker_client):
    await broker.create_topic("named", 3, {})
    await broker.create_topic("other", 1, {})
    response = await broker_client.send(
        describe_log_dirs({"named": [0, 2, 7], "no-such-topic": [0], "other": []})
    )
    assert response.error_code == ErrorCode.none
    [result] = response.results
    # Partition 7 and the unknown topic are left out without an error, as is a topic named
    # with no partitions.
    assert described(result) == {"named": {0: 0, 2: 0}}

    everything = await broker_client.send(describe_log_dirs(None))
    assert described(everything.results[0]) == {"named": {0: 0, 1: 0, 2: 0}, "other": {0: 0}}


async def test_no_topics_still_describes_each_log_dir(broker, broker_client):
    await broker.create_topic("present", 1, {})
    response = await broker_client.send(describe_log_dirs({}))
    [result] = response.results
    assert (result.error_code, result.topics) == (ErrorCode.none, ())
    assert result.log_dir == str(broker.config.log_dirs[0].absolute())


async def test_every_log_dir_is_described_with_the_partitions_it_holds(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    async with running_broker(dirs[0], log_dirs=",".join(map(str, dirs))) as (broker, conn):
        # New partitions go to the dir with fewest: one each in a and b, none in c.
        await broker.create_topic("spread", 2, {})
        await conn.send(produce_request("spread", records(3), partition=0))
        await conn.send(produce_request("spread", records(7), partition=1))
        response = await conn.send(describe_log_dirs(None))
        assert [r.log_dir for r in response.results] == [str(d.absolute()) for d in dirs]
        holding = {}
        for log_dir, result in zip(dirs, response.results, strict=True):
            assert result.error_code == ErrorCode.none
            for name, sizes in described(result).items():
                for partition, size in sizes.items():
                    assert size == size_on_disk(log_dir, name, partition) > 0
                    holding[partition] = log_dir
        assert holding == {0: dirs[0], 1: dirs[1]}
        assert response.results[2].topics == ()

        await broker.delete_topic("spread")
        response = await conn.send(describe_log_dirs(None))
        assert [r.topics for r in response.results] == [(), (), ()]


async def test_v4_gives_the_size_of_each_log_dirs_volume(broker, broker_client):
    [log_dir] = broker.config.log_dirs
    [result] = (await broker_client.send(describe_log_dirs(None, 4))).results
    st = os.statvfs(log_dir)
    assert result.total_bytes == st.f_blocks * st.f_frsize > 0
    # Other processes write to the same file system meanwhile: only bounds hold.
    assert 0 <= result.usable_bytes <= result.total_bytes
    [older] = (await broker_client.send(describe_log_dirs(None, 3))).results
    assert not hasattr(older, "total_bytes") and not hasattr(older, "usable_bytes")


@pytest.mark.parametrize("v", VERSIONS)
async def test_describe_on_the_cluster_is_required(tmp_path, v):
    async with secured_broker(tmp_path / "kafka-logs") as (broker, conn):
        await broker.create_topic("secret", 1, {})
        # Topic ACLs do not count: Kafka asks only about the cluster.
        await broker.create_acls([acl(ResourceType.TOPIC, "secret", AclOperation.ALL)])
        refused = await conn.send(describe_log_dirs(None, v))
        assert refused.results == ()
        if v >= 3:
            assert refused.error_code == ErrorCode.cluster_authorization_failed

        await broker.create_acls([acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.DESCRIBE)])
        allowed = await conn.send(describe_log_dirs(None, v))
        [result] = allowed.results
        assert described(result) == {"secret": {0: 0}}
        if v >= 3:
            assert allowed.error_code == ErrorCode.none
