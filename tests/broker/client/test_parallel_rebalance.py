"""Seed 002's parallel-rebalance mode against a real broker, under both group protocols: the
seed's own example (a gap of 70-120, then one of 140-190), the two logs in one fenced commit,
a standard consumer resuming at the low-water mark, and a member out of the group whose commit
(its child's progress included) is refused.

Waiting is polling a condition until a deadline; nothing is timed."""

from __future__ import annotations

import time

import pytest
from broker_process import FAST_GROUP_OVERRIDES, BrokerProcess
from confluent_kafka import Consumer as ConfluentConsumer
from test_consumer import (
    PROTOCOLS,
    create_topic,
    group_consumer,
    name,
    produce,
)

from broker.client import AdminClient
from broker.client.consumer.gaps import TOKEN_PREFIX
from broker.client.errors import CommitFailedError
from broker.client.models import OffsetAndMetadata
from broker.client.models import TopicPartition as TP

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("parallel-logs"), *FAST_GROUP_OVERRIDES).start()
    yield proc.bootstrap
    assert proc.stop() == 0, "".join(proc.output)


def parallel_consumer(bootstrap: str, protocol: str, group: str, **options):
    return group_consumer(bootstrap, protocol, group, enable_parallel_rebalance=True, **options)


async def take(consumer, tp: TP) -> list[int]:
    """Subscribe and poll until `tp` is assigned; the offsets handed out meanwhile."""
    consumer.subscribe([tp.topic])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while consumer.assignment() != {tp}:
        assert time.monotonic() < deadline, "timed out waiting for the assignment"
        seen += await poll(consumer)
    return seen


async def poll(consumer) -> list[int]:
    return [r.offset for batch in (await consumer.getmany(timeout_ms=100)).values() for r in batch]


async def handle(
    consumer, offsets: set[int], seen: list[int] | None = None, timeout: float = 30
) -> list[int]:
    """Poll until every offset of `offsets` was handed out (counting those in `seen`); every
    offset handed out, in order of handing out."""
    seen = list(seen or [])
    deadline = time.monotonic() + timeout
    while not offsets <= set(seen):
        assert time.monotonic() < deadline, f"missing {sorted(offsets - set(seen))[:10]}"
        seen += await poll(consumer)
    return seen


def raw_committed(bootstrap: str, group: str, tp: TP) -> tuple[int, str]:
    """The group's committed offset and metadata as any other client reads them."""
    from confluent_kafka import TopicPartition

    c = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (found,) = c.committed([TopicPartition(tp.topic, tp.partition)], timeout=30)
        return found.offset, found.metadata or ""
    finally:
        c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_the_seeds_example_70_120_then_140_190(bootstrap, protocol):
    topic = await create_topic(bootstrap)
    tp, group = TP(topic, 0), name("g")
    produce(bootstrap, topic, 100)
    # The first member reads to 100 but has committed 70 when it stops.
    async with parallel_consumer(bootstrap, protocol, group) as a:
        await handle(a, set(range(100)), await take(a, tp))
        await a.commit({tp: 70})
        assert not a.child_consumer_is_alive()  # nothing was committed when it took over
    produce(bootstrap, topic, 20)  # the log ends at 120

    async with parallel_consumer(bootstrap, protocol, group) as b:
        seen = await take(b, tp)
        assert await b.position(tp) == 120  # the primary starts at the end
        assert b.child_consumer_is_alive()
        assert (await b.committed(tp)).offset == 70
        assert all(70 <= o < 120 for o in seen)  # anything handed out yet is the child's
        # Committed now, the logs say: primary at 120, the child's progress in 70-120.
        await b.commit()
        offset, metadata = raw_committed(bootstrap, group, tp)
        if sorted(seen) == list(range(70, 120)):  # the child was done already
            assert (offset, metadata) == (120, "")
        else:
            assert offset == (max(seen) + 1 if seen else 70)
            assert metadata.startswith(TOKEN_PREFIX)
        produce(bootstrap, topic, 20)  # 120-139, for the primary
        seen = await handle(b, set(range(70, 140)), seen)
        assert sorted(seen) == list(range(70, 140))  # each once, from either consumer
        await b.commit()
        assert (await b.committed(tp)).offset == 140  # the gap is done: the primary's
        assert raw_committed(bootstrap, group, tp) == (140, "")
        produce(bootstrap, topic, 30)  # 140-169: b reads them but stops before committing
        await handle(b, set(range(140, 170)))
        assert b.child_consumer_is_alive()  # on standby
    produce(bootstrap, topic, 20)  # the log ends at 190

    async with parallel_consumer(bootstrap, protocol, group) as c:
        seen = await take(c, tp)
        assert await c.position(tp) == 190
        assert (await c.committed(tp)).offset == 140
        produce(bootstrap, topic, 10)  # 190-199
        seen = await handle(c, set(range(140, 200)), seen)
        assert sorted(seen) == list(range(140, 200))
        begin = await c.beginning_offsets([tp])
        end = await c.end_offsets([tp])
        assert (begin[tp], end[tp]) == (140, 200)  # what the two consumers handed out
        await c.commit()
        assert (await c.committed(tp)).offset == 200


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_standard_consumer_resumes_at_the_low_water_mark(bootstrap, protocol):
    topic = await create_topic(bootstrap)
    tp, group = TP(topic, 0), name("g")
    produce(bootstrap, topic, 50)
    async with parallel_consumer(bootstrap, protocol, group) as a:
        await handle(a, set(range(50)), await take(a, tp))
        await a.commit({tp: OffsetAndMetadata(10, "app")})
    produce(bootstrap, topic, 50)
    async with parallel_consumer(bootstrap, protocol, group) as b:
        await take(b, tp)
        assert await b.position(tp) == 100
        produce(bootstrap, topic, 5)
        await b.commit({tp: OffsetAndMetadata(105, "app")})  # the primary's part only
        committed = await b.committed(tp)
        assert (committed.offset, committed.metadata) == (10, "app")
    # Another client in the group: it starts at the low-water mark, losing nothing.
    config = {"group.protocol": protocol} if protocol == "consumer" else {}
    other = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            **config,
        }
    )
    try:
        other.subscribe([topic])
        first = None
        deadline = time.monotonic() + 60
        while first is None:
            assert time.monotonic() < deadline, "the standard consumer read nothing"
            message = other.poll(0.2)
            if message is not None and message.error() is None:
                first = message.offset()
        assert first == 10
    finally:
        other.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_member_out_of_the_group_cannot_commit_its_logs(bootstrap, protocol):
    """`a` takes a partition over with a gap, then stops polling past max_poll_interval_ms:
    `b` gets the partition and `a`'s commit, its child's progress included, is refused; the
    committed offset never went back."""
    topic = await create_topic(bootstrap)
    tp, group = TP(topic, 0), name("g")
    produce(bootstrap, topic, 40)
    async with parallel_consumer(bootstrap, protocol, group) as first:
        await handle(first, set(range(40)), await take(first, tp))
        await first.commit({tp: 20})
    produce(bootstrap, topic, 20)
    async with (
        parallel_consumer(bootstrap, protocol, group, max_poll_interval_ms=1500) as a,
        parallel_consumer(bootstrap, protocol, group) as b,
    ):
        seen = await take(a, tp)
        assert a.child_consumer_is_alive() and await a.position(tp) == 60
        await handle(a, set(range(20, 30)), seen)
        b_seen = await take(b, tp)
        # a's poll timer runs out: it leaves the group, b alone is left.
        async with AdminClient(bootstrap) as admin:
            deadline = time.monotonic() + 30
            while len((await admin.describe_group(group)).members) != 1:
                assert time.monotonic() < deadline, "a never left the group"
                b_seen += await poll(b)
        assert not a.assignment()
        with pytest.raises(CommitFailedError):
            await a.commit({tp: 25})  # inside the gap: the child's log
        with pytest.raises(CommitFailedError):
            await a.commit({tp: 61})
        assert raw_committed(bootstrap, group, tp)[0] == 20
        # b took over with the committed logs: its child reads 20-60.
        assert await b.position(tp) == 60
        await handle(b, set(range(20, 60)), b_seen)
        assert b.child_consumer_is_alive()
