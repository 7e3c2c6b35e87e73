"""read_committed at the protocol level (KIP-98): Fetch stops at the last stable offset and
reports aborted transactions, long polls wait for markers, ListOffsets answers the LSO.

Each producer has a transactional id whose transaction holds the partition (Produce verifies
it); its markers are written through the replica manager, as WriteTxnMarkers does, so a test
decides exactly when a transaction ends."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import pytest
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_produce_fetch import fetch_request, produce_request

from broker.client.connection import BrokerConnection
from broker.records.batch import build_batch, decode_batch, iter_batches
from broker.storage.producer_state import ProducerStateError

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
TOPIC = "txn"
TP = (TOPIC, 0)


class Producer:
    def __init__(self, client, txn: str, pid: int, epoch: int = 0) -> None:
        self.client, self.txn, self.pid, self.epoch, self.seq = client, txn, pid, epoch, 0
        self.ts = int(time.time() * 1000)

    async def send(self, *values: bytes, transactional: bool = True) -> int:
        self.ts += 1
        data = build_batch(
            [(None, v, [], self.ts) for v in values],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            transactional=transactional,
        )
        txn = self.txn if transactional else None
        response = await self.client.send(produce_request(TOPIC, data, transactional_id=txn))
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.none
        self.seq += len(values)
        return part.base_offset


async def new_producer(client) -> Producer:
    txn = f"rc-{uuid.uuid4().hex}"
    response = await client.send(
        req(22, 4, "InitProducerIdRequest", transactional_id=txn, transaction_timeout=ms(60000))
    )
    assert response.error_code == ErrorCode.none
    added = await client.send(
        req(
            24,
            3,
            "AddPartitionsToTxnRequest",
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=response.producer_id,
            v3_and_below_producer_epoch=response.producer_epoch,
            v3_and_below_topics=(
                req(24, 3, "AddPartitionsToTxnTopic", name=TOPIC, partitions=(0,)),
            ),
        )
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    return Producer(client, txn, response.producer_id, response.producer_epoch)


async def plain(client, *values: bytes, ts: int | None = None) -> int:
    ts = int(time.time() * 1000) if ts is None else ts
    data = build_batch([(None, v, [], ts) for v in values])
    response = await client.send(produce_request(TOPIC, data))
    return response.responses[0].partition_responses[0].base_offset


def end_txn(broker, producer: Producer, commit: bool):
    return broker.replica_manager.append_marker(
        TOPIC, 0, producer.pid, producer.epoch, commit, 0, int(time.time() * 1000)
    )


def fetch(topic_id, isolation_level, offset=0, *, v=16, **kw):
    request = fetch_request(topic_id, offset, v=v, **kw)
    return dataclasses.replace(request, isolation_level=isolation_level)


def fetch_v4(isolation_level, offset=0):
    part = req(
        1, 4, "FetchPartition", partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    topic = req(1, 4, "FetchTopic", topic=TOPIC, partitions=(part,))
    return req(
        1,
        4,
        "FetchRequest",
        replica_id=-1,
        max_wait=ms(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        topics=(topic,),
    )


def batches(part):
    if not part.records:
        return []
    buf = bytes(part.records)
    return [decode_batch(buf[pos : pos + h.size]) for pos, h in iter_batches(buf)]


def consumed(part, from_offset=0) -> list[bytes]:
    """What a read_committed consumer hands to the application (Kafka's Fetcher): control
    batches are dropped, and so are the batches of an aborted transaction, from its first
    offset up to its ABORT marker."""
    aborted = sorted((t.first_offset, t.producer_id) for t in part.aborted_transactions)
    skipping: set[int] = set()
    out = []
    for header, records in batches(part):
        while aborted and aborted[0][0] <= header.last_offset:
            skipping.add(aborted.pop(0)[1])
        if header.is_control:
            skipping.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in skipping:
            continue
        out += [r.value for r in records if header.record_offset(r) >= from_offset]
    return out


async def test_read_committed_sees_committed_data_and_aborted_transactions(broker, broker_client):
    topic = await broker.create_topic(TOPIC, 1, {})
    a, b = await new_producer(broker_client), await new_producer(broker_client)
    await plain(broker_client, b"p0")  # 0
    assert await a.send(b"a1", b"a2") == 1  # 1-2: A's transaction
    assert await b.send(b"b3") == 3  # 3: B's transaction
    await plain(broker_client, b"p4")  # 4

    response = await broker_client.send(fetch(topic.topic_id, READ_UNCOMMITTED))
    part = response.responses[0].partitions[0]
    assert (part.high_watermark, part.last_stable_offset) == (5, 1)
    assert part.aborted_transactions is None
    assert [r.value for _, rs in batches(part) for r in rs] == [b"p0", b"a1", b"a2", b"b3", b"p4"]

    part = (
        (await broker_client.send(fetch(topic.topic_id, READ_COMMITTED))).responses[0].partitions[0]
    )
    assert (part.error_code, part.high_watermark, part.last_stable_offset) == (0, 5, 1)
    assert part.aborted_transactions == ()
    assert [h.base_offset for h, _ in batches(part)] == [0]

    assert end_txn(broker, a, commit=False).base_offset == 5  # A aborted; B still open
    part = (
        (await broker_client.send(fetch(topic.topic_id, READ_COMMITTED))).responses[0].partitions[0]
    )
    assert part.last_stable_offset == 3
    assert [h.base_offset for h, _ in batches(part)] == [0, 1]
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(a.pid, 1)]
    assert consumed(part) == [b"p0"]

    assert end_txn(broker, b, commit=True).base_offset == 6
    part = (
        (await broker_client.send(fetch(topic.topic_id, READ_COMMITTED))).responses[0].partitions[0]
    )
    assert part.last_stable_offset == part.high_watermark == 7
    assert [h.base_offset for h, _ in batches(part)] == [0, 1, 3, 4, 5, 6]
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(a.pid, 1)]
    assert consumed(part) == [b"p0", b"b3", b"p4"]
    # From inside the aborted transaction: it still overlaps the range read.
    part = (
        (await broker_client.send(fetch(topic.topic_id, READ_COMMITTED, offset=3)))
        .responses[0]
        .partitions[0]
    )
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(a.pid, 1)]
    assert consumed(part, 3) == [b"b3", b"p4"]
    # Beyond the abort marker nothing aborted is left to report.
    part = (
        (await broker_client.send(fetch(topic.topic_id, READ_COMMITTED, offset=6)))
        .responses[0]
        .partitions[0]
    )
    assert part.aborted_transactions == ()


async def test_fetch_v4_by_topic_name(broker, broker_client):
    await broker.create_topic(TOPIC, 1, {})
    a = await new_producer(broker_client)
    await plain(broker_client, b"p0")
    await a.send(b"a1")
    end_txn(broker, a, commit=False)
    await plain(broker_client, b"p3")
    committed = (await broker_client.send(fetch_v4(READ_COMMITTED))).responses[0].partitions[0]
    assert committed.last_stable_offset == committed.high_watermark == 4
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(a.pid, 1)]
    assert consumed(committed) == [b"p0", b"p3"]
    uncommitted = (await broker_client.send(fetch_v4(READ_UNCOMMITTED))).responses[0].partitions[0]
    assert uncommitted.aborted_transactions is None


async def test_offset_between_lso_and_log_end_is_not_out_of_range(broker, broker_client):
    topic = await broker.create_topic(TOPIC, 1, {})
    a = await new_producer(broker_client)
    await a.send(b"a0")
    await plain(broker_client, b"p1", b"p2")
    part = (
        (await broker_client.send(fetch(topic.topic_id, READ_COMMITTED, offset=2)))
        .responses[0]
        .partitions[0]
    )
    assert (part.error_code, part.records or b"") == (ErrorCode.none, b"")
    assert part.last_stable_offset == 0
    part = (
        (await broker_client.send(fetch(topic.topic_id, READ_COMMITTED, offset=4)))
        .responses[0]
        .partitions[0]
    )
    assert part.error_code == ErrorCode.offset_out_of_range
    part = (
        (await broker_client.send(fetch(topic.topic_id, READ_UNCOMMITTED, offset=2)))
        .responses[0]
        .partitions[0]
    )
    assert [r.value for _, rs in batches(part) for r in rs] == [b"p1", b"p2"]


async def test_parked_read_committed_fetch_waits_for_the_marker(broker, broker_client):
    topic = await broker.create_topic(TOPIC, 1, {})
    host, port = broker.bound["PLAINTEXT"]
    producer_conn = await BrokerConnection.open(host, port)
    other = await BrokerConnection.open(host, port)
    rm = broker.replica_manager
    try:
        a = await new_producer(producer_conn)
        await a.send(b"a0")  # LSO 0 from here on
        committed = asyncio.ensure_future(
            broker_client.send(fetch(topic.topic_id, READ_COMMITTED, min_bytes=1, max_wait=60_000))
        )
        while not rm.parked(TP):
            assert not committed.done()  # it must park: nothing is below the LSO
            await asyncio.sleep(0)  # yield until parked: a condition, not a delay
        uncommitted = asyncio.ensure_future(
            other.send(
                fetch(topic.topic_id, READ_UNCOMMITTED, offset=1, min_bytes=1, max_wait=60_000)
            )
        )
        while rm.parked(TP) < 2:
            assert not uncommitted.done()
            await asyncio.sleep(0)
        # More of the transaction, then plain data behind it: nothing below the LSO yet.
        await a.send(b"a1")
        await plain(producer_conn, b"p2")
        # The read_uncommitted poll got its bytes; the read_committed one is still parked.
        part = (await uncommitted).responses[0].partitions[0]
        assert [r.value for _, rs in batches(part) for r in rs][0] == b"a1"
        assert rm.parked(TP) == 1 and not committed.done()
        end_txn(broker, a, commit=True)
        assert rm.parked(TP) == 0  # the marker itself released it
        part = (await committed).responses[0].partitions[0]
        assert part.last_stable_offset == part.high_watermark == 4
        assert part.aborted_transactions == ()
        assert consumed(part) == [b"a0", b"a1", b"p2"]
        assert rm.parked(TP) == 0
    finally:
        await producer_conn.close()
        await other.close()


async def test_parked_read_committed_fetch_counts_min_bytes_below_the_lso(broker, broker_client):
    topic = await broker.create_topic(TOPIC, 1, {})
    rm = broker.replica_manager
    a = await new_producer(broker_client)
    await a.send(b"a0")
    host, port = broker.bound["PLAINTEXT"]
    conn = await BrokerConnection.open(host, port)
    try:
        polled = asyncio.ensure_future(
            conn.send(fetch(topic.topic_id, READ_COMMITTED, min_bytes=10_000, max_wait=60_000))
        )
        while not rm.parked(TP):
            assert not polled.done()
            await asyncio.sleep(0)
        end_txn(broker, a, commit=False)  # the LSO moves, but by far fewer than 10 000 bytes
        await plain(broker_client, b"x" * 100)
        assert rm.parked(TP) == 1 and not polled.done()
        await plain(broker_client, b"y" * 12_000)
        assert rm.parked(TP) == 0  # released by the append that brought enough stable bytes
        part = (await polled).responses[0].partitions[0]
        assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(a.pid, 0)]
        assert consumed(part) == [b"x" * 100, b"y" * 12_000]
    finally:
        await conn.close()


def list_offsets(isolation_level: int, timestamp: int, v: int = 8):
    part = req(
        2,
        v,
        "ListOffsetsPartition",
        partition_index=0,
        timestamp=timestamp,
        current_leader_epoch=-1,
    )
    return req(
        2,
        v,
        "ListOffsetsRequest",
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(req(2, v, "ListOffsetsTopic", name=TOPIC, partitions=(part,)),),
    )


async def offset_of(client, isolation_level, timestamp) -> tuple[int, int]:
    response = await client.send(list_offsets(isolation_level, timestamp))
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return part.offset, part.timestamp


async def test_list_offsets_by_isolation_level(broker, broker_client):
    await broker.create_topic(TOPIC, 1, {})
    a = await new_producer(broker_client)
    now = int(time.time() * 1000)
    await plain(broker_client, b"p0", ts=now)
    a.ts = now
    await a.send(b"a1", b"a2")  # stamped now + 1
    txn_ts = now + 1
    await plain(broker_client, b"p3", ts=now + 5)
    assert await offset_of(broker_client, READ_UNCOMMITTED, -1) == (4, -1)
    assert await offset_of(broker_client, READ_COMMITTED, -1) == (1, -1)
    assert await offset_of(broker_client, READ_COMMITTED, -2) == (0, -1)
    # The transaction's records are found only where they may be read.
    assert (await offset_of(broker_client, READ_UNCOMMITTED, txn_ts))[0] == 1
    assert await offset_of(broker_client, READ_COMMITTED, txn_ts) == (-1, -1)
    assert await offset_of(broker_client, READ_COMMITTED, -3) == (-1, -1)  # max timestamp: p3
    assert (await offset_of(broker_client, READ_UNCOMMITTED, -3))[0] == 3
    end_txn(broker, a, commit=True)
    assert await offset_of(broker_client, READ_COMMITTED, -1) == (5, -1)
    assert (await offset_of(broker_client, READ_COMMITTED, txn_ts))[0] == 1


async def test_lso_gauge_and_marker_errors(broker, broker_client):
    await broker.create_topic(TOPIC, 1, {})
    a = await new_producer(broker_client)
    await plain(broker_client, b"p0", b"p1")
    await a.send(b"a2")
    rm = broker.replica_manager
    assert rm.last_stable_offset(TOPIC, 0) == 2
    metrics = broker.metrics.render().decode()
    assert 'fjord_partition_last_stable_offset{partition="0",topic="txn"} 2.0' in metrics
    assert 'fjord_partition_high_watermark{partition="0",topic="txn"} 3.0' in metrics
    with pytest.raises(ProducerStateError) as e:
        rm.append_marker(TOPIC, 0, a.pid, a.epoch - 1, True, 0, 0)
    assert e.value.error_code == ErrorCode.invalid_producer_epoch
    with pytest.raises(ProducerStateError) as e:
        rm.append_marker("nope", 0, a.pid, a.epoch, True, 0, 0)
    assert e.value.error_code == ErrorCode.unknown_topic_or_partition
    end_txn(broker, a, commit=True)
    metrics = broker.metrics.render().decode()
    assert 'fjord_partition_last_stable_offset{partition="0",topic="txn"} 4.0' in metrics
