"""Consumer groups across broker restarts and the group admin requests, with confluent-kafka:
committed offsets survive a clean restart and a kill -9 (classic and consumer protocol), a
cooperative-sticky member joining leaves the others' partitions in place, and ListGroups /
DescribeGroups / ConsumerGroupDescribe as AdminClient sends them.

Waiting is polling until a condition holds (never a sleep); no assertion is about timing.
"""

from __future__ import annotations

import pytest
from compat_support import topic_name, wait_until
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3
# A new classic group rebalances at once instead of waiting 3 s for more members.
OVERRIDES = ("group.initial.rebalance.delay.ms=0",)
PROTOCOLS = {
    "classic": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "consumer": {"group.protocol": "consumer"},
}


@pytest.fixture
def group_broker(make_broker_process):
    return make_broker_process(*OVERRIDES).start()


def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = topic_name("grp-restart")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=30)
    return name


def produce(bootstrap: str, topic: str, per_partition: int, first: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for i in range(first, first + per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def member(bootstrap: str, group: str, protocol: str = "classic", **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **PROTOCOLS[protocol],
            **extra,
        }
    )


def consume_until(consumer: Consumer, done, what: str) -> dict[int, list[tuple[int, bytes]]]:
    """Poll `consumer` until done(received) holds; received maps partition -> [(offset, value)]."""
    received: dict[int, list[tuple[int, bytes]]] = {}

    def step():
        msg = consumer.poll(0.1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            received.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
        return done(received)

    wait_until(step, timeout=60, what=what)
    return received


# -- (a) committed offsets across a broker restart ---------------------------------------------


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("restart", ["sigterm", "kill -9"])
def test_committed_offsets_survive_a_broker_restart(group_broker, protocol, restart):
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap)
    produce(bootstrap, topic, 10)
    committed = {0: 4, 1: 7, 2: 1}

    first = member(bootstrap, topic, protocol)
    first.subscribe([topic])
    consume_until(
        first,
        lambda got: all(len(got.get(p, [])) >= n for p, n in committed.items()),
        "the first records of every partition",
    )
    first.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False
    )
    first.close()

    if restart == "sigterm":
        assert group_broker.stop() == 0, "".join(group_broker.output)
    else:
        group_broker.kill()  # only the synchronous (acknowledged) commit has to survive this
    group_broker.start()
    produce(bootstrap, topic, 2, first=10)

    resumed = member(bootstrap, topic, protocol, **{"auto.offset.reset": "error"})
    try:
        resumed.subscribe([topic])
        got = consume_until(
            resumed,
            lambda got: sum(map(len, got.values())) == sum(12 - o for o in committed.values()),
            "the records after the committed offsets",
        )
        assert got == {
            p: [(o, f"{p}-{o}".encode()) for o in range(start, 12)]
            for p, start in committed.items()
        }
        stored = resumed.committed([TopicPartition(topic, p) for p in committed], timeout=30)
        assert {tp.partition: tp.offset for tp in stored} == committed
    finally:
        resumed.close()


# -- (b) a cooperative-sticky member joins ------------------------------------------------------


def test_a_cooperative_member_joining_leaves_the_others_consuming(group_broker):
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, partitions=6)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    members: dict[str, Consumer] = {}
    revoked: dict[str, list[int]] = {}
    # Per original member: the smallest assignment it held while the newcomer joined.
    held: dict[str, set[int]] = {}
    received: dict[str, dict[int, list[int]]] = {}

    def add(name: str) -> None:
        c = member(bootstrap, topic, **{"partition.assignment.strategy": "cooperative-sticky"})
        revoked[name], received[name] = [], {}
        c.subscribe(
            [topic], on_revoke=lambda _c, tps: revoked[name].extend(tp.partition for tp in tps)
        )
        members[name] = c

    def poll_all(produce: bool = True) -> dict[str, set[int]]:
        for p in range(6 if produce else 0):
            producer.produce(topic, value=b"x", partition=p)
        producer.poll(0)
        for name, c in members.items():
            for msg in c.consume(100, 0.05):
                assert msg.error() is None, msg.error()
                received[name].setdefault(msg.partition(), []).append(msg.offset())
        assignments = {name: {tp.partition for tp in c.assignment()} for name, c in members.items()}
        for name in held:
            held[name] &= assignments[name]
        return assignments

    def shared(assignments: dict[str, set[int]]) -> bool:
        owned = sorted(p for a in assignments.values() for p in a)
        return owned == list(range(6)) and all(assignments.values())

    try:
        add("a")
        add("b")
        before = wait_until(lambda: shared(a := poll_all()) and a, what="a and b sharing")
        held.update({name: set(before[name]) for name in before})
        for name in revoked:
            revoked[name].clear()
        add("c")
        after = wait_until(lambda: shared(a := poll_all()) and a, what="c getting partitions")
        for name in ("a", "b"):
            kept = before[name] & after[name]
            assert kept, f"{name} lost all its partitions"
            # Incremental: the kept partitions were never revoked, not even for a moment.
            assert held[name] == kept, f"{name} held only {held[name]} of {kept} meanwhile"
            assert set(revoked[name]) == before[name] - after[name] <= after["c"]
        producer.flush(30)
        # The kept partitions were never reset either: no commits were made, so a revoked and
        # re-assigned partition would be read again from offset 0. Every record of a kept
        # partition reaches its member once, in order.
        ends = {
            p: members["a"].get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(6)
        }
        wait_until(
            lambda: (
                poll_all(produce=False) is not None
                and all(
                    len(received[name].get(p, [])) >= ends[p]
                    for name in ("a", "b")
                    for p in before[name] & after[name]
                )
            ),
            what="the kept partitions read to their end",
        )
        for name in ("a", "b"):
            for p in before[name] & after[name]:
                assert received[name][p][: ends[p]] == list(range(ends[p])), (name, p)
    finally:
        for c in members.values():
            c.close()
        producer.flush(10)


# -- (c) ListGroups filters, DescribeGroups and ConsumerGroupDescribe ---------------------------


def test_list_groups_filters_and_describe_a_consumer_group(group_broker):
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    groups = {name: topic_name(f"grp-{name}") for name in ("classic", "consumer", "empty")}
    consumers = {
        name: member(bootstrap, groups[name], name, **{"client.id": f"client-{name}"})
        for name in ("classic", "consumer")
    }
    try:
        for c in consumers.values():
            c.subscribe([topic])
        wait_until(
            lambda: (
                [c.poll(0.05) for c in consumers.values()]
                and all(c.assignment() for c in consumers.values())
            ),
            what="both groups assigned",
        )
        # A group with committed offsets and no members: EMPTY, of the classic type.
        empty = member(bootstrap, groups["empty"])
        empty.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        empty.close()

        def listed(**filters) -> set[str]:
            result = admin.list_consumer_groups(request_timeout=30, **filters).result(timeout=30)
            assert not result.errors, result.errors
            return {g.group_id for g in result.valid} & set(groups.values())

        wait_until(
            lambda: (
                listed(states={ConsumerGroupState.STABLE})
                == {groups["classic"], groups["consumer"]}
            ),
            what="both groups listed as STABLE",
        )
        assert listed(states={ConsumerGroupState.EMPTY}) == {groups["empty"]}
        assert listed(types={ConsumerGroupType.CONSUMER}) == {groups["consumer"]}
        assert listed(types={ConsumerGroupType.CLASSIC}) == {groups["classic"], groups["empty"]}
        assert listed(states={ConsumerGroupState.STABLE}, types={ConsumerGroupType.CLASSIC}) == {
            groups["classic"]
        }
        every = admin.list_consumer_groups(request_timeout=30).result(timeout=30).valid
        types = {g.group_id: g.type for g in every if g.group_id in groups.values()}
        assert types == {
            groups["classic"]: ConsumerGroupType.CLASSIC,
            groups["consumer"]: ConsumerGroupType.CONSUMER,
            groups["empty"]: ConsumerGroupType.CLASSIC,
        }

        described = {
            name: future.result(timeout=30)
            for name, future in admin.describe_consumer_groups(
                [groups["consumer"], groups["classic"]], request_timeout=30
            ).items()
        }
        for name in ("consumer", "classic"):
            description = described[groups[name]]
            assert description.state == ConsumerGroupState.STABLE, (name, description.state)
            assert description.type == getattr(ConsumerGroupType, name.upper())
            [m] = description.members
            assert m.client_id == f"client-{name}"
            assert m.member_id
            assert sorted(tp.partition for tp in m.assignment.topic_partitions) == [0, 1, 2]
            assert {tp.topic for tp in m.assignment.topic_partitions} == {topic}
        consumer_member = described[groups["consumer"]].members[0]
        assert consumer_member.target_assignment is not None
        assert sorted(
            tp.partition for tp in consumer_member.target_assignment.topic_partitions
        ) == [
            0,
            1,
            2,
        ]
        assert described[groups["consumer"]].partition_assignor == "uniform"
    finally:
        for c in consumers.values():
            c.close()
