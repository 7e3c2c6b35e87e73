"""The Prometheus endpoint: per-API request metrics and per-partition offsets."""

from __future__ import annotations

import asyncio
import gc
import time

from kafka_requests import ms, req

from broker.records.batch import build_batch
from broker.server.loop_monitor import INTERVAL_S


async def scrape(broker, path="/metrics") -> tuple[str, str]:
    host, port = broker.metrics_address
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = (await reader.read()).decode()
    writer.close()
    head, _, body = raw.partition("\r\n\r\n")
    return head.splitlines()[0], body


async def test_metrics_show_requests_and_partition_offsets(broker, broker_client):
    await broker.create_topic("m", 2, {})
    part = req(
        0,
        11,
        "PartitionProduceData",
        index=1,
        records=build_batch([(None, b"x", [], 1), (None, b"y", [], 2)]),
    )
    await broker_client.send(
        req(
            0,
            11,
            "ProduceRequest",
            acks=1,
            timeout=ms(1000),
            transactional_id=None,
            topic_data=(req(0, 11, "TopicProduceData", name="m", partition_data=(part,)),),
        )
    )
    status, body = await scrape(broker)
    assert status == "HTTP/1.1 200 OK"
    assert 'fjord_partition_high_watermark{partition="1",topic="m"} 2.0' in body
    assert 'fjord_partition_high_watermark{partition="0",topic="m"} 0.0' in body
    assert 'fjord_partition_log_start_offset{partition="1",topic="m"} 0.0' in body
    assert 'fjord_requests_total{api="Produce"} 1.0' in body
    assert 'fjord_request_latency_seconds_count{api="Produce"} 1.0' in body
    assert 'fjord_request_bytes_total{api="Produce"}' in body
    assert 'fjord_connections{listener="PLAINTEXT"} 1.0' in body


async def test_other_paths_are_not_found(broker):
    status, _ = await scrape(broker, "/other")
    assert status == "HTTP/1.1 404 Not Found"


def metric(body: str, name: str) -> float:
    [line] = [x for x in body.splitlines() if x.startswith(name + " ")]
    return float(line.split()[1])


async def test_log_cleaner_metrics(broker, broker_client):
    await broker.create_topic(
        "c",
        1,
        {"cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"},
    )
    for i in range(12):
        records = build_batch([(b"same-key", b"value %d" % i + bytes(50), [], 1000 + i)])
        part = req(0, 11, "PartitionProduceData", index=0, records=records)
        topic = req(0, 11, "TopicProduceData", name="c", partition_data=(part,))
        produce = req(
            0,
            11,
            "ProduceRequest",
            acks=1,
            timeout=ms(1000),
            transactional_id=None,
            topic_data=(topic,),
        )
        await broker_client.send(produce)
    _, before = await scrape(broker)
    assert metric(before, "fjord_log_cleaner_rounds_total") == 0
    assert await broker.run_blocking(broker.log_cleaner.clean_logs) >= 1
    _, body = await scrape(broker)
    assert metric(body, "fjord_log_cleaner_rounds_total") >= 1
    read, written = (
        metric(body, f"fjord_log_cleaner_{n}_bytes_total") for n in ("read", "written")
    )
    assert 0 < written < read  # eleven of twelve values of one key went
    assert metric(body, "fjord_log_cleaner_uncleanable_partitions") == 0
    assert 0 < metric(body, "fjord_log_cleaner_buffer_utilization") < 1
    assert metric(body, "fjord_log_cleaner_seconds_since_last_run") >= 0


async def test_a_held_event_loop_shows_as_lag(broker):
    """Holding the loop (here on purpose, as a blocking call would) is what clients feel as
    tail latency: the lag metric must show it, and the next ticks must still run."""
    _, before = await scrape(broker)
    assert metric(before, "fjord_event_loop_lag_max_seconds") < 0.3
    ticks = metric(before, "fjord_event_loop_lag_seconds_count")
    time.sleep(0.3)  # the fault under test: the loop held, not a wait for something
    while True:
        _, body = await scrape(broker)
        if metric(body, "fjord_event_loop_lag_seconds_count") > ticks:
            break
        await asyncio.sleep(0.05)
    # The tick due next was at most one interval into the hold.
    assert metric(body, "fjord_event_loop_lag_max_seconds") >= 0.3 - INTERVAL_S
    assert metric(body, 'fjord_event_loop_lag_seconds_bucket{le="0.1"}') < metric(
        body, "fjord_event_loop_lag_seconds_count"
    )


async def test_garbage_collections_are_timed_by_generation(broker):
    _, before = await scrape(broker)
    collections = metric(before, 'fjord_gc_pause_seconds_count{generation="2"}')
    gc.collect()
    _, body = await scrape(broker)
    assert metric(body, 'fjord_gc_pause_seconds_count{generation="2"}') == collections + 1
    assert metric(body, 'fjord_gc_pause_seconds_sum{generation="2"}') > 0
