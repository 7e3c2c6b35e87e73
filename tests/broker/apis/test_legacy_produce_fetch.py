"""Produce v0-2, Fetch v0-3 and ListOffsets v0 at the protocol level, against an in-process
broker: magic 0/1 message sets in, v2 batches on disk, down-converted message sets out."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from test_produce_fetch import fetch_request, fetched, produce_request
from test_read_committed import end_txn, new_producer, plain

from broker.apis.registry import API_SPECS
from broker.client.connection import BrokerConnection
from broker.protocol import codec
from broker.protocol import legacy as wire
from broker.records import compression as codecs
from broker.records.batch import LOG_APPEND_TIME, NO_TIMESTAMP, build_batch
from broker.records.legacy import (
    MAGIC_V0,
    MAGIC_V1,
    build_message_set,
    decode_message_set,
    encode_entry,
    encode_wrapper,
    iter_entries,
)

LEGACY_CODECS = [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4]
PRODUCE_MAGIC = {0: MAGIC_V0, 1: MAGIC_V0, 2: MAGIC_V1}
FETCH_MAGIC = {0: MAGIC_V0, 1: MAGIC_V0, 2: MAGIC_V1, 3: MAGIC_V1}


def now_ms() -> int:
    return int(time.time() * 1000)


def message_set(n: int, *, magic=MAGIC_V1, codec=codecs.NONE, start=0, ts=None, size=0):
    ts = now_ms() if ts is None else ts
    recs = [(b"k%d" % i, b"v%d" % i + bytes(size), ts + i) for i in range(start, start + n)]
    return build_message_set(recs, magic=magic, compression=codec)


def legacy_produce(topic, records, *, v=2, partition=0, acks=-1):
    part = wire.ProducePartition(partition, records)
    return wire.ProduceRequest.at(v)(
        acks=acks, timeout_ms=5000, topic_data=(wire.ProduceTopic(topic, (part,)),)
    )


def legacy_fetch(topic, offset=0, *, v=2, min_bytes=0, max_wait=0, max_bytes=None, pmax=1 << 20):
    part = wire.FetchPartition(0, offset, pmax)
    extra = {} if max_bytes is None else {"max_bytes": max_bytes}
    return wire.FetchRequest.at(v)(
        replica_id=-1,
        max_wait_ms=max_wait,
        min_bytes=min_bytes,
        topics=(wire.FetchTopic(topic, (part,)),),
        **extra,
    )


def list_offsets_v0(topic, timestamp, max_num_offsets=1, partition=0):
    part = wire.ListOffsetsPartition(partition, timestamp, max_num_offsets)
    return wire.ListOffsetsRequest.at(0)(
        replica_id=-1, topics=(wire.ListOffsetsTopic(topic, (part,)),)
    )


def produced(response):
    return response.responses[0].partition_responses[0]


def fetched_messages(response):
    part = response.responses[0].partitions[0]
    return part, decode_message_set(part.records, allow_partial_tail=True)


# -- the wire codecs ------------------------------------------------------------------------------


def _samples():
    records = message_set(2, magic=MAGIC_V1)
    yield legacy_produce("t", records, v=0, acks=1)
    yield legacy_produce("t", None, v=2)
    yield legacy_fetch("t", 5, v=0)
    yield legacy_fetch("t", 5, v=3, max_bytes=1234)
    yield list_offsets_v0("t", -1, 3)
    yield wire.ProduceResponse.at(0)(
        (wire.ProduceTopicResponse("t", (wire.ProducePartitionResponse(0, ErrorCode.none, 7),)),)
    )
    yield wire.ProduceResponse.at(2)(
        (
            wire.ProduceTopicResponse(
                "t", (wire.ProducePartitionResponse(1, ErrorCode.corrupt_message, -1, 99),)
            ),
        ),
        throttle_time_ms=3,
    )
    yield wire.FetchResponse.at(0)(
        (wire.FetchTopicResponse("t", (wire.FetchPartitionResponse(0, 0, 10, records),)),)
    )
    yield wire.FetchResponse.at(3)(
        (wire.FetchTopicResponse("t", (wire.FetchPartitionResponse(2, 1, 10, b""),)),), 5
    )
    yield wire.ListOffsetsResponse.at(0)(
        (
            wire.ListOffsetsTopicResponse(
                "t", (wire.ListOffsetsPartitionResponse(0, ErrorCode.none, (9, 0)),)
            ),
        )
    )


@pytest.mark.parametrize("message", list(_samples()), ids=lambda m: type(m).__name__)
def test_wire_codecs_round_trip(message):
    key, version = message.__api_key__, message.__version__
    if "Request" in type(message).__name__:
        frame = codec.encode_request(message, 42, "client")
        decoded = codec.decode_request(frame, key, version)
        assert (decoded.correlation_id, decoded.client_id) == (42, "client")
        assert decoded.body == message
        assert type(decoded.body).__version__ == version
    else:
        payload = b"".join(codec.encode_response(43, message))
        correlation_id, decoded = codec.decode_response(payload, key, version)
        assert correlation_id == 43 and decoded == message


def test_produce_v0_request_bytes_match_the_protocol_guide():
    frame = codec.encode_request(legacy_produce("t", b"MS", v=0, acks=1), 7, None)
    assert frame == (
        struct.pack(">hhih", 0, 0, 7, -1)  # request header v1, null client id
        + struct.pack(">hi", 1, 5000)  # acks, timeout
        + struct.pack(">ih", 1, 1)
        + b"t"
        + struct.pack(">iii", 1, 0, 2)
        + b"MS"
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.binary(max_size=200), key_version=st.sampled_from([(0, 2), (1, 3), (1, 0), (2, 0)]))
def test_malformed_legacy_requests_raise_decode_errors_only(body, key_version):
    frame = struct.pack(">hhi", *key_version, 1) + body
    try:
        codec.decode_request(frame, *key_version)
    except codec.DecodeError:
        pass


# -- produce -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_id", LEGACY_CODECS)
@pytest.mark.parametrize("v", [0, 1, 2])
async def test_old_produce_is_stored_as_v2_batches(broker, broker_client, v, codec_id):
    topic = await broker.create_topic("t", 1, {})
    magic = PRODUCE_MAGIC[v]
    ts = now_ms() - 5000
    first = await broker_client.send(
        legacy_produce("t", message_set(3, magic=magic, codec=codec_id, ts=ts), v=v)
    )
    second = await broker_client.send(
        legacy_produce("t", message_set(2, magic=magic, codec=codec_id, ts=ts, start=3), v=v)
    )
    assert type(first).__version__ == v
    assert [produced(r).error_code for r in (first, second)] == [ErrorCode.none] * 2
    assert [produced(r).base_offset for r in (first, second)] == [0, 3]
    assert produced(first).log_append_time_ms == -1
    part, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    assert part.high_watermark == 5
    assert [(h.magic, h.base_offset, h.compression) for h, _ in batches] == [
        (2, 0, codec_id),
        (2, 3, codec_id),
    ]
    stamps = [h.record_timestamp(r) for h, records in batches for r in records]
    expected = [NO_TIMESTAMP] * 5 if magic == MAGIC_V0 else [ts + i for i in range(5)]
    assert stamps == expected
    values = [r.value for _, records in batches for r in records]
    assert values == [b"v%d" % i for i in range(5)]


async def test_log_append_time_topics_stamp_old_messages(broker, broker_client):
    topic = await broker.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    response = await broker_client.send(
        legacy_produce("lat", message_set(3, codec=codecs.GZIP, ts=1000))
    )
    p = produced(response)
    assert p.error_code == ErrorCode.none and p.log_append_time_ms >= before
    part, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    header, records = batches[0]
    assert header.timestamp_type == LOG_APPEND_TIME
    assert [header.record_timestamp(r) for r in records] == [p.log_append_time_ms] * 3
    for v in (2, 3):
        _, messages = fetched_messages(await broker_client.send(legacy_fetch("lat", v=v)))
        assert {(m.timestamp, m.timestamp_type) for m in messages} == {
            (p.log_append_time_ms, LOG_APPEND_TIME)
        }


async def test_every_timestamp_of_an_old_message_set_is_validated(broker, broker_client):
    await broker.create_topic("t", 1, {"message.timestamp.before.max.ms": "60000"})
    now = now_ms()
    cases = [
        [(b"a", b"1", now + 7_200_000)],  # after message.timestamp.after.max.ms (1 hour)
        [(b"a", b"1", now - 120_000)],
        # only the second message is too old: the first's timestamp alone would pass
        [(b"a", b"1", now), (b"b", b"2", now - 120_000)],
    ]
    for recs in cases:
        for codec_id in (codecs.NONE, codecs.SNAPPY):
            data = build_message_set(recs, magic=MAGIC_V1, compression=codec_id)
            response = await broker_client.send(legacy_produce("t", data))
            assert produced(response).error_code == ErrorCode.invalid_timestamp
    # magic 0 has no timestamps to check
    untimed = build_message_set([(b"a", b"1", 0)], magic=MAGIC_V0)
    response = await broker_client.send(legacy_produce("t", untimed, v=1))
    assert (produced(response).error_code, produced(response).base_offset) == (ErrorCode.none, 0)


async def test_producers_may_not_claim_log_append_time(broker, broker_client):
    await broker.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    claimed = build_message_set(
        [(b"k", b"v", 5)], magic=MAGIC_V1, timestamp_type=LOG_APPEND_TIME, log_append_time=5
    )
    response = await broker_client.send(legacy_produce("lat", claimed))
    assert produced(response).error_code == ErrorCode.invalid_timestamp


def _corrupt(data: bytes) -> bytes:
    out = bytearray(data)
    out[-1] ^= 0xFF
    return bytes(out)


async def test_bad_message_sets_get_kafkas_errors_and_lose_nothing(broker, broker_client):
    await broker.create_topic("t", 2, {"max.message.bytes": "2000"})
    good = message_set(2)
    zstd_wrapper = bytearray()
    encode_entry(zstd_wrapper, 0, MAGIC_V1, None, b"\x28\xb5\x2f\xfd", timestamp=0, attributes=4)
    cases = [
        (legacy_produce("nope", good), ErrorCode.unknown_topic_or_partition),
        (legacy_produce("t", good, partition=9), ErrorCode.unknown_topic_or_partition),
        (legacy_produce("t", _corrupt(good)), ErrorCode.corrupt_message),
        (legacy_produce("t", good[:-4]), ErrorCode.corrupt_message),
        (
            legacy_produce("t", _corrupt(message_set(2, codec=codecs.GZIP))),
            ErrorCode.corrupt_message,
        ),
        (legacy_produce("t", bytes(zstd_wrapper)), ErrorCode.unsupported_compression_type),
        (legacy_produce("t", good + message_set(1, magic=MAGIC_V0)), ErrorCode.invalid_record),
        (legacy_produce("t", b""), ErrorCode.invalid_record),
        (legacy_produce("t", None), ErrorCode.invalid_record),
        (legacy_produce("t", build_batch([(b"k", b"v", [], now_ms())])), ErrorCode.corrupt_message),
        (legacy_produce("t", message_set(1, size=3000)), ErrorCode.message_too_large),
        # small messages, but one v2 batch too large once converted
        (legacy_produce("t", message_set(40, size=60)), ErrorCode.message_too_large),
        (legacy_produce("t", good, acks=5), ErrorCode.invalid_required_acks),
    ]
    for request, expected in cases:
        response = await broker_client.send(request)
        assert produced(response).error_code == expected, request
    ok = await broker_client.send(legacy_produce("t", good))
    assert produced(ok).base_offset == 0  # nothing was appended before


async def test_one_bad_partition_does_not_fail_the_others(broker, broker_client):
    await broker.create_topic("t", 2, {})
    parts = (
        wire.ProducePartition(0, _corrupt(message_set(1))),
        wire.ProducePartition(1, message_set(2)),
    )
    request = wire.ProduceRequest.at(1)(
        acks=1, timeout_ms=1000, topic_data=(wire.ProduceTopic("t", parts),)
    )
    response = await broker_client.send(request)
    results = [
        (p.index, p.error_code, p.base_offset) for p in response.responses[0].partition_responses
    ]
    assert results == [(0, ErrorCode.corrupt_message, -1), (1, ErrorCode.none, 0)]


async def test_non_contiguous_inner_offsets_are_reassigned(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    inner = bytearray()
    for rel in (0, 3, 9):
        encode_entry(inner, rel, MAGIC_V1, b"k", b"v%d" % rel, timestamp=now_ms())
    data = bytearray()
    encode_wrapper(data, inner, offset=9, magic=MAGIC_V1, compression=codecs.GZIP)
    await broker_client.send(legacy_produce("t", message_set(1)))
    response = await broker_client.send(legacy_produce("t", bytes(data)))
    assert produced(response).base_offset == 1
    part, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    assert [(h.base_offset, h.last_offset) for h, _ in batches] == [(0, 0), (1, 3)]
    _, messages = fetched_messages(await broker_client.send(legacy_fetch("t")))
    assert [(m.offset, m.value) for m in messages] == [
        (0, b"v0"),
        (1, b"v0"),
        (2, b"v3"),
        (3, b"v9"),
    ]


async def test_acks_zero(broker, broker_client):
    await broker.create_topic("t", 1, {})
    await broker_client.send_raw(legacy_produce("t", message_set(1), acks=0), expect_response=False)
    response = await broker_client.send(legacy_produce("t", message_set(1)))
    assert produced(response).base_offset == 1
    # an error answers acks=0 by closing the connection, as Kafka does
    await broker_client.send_raw(legacy_produce("t", b"junk", acks=0), expect_response=False)
    await broker_client.wait_closed()


async def test_pipelined_old_produce_requests_append_in_arrival_order(broker, broker_client):
    """Compressed sets are converted in threads that may finish in any order; the log must
    still hold them in the order the producer sent them."""
    await broker.create_topic("t", 1, {})
    sizes = [1 + (i * 7) % 13 for i in range(30)]
    starts = [sum(sizes[:i]) for i in range(30)]
    requests = [
        legacy_produce(
            "t",
            message_set(
                n, codec=codecs.GZIP if i % 2 else codecs.NONE, start=s, size=4000 * (i % 3)
            ),
        )
        for i, (n, s) in enumerate(zip(sizes, starts, strict=True))
    ]
    responses = await asyncio.gather(*(broker_client.send(r) for r in requests))
    assert [produced(r).base_offset for r in responses] == starts
    _, messages = fetched_messages(await broker_client.send(legacy_fetch("t", pmax=10 << 20)))
    assert [m.key for m in messages] == [b"k%d" % i for i in range(sum(sizes))]


# -- fetch -------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_id", LEGACY_CODECS)
@pytest.mark.parametrize("v", [0, 1, 2, 3])
async def test_old_fetch_down_converts_v2_batches(broker, broker_client, v, codec_id):
    await broker.create_topic("t", 1, {})
    ts = now_ms()
    batch = build_batch(
        [(b"k%d" % i, b"v%d" % i, [("h", b"dropped")], ts + i) for i in range(4)],
        compression=codec_id,
    )
    await broker_client.send(produce_request("t", batch))
    response = await broker_client.send(legacy_fetch("t", v=v))
    assert type(response).__version__ == v
    part, messages = fetched_messages(response)
    assert (part.error_code, part.high_watermark) == (ErrorCode.none, 4)
    magic = FETCH_MAGIC[v]
    assert {m.magic for m in messages} == {magic}
    stamps = [NO_TIMESTAMP] * 4 if magic == MAGIC_V0 else [ts + i for i in range(4)]
    assert [(m.offset, m.key, m.value, m.timestamp) for m in messages] == [
        (i, b"k%d" % i, b"v%d" % i, stamps[i]) for i in range(4)
    ]
    entries = list(iter_entries(part.records))
    assert len(entries) == (4 if codec_id == codecs.NONE else 1)
    assert all(m.compression == codec_id for _, m in entries)


async def test_old_fetch_from_the_middle_of_a_batch(broker, broker_client):
    await broker.create_topic("t", 1, {})
    await broker_client.send(
        produce_request("t", build_batch([(b"k", b"%d" % i, [], now_ms()) for i in range(5)]))
    )
    _, messages = fetched_messages(await broker_client.send(legacy_fetch("t", 3)))
    assert [m.offset for m in messages] == [3, 4]


async def test_old_fetch_drops_control_batches_and_reads_uncommitted(broker, broker_client):
    await broker.create_topic("txn", 1, {})
    a, b = await new_producer(broker_client), await new_producer(broker_client)
    await plain(broker_client, b"p0")  # 0
    await a.send(b"a1", b"a2")  # 1-2, committed below
    await b.send(b"b3")  # 3, aborted below
    end_txn(broker, a, commit=True)  # 4
    end_txn(broker, b, commit=False)  # 5
    await plain(broker_client, b"p6")  # 6
    await b.send(b"b7")  # 7: B's next transaction, still open
    for v in (0, 3):
        part, messages = fetched_messages(await broker_client.send(legacy_fetch("txn", v=v)))
        assert part.high_watermark == 8
        # read_uncommitted, as Kafka serves old consumers: open and aborted data alike
        assert [(m.offset, m.value) for m in messages] == [
            (0, b"p0"),
            (1, b"a1"),
            (2, b"a2"),
            (3, b"b3"),
            (6, b"p6"),
            (7, b"b7"),
        ]


async def test_zstd_data_cannot_reach_old_consumers(broker, broker_client):
    await broker.create_topic("t", 1, {})
    await broker_client.send(produce_request("t", build_batch([(b"k", b"plain", [], now_ms())])))
    zstd = build_batch([(b"k", b"z", [], now_ms())], compression=codecs.ZSTD)
    await broker_client.send(produce_request("t", zstd))
    part, messages = fetched_messages(await broker_client.send(legacy_fetch("t")))
    assert part.error_code == ErrorCode.none and [m.value for m in messages] == [b"plain"]
    part, messages = fetched_messages(await broker_client.send(legacy_fetch("t", 1)))
    assert (part.error_code, messages) == (ErrorCode.unsupported_compression_type, [])


async def test_old_fetch_errors(broker, broker_client):
    await broker.create_topic("t", 1, {})
    part, _ = fetched_messages(await broker_client.send(legacy_fetch("t", 5)))
    assert (part.error_code, part.high_watermark) == (ErrorCode.offset_out_of_range, 0)
    part, _ = fetched_messages(await broker_client.send(legacy_fetch("nope", v=1)))
    assert (part.error_code, part.high_watermark) == (ErrorCode.unknown_topic_or_partition, -1)


async def test_old_fetch_limits(broker, broker_client):
    await broker.create_topic("t", 1, {})
    for i in range(3):
        await broker_client.send(legacy_produce("t", message_set(1, start=i, size=1000)))
    _, messages = fetched_messages(await broker_client.send(legacy_fetch("t", v=3, max_bytes=10)))
    assert [m.offset for m in messages] == [0]  # beyond the limit, but the first goes whole
    _, messages = fetched_messages(await broker_client.send(legacy_fetch("t", v=1, pmax=2500)))
    assert [m.offset for m in messages] == [0, 1]


async def test_parked_old_fetch_is_answered_when_data_arrives(broker, broker_client):
    await broker.create_topic("t", 1, {})
    host, port = broker.bound["PLAINTEXT"]
    producer = await BrokerConnection.open(host, port)
    try:
        parked = asyncio.ensure_future(
            broker_client.send(legacy_fetch("t", min_bytes=1, max_wait=30_000, v=0))
        )
        while not broker.replica_manager.parked(("t", 0)):
            await asyncio.sleep(0)  # yield until the fetch is parked: a condition, not a delay
        assert not parked.done()
        await producer.send(legacy_produce("t", message_set(2, codec=codecs.GZIP), v=2))
        part, messages = fetched_messages(await parked)
        assert part.high_watermark == 2 and [m.offset for m in messages] == [0, 1]
        assert {m.magic for m in messages} == {MAGIC_V0}
    finally:
        await producer.close()


# -- ListOffsets v0 and ApiVersions ------------------------------------------------------------


async def test_list_offsets_v0(broker, broker_client):
    """Kafka's v0 semantics: offsets where segments start (and the log end), picked by the
    segment files' modification times, newest first."""
    await broker.create_topic("t", 1, {"segment.bytes": "200"})
    before = now_ms() - 1000
    for i in range(3):
        await broker_client.send(legacy_produce("t", message_set(2, start=2 * i, size=100)))
    log = broker.replica_manager.log("t", 0)
    bases = [s.base_offset for s in log.segments]
    assert bases == [0, 2, 4]

    async def offsets(timestamp, max_num=10, topic="t"):
        response = await broker_client.send(list_offsets_v0(topic, timestamp, max_num))
        p = response.topics[0].partitions[0]
        return p.error_code, p.old_style_offsets

    assert await offsets(-1) == (ErrorCode.none, (6, 4, 2, 0))
    assert await offsets(-1, max_num=1) == (ErrorCode.none, (6,))
    assert await offsets(-2) == (ErrorCode.none, (0,))
    assert await offsets(now_ms() + 60_000, max_num=2) == (ErrorCode.none, (6, 4))
    assert await offsets(before) == (ErrorCode.none, ())  # every file is newer
    log.segments[0].set_last_modified(before - 1)
    assert await offsets(before) == (ErrorCode.none, (0,))
    assert await offsets(-1, max_num=0) == (ErrorCode.none, ())
    assert await offsets(-1, topic="nope") == (ErrorCode.unknown_topic_or_partition, ())


async def test_api_versions_advertise_the_old_versions(broker, broker_client):
    from kafka_requests import req

    response = await broker_client.send(
        req(18, 3, "ApiVersionsRequest", client_software_name="x", client_software_version="1")
    )
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[0][0] == 0 and ranges[1][0] == 0 and ranges[2][0] == 0
    assert (API_SPECS[0].min_version, API_SPECS[1].min_version, API_SPECS[2].min_version) == (
        0,
        0,
        0,
    )


async def test_malformed_old_request_closes_only_its_connection(broker, broker_client):
    host, port = broker.bound["PLAINTEXT"]
    bad = await BrokerConnection.open(host, port)
    payload = struct.pack(">hhih", 0, 2, 99, -1) + struct.pack(">hii", 1, 1000, 5)  # cut short
    with pytest.raises(ConnectionError):
        await bad.send_frame(payload)
    await bad.close()
    response = await broker_client.send(list_offsets_v0("t", -1))
    assert response.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
