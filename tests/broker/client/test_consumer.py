"""The Consumer against a real broker process: assign and subscribe under both group
protocols, commits (with metadata, auto-commit, fenced), positions, seeks, pauses, offset
lookups, read_committed over confluent-kafka's transactions, every codec and an old-format
topic, regex subscriptions, rebalance listeners, static membership, and leaving on close.

Waiting is polling a condition until a deadline; nothing is timed."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable

import pytest
from broker_process import FAST_GROUP_OVERRIDES, BrokerProcess
from confluent_kafka import Producer as ConfluentProducer
from in_process_broker import running_broker

from broker.client import AdminClient, Consumer
from broker.client.consumer import ConsumerRebalanceListener
from broker.client.consumer.fetcher import FetchRequestData
from broker.client.consumer.subscription_state import EARLIEST, SubscriptionState
from broker.client.errors import (
    CommitFailedError,
    IllegalStateError,
    NoOffsetForPartitionError,
)
from broker.client.models import NewTopic, OffsetAndMetadata
from broker.client.models import TopicPartition as TP
from broker.client.options import ConfigError

pytestmark = pytest.mark.timeout(120)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Record timestamps: an hour ago (older ones would fall to retention.ms), on a whole second.
BASE_TS = (int(time.time()) - 3600) * 1000
FAST_MEMBER = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 200}
PROTOCOLS = ["classic", "consumer"]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("consumer-logs"), *FAST_GROUP_OVERRIDES).start()
    yield proc.bootstrap
    assert proc.stop() == 0, "".join(proc.output)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create_topic(bootstrap: str, partitions: int = 1, **configs: str) -> str:
    topic = name("consumer")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1, configs)])
    return topic


def produce(
    bootstrap: str, topic: str, count: int, partitions: int = 1, headers: bool = True, **config
) -> None:
    """confluent-kafka settings as keywords, with underscores for dots; every delivery
    checked."""
    failed = []
    config = {k.replace("_", "."): v for k, v in config.items()}
    p = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, **config})
    for i in range(count):
        p.produce(
            topic,
            b"v%d" % i,
            b"k%d" % i,
            partition=i % partitions,
            headers=[("i", str(i).encode())] if headers else None,
            timestamp=BASE_TS + i * 1000,
            on_delivery=lambda err, _: err and failed.append(err),
        )
    assert p.flush(30) == 0
    assert failed == []


async def until(predicate: Callable[[], object], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def read(consumer: Consumer, count: int, timeout: float = 30) -> list:
    records: list = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        assert time.monotonic() < deadline, f"read {len(records)} of {count}"
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            records += batch
    return records


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set]] = []

    async def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", revoked))

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", assigned))

    async def on_partitions_lost(self, lost):
        self.events.append(("lost", lost))


# -- options --------------------------------------------------------------------------------


def test_options_are_checked_at_construction():
    with pytest.raises(ConfigError, match="fetch_max_wait"):
        Consumer("127.0.0.1:9", fetch_max_wait=5)
    with pytest.raises(ConfigError, match="auto_offset_reset"):
        Consumer("127.0.0.1:9", auto_offset_reset="smallest")
    with pytest.raises(ConfigError, match="partition_assignment_strategy"):
        Consumer("127.0.0.1:9", partition_assignment_strategy="roundrobin")
    c = Consumer("127.0.0.1:9", partition_assignment_strategy="cooperative-sticky")
    assert c.config.partition_assignment_strategy == ["cooperative-sticky"]
    assert (c.config.auto_offset_reset, c.config.enable_auto_commit) == ("latest", True)
    assert (c.config.max_poll_records, c.config.session_timeout_ms) == (500, 45000)


@pytest.mark.parametrize(
    "option", ["session_timeout_ms", "heartbeat_interval_ms", "partition_assignment_strategy"]
)
def test_classic_options_are_refused_with_the_consumer_protocol(option):
    """The broker decides them under KIP-848: a value would be silently ignored."""
    value = "range" if option == "partition_assignment_strategy" else 6000
    with pytest.raises(ConfigError, match=f"{option}.*cannot be set when group.protocol=consumer"):
        Consumer("127.0.0.1:9", group_protocol="consumer", **{option: value})
    assert Consumer("127.0.0.1:9", group_protocol="classic", **{option: value})


# -- without a group ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
async def test_every_codec_is_read(bootstrap, codec):
    topic = await create_topic(bootstrap)
    produce(bootstrap, topic, 20, compression_type=codec)
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_bytes=1000) as c:
        c.assign([TP(topic, 0)])
        records = await read(c, 20)
    assert [r.offset for r in records] == list(range(20))
    assert [(r.key, r.value) for r in records] == [(b"k%d" % i, b"v%d" % i) for i in range(20)]
    assert records[3].headers == [("i", b"3")]
    assert records[3].timestamp_ms == BASE_TS + 3000 and records[3].timestamp_type == 0


async def test_an_old_format_topic_is_read(bootstrap):
    topic = await create_topic(bootstrap, **{"message.format.version": "0.10.0"})
    produce(bootstrap, topic, 12, headers=False, compression_type="gzip")
    async with Consumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP(topic, 0)])
        records = await read(c, 12)
    assert [r.value for r in records] == [b"v%d" % i for i in range(12)]
    assert records[0].timestamp_ms == BASE_TS and records[0].headers == []


async def test_read_committed_skips_aborted_transactions(bootstrap):
    topic = await create_topic(bootstrap)
    txn = ConfluentProducer({"bootstrap.servers": bootstrap, "transactional.id": name("tx")})
    txn.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        txn.begin_transaction()
        for i in range(5):
            txn.produce(topic, f"{outcome}-{i}".encode(), partition=0)
        assert txn.flush(30) == 0  # in the log before the abort (else librdkafka drops them)
        if outcome == "commit":
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)
    async with (
        Consumer(bootstrap, auto_offset_reset="earliest", isolation_level="read_committed") as rc,
        Consumer(bootstrap, auto_offset_reset="earliest") as ru,
    ):
        rc.assign([TP(topic, 0)])
        ru.assign([TP(topic, 0)])
        committed = await read(rc, 10)
        everything = await read(ru, 15)
        assert {r.value for r in committed} == {f"commit-{i}".encode() for i in range(5)}
        assert len({r.value for r in everything}) == 10  # both commits and the abort
        assert any(r.value.startswith(b"abort") for r in everything)
        # Past the last marker: the positions stand at the log end in both.
        end = (await rc.end_offsets([TP(topic, 0)]))[TP(topic, 0)]
        await until(lambda: rc.subscriptions.state(TP(topic, 0)).position == end, "the end")
        assert await rc.getmany(timeout_ms=100) == {}


async def read_fetched_ahead(consumer: Consumer, count: int) -> list:
    """`read`, letting every fetch ahead come in before each poll: the records handed out
    then always continue from a fetch made ahead of the ones before."""
    fetcher = consumer.fetcher

    def fetched_ahead(tp: TP) -> bool:
        position = consumer.subscriptions.state(tp).position
        if position is None or position >= fetcher._log_end.get(tp, position + 1):
            return True  # set by the next poll, or read to the end
        buffered = fetcher._completed.get(tp)
        return buffered is not None and (
            tp in fetcher._ahead or fetcher._fetch_ahead_offset(tp, buffered, position) is None
        )

    records: list = []
    deadline = time.monotonic() + 30
    while len(records) < count:
        assert time.monotonic() < deadline, f"read {len(records)} of {count}"
        while not all(map(fetched_ahead, consumer.assignment())):  # polled closely: it is quick
            assert time.monotonic() < deadline, f"read {len(records)} of {count}"
            await asyncio.sleep(0.001)
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            records += batch
    return records


async def test_small_fetches_fetched_ahead_give_every_record_once_in_order(bootstrap):
    # Batches of 10 records, fetches of about one batch a partition: every partition is fetched
    # ahead of what is being handed out many times over, and sought back in the middle.
    topic = await create_topic(bootstrap, partitions=2)
    produce(bootstrap, topic, 2000, partitions=2, batch_num_messages=10)
    t0, t1 = TP(topic, 0), TP(topic, 1)
    small = {"max_partition_fetch_bytes": 300, "max_poll_records": 15}
    async with Consumer(bootstrap, auto_offset_reset="earliest", **small) as c:
        c.assign([t0, t1])
        first = await read_fetched_ahead(c, 600)
        seen_before_seek = [r.offset for r in first if r.partition == 0]
        c.seek(t0, 100)
        # What is left of partition 1 and partition 0's 900 from offset 100 (the first read
        # may have gone past 600: it takes what each poll gives).
        rest = await read_fetched_ahead(c, 1000 - (len(first) - len(seen_before_seek)) + 900)
        assert await c.getmany(timeout_ms=200) == {}
    by_partition = {0: [], 1: []}
    for r in first + rest:
        by_partition[r.partition].append(r.offset)
    assert by_partition[1] == list(range(1000))
    assert by_partition[0] == seen_before_seek + list(range(100, 1000))
    assert all(r.value == b"v%d" % (2 * r.offset + r.partition) for r in first + rest)


async def test_read_committed_over_many_small_fetches(bootstrap):
    topic = await create_topic(bootstrap)
    txn = ConfluentProducer(
        {"bootstrap.servers": bootstrap, "transactional.id": name("tx"), "linger.ms": 0}
    )
    txn.init_transactions(30)
    for t in range(20):
        txn.begin_transaction()
        for i in range(10):  # a batch each: fetches of two or three end anywhere
            txn.produce(topic, f"{t}-{i}".encode(), partition=0)
            assert txn.flush(30) == 0
        if t % 2:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
    async with Consumer(
        bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_partition_fetch_bytes=200,
        max_poll_records=3,
    ) as rc:
        rc.assign([TP(topic, 0)])
        records = await read_fetched_ahead(rc, 100)
        assert [r.value for r in records] == [
            f"{t}-{i}".encode() for t in range(0, 20, 2) for i in range(10)
        ]
        assert await rc.getmany(timeout_ms=200) == {}


async def test_positions_seeks_pauses_and_offset_lookups(bootstrap):
    topic = await create_topic(bootstrap, partitions=2)
    produce(bootstrap, topic, 20, partitions=2)
    t0, t1 = TP(topic, 0), TP(topic, 1)
    async with Consumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign([t0, t1])
        assert c.assignment() == {t0, t1}
        assert await c.beginning_offsets([t0, t1]) == {t0: 0, t1: 0}
        assert await c.end_offsets([t0, t1]) == {t0: 10, t1: 10}
        # Record i went to partition i % 2 with timestamp base + i s: partition 0 holds the
        # even ones, so the first at or after record 5's time is record 6, offset 3.
        found = await c.offsets_for_times({t0: BASE_TS + 5000, t1: BASE_TS + 3_600_000})
        assert found[t0].offset == 3 and found[t0].timestamp_ms == BASE_TS + 6000
        assert found[t1] is None

        assert await c.position(t0) == 0
        c.seek(t0, 7)
        c.pause(t1)
        assert c.paused() == {t1}
        records = await read(c, 3)
        assert [(r.partition, r.offset) for r in records] == [(0, 7), (0, 8), (0, 9)]
        assert await c.getmany(timeout_ms=100) == {}  # partition 1 paused
        c.resume(t1)
        assert [r.offset for r in await read(c, 10)] == list(range(10))

        await c.seek_to_beginning(t0)
        assert await c.position(t0) == 0
        await c.seek_to_end(t0)
        assert await c.position(t0) == 10
        c.seek(t0, 5)
        first = await c.getone()
        assert (first.partition, first.offset) == (0, 5)
        assert await c.position(t0) == 6

        # Out of range: auto_offset_reset takes over.
        c.seek(t0, 1000)
        again = await read(c, 1)
        assert again[0].offset == 0

        with pytest.raises(IllegalStateError):
            c.subscribe([topic])
        with pytest.raises(IllegalStateError):
            await c.commit()


async def test_no_offset_with_reset_none_raises(bootstrap):
    topic = await create_topic(bootstrap)
    async with Consumer(bootstrap, group_id=name("g"), auto_offset_reset="none") as c:
        c.assign([TP(topic, 0)])
        with pytest.raises(NoOffsetForPartitionError):
            await c.getmany(timeout_ms=100)


async def test_assigned_partitions_commit_and_resume_from_the_group(bootstrap):
    topic = await create_topic(bootstrap)
    produce(bootstrap, topic, 10)
    group = name("g")
    tp = TP(topic, 0)
    async with Consumer(bootstrap, group_id=group, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert await c.committed(tp) is None
        await read(c, 4)
        await c.commit({tp: OffsetAndMetadata(4, "checkpoint-a")})
        assert await c.committed(tp) == OffsetAndMetadata(4, "checkpoint-a", -1)
    async with Consumer(bootstrap, group_id=group, enable_auto_commit=False) as c:
        c.assign([tp])
        assert (await c.getone()).offset == 4
        await c.commit()
        assert (await c.committed(tp)).offset == 5


# -- groups ---------------------------------------------------------------------------------


def group_consumer(bootstrap: str, protocol: str, group: str, **options) -> Consumer:
    extra = FAST_MEMBER if protocol == "classic" else {}
    return Consumer(
        bootstrap,
        group_id=group,
        group_protocol=protocol,
        auto_offset_reset="earliest",
        **{"enable_auto_commit": False, **extra, **options},
    )


async def poll_all(*consumers: Consumer) -> None:
    await asyncio.gather(*(c.getmany(timeout_ms=50) for c in consumers))


async def settle(consumers: list[Consumer], partitions: set, what: str) -> None:
    """Poll every member until each partition is owned by exactly one of them, and every
    member owns some."""

    def settled() -> bool:
        owned = [tp for c in consumers for tp in c.assignment()]
        shared = all(c.assignment() for c in consumers)
        return shared and len(owned) == len(partitions) and set(owned) == partitions

    deadline = time.monotonic() + 30
    while not settled():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await poll_all(*consumers)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_members_share_partitions_and_listeners_see_every_move(bootstrap, protocol):
    topic = await create_topic(bootstrap, partitions=4)
    group = name("g")
    everything = {TP(topic, p) for p in range(4)}
    first, second = Recorder(), Recorder()
    async with group_consumer(bootstrap, protocol, group) as a:
        a.subscribe([topic], listener=first)
        await settle([a], everything, "the first member")  # (settling polls, records too)
        assert a.subscription() == {topic}
        assert ("assigned", everything) in first.events
        produce(bootstrap, topic, 40, partitions=4)
        await read(a, 40)
        await a.commit()
        committed = {tp: (await a.committed(tp)).offset for tp in everything}
        assert committed == dict.fromkeys(everything, 10)
        assert a.group_metadata().member_id and a.group_metadata().generation_id > 0

        async with group_consumer(bootstrap, protocol, group) as b:
            b.subscribe([topic], listener=second)
            await settle([a, b], everything, "two members")
            assert a.assignment() and b.assignment()
            assert [e for e in first.events if e[0] == "revoked"]
            # b starts from the committed offsets: nothing to read.
            assert await b.getmany(timeout_ms=200) == {}
        # b closed and left: a takes everything back.
        await settle([a], everything, "b's partitions back")
    assert not [e for e in first.events + second.events if e[0] == "lost"]
    assert second.events[-1][0] == "revoked"  # on close


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_close_leaves_the_group(bootstrap, protocol):
    topic = await create_topic(bootstrap, partitions=2)
    group = name("g")
    async with group_consumer(bootstrap, protocol, group) as c:
        c.subscribe([topic])
        await settle([c], {TP(topic, 0), TP(topic, 1)}, "the assignment")
        async with AdminClient(bootstrap) as admin:
            assert len((await admin.describe_group(group)).members) == 1
    async with AdminClient(bootstrap) as admin:
        assert (await admin.describe_group(group)).members == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_regex_subscription(bootstrap, protocol):
    prefix = name("rx")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics(
            [NewTopic(f"{prefix}-a", 1, 1), NewTopic(f"{prefix}-b", 1, 1), NewTopic(prefix, 1, 1)]
        )
    async with group_consumer(bootstrap, protocol, name("g")) as c:
        c.subscribe(re.compile(re.escape(prefix) + "-.*"))
        await settle([c], {TP(f"{prefix}-a", 0), TP(f"{prefix}-b", 0)}, "the matching topics")
        assert c.subscription() == {f"{prefix}-a", f"{prefix}-b"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_auto_commit(bootstrap, protocol):
    topic = await create_topic(bootstrap)
    tp = TP(topic, 0)
    options = {"enable_auto_commit": True, "auto_commit_interval_ms": 50}
    async with group_consumer(bootstrap, protocol, name("g"), **options) as c:
        c.subscribe([topic])
        await settle([c], {tp}, "the assignment")
        produce(bootstrap, topic, 5)
        await read(c, 5)

        async def committed() -> int | None:
            await c.getmany(timeout_ms=50)  # the records read count once the next poll comes
            found = await c.committed(tp)
            return found and found.offset

        deadline = time.monotonic() + 30
        while await committed() != 5:
            assert time.monotonic() < deadline


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_static_member_keeps_its_place_across_a_restart(bootstrap, protocol):
    topic = await create_topic(bootstrap, partitions=2)
    group = name("g")
    everything = {TP(topic, 0), TP(topic, 1)}
    async with group_consumer(bootstrap, protocol, group, group_instance_id="static-1") as c:
        c.subscribe([topic])
        await settle([c], everything, "the assignment")
    async with AdminClient(bootstrap) as admin:
        members = (await admin.describe_group(group)).members
    assert [m.group_instance_id for m in members] == ["static-1"]  # still in the group
    async with group_consumer(bootstrap, protocol, group, group_instance_id="static-1") as c:
        c.subscribe([topic])
        await settle([c], everything, "the same assignment back")
    async with AdminClient(bootstrap) as admin:
        members = (await admin.describe_group(group)).members
    assert [m.group_instance_id for m in members] == ["static-1"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_member_out_of_the_group_cannot_commit(bootstrap, protocol):
    """`a` stops polling past max_poll_interval_ms: it leaves, `b` takes its partitions, and
    `a`'s commit of what it had read is refused by the group."""
    topic = await create_topic(bootstrap, partitions=2)
    group = name("g")
    everything = {TP(topic, 0), TP(topic, 1)}
    listener = Recorder()
    async with (
        group_consumer(bootstrap, protocol, group, max_poll_interval_ms=1500) as a,
        group_consumer(bootstrap, protocol, group) as b,
    ):
        a.subscribe([topic], listener=listener)
        await settle([a], everything, "a's assignment")
        produce(bootstrap, topic, 10, partitions=2)
        await read(a, 10)
        b.subscribe([topic])
        # Only b polls now: a's poll timer runs out, a leaves, b gets everything.
        deadline = time.monotonic() + 30
        while b.assignment() != everything:
            assert time.monotonic() < deadline, "b never got a's partitions"
            await b.getmany(timeout_ms=50)
        assert a.assignment() == set()
        assert listener.events[-1][0] == "lost"
        with pytest.raises(CommitFailedError):
            await a.commit({TP(topic, 0): 5})
        # After a poll a joins again and commits as a member.
        await settle([a, b], everything, "a back in the group")
        owned = next(iter(a.assignment()))
        await a.commit({owned: 1})


async def test_close_closes_the_fetch_session(tmp_path):
    async with running_broker(tmp_path) as (broker, _):
        bootstrap = "{}:{}".format(*broker.bound["PLAINTEXT"])
        topic = await create_topic(bootstrap)
        await asyncio.to_thread(produce, bootstrap, topic, 10)  # the broker runs on this loop
        consumer = Consumer(bootstrap, auto_offset_reset="earliest")
        async with consumer:
            consumer.assign([TP(topic, 0)])
            await read(consumer, 10)
            assert len(broker.fetch_sessions) == 1
        assert len(broker.fetch_sessions) == 0  # freed now, not at its eviction


async def test_close_does_not_wait_out_a_long_poll(tmp_path):
    """A caught-up partition's fetch waits on the broker up to fetch_max_wait_ms, and a close
    sent behind it on its connection would too: the session is closed through another
    connection instead, at once (here well before the minute the long poll may take)."""
    async with running_broker(tmp_path) as (broker, _):
        bootstrap = "{}:{}".format(*broker.bound["PLAINTEXT"])
        topic = await create_topic(bootstrap)
        await asyncio.to_thread(produce, bootstrap, topic, 10)
        consumer = Consumer(
            bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=60_000,
            request_timeout_ms=120_000,
        )
        async with consumer:
            consumer.assign([TP(topic, 0)])
            await read(consumer, 10)
            await until(lambda: consumer.fetcher._in_flight, "a long poll in flight")
            await asyncio.wait_for(consumer.close(), 20)
        assert len(broker.fetch_sessions) == 0


async def test_fetches_carry_the_client_rack(bootstrap):
    async with Consumer(bootstrap, client_rack="eu-west-1a") as consumer:
        session = await consumer.client.any_session()
        fetch = consumer.fetcher._request(session, FetchRequestData(0, 0, {}, {}, {}))
        assert fetch.rack_id == "eu-west-1a"


async def test_a_range_read_to_its_stop_leaves_nothing_buffered_for_the_next(bootstrap):
    """A fetcher reading [0, 5) of a batch of 20 takes 0-6 out of its buffer and hands out
    0-4. The next range, [5, 12), as seed 002's child goes on from one gap to the next, starts
    at 5: it must get 5 and 6 too, not carry on in the buffer from 7."""
    topic = await create_topic(bootstrap)
    produce(bootstrap, topic, 20, linger_ms=100)
    tp = TP(topic, 0)
    async with Consumer(bootstrap) as c:
        ranged = SubscriptionState(EARLIEST)
        fetcher = c.make_fetcher(ranged)
        c.add_fetcher(fetcher)
        fetcher.start()
        ranged.assign_range(tp, 0, 5)
        first = await c.getmany(timeout_ms=10_000, max_records=7)
        assert [r.offset for r in first[tp]] == [0, 1, 2, 3, 4]
        ranged.assign_range(tp, 5, 12)
        second: list[int] = []
        deadline = time.monotonic() + 30
        while len(second) < 7 and time.monotonic() < deadline:
            second += [r.offset for r in (await c.getmany(timeout_ms=1000)).get(tp, [])]
        assert second == list(range(5, 12))
