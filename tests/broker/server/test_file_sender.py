"""Fetch responses sent from the segment files with sendfile: behind a client that stops
reading, they arrive whole and in the order of the requests, with the small responses that
queued behind them, even when their topic is deleted while they wait; and nothing stays open
after the connection."""

from __future__ import annotations

import os
import random

from kafka_requests import fetch_request, produce_request
from kio.schema.errors import ErrorCode
from raw_client import SIZE, RawClient, api_versions_request, framed, wait_until

from broker.protocol import codec
from broker.records.batch import build_batch, decode_batch, iter_batches

MB = 1 << 20
RECORDS_PER_BATCH = 20


def megabyte_batch(seed: int) -> bytes:
    rng = random.Random(seed)
    return build_batch(
        [(None, rng.randbytes(50_000), [], 1000 + i) for i in range(RECORDS_PER_BATCH)]
    )


def values(records: bytes) -> list[bytes]:
    return [
        r.value
        for pos, h in iter_batches(records)
        for r in decode_batch(bytes(records[pos : pos + h.size]))[1]
    ]


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def beyond_kernel_buffers() -> int:
    """Megabyte batches that outgrow what the kernel buffers for a socket, whatever it grows
    to, so that a broker sending them to a client that does not read must wait."""
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        return int(f.read().split()[2]) // MB + 2


async def big_topic(broker, broker_client, batches: int):
    """A topic of one partition holding `batches` megabyte batches, and the batches."""
    topic = await broker.create_topic("big", 1, {})
    written = [megabyte_batch(seed) for seed in range(batches)]
    for data in written:
        response = await broker_client.send(produce_request("big", data))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    return topic, written


async def slow_reader(broker) -> RawClient:
    return await RawClient.open(*broker.bound["PLAINTEXT"], receive_buffer=16 * 1024)


def big_fetch(topic, offset: int, size: int, correlation_id: int) -> bytes:
    return framed(
        fetch_request(topic.topic_id, offset, partition_max_bytes=size, max_bytes=size),
        correlation_id,
    )


def sending_from_file(broker) -> bool:
    """A connection of the broker waits for its socket to take more of a file slice."""
    return any(c._sender is not None and c._sender._watching for c in broker.connections)


async def test_responses_from_files_arrive_whole_and_in_order_behind_a_stalled_reader(
    broker, broker_client
):
    per_fetch = beyond_kernel_buffers()  # two fetches of that many: twice what could buffer
    topic, batches = await big_topic(broker, broker_client, 2 * per_fetch)
    end = len(batches) * RECORDS_PER_BATCH
    descriptors = open_descriptors()

    client = await slow_reader(broker)
    size = per_fetch * len(batches[0]) + 1
    # A fetch that waits for a record at the log's end holds back the responses behind it: when
    # it is answered they are written one after the other, the later ones while the first big
    # one is still going out.
    await client.send(
        framed(fetch_request(topic.topic_id, end, min_bytes=1, max_wait=30_000), 1)
        + big_fetch(topic, 0, size, 2)
        + api_versions_request(3)
        + big_fetch(topic, per_fetch * RECORDS_PER_BATCH, size, 4)
        + api_versions_request(5)
    )
    await wait_until(lambda: broker.replica_manager.parked(("big", 0)), what="a parked fetch")
    last = build_batch([(None, b"last", [], 5000)])
    await broker_client.send(produce_request("big", last))
    await wait_until(lambda: sending_from_file(broker), what="a send waiting for the socket")
    await broker.delete_topic("big")  # its segment files go while the responses wait

    frames = [await client.read_frame() for _ in range(5)]
    assert [SIZE.unpack_from(f, 0)[0] for f in frames] == [1, 2, 3, 4, 5]
    parked = codec.decode_response(frames[0], 1, 16)[1].responses[0].partitions[0]
    assert values(parked.records) == [b"last"]
    for frame, wanted in ((frames[1], batches[:per_fetch]), (frames[3], batches[per_fetch:])):
        part = codec.decode_response(frame, 1, 16)[1].responses[0].partitions[0]
        assert part.error_code == ErrorCode.none
        assert values(part.records) == [v for data in wanted for v in values(data)]
    for frame in (frames[2], frames[4]):
        assert codec.decode_response(frame, 18, 0)[1].error_code == ErrorCode.none

    client.close()
    await wait_until(lambda: len(broker.connections) == 1, what="the connection closed")
    await wait_until(lambda: open_descriptors() <= descriptors, what="descriptors closed")


async def test_a_connection_closed_mid_send_first_writes_what_it_answered(broker, broker_client):
    topic, batches = await big_topic(broker, broker_client, beyond_kernel_buffers())
    client = await slow_reader(broker)
    await client.send(big_fetch(topic, 0, len(batches) * len(batches[0]), 1))
    await wait_until(lambda: sending_from_file(broker), what="a send waiting for the socket")
    (sending,) = [c for c in broker.connections if c._sender is not None and c._sender.busy]
    sending.close()  # as the broker's shutdown does: the transport's close flushes first

    frame = await client.read_frame()
    part = codec.decode_response(frame, 1, 16)[1].responses[0].partitions[0]
    assert values(part.records) == [v for data in batches for v in values(data)]
    assert await client.closed_by_broker()
