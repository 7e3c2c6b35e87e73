"""Cluster mode (issue 16), Fjord only: what replication costs a producer, and how long a
partition takes no writes when its leader goes. Every broker of a cluster runs on this
machine, so the three share its cores with each other and with the load generator.

Throughput: the core benchmark's produce tests (rdkafka_performance, 1 KB and 100 B records,
4 partitions, its producer settings) on one broker with its embedded SQLite metadata (as
`make run`) and acks=1, against a cluster of three brokers sharing a throwaway PostgreSQL
database, on a topic of replication factor 3, with acks=all. Each side of each repetition
runs on freshly started brokers after the core benchmark's warm-up (with the side's acks);
the sides alternate in order; the figure is the median of the repetitions' cluster/single
ratios, target at least 0.4.

Failover: a confluent-kafka idempotent acks=all producer with short retry, reconnect and
metadata backoffs writes RATE records/s to each of the 3 partitions (replication factor 3,
one led by each broker) of a fresh cluster. Then the leader of one partition is killed
(SIGKILL) or stopped (SIGTERM: controlled shutdown hands its leadership over first). Measured
from the signal, on the partitions it led: the first successful delivery report of a record
produced after the signal (target under 1 s), the longest time without any successful
delivery report until a record produced after the broker's exit is acknowledged, and, apart
from the client, when Metadata first names a new leader. The victim is not the controller; a
third case kills a leader that is the controller as well. Brokers run with Kafka's defaults
(broker.session.timeout.ms 9000, broker.heartbeat.interval.ms 2000).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import itertools
import signal
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import psycopg
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ClusterMetadata

from bench import build, loadgen, procstat, workload
from bench.brokers import (
    FJORD,
    START_TIMEOUT_S,
    Broker,
    BrokerError,
    BrokerKind,
    ClientLog,
    create_topics,
    running,
)
from bench.groups import longest_pause

REFERENCE_NOTE = (
    "Fjord only: a three-broker cluster against one broker of Fjord's, and failover times, "
    "so these are ratios within Fjord and absolute times, not against Tansu"
)
POSTGRES = "postgresql://postgres@127.0.0.1:5432"
BROKERS = 3
TARGET_RATIO = 0.4
TARGET_FAILOVER_S = 1.0
FAILOVER_TOPIC = "bench-failover"
RECORD = b"x" * 100
RATE = 1000  # records/s per partition: a record produced after the signal within 1 ms
CHECK_S = 0.01
SIDES = {
    "single": "one broker, acks=1",
    "cluster": f"{BROKERS} brokers, replication factor {BROKERS}, acks=all",
}
FAILOVERS = {
    "kill": "SIGKILL of a leader",
    "controlled": "SIGTERM of a leader (controlled shutdown)",
    "kill_controller": "SIGKILL of a leader that is also the controller",
}
# Backoffs of milliseconds (librdkafka's are 100 ms and up): the figure is how soon the
# cluster takes writes again, not how long the client waits before asking.
FAILOVER_PRODUCER = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 1,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 100,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "topic.metadata.refresh.fast.interval.ms": 10,
}


@dataclass(frozen=True)
class ClusterPlan:
    throughput: workload.Workload
    failover_repetitions: int
    steady_s: float  # writing before the signal
    timeout_s: float


FULL = ClusterPlan(
    throughput=workload.FULL,
    failover_repetitions=5,
    steady_s=2,
    timeout_s=60,
)
QUICK = replace(FULL, throughput=workload.QUICK, failover_repetitions=2)


class ClusterBenchError(RuntimeError):
    pass


def unavailable() -> str | None:
    """Why the cluster part cannot run here, or None."""
    reason = FJORD.unavailable()
    if reason:
        return reason
    try:
        psycopg.connect(f"{POSTGRES}/postgres", connect_timeout=3).close()
    except psycopg.OperationalError:
        return "nothing answers at 127.0.0.1:5432 (tests/services.sh up starts PostgreSQL)"
    return None


@contextlib.contextmanager
def cluster(size: int, kind: BrokerKind = FJORD) -> Iterator[list[Broker]]:
    """`size` brokers of `kind`, node ids 1 to `size`, sharing a PostgreSQL database made for
    them and dropped after."""
    database = f"fjord_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    try:
        with contextlib.ExitStack() as stack:
            brokers = [
                stack.enter_context(
                    running(
                        kind,
                        {"node.id": str(node), "metadata.store.url": f"{POSTGRES}/{database}"},
                    )
                )
                for node in range(1, size + 1)
            ]
            # A broker starts fenced, and replicas are placed only on unfenced ones.
            metadata_when(
                brokers,
                lambda metadata: len(metadata.brokers) == size,
                f"Metadata listing {size} brokers",
                START_TIMEOUT_S,
            )
            yield brokers
    finally:
        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def metadata_when(
    brokers: list[Broker],
    condition: Callable[[ClusterMetadata], bool],
    what: str,
    timeout_s: float,
    topic: str | None = None,
) -> ClusterMetadata:
    """Metadata (of `topic`, or all), as the first broker to answer has it, once `condition`
    holds for it."""
    client_log = ClientLog()
    admin = AdminClient(
        {"bootstrap.servers": ",".join(b.bootstrap for b in brokers), "logger": client_log.logger}
    )
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(KafkaException):
            metadata = admin.list_topics(topic, timeout=5)
            if condition(metadata):
                return metadata
        if time.monotonic() > deadline:
            raise ClusterBenchError(
                f"no {what} within {timeout_s:.0f} s\n{client_log.tail()}\n{_logs(brokers)}"
            )
        time.sleep(CHECK_S)


def in_sync(brokers: list[Broker], topic: str, timeout_s: float) -> ClusterMetadata:
    """Once every partition of `topic` has a leader and all its replicas in sync."""

    def synced(metadata: ClusterMetadata) -> bool:
        partitions = metadata.topics[topic].partitions.values()
        return bool(partitions) and all(
            p.leader >= 0 and p.error is None and len(p.isrs) == len(p.replicas) for p in partitions
        )

    return metadata_when(
        brokers, synced, f"leader with every replica in sync for {topic}", timeout_s, topic
    )


def _logs(brokers: list[Broker]) -> str:
    return "\n".join(f"broker {n}:\n{b.log_tail()}" for n, b in enumerate(brokers, 1))


# -- throughput --------------------------------------------------------------------------------


def _tests(load: workload.Workload) -> dict[str, tuple[int, int]]:
    """The core benchmark's produce tests: key -> (record size, records)."""
    return {
        "produce_1kb": (workload.KB, load.records_1kb),
        "produce_100b": (100, load.records_100b),
    }


def throughput_side(side: str, binary: Path, load: workload.Workload, kind: BrokerKind) -> dict:
    """The produce tests on freshly started brokers of `side`, back to back."""
    with contextlib.ExitStack() as stack:
        if side == "single":
            brokers, replication, acks = [stack.enter_context(running(kind))], 1, "1"
        else:
            brokers, replication, acks = stack.enter_context(cluster(BROKERS, kind)), BROKERS, "all"
        generator = workload.warmed_up(
            brokers[0], binary, load, replication_factor=replication, acks=acks
        )
        in_sync(brokers, workload.TOPIC, load.timeout_s)
        results: dict = {}
        pids = [broker.process.pid for broker in brokers]
        for key, (size, count) in _tests(load).items():
            before = procstat.cpu_times(pids)
            try:
                produced = generator.produce(workload.TOPIC, size, count, acks)
            except loadgen.LoadError as error:
                for broker in brokers:
                    broker.check_alive()
                raise ClusterBenchError(f"{SIDES[side]}, {key}: {error}") from error
            cpu = procstat.cpu_times(pids) - before
            results[key] = {
                **asdict(produced),
                "broker_user_s": cpu.user_s,
                "broker_system_s": cpu.system_s,
            }
            print(
                f"  {kind.name}  {SIDES[side]}: {key} ... {workload.describe(produced)}", flush=True
            )
        if side == "cluster":
            # A follower that fell out of the ISR would have made the run a smaller
            # replication factor's.
            in_sync(brokers, workload.TOPIC, 0)
    return results


def measure_throughput(binary: Path, load: workload.Workload, kinds: list[BrokerKind]) -> dict:
    """Both sides for each kind of Fjord (this tree first, then a revision to compare with),
    the kinds taking turns repetition by repetition: the figures of this tree, and of each
    other kind under `against`."""
    samples: dict[str, dict[str, list[dict]]] = {
        kind.name: {side: [] for side in SIDES} for kind in kinds
    }
    for rep, kind in workload.interleaved(kinds, load):
        print(f"  throughput, {kind.name}, run {rep + 1}/{load.repetitions}", flush=True)
        order = list(SIDES)
        for side in order if rep % 2 == 0 else reversed(order):
            samples[kind.name][side].append(throughput_side(side, binary, load, kind))
    figures = {name: _figures(load, runs) for name, runs in samples.items()}
    own = kinds[0].name
    return {
        "figures": figures[own],
        "samples": samples[own],
        "against": {
            name: {"figures": figures[name], "samples": samples[name]}
            for name in samples
            if name != own
        },
    }


def _figures(load: workload.Workload, samples: dict[str, list[dict]]) -> dict:
    figures = {}
    for key in _tests(load):
        # Each repetition's two sides ran back to back: their ratio is steadier than a ratio
        # of medians when the machine's speed drifts between repetitions.
        ratios = [
            c[key]["records_per_s"] / s[key]["records_per_s"]
            for c, s in zip(samples["cluster"], samples["single"], strict=True)
        ]
        ratio = statistics.median(ratios)
        size = _tests(load)[key][0]
        # Each replica's share of the cluster's CPU against the one broker's whole: 1.0 when a
        # replica costs what the single broker does per byte, whatever the cores they share.
        per_replica = [
            _cpu_s_per_gb(c[key], size) / BROKERS / _cpu_s_per_gb(s[key], size)
            for c, s in zip(samples["cluster"], samples["single"], strict=True)
        ]
        figures[key] = {
            **{
                side: {
                    "records_per_s": statistics.median(r[key]["records_per_s"] for r in runs),
                    "mb_per_s": statistics.median(r[key]["mb_per_s"] for r in runs),
                    "broker_user_s_per_gb": statistics.median(
                        _cpu_s_per_gb(r[key], size, "broker_user_s") for r in runs
                    ),
                    "broker_system_s_per_gb": statistics.median(
                        _cpu_s_per_gb(r[key], size, "broker_system_s") for r in runs
                    ),
                }
                for side, runs in samples.items()
            },
            "ratio": ratio,
            "ratios": ratios,
            "target_met": ratio >= TARGET_RATIO,
            "cpu_per_replica": statistics.median(per_replica),
            "cpus_per_replica": per_replica,
        }
    return figures


def _cpu_s_per_gb(run: dict, size: int, *kinds: str) -> float:
    """The brokers' CPU seconds (of `kinds`, by default user and system) per GB produced."""
    kinds = kinds or ("broker_user_s", "broker_system_s")
    return sum(run[kind] for kind in kinds) / (run["records"] * size / 1e9)


# -- failover ----------------------------------------------------------------------------------


class SteadyWriter(threading.Thread):
    """An idempotent acks=all producer writing RATE records/s to each partition, recording
    for each partition when each acknowledged record was produced and acknowledged."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.log = ClientLog()
        self.producer = Producer(
            {**FAILOVER_PRODUCER, "bootstrap.servers": bootstrap, "logger": self.log.logger}
        )
        self.partitions = partitions
        # Per partition, in acknowledgement order, which idempotence makes production order.
        self.acked: list[list[tuple[float, float]]] = [[] for _ in range(partitions)]
        self.failed: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        start, produced = time.monotonic(), 0
        while not self.stopping.is_set():
            due = int((time.monotonic() - start) * RATE)
            while produced < due:
                now = time.monotonic()
                for partition in range(self.partitions):
                    self.producer.produce(
                        FAILOVER_TOPIC,
                        RECORD,
                        partition=partition,
                        on_delivery=functools.partial(self._delivered, now),
                    )
                produced += 1
            self.producer.poll(0.001)
        self.producer.flush(30)

    def _delivered(self, produced: float, error, message) -> None:
        if error is not None:
            self.failed.append(str(error))
        else:
            self.acked[message.partition()].append((produced, time.monotonic()))

    def first_ack(self, partition: int, since: float) -> float | None:
        """When the first record produced at or after `since` was acknowledged, if it was."""
        return next((acked for produced, acked in self.acked[partition] if produced >= since), None)


def failover(plan: ClusterPlan, case: str) -> dict:
    """One signal to a leader of a fresh cluster under steady writes, and the figures."""
    with cluster(BROKERS) as brokers:
        create_topics(brokers[0], BROKERS, [FAILOVER_TOPIC], replication_factor=BROKERS)
        metadata = in_sync(brokers, FAILOVER_TOPIC, plan.timeout_s)
        controller, partitions = metadata.controller_id, metadata.topics[FAILOVER_TOPIC].partitions
        victim = next(
            (
                p.leader
                for p in partitions.values()
                if (p.leader == controller) == (case == "kill_controller")
            ),
            None,
        )
        if victim is None:
            raise ClusterBenchError(f"no partition leader to pick for {case}: {partitions}")
        led = sorted(p.id for p in partitions.values() if p.leader == victim)
        every = range(BROKERS)
        writer = SteadyWriter(",".join(b.bootstrap for b in brokers), BROKERS)
        writer.start()
        try:
            time.sleep(plan.steady_s)
            _wait(writer, brokers, lambda: all(writer.acked), "steady writes", plan.timeout_s)
            process = brokers[victim - 1].process
            # Waited for beside the metadata: a controlled shutdown moves the leadership
            # before the process exits, a killed process exits before anything moves.
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                signalled = time.monotonic()
                process.send_signal(signal.SIGTERM if case == "controlled" else signal.SIGKILL)
                exit_time = pool.submit(_exit_time, process, plan.timeout_s)
                metadata_when(
                    brokers,
                    lambda m: all(
                        m.topics[FAILOVER_TOPIC].partitions[p].leader not in (victim, -1)
                        for p in led
                    ),
                    "new leader in metadata",
                    plan.timeout_s,
                    FAILOVER_TOPIC,
                )
                elected = time.monotonic()
                try:
                    exited = exit_time.result()
                except subprocess.TimeoutExpired as error:
                    raise ClusterBenchError(
                        f"broker {victim} still running {plan.timeout_s:.0f} s after the "
                        f"signal\n{_logs(brokers)}"
                    ) from error
            _wait(
                writer,
                brokers,
                lambda: all(writer.first_ack(p, exited) for p in every),
                "an acknowledged write on every partition after the signal",
                plan.timeout_s,
            )
        finally:
            writer.stopping.set()
            writer.join(60)
        if writer.failed:
            raise ClusterBenchError(
                f"{len(writer.failed)} records failed, first: {writer.failed[0]}"
            )
        first = {p: writer.first_ack(p, signalled) - signalled for p in every}
        return {
            "victim": victim,
            "controller": controller,
            "partitions_led": led,
            "new_leader_s": elected - signalled,
            "first_ack_s": max(first[p] for p in led),
            "longest_pause_s": max(
                longest_pause(
                    [acked for _, acked in writer.acked[p]],
                    signalled,
                    writer.first_ack(p, exited),
                )
                for p in led
            ),
            "other_partitions_first_ack_s": max(first[p] for p in every if p not in led),
            "exit_s": exited - signalled,
        }


def _exit_time(process: subprocess.Popen, timeout_s: float) -> float:
    process.wait(timeout_s)
    return time.monotonic()


def _wait(writer: SteadyWriter, brokers: list[Broker], condition, what: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if writer.failed:
            raise ClusterBenchError(f"{what}: a record failed: {writer.failed[0]}")
        if time.monotonic() > deadline:
            raise ClusterBenchError(
                f"no {what} within {timeout_s:.0f} s\n{writer.log.tail()}\n{_logs(brokers)}"
            )
        time.sleep(CHECK_S)


def measure_failover(plan: ClusterPlan) -> dict:
    results = {}
    for case, label in FAILOVERS.items():
        runs = []
        for rep in range(plan.failover_repetitions):
            print(
                f"  fjord  {label} (run {rep + 1}/{plan.failover_repetitions}) ...",
                end=" ",
                flush=True,
            )
            run = failover(plan, case)
            print(_describe_failover(run), flush=True)
            runs.append(run)
        first = [run["first_ack_s"] for run in runs]
        pauses = [run["longest_pause_s"] for run in runs]
        results[case] = {
            "new_leader_median_s": statistics.median(run["new_leader_s"] for run in runs),
            "first_ack_median_s": statistics.median(first),
            "first_ack_max_s": max(first),
            "longest_pause_median_s": statistics.median(pauses),
            "longest_pause_max_s": max(pauses),
            "target_met": max(first) < TARGET_FAILOVER_S,
            "runs": runs,
        }
    return results


def _describe_failover(run: dict) -> str:
    return (
        f"new leader in metadata {run['new_leader_s']:.3f} s, "
        f"first ack {run['first_ack_s']:.3f} s, longest pause {run['longest_pause_s']:.3f} s "
        f"(broker {run['victim']} leading partition(s) {run['partitions_led']}, exited after "
        f"{run['exit_s']:.3f} s; controller {run['controller']})"
    )


# -- the part ----------------------------------------------------------------------------------


def run(plan: ClusterPlan, against: BrokerKind | None = None) -> tuple[dict, bool]:
    """The results section for the report, and whether every figure was measured; with
    `against`, the throughput part measures that revision too, in the same sitting."""
    section: dict = {
        "plan": asdict(plan),
        "throughput_producer_config": loadgen.PRODUCER_CONFIG,
        "failover_producer_config": FAILOVER_PRODUCER,
    }
    try:
        kinds = [FJORD] + ([against] if against is not None else [])
        section["throughput"] = measure_throughput(build.loadgen(), plan.throughput, kinds)
        section["failover"] = measure_failover(plan)
    except (
        BrokerError,
        ClusterBenchError,
        build.BuildError,
        KafkaException,
        psycopg.Error,
    ) as error:
        print(f"\nfjord failed: {error}", flush=True)
        return {**section, "status": f"failed: {str(error).splitlines()[0]}"}, False
    return {**section, "status": "ok"}, True


def markdown(result: dict) -> str:
    section = result["cluster"]
    plan = section["plan"]
    load = plan["throughput"]
    lines = [
        f"# Fjord cluster mode: {result['label']}",
        "",
        f"{result['timestamp']} on {result['machine']['cpus']} CPUs "
        f"({result['machine']['cpu_model']}), librdkafka {result['versions']['librdkafka']}, "
        f"Fjord at {result['versions']['fjord_commit']}. {REFERENCE_NOTE}. Every broker runs on "
        "this machine: the three of a cluster share its cores with each other and the clients. "
        f"Load average {result['machine']['load_average_1min_at_start']:.2f} at the start.",
        "",
    ]
    if "throughput" in section:
        lines += _throughput_markdown(section["throughput"], load)
    if "failover" in section:
        lines += _failover_markdown(section["failover"], plan)
    if section["status"] != "ok":
        lines += [f"fjord: {section['status']}"]
    return "\n".join(lines) + "\n"


def _throughput_markdown(throughput: dict, load: dict) -> list[str]:
    lines = [
        "## Produce: acks=all on replication factor 3 against acks=1 on one broker",
        "",
        "rdkafka_performance with the core benchmark's producer settings (no compression, "
        f"batches up to 1 MB, linger 5 ms), {load['partitions']} partitions. Single: one "
        "broker with its embedded SQLite metadata (as `make run`), acks=1. Cluster: "
        f"{BROKERS} brokers sharing a PostgreSQL database, replication factor {BROKERS}, "
        f"acks=all. {load['repetitions']} repetition(s) of both sides in alternating order, "
        "each side on freshly started brokers after a warm-up; the ratio is the median of "
        "the repetitions' ratios. Rows naming a revision (`--against`) ran in the same "
        "sitting, the revisions taking turns repetition by repetition.",
        "",
        "| test | single, acks=1 (MB/s) | cluster, acks=all (MB/s) | single (records/s) "
        f"| cluster (records/s) | cluster/single | target (>= {TARGET_RATIO}) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    labels = {"produce_1kb": "produce 1 KB", "produce_100b": "produce 100 B"}
    rows = [("", throughput["figures"])] + [
        (f" ({name})", other["figures"]) for name, other in throughput.get("against", {}).items()
    ]

    def table(cells: Callable[[dict, dict, dict], str]) -> list[str]:
        """A row per test and revision: cells(figure, single, cluster)."""
        return [
            f"| {labels[key]}{suffix} | "
            + cells(figures[key], figures[key]["single"], figures[key]["cluster"])
            + " |"
            for (suffix, figures), key in itertools.product(rows, labels)
        ]

    lines += table(
        lambda figure, single, clustered: (
            f"{single['mb_per_s']:,.1f} | {clustered['mb_per_s']:,.1f} | "
            f"{single['records_per_s']:,.0f} | {clustered['records_per_s']:,.0f} | "
            f"**{figure['ratio']:.2f}** ({_listed(figure['ratios'])}) | "
            f"{'met' if figure['target_met'] else 'missed'}"
        )
    )
    lines += [
        "",
        "The brokers' CPU time (user + system, all brokers of the side) per GB produced, "
        "medians; per replica: the cluster's CPU per GB divided by its replication factor, "
        "against the single broker's (1.00 when a replica costs what one broker does).",
        "",
        "| test | single user (s/GB) | single system (s/GB) | cluster user (s/GB) "
        "| cluster system (s/GB) | per replica / single |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += table(
        lambda figure, single, clustered: (
            f"{single['broker_user_s_per_gb']:.2f} | {single['broker_system_s_per_gb']:.2f} | "
            f"{clustered['broker_user_s_per_gb']:.2f} | "
            f"{clustered['broker_system_s_per_gb']:.2f} | "
            f"**{figure['cpu_per_replica']:.2f}** ({_listed(figure['cpus_per_replica'])})"
        )
    )
    return [*lines, ""]


def _listed(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _failover_markdown(failover: dict, plan: dict) -> list[str]:
    lines = [
        "## Failover: from a leader's end to the first acknowledged acks=all write",
        "",
        f"A fresh {BROKERS}-broker cluster per run (Kafka's defaults: broker.session.timeout.ms "
        f"9000, broker.heartbeat.interval.ms 2000), a topic of {BROKERS} partitions, "
        f"replication factor {BROKERS}, one led by each broker. A confluent-kafka producer "
        "(acks=all, idempotent, linger 1 ms, retry, reconnect and metadata backoffs of 10 to "
        f"100 ms) writes {RATE:,} records/s of 100 B to each partition for "
        f"{plan['steady_s']:g} s; then one broker leading a partition gets the signal. All "
        "times are from the signal. New leader: until Metadata, asked every "
        f"{CHECK_S * 1000:.0f} ms by another client, names another leader for the partition "
        "that broker led. First ack: until the first successful delivery report of a record "
        "produced after the signal on that partition. Longest pause: the longest time without "
        "any successful delivery report on it, until a record produced after the process "
        "exited was acknowledged. Others: the first ack on the partitions it followed "
        "(acks=all waits there until it leaves the ISR). After a SIGKILL, first ack minus new "
        "leader is the client's: librdkafka looks up a partition whose leader is down again "
        "once a second, and an idempotent producer drains its requests in flight before it "
        "moves to a new leader. A broker shutting down still acknowledges writes until it "
        "hands its leadership over, so there the longest pause tells the handover's cost. "
        f"{plan['failover_repetitions']} run(s) of each case; target: first ack under "
        f"{TARGET_FAILOVER_S:g} s in every run.",
        "",
        "| case | new leader median (s) | first ack median (s) | first ack max (s) "
        "| longest pause median (s) | longest pause max (s) | others' first ack max (s) "
        "| target |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for case, entry in failover.items():
        others = max(run["other_partitions_first_ack_s"] for run in entry["runs"])
        lines.append(
            f"| {FAILOVERS[case]} | {entry['new_leader_median_s']:.3f} | "
            f"{entry['first_ack_median_s']:.3f} | {entry['first_ack_max_s']:.3f} | "
            f"{entry['longest_pause_median_s']:.3f} | {entry['longest_pause_max_s']:.3f} | "
            f"{others:.3f} | {'met' if entry['target_met'] else 'missed'} |"
        )
    controlled = failover.get("controlled")
    if controlled:
        exits = [r["exit_s"] for r in controlled["runs"]]
        lines += [
            "",
            f"Controlled shutdown: the stopped broker exited {statistics.median(exits):.2f} s "
            f"after SIGTERM (median; max {max(exits):.2f} s).",
        ]
    return [*lines, ""]
