"""Consumer-group measurements, Fjord only: how long a group takes to reach a stable, complete
assignment, and how much the members already in a group consume while another one joins,
for the classic protocol and the KIP-848 consumer protocol.

Every member is a confluent-kafka Consumer of its own, polled from a thread of its own in this
process (librdkafka does the network work on its own threads; the short polls only serve
rebalance callbacks and hand over records). "Stable and complete" is judged from the members'
own `assignment()`: every member owns at least one partition, every partition is owned by
exactly one member, and the sizes differ by at most one (what the range and uniform assignors
produce), so an intermediate step of an incremental rebalance does not count as the end.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from bench.brokers import FJORD, Broker, BrokerError, ClientLog, create_topics, running

REFERENCE_NOTE = (
    "Fjord only: Tansu, the throughput reference, lacks these group features, "
    "so these figures are absolute, not ratios."
)
SIZE_TOPIC = "bench-groups"
JOIN_TOPIC = "bench-groups-join"
POLL_S = 0.05
CHECK_S = 0.01
RECORD = b"x" * 100

# Members configure only the protocol; everything else is the client's and the broker's
# (Kafka's) default: classic heartbeat.interval.ms 3000, consumer protocol heartbeats every
# group.consumer.heartbeat.interval.ms (5000) as the broker tells the member.
PROTOCOLS = {
    "classic": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "consumer": {"group.protocol": "consumer"},
}
JOIN_PROTOCOLS = {
    "classic": PROTOCOLS["classic"],
    "classic cooperative-sticky": {
        "group.protocol": "classic",
        "partition.assignment.strategy": "cooperative-sticky",
    },
    "consumer": PROTOCOLS["consumer"],
}
# A new classic group waits group.initial.rebalance.delay.ms for more members before its
# first rebalance; the main run sets it to 0, the default run shows Kafka's 3000 ms.
NO_INITIAL_DELAY = {"group.initial.rebalance.delay.ms": "0"}
KAFKA_DEFAULT_DELAY_MS = 3000


@dataclass(frozen=True)
class GroupPlan:
    sizes: tuple[int, ...]
    partitions: int
    repetitions: int
    join_members: int
    join_partitions: int
    join_rate: int
    timeout_s: float


FULL = GroupPlan(
    sizes=(1, 10, 50),
    partitions=100,
    repetitions=3,
    join_members=5,
    join_partitions=30,
    join_rate=1000,
    timeout_s=120,
)
QUICK = replace(FULL, repetitions=1, timeout_s=90)


class GroupBenchError(RuntimeError):
    pass


class Member(threading.Thread):
    """One consumer, subscribed and polled from its own thread until stopped."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.log = ClientLog()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "logger": self.log.logger,
                **protocol,
            }
        )
        self.topic = topic
        self.assignment: frozenset[int] = frozenset()
        self.consumed = 0
        # When a poll returned records: the pauses in consumption are the gaps between them.
        self.receipts: list[float] = []
        self.error: str | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self.consumer.subscribe([self.topic])
            while not self.stopping.is_set():
                messages = self.consumer.consume(500, POLL_S)
                records = sum(1 for m in messages if m.error() is None)
                if records:
                    self.consumed += records
                    self.receipts.append(time.monotonic())
                self.assignment = frozenset(tp.partition for tp in self.consumer.assignment())
        except KafkaException as error:
            self.error = str(error)
        finally:
            self.consumer.close()


class Group:
    """Members of one fresh group; closes them all (in parallel) on exit."""

    def __init__(self, broker: Broker, topic: str, partitions: int, protocol: dict[str, str]):
        self.broker, self.topic, self.partitions, self.protocol = (
            broker,
            topic,
            partitions,
            protocol,
        )
        self.id = f"bench-{uuid.uuid4().hex[:12]}"
        self.members: list[Member] = []

    def add(self, count: int) -> list[Member]:
        """Members created and then started together: their subscribes follow at once."""
        new = [
            Member(self.broker.bootstrap, self.id, self.topic, self.protocol) for _ in range(count)
        ]
        self.members += new
        for member in new:
            member.start()
        return new

    def stable(self) -> bool:
        sizes = [len(m.assignment) for m in self.members]
        owned = set().union(*(m.assignment for m in self.members))
        return (
            min(sizes) >= 1
            and max(sizes) - min(sizes) <= 1
            and sum(sizes) == len(owned) == self.partitions
        )

    def wait(self, condition, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            failed = [m.error for m in self.members if m.error]
            if failed:
                raise GroupBenchError(f"{what}: a member failed: {failed[0]}")
            self.broker.check_alive()
            if time.monotonic() > deadline:
                sizes = sorted(len(m.assignment) for m in self.members)
                raise GroupBenchError(
                    f"no {what} within {timeout_s:.0f} s; assignment sizes {sizes}\n"
                    f"{self.members[0].log.tail()}\n{self.broker.log_tail()}"
                )
            time.sleep(CHECK_S)

    def described_state(self) -> str:
        """The group's state and member count as DescribeGroups / ConsumerGroupDescribe
        report them (a cross-check of the members' own view, not timed)."""
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        description = admin.describe_consumer_groups([self.id])[self.id].result(timeout=30)
        return f"{description.state.name} with {len(description.members)} members"

    def close(self) -> None:
        for member in self.members:
            member.stopping.set()
        for member in self.members:
            member.join(30)


@contextlib.contextmanager
def _group(
    broker: Broker, topic: str, partitions: int, protocol: dict[str, str]
) -> Iterator[Group]:
    group = Group(broker, topic, partitions, protocol)
    try:
        yield group
    finally:
        group.close()


def time_to_stable(
    broker: Broker, protocol: dict[str, str], members: int, plan: GroupPlan
) -> tuple[float, str]:
    """Seconds from the first subscribe of `members` new members to a stable, complete
    assignment, and the described group state then."""
    with _group(broker, SIZE_TOPIC, plan.partitions, protocol) as group:
        start = time.monotonic()
        group.add(members)
        group.wait(group.stable, f"stable assignment of {members} members", plan.timeout_s)
        elapsed = time.monotonic() - start
        return elapsed, group.described_state()


class RateProducer(threading.Thread):
    """Produces RECORD round robin over the partitions at `rate` records/s until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.produced = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopping.wait(0.01):
            due = int((time.monotonic() - start) * self.rate)
            while self.produced < due:
                self.producer.produce(self.topic, RECORD, partition=self.produced % self.partitions)
                self.produced += 1
            self.producer.poll(0)
        self.producer.flush(10)


def join_while_consuming(broker: Broker, protocol: dict[str, str], plan: GroupPlan) -> dict:
    """`join_members` members consume a topic produced at a fixed rate; one more joins. What
    the members already there consume from its subscribe until the group is stable again, and
    their longest pause in it."""
    # A topic of its own: a new group reads from the earliest offset, and an earlier run's
    # records would be counted.
    topic = f"{JOIN_TOPIC}-{uuid.uuid4().hex[:12]}"
    create_topics(broker, plan.join_partitions, [topic])
    producer = RateProducer(broker.bootstrap, topic, plan.join_partitions, plan.join_rate)
    try:
        with _group(broker, topic, plan.join_partitions, protocol) as group:
            untouched = group.add(plan.join_members)
            group.wait(group.stable, f"stable assignment of {plan.join_members}", plan.timeout_s)
            # Produced from here on, so no backlog from the group's formation is counted.
            producer.start()
            group.wait(
                lambda: (
                    all(m.consumed for m in untouched)
                    and sum(m.consumed for m in untouched)
                    >= producer.produced - plan.join_rate / 10
                ),
                f"{plan.join_members} members consuming and caught up",
                plan.timeout_s,
            )
            consumed_before, produced_before = (
                sum(m.consumed for m in untouched),
                producer.produced,
            )
            start = time.monotonic()
            group.add(1)
            group.wait(group.stable, "stable assignment after the join", plan.timeout_s)
            end = time.monotonic()
            return {
                "window_s": end - start,
                "produced": producer.produced - produced_before,
                "consumed_by_untouched": sum(m.consumed for m in untouched) - consumed_before,
                "longest_pause_s": max(longest_pause(m.receipts, start, end) for m in untouched),
                "described": group.described_state(),
            }
    finally:
        producer.stopping.set()
        if producer.is_alive():
            producer.join(30)


def longest_pause(receipts: list[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without a receipt (of records by a member, of
    acknowledgements for a partition)."""
    times = [start, *(t for t in receipts if start < t < end), end]
    return max(later - earlier for earlier, later in itertools.pairwise(times))


def measure(plan: GroupPlan) -> dict:
    """Every figure (medians over the repetitions, with the samples), or its error."""
    results: dict = {"sizes": {}, "join": {}}
    with running(FJORD, NO_INITIAL_DELAY) as broker:
        create_topics(broker, plan.partitions, [SIZE_TOPIC])
        # Creates __consumer_offsets and warms the client and broker paths; not measured.
        for protocol in PROTOCOLS.values():
            _attempt(
                f"warm-up, {protocol['group.protocol']}", time_to_stable, broker, protocol, 1, plan
            )
        for members in plan.sizes:
            for name, protocol in PROTOCOLS.items():
                results["sizes"].setdefault(str(members), {})[name] = _repeat(
                    f"{members} member(s), {name}",
                    plan,
                    lambda protocol=protocol, members=members: time_to_stable(
                        broker, protocol, members, plan
                    ),
                )
        for name, protocol in JOIN_PROTOCOLS.items():
            results["join"][name] = _repeat_join(name, broker, protocol, plan)
    with running(FJORD) as broker:
        create_topics(broker, plan.partitions, [SIZE_TOPIC])
        _attempt("warm-up, classic", time_to_stable, broker, PROTOCOLS["classic"], 1, plan)
        for members in plan.sizes:
            results["sizes"][str(members)]["classic_default_delay"] = _repeat(
                f"{members} member(s), classic, initial delay {KAFKA_DEFAULT_DELAY_MS} ms",
                plan,
                lambda members=members: time_to_stable(broker, PROTOCOLS["classic"], members, plan),
            )
    return results


def _attempt(label: str, action, *args):
    print(f"  fjord  {label} ...", end=" ", flush=True)
    try:
        outcome = action(*args)
    except (GroupBenchError, KafkaException) as error:
        print(f"failed: {error}", flush=True)
        return error
    print(_describe(outcome), flush=True)
    return outcome


def _repeat(label: str, plan: GroupPlan, action) -> dict:
    samples, states = [], []
    for rep in range(plan.repetitions):
        outcome = _attempt(f"{label} (run {rep + 1}/{plan.repetitions})", action)
        if isinstance(outcome, Exception):
            return {"error": str(outcome).splitlines()[0]}
        samples.append(outcome[0])
        states.append(outcome[1])
    return {"value": statistics.median(samples), "samples": samples, "described": states}


def _repeat_join(name: str, broker: Broker, protocol: dict[str, str], plan: GroupPlan) -> dict:
    runs = []
    for rep in range(plan.repetitions):
        outcome = _attempt(
            f"{plan.join_members} members + 1 joining, {name} (run {rep + 1}/{plan.repetitions})",
            join_while_consuming,
            broker,
            protocol,
            plan,
        )
        if isinstance(outcome, Exception):
            return {"error": str(outcome).splitlines()[0]}
        runs.append(outcome)
    # The run with the median window stands for the protocol; every run is kept.
    median = sorted(runs, key=lambda run: run["window_s"])[len(runs) // 2]
    return {**median, "runs": runs}


def _describe(outcome) -> str:
    if isinstance(outcome, dict):
        return (
            f"window {outcome['window_s']:.2f} s, produced {outcome['produced']:,}, "
            f"consumed by untouched {outcome['consumed_by_untouched']:,}, longest pause "
            f"{outcome['longest_pause_s']:.2f} s ({outcome['described']})"
        )
    seconds, described = outcome
    return f"stable in {seconds:.2f} s ({described})"


def run(plan: GroupPlan) -> tuple[dict, bool]:
    """The results section for the report, and whether every figure was measured."""
    try:
        figures = measure(plan)
    except BrokerError as error:
        print(f"\nfjord failed: {error}", flush=True)
        return {"status": f"failed: {str(error).splitlines()[0]}", "plan": asdict(plan)}, False
    entries = [*figures["join"].values()] + [
        entry for by_protocol in figures["sizes"].values() for entry in by_protocol.values()
    ]
    failed = [entry["error"] for entry in entries if "error" in entry]
    status = f"failed: {failed[0]}" if failed else "ok"
    return {"status": status, "plan": asdict(plan), **figures}, not failed


def markdown(result: dict) -> str:
    groups = result["groups"]
    plan = groups["plan"]
    lines = [
        f"# Fjord consumer groups: {result['label']}",
        "",
        f"{result['timestamp']} on {result['machine']['cpus']} CPUs "
        f"({result['machine']['cpu_model']}), members are confluent-kafka Consumers on "
        f"librdkafka {result['versions']['librdkafka']}, each its own instance on a thread of "
        f"this process; Fjord at {result['versions']['fjord_commit']}. {REFERENCE_NOTE}",
        "",
    ]
    if "sizes" not in groups:
        return "\n".join([*lines, f"fjord: {groups['status']}"]) + "\n"
    lines += [
        f"## Time to a stable, complete assignment ({plan['partitions']} partitions)",
        "",
        "From the first member's subscribe to every member owning partitions, each partition "
        "owned by exactly one member and sizes within one of each other, seen through the "
        f"members' assignment(); median of {plan['repetitions']} run(s), a new group each. "
        "classic: eager range assignor, broker group.initial.rebalance.delay.ms=0; consumer: "
        "KIP-848, the broker's default (uniform) assignor. Client and broker heartbeat "
        "defaults (classic 3 s, consumer 5 s).",
        "",
        "| members | classic (s) | consumer (s) | classic, initial delay "
        f"{KAFKA_DEFAULT_DELAY_MS} ms (Kafka's default) (s) |",
        "|---:|---:|---:|---:|",
    ]
    for members, entry in groups["sizes"].items():
        cells = [_seconds(entry.get(key)) for key in ("classic", "consumer")]
        cells.append(_seconds(entry.get("classic_default_delay")))
        lines.append(f"| {members} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## One member joins {plan['join_members']} that consume",
        "",
        f"A producer sends {plan['join_rate']:,} records/s of 100 B round robin over "
        f"{plan['join_partitions']} partitions; once {plan['join_members']} members are stable "
        "and have caught up, a sixth subscribes. The window runs from its subscribe to the "
        "group being stable again; counted are the records the untouched members received in "
        "it, and the longest time any of them received nothing (the run with the median "
        "window). An eager classic member goes on consuming until a heartbeat tells it of the "
        "rebalance, then stops until the new assignment: the pause.",
        "",
        "| protocol | join window (s) | produced in window | consumed by untouched members "
        "| longest pause of an untouched member (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, entry in groups["join"].items():
        if "error" in entry:
            lines.append(f"| {name} | failed | | | |")
            continue
        lines.append(
            f"| {name} | {entry['window_s']:.2f} | {entry['produced']:,} | "
            f"{entry['consumed_by_untouched']:,} | {entry['longest_pause_s']:.2f} |"
        )
    if groups["status"] != "ok":
        lines += ["", f"fjord: {groups['status']}"]
    return "\n".join(lines) + "\n"


def _seconds(entry: dict | None) -> str:
    if entry is None:
        return "n/a"
    if "error" in entry:
        return "failed"
    return f"{entry['value']:.2f}"
