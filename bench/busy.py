"""Busy clients: the shape of production traffic, many small clients on one broker.

Per broker (the reference first, then Fjord, then Fjord at another revision with --against):
produce latency at 1,000 records/s on an idle broker (rdkafka_performance, one request per
record), then for each connection count N, N connections each sending one small request a
second (bench/swarm.py: a one-record Produce, then separately a small Fetch) while the same
probe measures produce latency beside them. Reported: the probe's and the busy connections'
p50/p99/p99.9, whether every request was answered, and the broker's CPU (in cores, over the
probe's window) and memory (PSS, whole process tree) per connection. Each point has a freshly
started broker, so that no earlier point's connections count in its memory.
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import confluent_kafka

from bench import procstat
from bench.brokers import (
    REPO_DIR,
    Broker,
    BrokerError,
    BrokerKind,
    ClientLog,
    create_topics,
    running,
)
from bench.loadgen import LoadError, LoadGenerator

REFERENCE_NOTE = "side by side with the reference broker"
TOPIC = "bench-busy"
# Fetches read a topic of its own, a few records a partition, so that every broker's answer
# is as small (one that ignores partition_max_bytes included) whatever the produce points wrote.
FETCH_TOPIC = "bench-busy-fetch"
FETCH_RECORDS_PER_PARTITION = 8
MODES = ("produce", "fetch")


@dataclass(frozen=True)
class BusyPlan:
    connections: tuple[int, ...]
    rate_per_connection: float  # requests a second on each busy connection
    record_size: int
    partitions: int
    probe_rate: int  # records a second, one request each
    probe_warmup_s: int  # the probe's first seconds, not counted
    probe_s: int  # the measured window
    settle_s: float  # load running before the window opens
    timeout_s: float


FULL = BusyPlan(
    connections=(1_000, 3_000, 10_000),
    rate_per_connection=1.0,
    record_size=100,
    partitions=16,
    probe_rate=1_000,
    probe_warmup_s=2,
    probe_s=20,
    settle_s=5.0,
    timeout_s=120.0,
)
QUICK = replace(FULL, connections=(300, 3_000), probe_s=5, settle_s=2.0, timeout_s=60.0)


class BusyError(RuntimeError):
    pass


def measure(kind: BrokerKind, binary: Path, plan: BusyPlan) -> dict:
    _raise_file_limit()  # inherited by the broker: each connection is a descriptor there too
    result = {}
    with _started(kind, binary, plan) as (_, generator):
        result["idle"] = {"probe_ms": _probe(generator, plan)}
    print(f"  {kind.name:<12} idle: probe {_describe(result['idle']['probe_ms'])}", flush=True)
    for mode in MODES:
        for connections in plan.connections:
            # A broker of its own for each point: the memory the connections take is measured
            # from a start no earlier point has grown or fragmented.
            with _started(kind, binary, plan) as (broker, generator):
                try:
                    point = _busy_point(broker, generator, mode, connections, plan)
                except BusyError as error:
                    # The broker still runs (a dead one raises BrokerError): the next points
                    # are measured; this one says why it has no figures.
                    point = {"error": str(error).splitlines()[0]}
                    print(
                        f"  {kind.name:<12} {mode} x {connections:,}: failed, {error}", flush=True
                    )
                else:
                    print(
                        f"  {kind.name:<12} {mode} x {connections:,}: {_summary(point)}", flush=True
                    )
            result[f"{mode}-{connections}"] = point
    return result


@contextlib.contextmanager
def _started(
    kind: BrokerKind, binary: Path, plan: BusyPlan
) -> Iterator[tuple[Broker, LoadGenerator]]:
    """A broker with the busy topics, the fetch topic filled, and the probe warmed up."""
    with running(kind) as broker:
        create_topics(broker, plan.partitions, [TOPIC, FETCH_TOPIC])
        generator = LoadGenerator(binary, broker.bootstrap, plan.timeout_s)
        _fill(broker, plan)
        _probe(generator, plan, warm_up_only=True)
        yield broker, generator


def _fill(broker: Broker, plan: BusyPlan) -> None:
    """FETCH_RECORDS_PER_PARTITION records in every partition of FETCH_TOPIC, each partition
    named (a keyless producer's sticky partitioner would leave most of them empty, and a fetch
    of an empty partition waits out fetch.max.wait.ms)."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "logger": ClientLog().logger}
    )
    value = b"x" * plan.record_size
    for partition in range(plan.partitions):
        for _ in range(FETCH_RECORDS_PER_PARTITION):
            producer.produce(FETCH_TOPIC, value, partition=partition)
    if producer.flush(plan.timeout_s):
        raise BrokerError(f"filling {FETCH_TOPIC} failed: records left unsent")


def _busy_point(
    broker: Broker, generator: LoadGenerator, mode: str, connections: int, plan: BusyPlan
) -> dict:
    pid = broker.process.pid
    memory_before = procstat.pss_kb(pid)
    argv = [
        sys.executable,
        "-m",
        "bench.swarm",
        broker.bootstrap,
        TOPIC if mode == "produce" else FETCH_TOPIC,
        str(plan.partitions),
        mode,
        str(connections),
        str(plan.rate_per_connection),
        str(plan.record_size),
    ]
    swarm = subprocess.Popen(
        argv, cwd=REPO_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        if swarm.stdout.readline().strip() != "connected":
            raise BusyError(f"{connections:,} connections could not be opened\n{broker.log_tail()}")
        broker.check_alive()
        time.sleep(plan.settle_s)  # a steady load before the window opens, not a synchronization
        swarm.stdin.write("mark\n")
        swarm.stdin.flush()
        cpu_before, started = procstat.cpu_times([pid]).total_s, time.monotonic()
        try:
            probe = _probe(generator, plan)
        except BusyError as error:  # the busy connections' own figures still count
            probe = {"error": str(error)}
        cpu_s, window_s = procstat.cpu_times([pid]).total_s - cpu_before, time.monotonic() - started
        memory = procstat.pss_kb(pid)
        swarm.stdin.write("stop\n")
        swarm.stdin.flush()
        busy = json.loads(swarm.stdout.readline())
    finally:
        swarm.stdin.close()
        swarm.wait(plan.timeout_s)
    broker.check_alive()
    return {
        "connections": connections,
        "probe_ms": probe,
        "busy": busy,
        "broker_cpu_cores": cpu_s / window_s,
        "broker_pss_mb": memory / 1024,
        "pss_kb_per_connection": (memory - memory_before) / connections,
    }


def _probe(generator: LoadGenerator, plan: BusyPlan, *, warm_up_only: bool = False) -> dict:
    warmup = plan.probe_rate * plan.probe_warmup_s
    count = warmup + (0 if warm_up_only else plan.probe_rate * plan.probe_s)
    try:
        latencies = generator.produce_latencies_us(TOPIC, plan.record_size, plan.probe_rate, count)
    except LoadError as error:
        raise BusyError(f"the latency probe failed: {error}") from error
    measured = sorted(latencies[warmup:])
    if not measured:
        return {}
    return {
        name: _percentile(measured, percent) / 1000
        for name, percent in (("p50", 50), ("p99", 99), ("p99.9", 99.9))
    }


def _percentile(ordered: list[int], percent: float) -> float:
    return ordered[max(1, math.ceil(len(ordered) * percent / 100)) - 1]


def _raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _describe(probe: dict) -> str:
    if "error" in probe:
        return probe["error"]
    return ", ".join(f"{name} {value:.2f} ms" for name, value in probe.items())


def _summary(point: dict) -> str:
    busy = point["busy"]
    latency = busy["latency_ms"] or {}
    return (
        f"probe {_describe(point['probe_ms'])}; busy "
        + ", ".join(f"{name} {value:.1f} ms" for name, value in latency.items())
        + f"; {busy['answered']:,} of {busy['sent']:,} answered, errors {busy['errors'] or 0}; "
        f"broker {point['broker_cpu_cores']:.2f} cores, {point['broker_pss_mb']:,.0f} MB, "
        f"{point['pss_kb_per_connection']:,.1f} KB per connection"
    )


def run(kinds: list[BrokerKind], binary: Path, plan: BusyPlan) -> tuple[dict, bool]:
    section: dict = {"plan": asdict(plan), "brokers": {}}
    ok = True
    for kind in kinds:
        reason = kind.unavailable()
        if reason:
            section["brokers"][kind.name] = {"status": f"skipped: {reason}"}
            continue
        try:
            section["brokers"][kind.name] = {"status": "ok", **measure(kind, binary, plan)}
        except (BrokerError, BusyError) as error:
            print(f"  {kind.name} failed: {error}", file=sys.stderr, flush=True)
            section["brokers"][kind.name] = {"status": f"failed: {str(error).splitlines()[0]}"}
            ok = False
    return section, ok


def _rows(plan: dict) -> list[tuple[str, str, tuple[str, ...]]]:
    """(label, point key, path in the point) for each row of the table."""
    rows = [
        (f"idle produce {q} @ {plan['probe_rate']:,}/s (ms)", "idle", ("probe_ms", q))
        for q in ("p50", "p99", "p99.9")
    ]
    for mode in MODES:
        for n in plan["connections"]:
            where = f"{mode} x {n:,}"
            rows += [
                (f"{where}: probe produce {q} (ms)", f"{mode}-{n}", ("probe_ms", q))
                for q in ("p50", "p99", "p99.9")
            ]
            rows += [
                (f"{where}: busy {mode} {q} (ms)", f"{mode}-{n}", ("busy", "latency_ms", q))
                for q in ("p50", "p99", "p99.9")
            ]
            rows += [
                (f"{where}: unanswered requests", f"{mode}-{n}", ("unanswered",)),
                (f"{where}: broker CPU (cores)", f"{mode}-{n}", ("broker_cpu_cores",)),
                (f"{where}: memory per connection (KB)", f"{mode}-{n}", ("pss_kb_per_connection",)),
            ]
    return rows


def _value(broker: dict, key: str, path: tuple[str, ...]) -> float | None:
    point = broker.get(key)
    if point is None or "error" in point:
        return None
    if path == ("unanswered",):
        busy = point["busy"]
        return busy["sent"] - busy["answered"]
    value = point
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def markdown(result: dict) -> str:
    section = result["busy"]
    brokers = section["brokers"]
    names = list(brokers)
    reference = names[0] if names else None
    plan = section["plan"]
    machine = result["machine"]
    lines = [
        f"# Busy clients: {result['label']}",
        "",
        f"{result['timestamp']} on {machine['cpus']} CPUs ({machine['cpu_model']}), Fjord at "
        f"{result['versions']['fjord_commit']}. Each connection sends one request every "
        f"{1 / plan['rate_per_connection']:g} s (a {plan['record_size']}-byte record with acks=1, "
        f"or a Fetch of up to 1 KB from offset 0 with fetch.min.bytes 1) over {plan['partitions']} partitions; the "
        f"probe is rdkafka_performance producing {plan['probe_rate']:,} records/s, one request "
        f"each, over {plan['probe_s']} s after {plan['probe_warmup_s']} s of warm-up. Ratios are "
        f"to {reference}; for latency and cost lower is better.",
        "",
        "| metric | "
        + " | ".join(names)
        + " | "
        + " | ".join(f"{n}/{reference}" for n in names[1:])
        + " |",
        "|---|" + "---:|" * (2 * len(names) - 1),
    ]
    for label, key, path in _rows(plan):
        values = [_value(brokers[name], key, path) for name in names]
        cells = ["n/a" if v is None else f"{v:,.2f}" for v in values]
        ratios = [
            "n/a" if v is None or not values[0] else f"{v / values[0]:.2f}" for v in values[1:]
        ]
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    lines.append("")
    for name in names:
        if brokers[name]["status"] != "ok":
            lines.append(f"{name}: {brokers[name]['status']}")
        for key, point in brokers[name].items():
            if not isinstance(point, dict):
                continue
            problem = point.get("error") or point.get("probe_ms", {}).get("error")
            if problem:
                lines.append(f"{name}, {key.replace('-', ' x ')}: {problem}")
    return "\n".join(lines) + "\n"
