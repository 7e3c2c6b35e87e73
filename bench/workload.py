"""The measurements, run identically against each broker."""

import contextlib
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.brokers import Broker, BrokerError, BrokerKind, create_topics, running
from bench.loadgen import PRODUCER_CONFIG, LoadError, LoadGenerator, Throughput

KB = 1024
TOPIC = "bench"
WARMUP_TOPIC = "bench-warmup"


@dataclass(frozen=True)
class Workload:
    partitions: int
    repetitions: int
    warmup_records: int
    records_1kb: int
    records_100b: int
    latency_rate: int
    latency_seconds: int
    # The first second's records pay for connecting and fetching metadata; they are dropped.
    latency_warmup_seconds: int
    timeout_s: float


# Counts sized so each Tansu run lasts a few seconds on a fast 2-core machine (runs under a
# second measured mostly start-up and noise there); a broker 5x slower still finishes in a few
# minutes, and the timeout bounds anything slower.
FULL = Workload(
    partitions=4,
    repetitions=3,
    warmup_records=100_000,
    records_1kb=2_000_000,
    records_100b=10_000_000,
    latency_rate=1000,
    latency_seconds=10,
    latency_warmup_seconds=1,
    timeout_s=120,
)
QUICK = Workload(
    partitions=4,
    repetitions=1,
    warmup_records=10_000,
    records_1kb=100_000,
    records_100b=600_000,
    latency_rate=1000,
    latency_seconds=3,
    latency_warmup_seconds=1,
    timeout_s=60,
)


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    # The bound on Fjord/Tansu: a floor for throughput, a ceiling for latency.
    target_ratio: float | None


METRICS = [
    Metric("produce_1kb_mb_s", "produce 1 KB", "MB/s", True, 1.0),
    Metric("produce_1kb_records_s", "produce 1 KB", "records/s", True, 1.0),
    Metric("produce_100b_records_s", "produce 100 B", "records/s", True, 1.0),
    Metric("produce_100b_mb_s", "produce 100 B", "MB/s", True, 1.0),
    Metric("consume_1kb_mb_s", "consume 1 KB", "MB/s", True, 1.0),
    Metric("consume_1kb_records_s", "consume 1 KB", "records/s", True, 1.0),
    Metric("latency_p50_ms", "produce latency p50 @ 1,000 records/s", "ms", False, None),
    Metric("latency_p99_ms", "produce latency p99 @ 1,000 records/s", "ms", False, 2.0),
]


class Samples:
    """One broker kind's samples of every metric, and the first error of each."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {metric.key: [] for metric in METRICS}
        self.errors: dict[str, str] = {}

    def attempt(self, broker: Broker, keys: list[str], name: str, action: Callable[[], object]):
        print(f"  {broker.name:<6} {name} ...", end=" ", flush=True)
        try:
            outcome = action()
        except LoadError as error:
            broker.check_alive()
            print(f"failed: {error}\n{broker.log_tail()}", flush=True)
            for key in keys:
                self.errors.setdefault(key, f"{name}: {error}")
            return None
        print(describe(outcome), flush=True)
        return outcome

    def figures(self) -> dict:
        """Every metric's value (the median over repetitions) and raw samples, or its error."""
        figures = {}
        for metric in METRICS:
            if metric.key in self.errors:
                figures[metric.key] = {"error": self.errors[metric.key]}
            else:
                values = self.values[metric.key]
                figures[metric.key] = {"value": statistics.median(values), "samples": values}
        return figures


def interleaved(kinds: list[BrokerKind], workload: Workload) -> Iterator[tuple[int, BrokerKind]]:
    """(repetition, kind) in the order they run: every kind once per repetition, the order
    rotating, so a machine whose speed drifts during the run (other tenants, a host handing
    memory back and forth) slows each kind alike and no kind always runs first."""
    for rep in range(workload.repetitions):
        shift = rep % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            yield rep, kind


def measure_repetition(
    kind: BrokerKind, binary: Path, workload: Workload, rep: int, samples: Samples
) -> None:
    """One repetition of the throughput tests, each on a freshly started broker: Tansu's
    memory engine slows down as it fills, so tests sharing one broker would depend on their
    order. Raises BrokerError if the broker cannot start or dies."""
    produce_1kb = ["produce_1kb_mb_s", "produce_1kb_records_s"]
    consume_1kb = ["consume_1kb_mb_s", "consume_1kb_records_s"]
    label = f"(run {rep + 1}/{workload.repetitions})"
    with _session(kind, binary, workload) as (broker, generator):
        produced = samples.attempt(
            broker,
            produce_1kb + consume_1kb,
            f"produce 1 KB x {workload.records_1kb:,} {label}",
            lambda: generator.produce(TOPIC, KB, workload.records_1kb),
        )
        if produced:
            _add(samples.values, "produce_1kb", produced)
            consumed = samples.attempt(
                broker,
                consume_1kb,
                f"consume 1 KB x {workload.records_1kb:,} {label}",
                lambda: generator.consume(TOPIC, workload.partitions, workload.records_1kb),
            )
            if consumed:
                _add(samples.values, "consume_1kb", consumed)
    with _session(kind, binary, workload) as (broker, generator):
        produced = samples.attempt(
            broker,
            ["produce_100b_mb_s", "produce_100b_records_s"],
            f"produce 100 B x {workload.records_100b:,} {label}",
            lambda: generator.produce(TOPIC, 100, workload.records_100b),
        )
        if produced:
            _add(samples.values, "produce_100b", produced)


def measure_latency(kind: BrokerKind, binary: Path, workload: Workload, samples: Samples) -> None:
    with _session(kind, binary, workload) as (broker, generator):
        latency = samples.attempt(
            broker,
            ["latency_p50_ms", "latency_p99_ms"],
            f"latency, 1 KB at {workload.latency_rate:,} records/s for {workload.latency_seconds} s",
            lambda: _latency(generator, workload),
        )
        if latency:
            samples.values["latency_p50_ms"].append(latency.p50_ms)
            samples.values["latency_p99_ms"].append(latency.p99_ms)


@contextlib.contextmanager
def _session(
    kind: BrokerKind, binary: Path, workload: Workload
) -> Iterator[tuple[Broker, LoadGenerator]]:
    """A fresh broker with the bench topic, warmed up by a produce and a consume."""
    with running(kind) as broker:
        yield broker, warmed_up(broker, binary, workload)


def warmed_up(
    broker: Broker,
    binary: Path,
    workload: Workload,
    *,
    replication_factor: int = 1,
    acks: str = PRODUCER_CONFIG["acks"],
) -> LoadGenerator:
    """A load generator for `broker`, whose bench topics are created and warmed up by a
    produce (with `acks`) and a consume."""
    generator = LoadGenerator(binary, broker.bootstrap, workload.timeout_s)
    try:
        create_topics(
            broker,
            workload.partitions,
            [WARMUP_TOPIC, TOPIC],
            replication_factor=replication_factor,
        )
        generator.produce(WARMUP_TOPIC, KB, workload.warmup_records, acks)
        generator.consume(WARMUP_TOPIC, workload.partitions, workload.warmup_records)
    except LoadError as error:
        raise BrokerError(f"warm-up failed: {error}\n{broker.log_tail()}") from error
    return generator


def _add(samples: dict[str, list[float]], prefix: str, result: Throughput) -> None:
    samples[f"{prefix}_mb_s"].append(result.mb_per_s)
    samples[f"{prefix}_records_s"].append(result.records_per_s)


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p99_ms: float


def _latency(generator: LoadGenerator, workload: Workload) -> Latency:
    warmup = workload.latency_rate * workload.latency_warmup_seconds
    count = warmup + workload.latency_rate * workload.latency_seconds
    latencies = generator.produce_latencies_us(TOPIC, KB, workload.latency_rate, count)
    measured = sorted(latencies[warmup:])
    return Latency(_percentile(measured, 50) / 1000, _percentile(measured, 99) / 1000)


def _percentile(ordered: list[int], percent: float) -> float:
    """Nearest-rank percentile, so p99 is a latency some record really had."""
    return ordered[max(1, math.ceil(len(ordered) * percent / 100)) - 1]


def describe(outcome: object) -> str:
    if isinstance(outcome, Throughput):
        return (
            f"{outcome.mb_per_s:,.1f} MB/s, {outcome.records_per_s:,.0f} records/s "
            f"in {outcome.seconds:.2f} s"
        )
    return f"p50 {outcome.p50_ms:.2f} ms, p99 {outcome.p99_ms:.2f} ms"
