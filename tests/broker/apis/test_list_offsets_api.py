"""ListOffsets' offset specs at the protocol level, against an in-process broker: each spec from
the version that brings it (UNSUPPORTED_VERSION before, as Kafka's ReplicaManager answers), and
the tiered-storage ones (KIP-405, KIP-1005, KIP-1023) as Kafka answers them for a log without
remote storage."""

from __future__ import annotations

import pytest
from kafka_requests import ms, produce_request, req
from kio.schema.errors import ErrorCode
from test_produce_fetch import batch

from broker.apis.list_offsets import (
    EARLIEST,
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
)
from broker.apis.registry import API_SPECS

TOPIC = "offsets"
NEWEST = API_SPECS[2].max_version


def list_offsets(*timestamps: int, v: int = NEWEST, timeout_ms: int = 30_000):
    partitions = tuple(
        req(2, v, "ListOffsetsPartition", partition_index=0, timestamp=t, current_leader_epoch=-1)
        for t in timestamps
    )
    return req(
        2,
        v,
        "ListOffsetsRequest",
        replica_id=-1,
        isolation_level=0,
        topics=(req(2, v, "ListOffsetsTopic", name=TOPIC, partitions=partitions),),
        timeout=ms(timeout_ms),  # v10+
    )


async def answers(client, *timestamps: int, v: int = NEWEST) -> list[tuple]:
    """(error, offset, timestamp, leader epoch) per timestamp asked (v4+ carry the epoch)."""
    response = await client.send(list_offsets(*timestamps, v=v))
    return [
        (p.error_code, p.offset, p.timestamp, getattr(p, "leader_epoch", -1))
        for p in response.topics[0].partitions
    ]


@pytest.fixture
async def three_records(broker, broker_client):
    """Offsets 0-2 stamped 1_700_000_000_000 + 0..2; the start moved to 1."""
    await broker.create_topic(TOPIC, 1, {})
    await broker_client.send(produce_request(TOPIC, batch(3)))
    part = req(21, 2, "DeleteRecordsPartition", partition_index=0, offset=1)
    topic = req(21, 2, "DeleteRecordsTopic", name=TOPIC, partitions=(part,))
    deleted = await broker_client.send(
        req(21, 2, "DeleteRecordsRequest", topics=(topic,), timeout=ms(5000))
    )
    assert deleted.topics[0].partitions[0].low_watermark == 1
    return broker.replica_manager.leader_epoch_of(TOPIC, 0)


async def test_without_remote_storage_the_tiered_specs_find_nothing(broker_client, three_records):
    epoch = three_records
    found = await answers(
        broker_client, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD, EARLIEST, LATEST
    )
    none = ErrorCode.none
    assert found == [
        (none, 1, -1, epoch),  # the local log is the whole log: its start, as EARLIEST
        (none, -1, -1, -1),  # nothing is tiered: no offset, no epoch (Kafka's UnifiedLog)
        (none, -1, -1, -1),  # nothing waits for an upload either
        (none, 1, -1, epoch),
        (none, 3, -1, epoch),
    ]


# (spec, first version that may ask for it)
SPECS = [
    (LATEST, 1),
    (EARLIEST, 1),
    (MAX_TIMESTAMP, 7),
    (EARLIEST_LOCAL, 8),
    (LATEST_TIERED, 9),
    (EARLIEST_PENDING_UPLOAD, 11),
    (-7, 1 << 15),  # no spec: refused at every version
]


@pytest.mark.parametrize("v", range(1, NEWEST + 1))
async def test_each_spec_is_refused_below_its_version(broker_client, three_records, v):
    found = await answers(broker_client, *(spec for spec, _ in SPECS), 1_700_000_000_002, v=v)
    for (spec, since), (error, offset, timestamp, epoch) in zip(SPECS, found, strict=False):
        if v < since:
            assert (error, offset, timestamp, epoch) == (ErrorCode.unsupported_version, -1, -1, -1)
        else:
            assert error == ErrorCode.none, spec
    # A timestamp is no spec: found at every version (the record stamped ...002, offset 2).
    assert found[-1][:3] == (ErrorCode.none, 2, 1_700_000_000_002)


async def test_a_timestamp_past_every_record_has_no_offset_and_no_epoch(
    broker_client, three_records
):
    assert await answers(broker_client, 1_800_000_000_000) == [(ErrorCode.none, -1, -1, -1)]


async def test_v10_timeout_is_accepted_and_unused_without_remote_storage(
    broker_client, three_records
):
    """KIP-1075's timeout bounds a remote look-up; with none every answer is immediate."""
    for timeout_ms in (0, 1, 30_000):
        response = await broker_client.send(list_offsets(LATEST, timeout_ms=timeout_ms, v=10))
        assert response.topics[0].partitions[0].offset == 3
