"""Consumer groups of the classic protocol with real clients against a broker process:
confluent-kafka (eager range and roundrobin, cooperative-sticky), kafka-python and aiokafka.
Members share the partitions (every partition owned by exactly one member), commit, and a new
member resumes from the committed offsets; a member that leaves, is killed, or is closed
without leaving has its partitions taken over; a static member restarts without a rebalance."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading

import pytest
from aiokafka import AIOKafkaConsumer
from compat_support import topic_name, wait_until
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 6
SESSION_MS, HEARTBEAT_MS = 3000, 300
# kafka-python and aiokafka spell their settings alike.
PYTHON_CLIENT_MEMBER = {
    "session_timeout_ms": SESSION_MS,
    "heartbeat_interval_ms": HEARTBEAT_MS,
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
}
# A new group's first rebalance would wait 3 s for more members, and sessions this short
# would be refused.
OVERRIDES = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")
# kafka-python 3.0.12 loses a rebalance whose SyncGroup answer arrives after poll() timed out:
# the next poll no longer sees a rejoin pending and never applies the assignment (its debug log
# shows Fjord's SyncGroup response received, then nothing). Its polls here outlast a join.
KAFKA_PYTHON_POLL_MS = 1000


@pytest.fixture
def group_broker(make_broker_process):
    return make_broker_process(*OVERRIDES).start()


@pytest.fixture
def topic(group_broker) -> str:
    name = topic_name("groups")
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])
    futures[name].result(timeout=30)
    return name


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def shared_once(assignments: list[set[int]]) -> bool:
    """Every partition owned by exactly one member, and every member owning some."""
    owned = sorted(p for a in assignments for p in a)
    return owned == list(range(PARTITIONS)) and all(assignments)


# -- confluent-kafka (librdkafka) ------------------------------------------------------------


def confluent_member(bootstrap: str, group: str, strategy: str = "range", **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "classic",
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def confluent_assignments(members: list[Consumer]) -> list[set[int]]:
    """Poll each member once (rebalance events are served there), then what each owns."""
    for m in members:
        m.poll(0.05)
    return [{tp.partition for tp in m.assignment()} for m in members]


def until_shared(members: list[Consumer]) -> list[set[int]]:
    return wait_until(
        lambda: (a := confluent_assignments(members)) and shared_once(a) and a,
        timeout=60,
        what="the partitions shared by the members",
    )


def until_sole_owner(member: Consumer) -> None:
    wait_until(
        lambda: confluent_assignments([member])[0] == set(range(PARTITIONS)),
        timeout=60,
        what="one member owning every partition",
    )


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_members_share_partitions_and_take_over_from_one_that_leaves(
    group_broker, topic, strategy
):
    members = [confluent_member(group_broker.bootstrap, topic, strategy) for _ in range(3)]
    try:
        for m in members:
            m.subscribe([topic])
        until_shared(members)
        members.pop().close()  # leaves the group: the others rebalance at once
        until_shared(members)
    finally:
        for m in members:
            m.close()


def test_confluent_members_commit_and_a_new_member_resumes(group_broker, topic):
    bootstrap = group_broker.bootstrap
    members = [confluent_member(bootstrap, topic) for _ in range(2)]
    for m in members:
        m.subscribe([topic])
    until_shared(members)
    produce(bootstrap, topic, 5)
    seen: set[tuple[int, int]] = set()

    def consume() -> bool:
        for m in members:
            msg = m.poll(0.05)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen.add((msg.partition(), msg.offset()))
                m.commit(message=msg, asynchronous=False)
        return len(seen) == 5 * PARTITIONS

    wait_until(consume, timeout=60, what="every record consumed")
    for m in members:
        m.close()
    produce(bootstrap, topic, 2)
    resumed = confluent_member(bootstrap, topic, **{"auto.offset.reset": "error"})
    try:
        resumed.subscribe([topic])
        fresh: list[tuple[int, int, bytes]] = []

        def consume_new() -> bool:
            msg = resumed.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                fresh.append((msg.partition(), msg.offset(), msg.value()))
            return len(fresh) == 2 * PARTITIONS

        wait_until(consume_new, timeout=60, what="the records produced after the commits")
        assert sorted(fresh) == [
            (p, o, f"{p}-{i}".encode()) for p in range(PARTITIONS) for o, i in ((5, 0), (6, 1))
        ]
    finally:
        resumed.close()


MEMBER_SCRIPT = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "classic", "session.timeout.ms": int(sys.argv[3]),
              "heartbeat.interval.ms": 300, "enable.auto.commit": False})
c.subscribe([sys.argv[2]])
while True:
    c.poll(0.1)
"""


def test_a_killed_members_partitions_are_reassigned_after_its_session_timeout(group_broker, topic):
    survivor = confluent_member(group_broker.bootstrap, topic)
    doomed = subprocess.Popen(
        [sys.executable, "-c", MEMBER_SCRIPT, group_broker.bootstrap, topic, str(SESSION_MS)],
    )
    try:
        survivor.subscribe([topic])
        wait_until(
            lambda: 0 < len(confluent_assignments([survivor])[0]) < PARTITIONS,
            timeout=60,
            what="the partitions split between the two members",
        )
        doomed.send_signal(signal.SIGKILL)  # no LeaveGroup: the broker notices the silence
        doomed.wait()
        until_sole_owner(survivor)
    finally:
        doomed.kill()
        doomed.wait()
        survivor.close()


def test_a_static_member_restarts_without_a_rebalance_and_is_replaced_when_gone(
    group_broker, topic
):
    bootstrap = group_broker.bootstrap
    rebalances: list[str] = []

    def static(instance: str, session_ms: int) -> Consumer:
        return confluent_member(
            bootstrap, topic, **{"group.instance.id": instance, "session.timeout.ms": session_ms}
        )

    other = static("other", 30_000)
    restarting = static("restarting", 30_000)
    other.subscribe(
        [topic],
        on_assign=lambda c, ps: rebalances.append("assign"),
        on_revoke=lambda c, ps: rebalances.append("revoke"),
    )
    restarting.subscribe([topic])
    before = until_shared([other, restarting])
    rebalances.clear()
    restarting.close()  # a static member does not leave the group when it closes
    restarted = static("restarting", SESSION_MS)
    try:
        restarted.subscribe([topic])
        # Only the restarted member polls: were a rebalance needed, `other` would have to
        # rejoin for it to finish, and the assignment would not come.
        wait_until(
            lambda: confluent_assignments([restarted])[0] == before[1],
            timeout=60,
            what="the restarted static member getting its partitions back",
        )
        assert confluent_assignments([other, restarted]) == before
        assert rebalances == []
        # Closed without leaving: `other` takes over once the session timeout has passed.
        restarted.close()
        until_sole_owner(other)
    finally:
        other.close()


# -- kafka-python ------------------------------------------------------------------------------


class KafkaPythonMember(threading.Thread):
    """A kafka-python consumer polls from its own thread (its JoinGroup blocks the poll until
    the rebalance completes, which needs the other members to poll meanwhile); it commits what
    it consumed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=topic, **PYTHON_CLIENT_MEMBER
        )
        self.assignment: set[int] = set()
        self.consumed: set[tuple[int, int]] = set()
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stopping.is_set():
            batches = self.consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
            for tp, records in batches.items():
                self.consumed.update((tp.partition, r.offset) for r in records)
            if batches:
                self.consumer.commit()
            self.assignment = {tp.partition for tp in self.consumer.assignment()}
        self.consumer.close()

    def leave(self) -> None:
        self.stopping.set()
        self.join()


def test_kafka_python_members_share_commit_and_resume(group_broker, topic):
    bootstrap = group_broker.bootstrap
    members = [KafkaPythonMember(bootstrap, topic) for _ in range(3)]
    try:
        wait_until(lambda: shared_once([m.assignment for m in members]), timeout=60)
        produce(bootstrap, topic, 4)
        wait_until(lambda: len(set().union(*(m.consumed for m in members))) == 4 * PARTITIONS)
        members.pop().leave()
        wait_until(lambda: shared_once([m.assignment for m in members]), timeout=60)
    finally:
        for m in members:
            m.leave()
    produce(bootstrap, topic, 1)
    resumed = KafkaPythonMember(bootstrap, topic)
    try:
        wait_until(lambda: len(resumed.consumed) == PARTITIONS, timeout=60)
        assert resumed.consumed == {(p, 4) for p in range(PARTITIONS)}
    finally:
        resumed.leave()


# -- aiokafka ----------------------------------------------------------------------------------


def aiokafka_member(bootstrap: str, topic: str, **extra) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=topic, **{**PYTHON_CLIENT_MEMBER, **extra}
    )


async def until(predicate, timeout: float = 60) -> None:
    """The asyncio form of wait_until."""

    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def consume_and_commit(member: AIOKafkaConsumer, seen: set[tuple[int, int]]) -> None:
    while True:
        batches = await member.getmany(timeout_ms=100)
        for tp, records in batches.items():
            seen.update((tp.partition, r.offset) for r in records)
        if batches:
            await member.commit()


async def test_aiokafka_members_share_commit_and_resume(group_broker, topic):
    bootstrap = group_broker.bootstrap
    members = [aiokafka_member(bootstrap, topic) for _ in range(2)]
    seen: set[tuple[int, int]] = set()
    for m in members:
        await m.start()
    tasks = [asyncio.ensure_future(consume_and_commit(m, seen)) for m in members]
    try:
        await until(lambda: shared_once([{tp.partition for tp in m.assignment()} for m in members]))
        produce(bootstrap, topic, 3)
        await until(lambda: len(seen) == 3 * PARTITIONS)
        tasks.pop().cancel()
        await members.pop().stop()  # leaves the group
        await until(lambda: {tp.partition for tp in members[0].assignment()} == set(range(6)))
    finally:
        for t in tasks:
            t.cancel()
        for m in members:
            await m.stop()
    produce(bootstrap, topic, 1)
    resumed = aiokafka_member(bootstrap, topic, auto_offset_reset="none")
    await resumed.start()
    try:
        fresh: set[tuple[int, int]] = set()
        task = asyncio.ensure_future(consume_and_commit(resumed, fresh))
        await until(lambda: len(fresh) == PARTITIONS)
        task.cancel()
        assert fresh == {(p, 3) for p in range(PARTITIONS)}
    finally:
        await resumed.stop()
