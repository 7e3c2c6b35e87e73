"""confluent-kafka (librdkafka) with `group.protocol=consumer` (KIP-848) against a broker process:
server-side assignment, incremental rebalances, session expiry, both assignors, regex
subscriptions and committed offsets.

Every consumer of a test is polled from the test's thread, round robin; waiting is polling
until a condition holds (never a sleep), with generous deadlines and no timing assertions.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from compat_support import topic_name, wait_until
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(180)

# A short session so that a killed member is noticed quickly; heartbeats to match.
SESSION_TIMEOUT_MS = 6000
OVERRIDES = (
    f"group.consumer.session.timeout.ms={SESSION_TIMEOUT_MS}",
    f"group.consumer.min.session.timeout.ms={SESSION_TIMEOUT_MS}",
    "group.consumer.heartbeat.interval.ms=500",
    "group.consumer.min.heartbeat.interval.ms=500",
)


@pytest.fixture
def bootstrap(make_broker_process) -> str:
    return make_broker_process(*OVERRIDES).start().bootstrap


def create_topics(bootstrap: str, partitions: int, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions) for n in names])
    for future in futures.values():
        future.result(timeout=30)


def consumer_config(bootstrap: str, group: str, **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }


class Members:
    """Consumers of one group, polled in turn; what each received and had revoked is kept per
    consumer."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], **extra) -> None:
        self.bootstrap, self.group, self.topics, self.extra = bootstrap, group, topics, extra
        self.consumers: dict[str, Consumer] = {}
        self.received: dict[str, list[tuple[str, int, int]]] = {}
        self.revoked: dict[str, list[tuple[str, int]]] = {}

    def add(self, name: str) -> None:
        c = Consumer(consumer_config(self.bootstrap, self.group, **self.extra))
        self.received[name], self.revoked[name] = [], []

        def revoked(_consumer, partitions) -> None:
            self.revoked[name].extend((tp.topic, tp.partition) for tp in partitions)

        c.subscribe(self.topics, on_revoke=revoked, on_lost=revoked)
        self.consumers[name] = c

    def poll(self) -> None:
        for name, c in self.consumers.items():
            for msg in c.consume(100, 0.05):
                assert msg.error() is None, msg.error()
                self.received[name].append((msg.topic(), msg.partition(), msg.offset()))

    def assignments(self) -> dict[str, set[tuple[str, int]]]:
        return {
            name: {(tp.topic, tp.partition) for tp in c.assignment()}
            for name, c in self.consumers.items()
        }

    def wait_until(self, predicate, what: str, timeout: float = 60):
        def poll_and_check():
            self.poll()
            return predicate(self.assignments())

        return wait_until(poll_and_check, timeout, what)

    def wait_for_complete_assignment(self, partitions: set[tuple[str, int]], timeout: float = 60):
        self.wait_until(
            lambda a: is_complete_and_disjoint(a, partitions) and all(a.values()),
            f"complete, disjoint assignments of {sorted(partitions)}",
            timeout,
        )

    def close(self) -> None:
        for c in self.consumers.values():
            c.close()


def is_complete_and_disjoint(assignments, partitions) -> bool:
    owned = [tp for a in assignments.values() for tp in a]
    return len(owned) == len(set(owned)) and set(owned) == partitions


def all_partitions(partitions: int, *topics: str) -> set[tuple[str, int]]:
    return {(t, p) for t in topics for p in range(partitions)}


def test_members_get_complete_disjoint_assignments(bootstrap):
    topic = topic_name("kip848-split")
    create_topics(bootstrap, 6, topic)
    members = Members(bootstrap, topic, [topic])
    try:
        for name in ("a", "b", "c"):
            members.add(name)
        members.wait_for_complete_assignment(all_partitions(6, topic))
        assert sorted(len(a) for a in members.assignments().values()) == [2, 2, 2]
    finally:
        members.close()


def test_a_joining_member_does_not_stop_the_others(bootstrap):
    topic = topic_name("kip848-join")
    create_topics(bootstrap, 6, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    partitions = all_partitions(6, topic)
    # Per original member: the smallest assignment it held while the newcomer joined.
    held: dict[str, set[tuple[str, int]]] = {}

    def produce_round(assignments) -> dict[str, set[tuple[str, int]]]:
        for p in range(6):
            producer.produce(topic, value=b"x", partition=p)
        producer.poll(0)
        for name in held:
            held[name] &= assignments[name]
        return assignments

    def balanced(assignments) -> bool:
        # Two each, not merely covered: c may hold its partition before a or b has let theirs go.
        sizes = [len(a) for a in assignments.values()]
        return is_complete_and_disjoint(assignments, partitions) and sizes == [2, 2, 2]

    members = Members(bootstrap, topic, [topic])
    try:
        members.add("a")
        members.add("b")
        members.wait_for_complete_assignment(partitions)
        before = members.assignments()
        held.update({name: set(before[name]) for name in before})
        for revoked in members.revoked.values():
            revoked.clear()
        members.add("c")
        members.wait_until(lambda a: balanced(produce_round(a)), "two partitions each")
        after = members.assignments()
        kept_by = {name: before[name] & after[name] for name in ("a", "b")}
        for name, kept in kept_by.items():
            assert kept, f"{name} lost all its partitions"
            # Incremental: the kept partitions were never revoked, not even for a moment.
            assert held[name] == kept, f"{name} held only {held[name]} of {kept} meanwhile"
            assert set(members.revoked[name]) == before[name] - after[name] <= after["c"]
        producer.flush(30)
        # Nor were they reset: nothing was committed, so a partition revoked and assigned again
        # would be read from offset 0 a second time. Every record of a kept partition reaches
        # its member once, in order.
        watermarks = members.consumers["a"].get_watermark_offsets
        ends = {(t, p): watermarks(TopicPartition(t, p), timeout=30)[1] for t, p in partitions}

        def offsets(name: str, tp: tuple[str, int]) -> list[int]:
            return [o for t, p, o in members.received[name] if (t, p) == tp]

        members.wait_until(
            lambda _a: all(
                len(offsets(name, tp)) >= ends[tp] for name in kept_by for tp in kept_by[name]
            ),
            "the kept partitions read to their end",
        )
        for name, kept in kept_by.items():
            for tp in kept:
                assert offsets(name, tp)[: ends[tp]] == list(range(ends[tp])), (name, tp)
    finally:
        members.close()
        producer.flush(10)


KILLABLE_CONSUMER = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    c.subscribe([sys.argv[2]])
    reported = -1
    while True:
        c.poll(0.1)
        if len(c.assignment()) != reported:
            reported = len(c.assignment())
            print(reported, flush=True)
    """
)


def test_a_killed_members_partitions_move_to_the_survivor(bootstrap):
    topic = topic_name("kip848-kill")
    create_topics(bootstrap, 4, topic)
    doomed = subprocess.Popen(
        [sys.executable, "-c", KILLABLE_CONSUMER, bootstrap, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    members = Members(bootstrap, topic, [topic])
    try:
        members.add("survivor")
        # The doomed member reports its assignment size on every change; it holds some once
        # the survivor holds fewer than all.
        members.wait_until(
            lambda a: 0 < len(a["survivor"]) < 4, "the two members to share the partitions"
        )
        assert int(doomed.stdout.readline()) >= 0  # it is alive and polling
        doomed.kill()
        doomed.wait()
        members.wait_until(
            lambda a: a["survivor"] == all_partitions(4, topic),
            "the survivor to take over after the session timeout",
            timeout=SESSION_TIMEOUT_MS / 1000 * 10,
        )
    finally:
        doomed.kill()
        doomed.wait()
        members.close()


@pytest.mark.parametrize("assignor", ["range", "uniform"])
def test_the_remote_assignor_is_chosen_by_the_members(bootstrap, assignor):
    first, second = topic_name("kip848-left"), topic_name("kip848-right")
    create_topics(bootstrap, 4, first, second)
    members = Members(bootstrap, first, [first, second], **{"group.remote.assignor": assignor})
    try:
        members.add("a")
        members.add("b")
        members.wait_for_complete_assignment(all_partitions(4, first, second))
        for owned in members.assignments().values():
            assert len(owned) == 4
            if assignor == "range":
                # range assigns topic by topic: co-partitioned topics stay aligned per member
                assert {p for t, p in owned if t == first} == {p for t, p in owned if t == second}
        admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in
        described = admin.describe_consumer_groups([first])[first].result(timeout=30)
        assert described.partition_assignor == assignor
        assert len(described.members) == 2
    finally:
        members.close()


def test_a_regex_subscription_follows_new_topics(bootstrap):
    prefix = topic_name("kip848-rx")
    create_topics(bootstrap, 2, f"{prefix}-a", f"{prefix}-b", topic_name("kip848-other"))
    members = Members(bootstrap, prefix, [f"^{prefix}-.*"])
    try:
        members.add("a")
        members.wait_for_complete_assignment(all_partitions(2, f"{prefix}-a", f"{prefix}-b"))
        create_topics(bootstrap, 1, f"{prefix}-c")
        members.wait_for_complete_assignment(
            all_partitions(2, f"{prefix}-a", f"{prefix}-b") | {(f"{prefix}-c", 0)}
        )
    finally:
        members.close()


def test_committed_offsets_survive_a_consumer_restart(bootstrap):
    topic = topic_name("kip848-commit")
    create_topics(bootstrap, 1, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce(topic, value=str(i).encode(), partition=0)
    producer.flush(30)

    first = Members(bootstrap, topic, [topic])
    first.add("a")
    first.wait_until(lambda _a: len(first.received["a"]) >= 10, "ten records")
    consumer = first.consumers["a"]
    consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    first.close()

    second = Members(bootstrap, topic, [topic])
    try:
        second.add("b")
        second.wait_until(lambda _a: second.received["b"], "a record")
        assert second.received["b"][0] == (topic, 0, 10)
    finally:
        second.close()
