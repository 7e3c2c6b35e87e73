"""Produce and Fetch semantics at the protocol level, against an in-process broker."""

from __future__ import annotations

import asyncio
import dataclasses
import struct

import pytest
from kafka_requests import fetch_request, produce_request, req
from kio.schema.errors import ErrorCode

from broker.client.connection import BrokerConnection, ConnectionClosed
from broker.protocol import codec
from broker.records.batch import build_batch, decode_batch, iter_batches

FETCH_V = 16


def batch(n: int, start: int = 0, size: int = 10) -> bytes:
    return build_batch(
        [
            (f"k{i}".encode(), bytes(size), [], 1_700_000_000_000 + i)
            for i in range(start, start + n)
        ]
    )


def fetched(response) -> tuple[object, list]:
    part = response.responses[0].partitions[0]
    batches = (
        [
            decode_batch(bytes(part.records[pos : pos + h.size]))
            for pos, h in iter_batches(part.records)
        ]
        if part.records
        else []
    )
    return part, batches


async def test_produce_assigns_consecutive_offsets_and_fetch_returns_them(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    first = await broker_client.send(produce_request("t", batch(3)))
    second = await broker_client.send(produce_request("t", batch(2, 3)))
    p1 = first.responses[0].partition_responses[0]
    p2 = second.responses[0].partition_responses[0]
    assert (p1.error_code, p1.base_offset, p2.base_offset) == (ErrorCode.none, 0, 3)
    part, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    assert part.high_watermark == 5 and part.log_start_offset == 0
    assert [h.base_offset for h, _ in batches] == [0, 3]
    keys = [r.key for _, records in batches for r in records]
    assert keys == [f"k{i}".encode() for i in range(5)]


async def test_large_batches_travel_in_their_own_frame_buffers(broker, broker_client):
    topic = await broker.create_topic("big", 1, {})
    big = batch(40, size=20_000)  # 800 KB: far larger than the decoder's read chunk
    response = await broker_client.send(produce_request("big", big))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    part, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    assert [r.value for r in batches[0][1]] == [bytes(20_000)] * 40


async def test_produce_errors_are_per_partition_and_lose_nothing(broker, broker_client):
    await broker.create_topic("t", 1, {"max.message.bytes": "200"})
    good = batch(1)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # breaks the CRC
    cases = [
        (produce_request("nope", good), ErrorCode.unknown_topic_or_partition),
        (produce_request("t", good, partition=7), ErrorCode.unknown_topic_or_partition),
        (produce_request("t", bytes(corrupt)), ErrorCode.corrupt_message),
        (produce_request("t", good + good), ErrorCode.invalid_record),
        (produce_request("t", batch(1, size=500)), ErrorCode.message_too_large),
        (produce_request("t", good, acks=2), ErrorCode.invalid_required_acks),
    ]
    for request, expected in cases:
        response = await broker_client.send(request)
        assert response.responses[0].partition_responses[0].error_code == expected
    ok = await broker_client.send(produce_request("t", good))
    assert ok.responses[0].partition_responses[0].base_offset == 0  # nothing was appended


async def test_acks_zero_has_no_response_and_later_responses_stay_in_order(broker, broker_client):
    await broker.create_topic("t", 1, {})
    await broker_client.send_raw(produce_request("t", batch(1), acks=0), expect_response=False)
    response = await broker_client.send(produce_request("t", batch(1)))
    assert response.responses[0].partition_responses[0].base_offset == 1


async def until_parked(broker, tp) -> None:
    """Yield until a fetch of `tp` is parked (a condition, not a delay); fail past a deadline
    rather than hang."""

    async def parked() -> None:
        while not broker.replica_manager.parked(tp):
            await asyncio.sleep(0)

    await asyncio.wait_for(parked(), 10)


async def test_parked_fetch_is_answered_when_data_arrives(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    host, port = broker.bound["PLAINTEXT"]
    producer = await BrokerConnection.open(host, port)
    try:
        parked = asyncio.ensure_future(
            broker_client.send(fetch_request(topic.topic_id, min_bytes=1, max_wait=30_000))
        )
        await until_parked(broker, ("t", 0))
        assert not parked.done()
        await producer.send(produce_request("t", batch(2)))
        part, batches = fetched(await parked)
        assert part.high_watermark == 2 and len(batches) == 1
    finally:
        await producer.close()


def with_high_watermark(request, high_watermark: int, replica_id: int):
    """A Fetch v18 whose one partition tells the high watermark its fetcher knows (KIP-1166),
    from a consumer (-1) or a follower (a broker id)."""
    [topic] = request.topics
    [part] = topic.partitions
    part = dataclasses.replace(part, high_watermark=high_watermark)
    return dataclasses.replace(
        request,
        replica_state=dataclasses.replace(request.replica_state, replica_id=replica_id),
        topics=(dataclasses.replace(topic, partitions=(part,)),),
    )


@pytest.mark.parametrize("replica_id", [-1, 2])
async def test_fetch_v18_high_watermark_does_not_answer_a_fetch_early(
    broker, broker_client, replica_id
):
    """Kafka's KRaft quorum answers a fetcher that knows an older high watermark at once; its
    brokers ignore the field, for consumers and followers alike, and so does Fjord: the fetch
    waits for min_bytes as any other."""
    topic = await broker.create_topic("t", 1, {})
    await broker_client.send(produce_request("t", batch(2)))
    host, port = broker.bound["PLAINTEXT"]
    producer = await BrokerConnection.open(host, port)
    try:
        # Longer than the test may take: answered at its deadline, the test fails on its own.
        request = fetch_request(topic.topic_id, offset=2, min_bytes=1, max_wait=3_600_000, v=18)
        parked = asyncio.ensure_future(
            broker_client.send(with_high_watermark(request, 0, replica_id))
        )
        await until_parked(broker, ("t", 0))
        assert not parked.done()
        await producer.send(produce_request("t", batch(1, 2)))
        part, batches = fetched(await parked)
        assert part.high_watermark == 3 and [h.base_offset for h, _ in batches] == [2]
    finally:
        await producer.close()
    for known in (-1, 3, 2**63 - 1):  # unknown, current, "not supported" (the default)
        request = fetch_request(topic.topic_id, v=18)
        part, batches = fetched(
            await broker_client.send(with_high_watermark(request, known, replica_id))
        )
        assert (part.error_code, part.high_watermark, len(batches)) == (ErrorCode.none, 3, 2)


async def test_fetch_respects_max_bytes_but_returns_at_least_one_batch(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    for i in range(3):
        await broker_client.send(produce_request("t", batch(1, i, size=1000)))
    part, batches = fetched(await broker_client.send(fetch_request(topic.topic_id, max_bytes=10)))
    assert len(batches) == 1  # larger than the limit, still returned whole
    part, batches = fetched(
        await broker_client.send(fetch_request(topic.topic_id, partition_max_bytes=2500))
    )
    assert len(batches) == 2


async def test_fetch_out_of_range_offset(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    part, _ = fetched(await broker_client.send(fetch_request(topic.topic_id, offset=5)))
    assert part.error_code == ErrorCode.offset_out_of_range


async def test_unknown_fetch_session_is_rejected(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    request = fetch_request(topic.topic_id)
    response = await broker_client.send(
        dataclasses.replace(request, session_id=1234, session_epoch=1)
    )
    assert response.error_code == ErrorCode.fetch_session_id_not_found


async def test_pipelined_requests_are_answered_in_order(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    requests = [produce_request("t", batch(1, i)) for i in range(50)]
    parked = broker_client.send(fetch_request(topic.topic_id, offset=50, min_bytes=1, max_wait=200))
    responses = await asyncio.gather(*(broker_client.send(r) for r in requests), parked)
    offsets = [r.responses[0].partition_responses[0].base_offset for r in responses[:-1]]
    assert offsets == list(range(50))


async def test_unsupported_api_versions_version_gets_error_35_with_ranges(broker, broker_client):
    # ApiVersions v99 from a future broker_client: answered in v0 with the supported ranges.
    payload = struct.pack(">hhi", 18, 99, 4242) + struct.pack(">h", -1)
    raw = await broker_client.send_frame(payload)
    correlation_id, body = codec.decode_response(raw, 18, 0)
    assert correlation_id == 4242
    assert body.error_code == ErrorCode.unsupported_version
    produce = [k for k in body.api_keys if k.api_key == 0][0]
    assert (produce.min_version, produce.max_version) == (0, 13)


async def test_unsupported_version_of_another_api_closes_only_that_connection(
    broker, broker_client
):
    host, port = broker.bound["PLAINTEXT"]
    other = await BrokerConnection.open(host, port)
    try:
        payload = struct.pack(">hhi", 0, 99, 4243) + struct.pack(">h", -1)  # Produce v99
        try:
            await broker_client.send_frame(payload)
        except ConnectionClosed:
            pass
        await broker_client.wait_closed()
        assert broker_client.closed
        versions = await other.send(
            req(18, 3, "ApiVersionsRequest", client_software_name="x", client_software_version="1")
        )
        assert versions.error_code == ErrorCode.none
    finally:
        await other.close()


async def test_oversized_and_garbage_frames_close_only_their_connection(broker):
    host, port = broker.bound["PLAINTEXT"]
    for junk in (
        struct.pack(">i", 200 * 1024 * 1024),
        struct.pack(">i", -5),
        struct.pack(">i", 6) + b"\x00\x03\xff\xff\x00\x00",
    ):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(junk)
        await writer.drain()
        assert await reader.read() == b""  # the broker closed it
        writer.close()
    conn = await BrokerConnection.open(host, port)
    versions = await conn.send(
        req(18, 3, "ApiVersionsRequest", client_software_name="x", client_software_version="1")
    )
    assert versions.error_code == ErrorCode.none
    await conn.close()
