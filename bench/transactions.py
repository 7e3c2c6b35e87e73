"""Transactions, Fjord only: what KIP-98's transactions cost a producer and a consumer.

Produce: one confluent-kafka Producer loop in this process sends 1 KB records for the same
wall time twice, once idempotent without transactions and once transactional, committing
every COMMIT_INTERVAL_S (commit_transaction, then begin_transaction). rdkafka_performance
has no transactional mode, so both sides use this loop; they differ only in the transaction
calls. Their records/s and the transactional/idempotent ratio are reported; KIP-98 measured
a few percent of overhead for 100 ms transactions, the target here is at most 5 %.

Consume: rdkafka_performance (the throughput benchmark's load generator) reads the
transactional run's topic, with a COMMIT marker per partition per transaction, once with
isolation.level=read_uncommitted and once with read_committed.

The sides alternate in order between repetitions, each repetition on a freshly started broker
after a warm-up; the figures are medians. Tansu is not run: this part compares Fjord with
itself.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import asdict, dataclass, replace

from confluent_kafka import KafkaException, Producer

from bench import build, loadgen
from bench.brokers import FJORD, BrokerError, ClientLog, create_topics, running

REFERENCE_NOTE = (
    "Fjord only: transactional against non-transactional on the same broker and client, so "
    "these are ratios within Fjord, not against Tansu"
)
RECORD = b"x" * 1024
COMMIT_INTERVAL_S = 0.1
TARGET_PRODUCE_RATIO = 0.95  # at most 5 % overhead
# loadgen's producer settings (batches bounded by bytes, linger 5 ms), with acks=all because
# idempotence requires it, and a 32 MB buffer (the Java producer's buffer.memory) instead of
# the load generator's million records: a loop that only enqueues would otherwise measure how
# fast it fills a gigabyte of memory, and every commit would first drain it.
PRODUCER_CONFIG = {
    **{
        k: v
        for k, v in loadgen.PRODUCER_CONFIG.items()
        if k not in ("acks", "queue.buffering.max.messages")
    },
    "acks": "all",
    "enable.idempotence": True,
    "queue.buffering.max.kbytes": 32 * 1024,
    # Only failed records get a delivery report: the loop pays for no per-record callback.
    "delivery.report.only.error": True,
}


@dataclass(frozen=True)
class TxnPlan:
    partitions: int
    seconds: float
    repetitions: int
    warmup_seconds: float
    timeout_s: float


FULL = TxnPlan(partitions=4, seconds=5, repetitions=7, warmup_seconds=1, timeout_s=120)
QUICK = replace(FULL, seconds=3, repetitions=1)


class TxnBenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class ProduceRun:
    records: int
    seconds: float
    commits: int
    flush_seconds: float  # before each commit: waiting for the transaction's records
    end_seconds: float  # commit_transaction itself: EndTxn, the coordinator's markers

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def produce_for(bootstrap: str, topic: str, seconds: float, transactional: bool) -> ProduceRun:
    """Produces RECORD for `seconds`; the final flush or commit is part of the time."""
    client_log = ClientLog()
    failed: list[str] = []
    config = {
        "bootstrap.servers": bootstrap,
        "logger": client_log.logger,
        "on_delivery": lambda err, _msg: failed.append(str(err)),
        **PRODUCER_CONFIG,
    }
    if transactional:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:12]}"
    producer = Producer(config)
    try:
        if transactional:
            producer.init_transactions(30)
            producer.begin_transaction()
        produce, poll = producer.produce, producer.poll
        records = commits = 0
        flush_seconds = end_seconds = 0.0
        start = time.monotonic()
        end, next_commit = start + seconds, start + COMMIT_INTERVAL_S
        while True:
            for _ in range(100):
                try:
                    produce(topic, RECORD)
                except BufferError:
                    poll(0.001)
                    continue
                records += 1
            poll(0)
            now = time.monotonic()
            if transactional and now >= next_commit:
                # commit_transaction flushes first anyway; flushing separately splits the
                # time into the client's queue draining and the commit proper.
                producer.flush(30)
                flushed = time.monotonic()
                producer.commit_transaction(30)
                producer.begin_transaction()
                done = time.monotonic()
                commits += 1
                flush_seconds += flushed - now
                end_seconds += done - flushed
                next_commit = done + COMMIT_INTERVAL_S
            if now >= end:
                break
        if transactional:
            producer.commit_transaction(30)
            commits += 1
        elif producer.flush(30):
            raise TxnBenchError("records still undelivered after the final flush")
        elapsed = time.monotonic() - start
    except KafkaException as error:
        raise TxnBenchError(f"{error}\n{client_log.tail()}") from error
    if failed:
        raise TxnBenchError(f"{len(failed)} records failed, first: {failed[0]}")
    return ProduceRun(records, elapsed, commits, flush_seconds, end_seconds)


class IsolatedLoadGenerator(loadgen.LoadGenerator):
    """rdkafka_performance's consumer with an isolation level."""

    def consume_isolated(
        self, topic: str, partitions: int, count: int, isolation: str
    ) -> loadgen.Throughput:
        args = ["-C", "-t", topic, "-o", "beginning", "-c", str(count), "-e"]
        for partition in range(partitions):
            args += ["-p", str(partition)]
        output = self._run(args, {"isolation.level": isolation})
        match = loadgen._last(loadgen.CONSUMED, output)
        if int(match["consumed"]) != count:
            raise loadgen.LoadError(f"consumed {match['consumed']} of {count} records")
        return loadgen._throughput(match, count)


def _side(binary, plan: TxnPlan, kind: str, rep: int) -> tuple[ProduceRun, dict]:
    """One side of a repetition on a broker of its own: each side writes gigabytes, and a
    broker still writing the other side's back to disk would slow whichever runs second."""
    transactional = kind == "transactional"
    consumed: dict[str, loadgen.Throughput] = {}
    with running(FJORD) as broker:
        try:
            create_topics(broker, plan.partitions, ["bench-txn-warmup", "bench-txn"])
            # Creates __transaction_state for the transactional side; not measured.
            produce_for(broker.bootstrap, "bench-txn-warmup", plan.warmup_seconds, transactional)
            run = produce_for(broker.bootstrap, "bench-txn", plan.seconds, transactional)
            print(
                f"  fjord  produce, {kind} (run {rep + 1}) ... {_describe_produce(run)}",
                flush=True,
            )
            if transactional:
                generator = IsolatedLoadGenerator(binary, broker.bootstrap, plan.timeout_s)
                levels = ["read_uncommitted", "read_committed"]
                for isolation in levels if rep % 2 == 0 else reversed(levels):
                    result = generator.consume_isolated(
                        "bench-txn", plan.partitions, run.records, isolation
                    )
                    print(
                        f"  fjord  consume, {isolation} (run {rep + 1}) ... "
                        f"{result.records_per_s:,.0f} records/s in {result.seconds:.2f} s",
                        flush=True,
                    )
                    consumed[isolation] = result
        except (TxnBenchError, loadgen.LoadError) as error:
            broker.check_alive()
            raise TxnBenchError(f"{error}\n{broker.log_tail()}") from error
    return run, consumed


def measure(plan: TxnPlan) -> dict:
    binary = build.loadgen()
    samples: dict[str, list] = {
        "idempotent": [],
        "transactional": [],
        "read_uncommitted": [],
        "read_committed": [],
    }
    for rep in range(plan.repetitions):
        order = ["idempotent", "transactional"]
        for kind in order if rep % 2 == 0 else reversed(order):
            run, consumed = _side(binary, plan, kind, rep)
            samples[kind].append(
                {
                    "records": run.records,
                    "seconds": run.seconds,
                    "records_per_s": run.records_per_s,
                    "commits": run.commits,
                    "flush_seconds": run.flush_seconds,
                    "end_seconds": run.end_seconds,
                }
            )
            for isolation, result in consumed.items():
                samples[isolation].append(
                    {
                        "records": result.records,
                        "seconds": result.seconds,
                        "records_per_s": result.records_per_s,
                    }
                )
    figures = {
        key: {
            "value": statistics.median(s["records_per_s"] for s in runs),
            "samples": runs,
        }
        for key, runs in samples.items()
    }

    def paired(numerator: str, denominator: str) -> list[float]:
        return [
            a["records_per_s"] / b["records_per_s"]
            for a, b in zip(samples[numerator], samples[denominator], strict=True)
        ]

    # The ratio of each repetition's two sides (same broker, back to back), then the median:
    # steadier than a ratio of medians when the machine's speed drifts between repetitions.
    produce_ratios = paired("transactional", "idempotent")
    consume_ratios = paired("read_committed", "read_uncommitted")
    produce_ratio = statistics.median(produce_ratios)
    runs = samples["transactional"]
    commits = max(1, sum(s["commits"] for s in runs))
    return {
        **figures,
        "produce_ratio": produce_ratio,
        "produce_ratios": produce_ratios,
        "produce_target_ratio": TARGET_PRODUCE_RATIO,
        "produce_target_met": produce_ratio >= TARGET_PRODUCE_RATIO,
        "consume_ratio": statistics.median(consume_ratios),
        "consume_ratios": consume_ratios,
        "mean_flush_ms": 1000 * sum(s["flush_seconds"] for s in runs) / commits,
        "mean_end_ms": 1000 * sum(s["end_seconds"] for s in runs) / commits,
    }


def run(plan: TxnPlan) -> tuple[dict, bool]:
    """The results section for the report, and whether every figure was measured."""
    try:
        figures = measure(plan)
    except (BrokerError, TxnBenchError, build.BuildError, loadgen.LoadError) as error:
        print(f"\nfjord failed: {error}", flush=True)
        return {"status": f"failed: {str(error).splitlines()[0]}", "plan": asdict(plan)}, False
    return {"status": "ok", "plan": asdict(plan), **figures}, True


def markdown(result: dict) -> str:
    section = result["transactions"]
    plan = section["plan"]
    lines = [
        f"# Fjord transactions: {result['label']}",
        "",
        f"{result['timestamp']} on {result['machine']['cpus']} CPUs "
        f"({result['machine']['cpu_model']}), librdkafka {result['versions']['librdkafka']}, "
        f"Fjord at {result['versions']['fjord_commit']}. {REFERENCE_NOTE}. Load average "
        f"{result['machine']['load_average_1min_at_start']:.2f} at the start: other work on "
        "the machine shows as spread between the repetitions' ratios.",
        "",
    ]
    if section["status"] != "ok":
        return "\n".join([*lines, f"fjord: {section['status']}"]) + "\n"
    lines += [
        "## Produce: transactional against idempotent",
        "",
        "One confluent-kafka Producer loop (rdkafka_performance has no transactional mode), "
        f"1 KB records, {plan['partitions']} partitions, acks=all, enable.idempotence=true, "
        f"linger.ms 5, a 32 MB buffer, for {plan['seconds']:g} s per side including the final flush or "
        f"commit; the transactional side commits every {COMMIT_INTERVAL_S * 1000:.0f} ms. "
        f"{plan['repetitions']} repetition(s) of both sides in alternating order, each side "
        "on a freshly started broker after a 1 s warm-up; records/s are medians.",
        "",
        "| producer | records/s | MB/s |",
        "|---|---:|---:|",
    ]
    for kind in ("idempotent", "transactional"):
        value = section[kind]["value"]
        lines.append(f"| {kind} | {value:,.0f} | {value * len(RECORD) / 1e6:,.1f} |")
    ratio = section["produce_ratio"]
    verdict = "met" if section["produce_target_met"] else "missed"
    lines += [
        "",
        f"transactional/idempotent: **{ratio:.3f}**, the median of the repetitions' ratios "
        f"({_ratios(section['produce_ratios'])}) (overhead {100 * (1 - ratio):.1f} %; "
        f"target >= {section['produce_target_ratio']:.2f}, i.e. at most "
        f"{100 * (1 - section['produce_target_ratio']):.0f} % overhead: {verdict}). "
        f"Per commit, on average: {section['mean_flush_ms']:.1f} ms flushing the "
        f"transaction's records, then {section['mean_end_ms']:.1f} ms in commit_transaction "
        "(EndTxn: Fjord writes the markers before it answers). The loop produces nothing "
        "meanwhile.",
        "",
        "## Consume: read_committed against read_uncommitted",
        "",
        "rdkafka_performance reads the transactional side's topic (a COMMIT marker per "
        "partition every 100 ms) from the beginning, once per isolation level.",
        "",
        "| isolation.level | records/s |",
        "|---|---:|",
    ]
    for isolation in ("read_uncommitted", "read_committed"):
        lines.append(f"| {isolation} | {section[isolation]['value']:,.0f} |")
    lines += [
        "",
        f"read_committed/read_uncommitted: **{section['consume_ratio']:.3f}**, the median of "
        f"the repetitions' ratios ({_ratios(section['consume_ratios'])}); no target.",
    ]
    return "\n".join(lines) + "\n"


def _ratios(ratios: list[float]) -> str:
    return ", ".join(f"{r:.3f}" for r in ratios)


def _describe_produce(run: ProduceRun) -> str:
    commits = (
        f", {run.commits} commits, per commit {1000 * run.flush_seconds / run.commits:.1f} ms "
        f"flush + {1000 * run.end_seconds / run.commits:.1f} ms commit_transaction"
        if run.commits
        else ""
    )
    return f"{run.records_per_s:,.0f} records/s in {run.seconds:.2f} s{commits}"
