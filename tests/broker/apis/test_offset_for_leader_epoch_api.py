"""OffsetForLeaderEpoch answered from the partition's leader epoch cache, as Kafka's
Partition.lastOffsetForLeaderEpoch does, against an in-process broker."""

from __future__ import annotations

from dataclasses import replace

from kafka_requests import produce_request, req
from kio.schema.errors import ErrorCode
from test_produce_fetch import batch

from broker.apis.registry import API_SPECS

TOPIC = "epochs"
NEWEST = API_SPECS[23].max_version


async def end_offsets(client, *leader_epochs: int, current_leader_epoch: int = -1):
    """(error, leader epoch, end offset) per epoch asked, for partition 0 of TOPIC."""
    parts = tuple(
        req(
            23,
            NEWEST,
            "OffsetForLeaderPartition",
            partition=0,
            current_leader_epoch=current_leader_epoch,
            leader_epoch=epoch,
        )
        for epoch in leader_epochs
    )
    response = await client.send(
        req(
            23,
            NEWEST,
            "OffsetForLeaderEpochRequest",
            replica_id=-1,
            topics=(req(23, NEWEST, "OffsetForLeaderTopic", topic=TOPIC, partitions=parts),),
        )
    )
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in response.topics[0].partitions]


async def test_end_offsets_come_from_the_epoch_cache(broker, broker_client):
    await broker.create_topic(TOPIC, 1, {})
    none = ErrorCode.none
    # A new leader's epoch starts at its log end, before anything is written (makeLeader).
    assert await end_offsets(broker_client, 0) == [(none, 0, 0)]
    await broker_client.send(produce_request(TOPIC, batch(3)))
    # A leader election to epoch 2, as cluster mode will make: epoch 0 now ends at 3.
    rm = broker.replica_manager
    partition = rm.partition(TOPIC, 0)
    partition.update(replace(partition.registration, leader_epoch=2, partition_epoch=1), 0)
    await broker_client.send(produce_request(TOPIC, batch(2)))
    assert await end_offsets(broker_client, 0, 1, 2, 3, -1) == [
        (none, 0, 3),  # an older epoch ends where the next one begins
        (none, 0, 3),  # an epoch never led: the largest epoch below it, and its end
        (none, 2, 5),  # the latest epoch ends at the log end
        (none, -1, -1),  # above the latest: unknown
        (none, -1, -1),  # UNDEFINED_EPOCH
    ]
    rm.log(TOPIC, 0).delete_records_before(4)
    assert await end_offsets(broker_client, 0) == [(none, 0, 4)]  # below the first: its start


async def test_errors_are_kept(broker, broker_client):
    assert await end_offsets(broker_client, 0) == [(ErrorCode.unknown_topic_or_partition, -1, -1)]
    await broker.create_topic(TOPIC, 1, {})
    fenced = await end_offsets(broker_client, 0, current_leader_epoch=1)
    assert fenced == [(ErrorCode.unknown_leader_epoch, -1, -1)]
