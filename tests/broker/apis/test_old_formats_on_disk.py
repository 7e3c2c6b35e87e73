"""Topics kept in an old record format (message.format.version before 0.11, seed 004), at the
protocol level: v2 batches are down-converted on append, old producers' sets go in as produced
(KIP-31), Fetch v4+ serves the entries as stored, Fetch v0-3 converts only what it must, and
what the old formats cannot hold is refused with Kafka's error codes."""

from __future__ import annotations

import time

import pytest
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_legacy_produce_fetch import (
    fetched_messages,
    legacy_fetch,
    legacy_produce,
    message_set,
    produced,
)
from test_produce_fetch import fetch_request, produce_request
from test_read_committed import TOPIC, list_offsets

from broker.records import compression as codecs
from broker.records.batch import build_batch, iter_batches
from broker.records.legacy import MAGIC_V0, MAGIC_V1, decode_message_set, iter_entries


def now_ms() -> int:
    return int(time.time() * 1000)


def v2(n, *, start=0, ts=None, codec=codecs.NONE, headers=(), **producer):
    ts = now_ms() if ts is None else ts
    return build_batch(
        [(b"k%d" % i, b"v%d" % i, list(headers), ts + i) for i in range(start, start + n)],
        compression=codec,
        **producer,
    )


def stored_entries(response):
    """(magic, offset, compression) of each entry a Fetch v4+ returned, and its messages."""
    part = response.responses[0].partitions[0]
    records = bytes(part.records or b"")
    shallow = [(h.magic, h.base_offset, h.compression) for _, h in iter_batches(records)]
    return part, shallow, decode_message_set(records)


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP, codecs.LZ4])
@pytest.mark.parametrize(("version", "magic"), [("0.9.0", MAGIC_V0), ("0.10.2-IV0", MAGIC_V1)])
async def test_v2_batches_are_kept_in_the_topics_format(
    broker, broker_client, version, magic, codec
):
    topic = await broker.create_topic("old", 1, {"message.format.version": version})
    ts = now_ms() - 1000
    for start in (0, 3):
        response = await broker_client.send(produce_request("old", v2(3, start=start, ts=ts)))
        assert produced(response).error_code == ErrorCode.none
        assert produced(response).base_offset == start
    compressed = await broker_client.send(
        produce_request("old", v2(2, start=6, ts=ts, codec=codec))
    )
    assert produced(compressed).base_offset == 6
    part, shallow, messages = stored_entries(
        await broker_client.send(fetch_request(topic.topic_id))
    )
    assert part.high_watermark == 8
    assert {m for m, _, _ in shallow} == {magic}
    assert shallow[-1][1:] == (7, codec)  # a wrapper's offset is its last message's
    assert [(m.offset, m.key) for m in messages] == [(i, b"k%d" % i) for i in range(8)]
    stamps = [m.timestamp for m in messages]
    assert stamps == ([-1] * 8 if magic == MAGIC_V0 else [ts + i for i in range(8)])
    # Fetch v4+ from inside a wrapper still gets the whole wrapper, as from Kafka.
    _, from_seven, _ = stored_entries(await broker_client.send(fetch_request(topic.topic_id, 7)))
    assert [o for _, o, _ in from_seven] == [7]


async def test_timestamps_index_and_list_offsets_over_magic_1(broker, broker_client):
    await broker.create_topic(TOPIC, 1, {"message.format.version": "0.10.1"})
    ts = now_ms() - 10_000
    for start in range(0, 30, 3):
        await broker_client.send(produce_request(TOPIC, v2(3, start=start, ts=ts)))
    response = await broker_client.send(list_offsets(0, ts + 14))
    part = response.topics[0].partitions[0]
    assert (part.error_code, part.offset, part.timestamp) == (ErrorCode.none, 14, ts + 14)
    response = await broker_client.send(list_offsets(0, -3))  # max timestamp
    part = response.topics[0].partitions[0]
    assert (part.offset, part.timestamp) == (29, ts + 29)


async def test_old_producers_sets_go_in_as_produced(broker, broker_client):
    """KIP-31: a magic 1 wrapper whose inner offsets are contiguous is stored without
    recompression; only its own offset (outside its CRC) changes."""
    topic = await broker.create_topic("old", 1, {"message.format.version": "0.10.2"})
    await broker_client.send(legacy_produce("old", message_set(2)))
    wrapper = message_set(4, codec=codecs.GZIP, start=2)
    response = await broker_client.send(legacy_produce("old", wrapper))
    assert produced(response).base_offset == 2
    part = (await broker_client.send(fetch_request(topic.topic_id, 2))).responses[0].partitions[0]
    stored = bytes(part.records)
    assert stored[8:] == wrapper[8:] and int.from_bytes(stored[:8], "big") == 5
    _, shallow, messages = stored_entries(await broker_client.send(fetch_request(topic.topic_id)))
    assert [o for _, o, _ in shallow] == [0, 1, 5]
    assert [m.value for m in messages] == [b"v%d" % i for i in range(6)]


@pytest.mark.parametrize("fetch_version", [0, 1, 2, 3])
async def test_old_fetches_convert_only_what_they_cannot_read(broker, broker_client, fetch_version):
    await broker.create_topic("old", 1, {"message.format.version": "0.10.0"})
    ts = now_ms() - 1000
    await broker_client.send(produce_request("old", v2(3, ts=ts)))
    await broker_client.send(produce_request("old", v2(3, start=3, ts=ts, codec=codecs.SNAPPY)))
    part, messages = fetched_messages(
        await broker_client.send(legacy_fetch("old", v=fetch_version))
    )
    magic = MAGIC_V0 if fetch_version < 2 else MAGIC_V1
    shallow = [m for _, m in iter_entries(part.records)]
    assert {m.magic for m in shallow} == {magic}
    assert shallow[-1].compression == codecs.SNAPPY
    assert [(m.offset, m.value) for m in messages] == [(i, b"v%d" % i) for i in range(6)]
    assert [m.timestamp for m in messages] == (
        [-1] * 6 if magic == MAGIC_V0 else [ts + i for i in range(6)]
    )


async def test_what_old_formats_cannot_hold_is_refused(broker, broker_client):
    await broker.create_topic("old", 1, {"message.format.version": "0.10.2"})
    cases = [
        (v2(1, headers=[("h", b"x")]), ErrorCode.unsupported_for_message_format),
        (v2(1, codec=codecs.ZSTD), ErrorCode.unsupported_compression_type),
        (
            v2(1, producer_id=1, producer_epoch=0, base_sequence=0),
            ErrorCode.unsupported_for_message_format,
        ),
    ]
    for records, code in cases:
        response = await broker_client.send(produce_request("old", records))
        assert produced(response).error_code == code
    response = await broker_client.send(produce_request("old", v2(1)))
    assert (produced(response).error_code, produced(response).base_offset) == (ErrorCode.none, 0)


async def test_message_format_version_is_validated(broker, broker_client):
    topic = req(
        19,
        7,
        "CreatableTopic",
        name="bad",
        num_partitions=1,
        replication_factor=1,
        assignments=(),
        configs=(req(19, 7, "CreatableTopicConfig", name="message.format.version", value="x"),),
    )
    response = await broker_client.send(
        req(19, 7, "CreateTopicsRequest", topics=(topic,), timeout=ms(5000), validate_only=False)
    )
    assert response.topics[0].error_code == ErrorCode.invalid_config
    assert "message.format.version" in response.topics[0].error_message


async def test_timestamp_difference_max_ms_bounds_both_ways(broker, broker_client):
    """Kafka 3's message.timestamp.difference.max.ms, kept for configs written for it."""
    await broker.create_topic("t", 1, {"message.timestamp.difference.max.ms": "60000"})
    now = now_ms()
    for ts, code in [
        (now - 120_000, ErrorCode.invalid_timestamp),
        (now + 120_000, ErrorCode.invalid_timestamp),
        (now - 1000, ErrorCode.none),
    ]:
        response = await broker_client.send(produce_request("t", v2(1, ts=ts)))
        assert produced(response).error_code == code
    assert (
        "message.timestamp.difference.max.ms=60000"
        in produced(
            await broker_client.send(produce_request("t", v2(1, ts=now - 120_000)))
        ).error_message
    )
