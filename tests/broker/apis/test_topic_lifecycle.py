"""Topics survive restarts with their ids, configs and data; LogAppendTime topics stamp time."""

from __future__ import annotations

import time

from in_process_broker import running_broker
from kio.schema.errors import ErrorCode
from test_produce_fetch import batch, fetch_request, fetched, produce_request

from broker.records.batch import LOG_APPEND_TIME


async def test_topics_configs_and_data_survive_a_restart(tmp_path):
    async with running_broker(tmp_path) as (first, conn):
        topic = await first.create_topic("kept", 2, {"retention.ms": "3600000"})
        await conn.send(produce_request("kept", batch(4), partition=1))
        cluster_id = first.image.cluster_id

    async with running_broker(tmp_path) as (second, conn):
        again = second.image.topic("kept")
        assert (again.topic_id, again.partitions, again.configs) == (
            topic.topic_id,
            2,
            {"retention.ms": "3600000"},
        )
        assert second.image.cluster_id == cluster_id
        part, batches = fetched(await conn.send(fetch_request(topic.topic_id, partition=1)))
        assert part.high_watermark == 4 and len(batches[0][1]) == 4


async def test_log_append_time_topics_stamp_the_broker_time(broker, broker_client):
    topic = await broker.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    response = await broker_client.send(produce_request("lat", batch(3)))
    after = int(time.time() * 1000)
    p = response.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.none
    stamped = int(p.log_append_time.timestamp() * 1000)
    assert before <= stamped <= after
    _, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    header, records = batches[0]
    assert header.timestamp_type == LOG_APPEND_TIME and header.max_timestamp == stamped
    assert [header.record_timestamp(r) for r in records] == [stamped] * 3


async def test_create_time_too_far_in_the_future_is_rejected(broker, broker_client):
    await broker.create_topic("ct", 1, {"message.timestamp.after.max.ms": "1000"})
    from broker.records.batch import build_batch

    future = build_batch([(None, b"x", [], int(time.time() * 1000) + 3_600_000)])
    response = await broker_client.send(produce_request("ct", future))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.invalid_timestamp


async def test_a_cancelled_creation_still_completes_store_and_image_together(broker):
    import asyncio

    for yields in range(12):
        name = f"cancelled-{yields}"
        task = asyncio.ensure_future(broker.create_topic(name, 1, {}))
        for _ in range(yields):
            await asyncio.sleep(0)  # cancel at each suspension point in turn
        task.cancel()
        # The change was begun: asking again waits for it and finds the topic, never a
        # UNIQUE-constraint failure from a row the image does not know.
        topic = await broker.create_topic(name, 1, {})
        stored = broker.store.load(None).topic(name)
        assert stored is not None and stored.topic_id == topic.topic_id
        assert broker.replica_manager.log(name, 0) is not None
