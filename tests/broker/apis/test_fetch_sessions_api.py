"""Incremental fetch sessions (KIP-227) at the protocol level, against an in-process broker:
every row of the seed's request table, FETCH_SESSION_ID_NOT_FOUND and
INVALID_FETCH_SESSION_EPOCH, what incremental responses carry, rotation under max_bytes,
long polls parked on a session, the eviction rules on a small cache, and the metrics."""

from __future__ import annotations

import asyncio

import pytest
from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_produce_fetch import batch, produce_request

from broker.client.connection import BrokerConnection
from broker.fetch_session import EVICTION_MS
from broker.protocol import codec
from broker.records.batch import iter_batches

FETCH_V = 16  # topics by id; v12 below for sessions of topic names
MB = 1 << 20


def fetch_request(
    partitions=(),
    *,
    session_id: int = 0,
    epoch: int = -1,
    forgotten=(),
    v: int = FETCH_V,
    replica_id: int = -1,
    min_bytes: int = 0,
    max_wait: int = 0,
    max_bytes: int = MB,
    isolation_level: int = 0,
):
    """`partitions`: (topic metadata, partition, fetch offset); `forgotten`: (topic metadata,
    partition). Topics go by id from v13, by name before."""
    topics: dict[str, tuple[object, list]] = {}
    for topic, partition, offset in partitions:
        fetch_partition = req(
            1, v, "FetchPartition", partition=partition, fetch_offset=offset, partition_max_bytes=MB
        )
        topics.setdefault(topic.name, (topic, []))[1].append(fetch_partition)
    forgets: dict[str, tuple[object, list]] = {}
    for topic, partition in forgotten:
        forgets.setdefault(topic.name, (topic, []))[1].append(partition)
    replica = {"replica_id": replica_id}
    if v >= 15:
        replica = {"replica_state": req(1, v, "ReplicaState", replica_id=replica_id)}
    return req(
        1,
        v,
        "FetchRequest",
        **replica,
        max_wait=ms(max_wait),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=epoch,
        topics=tuple(
            req(1, v, "FetchTopic", topic=t.name, topic_id=t.topic_id, partitions=tuple(ps))
            for t, ps in topics.values()
        ),
        forgotten_topics_data=tuple(
            req(1, v, "ForgottenTopic", topic=t.name, topic_id=t.topic_id, partitions=tuple(ps))
            for t, ps in forgets.values()
        ),
        rack_id="",
    )


def included(response) -> list[int]:
    """The partition indexes a response carries, in order."""
    return [p.partition_index for t in response.responses for p in t.partitions]


def partition(response, index: int):
    return next(p for t in response.responses for p in t.partitions if p.partition_index == index)


def record_batches(part) -> int:
    return sum(1 for _ in iter_batches(part.records)) if part.records else 0


def wire_size(response) -> int:
    return sum(map(len, codec.encode_response(0, response)))


async def produce(client, topic: str, partition: int, n: int = 1) -> None:
    response = await client.send(produce_request(topic, batch(n), partition=partition))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


class Fetcher:
    """One fetcher's view of its session: the id and the epoch it must send next."""

    def __init__(self, client, v: int = FETCH_V, replica_id: int = -1) -> None:
        self.client, self.v, self.replica_id = client, v, replica_id
        self.session_id, self.epoch = 0, 0

    async def full(self, partitions, **kw):
        response = await self.client.send(
            fetch_request(
                partitions,
                session_id=self.session_id,
                epoch=0,
                v=self.v,
                replica_id=self.replica_id,
                **kw,
            )
        )
        assert response.error_code == ErrorCode.none
        self.session_id, self.epoch = response.session_id, 1
        return response

    async def incremental(self, partitions=(), forgotten=(), **kw):
        response = await self.client.send(
            fetch_request(
                partitions,
                session_id=self.session_id,
                epoch=self.epoch,
                forgotten=forgotten,
                v=self.v,
                replica_id=self.replica_id,
                **kw,
            )
        )
        assert response.error_code == ErrorCode.none, response.error_code
        assert response.session_id == self.session_id
        self.epoch += 1
        return response


# -- the seed's request table --------------------------------------------------------------------


async def test_session_0_epoch_minus_1_is_a_full_fetch_that_creates_no_session(
    broker, broker_client
):
    topic = await broker.create_topic("t", 2, {})
    response = await broker_client.send(fetch_request([(topic, 0, 0), (topic, 1, 0)]))
    assert response.error_code == ErrorCode.none and response.session_id == 0
    assert included(response) == [0, 1]
    assert len(broker.fetch_sessions) == 0


async def test_session_0_epoch_0_creates_a_session_at_epoch_1(broker, broker_client):
    topic = await broker.create_topic("t", 3, {})
    await produce(broker_client, "t", 1, 2)
    fetcher = Fetcher(broker_client)
    response = await fetcher.full([(topic, p, 0) for p in range(3)])
    assert response.session_id != 0
    assert included(response) == [0, 1, 2]  # a full response carries every partition
    assert record_batches(partition(response, 1)) == 1
    session = broker.fetch_sessions.get(response.session_id)
    assert session.epoch == 1 and len(session) == 3 and not session.privileged


@pytest.mark.parametrize("v", [7, 12, 13, 15, 17])
async def test_incremental_fetches_carry_only_what_changed(broker, broker_client, v):
    topic = await broker.create_topic("t", 3, {})
    fetcher = Fetcher(broker_client, v=v)
    await fetcher.full([(topic, p, 0) for p in range(3)])
    idle = await fetcher.incremental()
    assert idle.responses == ()
    await produce(broker_client, "t", 1, 3)
    response = await fetcher.incremental()
    assert included(response) == [1]
    part = partition(response, 1)
    assert part.high_watermark == 3 and record_batches(part) == 1
    # The fetcher reports its new position: nothing left to tell it.
    assert included(await fetcher.incremental([(topic, 1, 3)])) == []
    assert included(await fetcher.incremental()) == []


async def test_incremental_request_adds_updates_and_forgets_partitions(broker, broker_client):
    topic = await broker.create_topic("t", 4, {})
    other = await broker.create_topic("u", 1, {})
    for p in range(4):
        await produce(broker_client, "t", p)
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 1), (topic, 1, 1)])
    session = broker.fetch_sessions.get(fetcher.session_id)
    # Added partitions are always in the next response; so is one whose offset moved back.
    response = await fetcher.incremental([(topic, 2, 1), (other, 0, 0), (topic, 0, 0)])
    assert included(response) == [0, 2, 0]
    assert [t.topic_id for t in response.responses] == [topic.topic_id, other.topic_id]
    assert record_batches(response.responses[0].partitions[0]) == 1
    response = await fetcher.incremental([(topic, 0, 1)], forgotten=[(topic, 1), (topic, 3)])
    assert included(response) == []
    assert sorted(p for _, p in session.partitions) == [0, 0, 2]
    await produce(broker_client, "t", 1)  # forgotten: the session no longer hears of it
    assert included(await fetcher.incremental()) == []
    assert broker.fetch_sessions.partitions_cached == 3


async def test_session_id_with_epoch_minus_1_closes_the_session(broker, broker_client):
    topic = await broker.create_topic("t", 2, {})
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 0), (topic, 1, 0)])
    closing = await broker_client.send(
        fetch_request([(topic, 0, 0), (topic, 1, 0)], session_id=fetcher.session_id, epoch=-1)
    )
    assert closing.error_code == ErrorCode.none and closing.session_id == 0
    assert included(closing) == [0, 1]  # a full response
    assert len(broker.fetch_sessions) == 0 and broker.fetch_sessions.evictions == 0
    gone = await broker_client.send(fetch_request(session_id=fetcher.session_id, epoch=1))
    assert gone.error_code == ErrorCode.fetch_session_id_not_found


async def test_session_id_with_epoch_0_replaces_the_session(broker, broker_client):
    topic = await broker.create_topic("t", 2, {})
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 0)])
    old_id = fetcher.session_id
    await fetcher.incremental()
    response = await fetcher.full([(topic, 0, 0), (topic, 1, 0)])
    assert response.session_id not in (0, old_id)
    assert included(response) == [0, 1]
    assert old_id not in broker.fetch_sessions and len(broker.fetch_sessions) == 1
    assert included(await fetcher.incremental()) == []


async def test_unknown_session_id_is_fetch_session_id_not_found(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    response = await broker_client.send(fetch_request([(topic, 0, 0)], session_id=123_456, epoch=1))
    assert response.error_code == ErrorCode.fetch_session_id_not_found
    assert response.session_id == 0 and response.responses == ()


async def test_wrong_epoch_is_invalid_fetch_session_epoch(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 0)])
    await fetcher.incremental()
    for epoch in (1, 3):  # a replayed request and one that skips ahead
        response = await broker_client.send(
            fetch_request(session_id=fetcher.session_id, epoch=epoch)
        )
        assert response.error_code == ErrorCode.invalid_fetch_session_epoch
        assert response.session_id == 0 and response.responses == ()
    # The session itself is unharmed: epoch 2 still works.
    assert fetcher.epoch == 2
    assert included(await fetcher.incremental()) == []


async def test_the_session_expects_each_next_epoch_and_wraps_after_max_int(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 0)])
    for _ in range(5):
        await fetcher.incremental()
    session = broker.fetch_sessions.get(fetcher.session_id)
    assert session.epoch == fetcher.epoch == 6
    session.epoch = fetcher.epoch = 2**31 - 1  # as after two billion fetches
    await fetcher.incremental()
    assert session.epoch == 1
    fetcher.epoch = 1
    await fetcher.incremental()


async def test_a_session_left_without_partitions_is_closed(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 0)])
    response = await broker_client.send(
        fetch_request(session_id=fetcher.session_id, epoch=1, forgotten=[(topic, 0)])
    )
    assert response.error_code == ErrorCode.none and response.session_id == 0
    assert fetcher.session_id not in broker.fetch_sessions


async def test_sessions_by_name_and_by_topic_id_do_not_mix(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    fetcher = Fetcher(broker_client, v=16)
    await fetcher.full([(topic, 0, 0)])
    response = await broker_client.send(fetch_request(session_id=fetcher.session_id, epoch=1, v=12))
    assert response.error_code == ErrorCode.fetch_session_topic_id_error


# -- what changes reach a session ----------------------------------------------------------------


async def test_log_start_offset_moved_by_delete_records_is_reported(broker, broker_client):
    topic = await broker.create_topic("t", 2, {})
    await produce(broker_client, "t", 0, 3)
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 3), (topic, 1, 0)])
    deleted = await broker_client.send(
        req(
            21,
            2,
            "DeleteRecordsRequest",
            topics=(
                req(
                    21,
                    2,
                    "DeleteRecordsTopic",
                    name="t",
                    partitions=(req(21, 2, "DeleteRecordsPartition", partition_index=0, offset=2),),
                ),
            ),
            timeout=ms(5000),
        )
    )
    assert deleted.topics[0].partitions[0].low_watermark == 2
    response = await fetcher.incremental()
    assert included(response) == [0]
    assert partition(response, 0).log_start_offset == 2
    assert included(await fetcher.incremental()) == []


async def test_log_start_offset_moved_by_retention_is_reported(broker, broker_client):
    # One batch per segment; retention.bytes keeps only the active one.
    topic = await broker.create_topic("t", 2, {"segment.bytes": "100", "retention.bytes": "1"})
    for _ in range(3):
        await produce(broker_client, "t", 0)
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 3), (topic, 1, 0)])
    # What the broker's log.retention.check.interval.ms job runs.
    assert broker.replica_manager.enforce_retention(broker.fetch_sessions.clock_ms()) >= 1
    response = await fetcher.incremental()
    assert included(response) == [0]
    assert partition(response, 0).log_start_offset == 3
    assert included(await fetcher.incremental()) == []


async def test_a_deleted_topic_is_reported_in_every_response(broker, broker_client):
    topic = await broker.create_topic("t", 1, {})
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 0)])
    await broker.delete_topic("t")
    for _ in range(2):
        response = await fetcher.incremental()
        assert partition(response, 0).error_code == ErrorCode.unknown_topic_id


async def test_a_parked_incremental_fetch_wakes_for_its_sessions_partitions(broker, broker_client):
    topic = await broker.create_topic("t", 3, {})
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, p, 0) for p in range(3)])
    session = broker.fetch_sessions.get(fetcher.session_id)
    producer = await BrokerConnection.open(*broker.bound["PLAINTEXT"])
    try:
        parked = asyncio.ensure_future(fetcher.incremental(min_bytes=1, max_wait=30_000))
        while not session.listeners:
            await asyncio.sleep(0)  # until the fetch is parked: a condition, not a delay
        assert broker.replica_manager.parked(("t", 2)) == 0  # on the session, not per partition
        await produce(producer, "t", 2)
        response = await parked
        assert included(response) == [2] and record_batches(partition(response, 2)) == 1
    finally:
        await producer.close()


async def test_read_committed_sessions_get_a_transaction_once_it_commits(broker, broker_client):
    from test_read_committed import end_txn, new_producer

    topic = await broker.create_topic("txn", 1, {})
    producer = await new_producer(broker_client)
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, 0, 0)], isolation_level=1)
    await producer.send(b"a", b"b")
    response = await fetcher.incremental(isolation_level=1)
    part = partition(response, 0)  # the high watermark moved; nothing is stable yet
    assert (part.high_watermark, part.last_stable_offset, record_batches(part)) == (2, 0, 0)
    end_txn(broker, producer, commit=True)
    part = partition(await fetcher.incremental(isolation_level=1), 0)
    assert (part.last_stable_offset, record_batches(part)) == (3, 2)  # data and marker


# -- rotation ------------------------------------------------------------------------------------


async def test_partitions_that_returned_data_move_last_so_none_starves(broker, broker_client):
    topic = await broker.create_topic("t", 3, {})
    fetcher = Fetcher(broker_client)
    await fetcher.full([(topic, p, 0) for p in range(3)])
    for p in range(3):
        await produce(broker_client, "t", p)
    # max_bytes 1: only the first partition read returns its batch (KIP-74: at least one).
    response = await fetcher.incremental(max_bytes=1)
    assert included(response) == [0, 1, 2]  # all have a new high watermark
    assert [record_batches(partition(response, p)) for p in range(3)] == [1, 0, 0]
    # The fetcher does not advance: the data goes round the partitions, not always to 0.
    served = []
    for _ in range(4):
        response = await fetcher.incremental(max_bytes=1)
        assert len(included(response)) == 1
        (index,) = included(response)
        assert record_batches(partition(response, index)) == 1
        served.append(index)
    assert served == [1, 2, 0, 1]
    session = broker.fetch_sessions.get(fetcher.session_id)
    assert [p for _, p in session.partitions] == [2, 0, 1]


# -- cost ----------------------------------------------------------------------------------------


async def test_an_idle_incremental_response_does_not_grow_with_the_session(broker, broker_client):
    sizes = {}
    for count in (10, 1000):
        topic = await broker.create_topic(f"t{count}", count, {})
        fetcher = Fetcher(broker_client)
        full = await fetcher.full([(topic, p, 0) for p in range(count)])
        idle = await fetcher.incremental()
        assert idle.responses == ()
        sizes[count] = (wire_size(full), wire_size(idle))
    assert sizes[1000][0] > 10 * sizes[10][0]  # full responses grow with the partitions
    assert sizes[1000][1] == sizes[10][1]


# -- eviction ------------------------------------------------------------------------------------


@pytest.fixture
async def small_cache(tmp_path):
    async with running_broker(
        tmp_path / "kafka-logs", max_incremental_fetch_session_cache_slots="2"
    ) as running:
        yield running


async def test_a_follower_evicts_the_smallest_consumer_session(small_cache):
    broker, client = small_cache
    topic = await broker.create_topic("t", 4, {})
    big, small = Fetcher(client), Fetcher(client)
    await big.full([(topic, p, 0) for p in range(3)])
    await small.full([(topic, 0, 0)])
    # Full of young consumer sessions: another consumer gets none, evicting nothing.
    latecomer = Fetcher(client)
    response = await latecomer.full([(topic, p, 0) for p in range(4)])
    assert response.session_id == 0 and broker.fetch_sessions.evictions == 0
    follower = Fetcher(client, replica_id=1)
    response = await follower.full([(topic, 3, 0)])
    assert response.session_id != 0
    assert broker.fetch_sessions.get(response.session_id).privileged
    gone = await client.send(fetch_request(session_id=small.session_id, epoch=1))
    assert gone.error_code == ErrorCode.fetch_session_id_not_found
    assert included(await big.incremental()) == []
    assert broker.fetch_sessions.evictions == 1


async def test_idle_sessions_then_older_smaller_sessions_are_evicted(small_cache):
    broker, client = small_cache
    cache = broker.fetch_sessions
    now = [cache.clock_ms()]
    cache.clock_ms = lambda: now[0]  # the broker's clock for sessions, advanced by the test
    topic = await broker.create_topic("t", 10, {})
    active, idle = Fetcher(client), Fetcher(client)
    await active.full([(topic, p, 0) for p in range(3)])
    await idle.full([(topic, 0, 0)])
    now[0] += EVICTION_MS + 1
    await active.incremental()
    # Rule 2: the session idle for more than 120 s makes room, even for a smaller one.
    newcomer = Fetcher(client)
    assert (await newcomer.full([(topic, 0, 0), (topic, 1, 0)])).session_id != 0
    assert idle.session_id not in cache and active.session_id in cache
    # Rule 3: `active` has existed for more than 120 s and has fewer partitions than this
    # one; `newcomer` is too young to be evicted whatever its size.
    now[0] += 1000
    bigger = Fetcher(client)
    assert (await bigger.full([(topic, p, 0) for p in range(4)])).session_id != 0
    assert active.session_id not in cache and newcomer.session_id in cache
    # Nothing is old enough now, nor idle: a still bigger consumer gets no session.
    now[0] += 1000
    assert (await Fetcher(client).full([(topic, p, 0) for p in range(10)])).session_id == 0
    assert cache.evictions == 2


# -- metrics -------------------------------------------------------------------------------------


async def scrape(broker) -> str:
    reader, writer = await asyncio.open_connection(*broker.metrics_address)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    raw = (await reader.read()).decode()
    writer.close()
    return raw.partition("\r\n\r\n")[2]


async def test_metrics_show_sessions_cached_partitions_and_evictions(small_cache):
    broker, client = small_cache
    topic = await broker.create_topic("t", 3, {})
    await Fetcher(client).full([(topic, p, 0) for p in range(3)])
    await Fetcher(client).full([(topic, 0, 0)])
    await Fetcher(client, replica_id=1).full([(topic, 1, 0), (topic, 2, 0)])
    body = await scrape(broker)
    assert "fjord_fetch_sessions_incremental 2.0" in body
    assert "fjord_fetch_session_partitions_cached 5.0" in body
    assert "fjord_fetch_session_evictions_total 1.0" in body
