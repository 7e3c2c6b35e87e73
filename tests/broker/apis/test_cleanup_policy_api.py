"""What the cleanup policy asks of writes: DeleteRecords may remove a prefix only where the
policy includes delete, and a compacted topic takes only records with a key."""

from __future__ import annotations

import time

import pytest
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_produce_fetch import produce_request

from broker.records.batch import build_batch


def delete_records(topic: str, offset: int, v: int = 2):
    part = req(21, v, "DeleteRecordsPartition", partition_index=0, offset=offset)
    return req(
        21,
        v,
        "DeleteRecordsRequest",
        timeout=ms(5000),
        topics=(req(21, v, "DeleteRecordsTopic", name=topic, partitions=(part,)),),
    )


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("delete", (ErrorCode.none, 2)),
        ("compact,delete", (ErrorCode.none, 2)),
        ("compact", (ErrorCode.policy_violation, -1)),
    ],
)
async def test_only_topics_with_the_delete_policy_lose_a_prefix(
    broker, broker_client, policy, expected
):
    await broker.create_topic("t", 1, {"cleanup.policy": policy})
    now = int(time.time() * 1000)
    records = build_batch([(b"k%d" % i, b"v", [], now) for i in range(3)])
    await broker_client.send(produce_request("t", records))
    response = await broker_client.send(delete_records("t", 2))
    result = response.topics[0].partitions[0]
    assert (result.error_code, result.low_watermark) == expected
    start = broker.replica_manager.log("t", 0).log_start_offset
    assert start == (2 if expected[0] == ErrorCode.none else 0)


async def test_compacted_topics_refuse_records_without_a_key(broker, broker_client):
    """Kafka's LogValidator: the cleaner keeps one record per key, so each needs one."""
    await broker.create_topic("t", 1, {"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    keyless = build_batch([(b"k", b"v", [], now), (None, b"v", [], now)])
    response = await broker_client.send(produce_request("t", keyless))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record
    assert broker.replica_manager.log("t", 0).log_end_offset == 0
    keyed = build_batch([(b"k", b"v", [], now)])
    response = await broker_client.send(produce_request("t", keyed))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
