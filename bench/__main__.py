"""python -m bench [--only fjord|tansu] [--quick] [--against REF]
[--groups | --no-groups | --transactions | --fetch-sessions | --client | --pipelines | --cluster
 | --busy] [--no-transactions] [--no-fetch-sessions] [--no-client] [--no-pipelines] [--no-busy]

Starts each broker in turn on this machine, drives both with the same rdkafka_performance
workload, prints the Fjord/Tansu table and writes it to bench/results/; then busy clients
(thousands of connections each sending a small request a second, with a latency probe beside
them, on both brokers) and writes latest-busy.md; then measures
consumer groups (Fjord only: classic and consumer protocol) and writes latest-groups.md;
then transactions (Fjord only: transactional against idempotent produce, read_committed
against read_uncommitted consume) and writes latest-transactions.md; then incremental fetch
sessions (Fjord only: full against incremental fetches of 10 to 10,000 idle partitions) and
writes latest-fetch_sessions.md; then the client library against aiokafka, kafka-python and
confluent-kafka on one Fjord broker, and writes latest-client.md; then an exactly-once Spark
pipeline against a confluent-kafka transactional copy loop, and writes latest-pipelines.md.
Only with --cluster, and alone (it needs PostgreSQL at 127.0.0.1:5432 and takes minutes):
cluster mode, acks=all produce on three brokers with replication factor 3 against acks=1 on
one, and failover times after a leader's SIGKILL or controlled shutdown; latest-cluster.md.
With --against REF, the throughput, busy-clients and cluster throughput parts also run Fjord as
of git revision REF, in the same sitting, so that a change is measured against the revision
before it.
Exit code 1 when a broker that ran failed, 2 when --only names one that cannot run here.
"""

import argparse
import dataclasses
import datetime
import functools
import os
import platform
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import confluent_kafka

from bench import (
    brokers,
    build,
    busy,
    client,
    cluster,
    fetch_sessions,
    groups,
    loadgen,
    pipelines,
    report,
    transactions,
    workload,
)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1])
    parser.add_argument("--only", choices=sorted(brokers.KINDS), help="run one broker (self-test)")
    parser.add_argument("--quick", action="store_true", help="small counts, one run each")
    part = parser.add_mutually_exclusive_group()
    part.add_argument("--groups", action="store_true", help="only the consumer-group part")
    part.add_argument("--no-groups", action="store_true", help="skip the consumer-group part")
    part.add_argument("--transactions", action="store_true", help="only the transactions part")
    part.add_argument(
        "--fetch-sessions", action="store_true", help="only the incremental fetch sessions part"
    )
    part.add_argument("--client", action="store_true", help="only the client library part")
    part.add_argument("--pipelines", action="store_true", help="only the Spark pipelines part")
    part.add_argument("--busy", action="store_true", help="only the busy-clients part")
    part.add_argument(
        "--cluster", action="store_true", help="only the cluster part (not run by default)"
    )
    parser.add_argument("--no-client", action="store_true", help="skip the client library part")
    parser.add_argument("--no-pipelines", action="store_true", help="skip the pipelines part")
    parser.add_argument("--no-busy", action="store_true", help="skip the busy-clients part")
    parser.add_argument(
        "--against",
        metavar="REF",
        help="also run Fjord as of this git revision (throughput, busy clients, cluster)",
    )
    parser.add_argument("--no-transactions", action="store_true", help="skip transactions")
    parser.add_argument(
        "--no-fetch-sessions", action="store_true", help="skip incremental fetch sessions"
    )
    args = parser.parse_args()
    # A terminated run unwinds like Ctrl-C, so the broker it started is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.transactions:
        return _transactions(args)
    if args.fetch_sessions:
        return _fetch_sessions(args)
    if args.client:
        return _client(args)
    if args.pipelines:
        return _pipelines(args)
    if args.cluster:
        return _cluster(args)
    try:
        args.kinds = _kinds(args)
    except brokers.BrokerError as error:
        print(error, file=sys.stderr)
        return 2
    if args.busy:
        return _busy(args)
    code = 0 if args.groups else _throughput(args)
    if code == 2:
        return code
    if not args.groups and not args.no_busy:
        code = max(code, _busy(args))
    if args.only == brokers.TANSU.name:
        print(f"\n== consumer groups: not run, {groups.REFERENCE_NOTE}")
        print(f"== transactions: not run, {transactions.REFERENCE_NOTE}")
        print(f"== fetch sessions: not run, {fetch_sessions.REFERENCE_NOTE}")
        print(f"== client: not run, {client.REFERENCE_NOTE}")
        print(f"== pipelines: not run, {pipelines.REFERENCE_NOTE}")
        return code
    if not args.no_groups:
        code = max(code, _groups(args))
    if args.groups:
        return code
    if not args.no_transactions:
        code = max(code, _transactions(args))
    if not args.no_fetch_sessions:
        code = max(code, _fetch_sessions(args))
    if not args.no_client:
        code = max(code, _client(args))
    if not args.no_pipelines:
        code = max(code, _pipelines(args))
    return code


def _throughput(args: argparse.Namespace) -> int:
    plan = workload.QUICK if args.quick else workload.FULL

    try:
        binary = build.loadgen()
    except build.BuildError as error:
        print(f"cannot build the load generator: {error}", file=sys.stderr)
        return 1
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.1f} before the run; other work skews the figures")
    results = {
        kind.name: {"storage": kind.storage, "status": "not run"}
        for kind in (brokers.TANSU, brokers.FJORD)
    }
    runnable = []
    for kind in args.kinds:
        results[kind.name] = {"storage": kind.storage, "status": "not run"}
        reason = kind.unavailable()
        if reason:
            print(f"== {kind.name}: skipped, {reason}", flush=True)
            results[kind.name]["status"] = f"skipped: {reason}"
            if args.only:
                return 2
            continue
        runnable.append(kind)
    for name, outcome in _run(runnable, binary, plan).items():
        results[name].update(outcome)

    result = _header(args)
    result["versions"]["tansu"] = brokers.tansu_version()
    result.update(
        workload=dataclasses.asdict(plan),
        producer_config=loadgen.PRODUCER_CONFIG,
        latency_producer_config=loadgen.LATENCY_CONFIG,
        brokers=results,
    )
    result["comparison"] = report.compare(results)
    print()
    print(report.markdown(result))
    stem = ("-quick" if args.quick else "") + (f"-{args.only}" if args.only else "")
    for path in report.write(result, stem):
        print(f"wrote {path.relative_to(brokers.REPO_DIR)}")
    failed = any(entry["status"].startswith("failed") for entry in results.values())
    return 1 if failed else 0


def _kinds(args: argparse.Namespace) -> list[brokers.BrokerKind]:
    """The brokers the side-by-side parts run. Tansu first: if the reference cannot run,
    there is nothing to compare against."""
    kinds = [brokers.TANSU, brokers.FJORD]
    if args.only:
        kinds = [kind for kind in kinds if kind.name == args.only]
    if args.against:
        kinds.append(brokers.fjord_at(args.against))
    return kinds


def _busy(args: argparse.Namespace) -> int:
    try:
        binary = build.loadgen()
    except build.BuildError as error:
        print(f"cannot build the load generator: {error}", file=sys.stderr)
        return 1
    print(f"\n== busy clients ({busy.REFERENCE_NOTE})", flush=True)
    header = _header(args)
    section, ok = busy.run(args.kinds, binary, busy.QUICK if args.quick else busy.FULL)
    result = {**header, "busy": section}
    print()
    print(busy.markdown(result))
    stem = "-busy" + ("-quick" if args.quick else "")
    for path in report.write(result, stem, busy.markdown):
        print(f"wrote {path.relative_to(brokers.REPO_DIR)}")
    return 0 if ok else 1


def _groups(args: argparse.Namespace) -> int:
    return _fjord_part(args, "consumer groups", "groups", groups, only=args.groups)


def _transactions(args: argparse.Namespace) -> int:
    return _fjord_part(args, "transactions", "transactions", transactions, only=args.transactions)


def _fetch_sessions(args: argparse.Namespace) -> int:
    return _fjord_part(
        args, "fetch sessions", "fetch_sessions", fetch_sessions, only=args.fetch_sessions
    )


def _client(args: argparse.Namespace) -> int:
    return _fjord_part(args, "client library", "client", client, only=args.client)


def _pipelines(args: argparse.Namespace) -> int:
    return _fjord_part(args, "pipelines", "pipelines", pipelines, only=args.pipelines)


def _cluster(args: argparse.Namespace) -> int:
    against = brokers.fjord_at(args.against) if args.against else None
    return _fjord_part(
        args,
        "cluster",
        "cluster",
        cluster,
        only=True,
        unavailable=cluster.unavailable,
        run=functools.partial(cluster.run, against=against),
    )


def _fjord_part(
    args: argparse.Namespace,
    title: str,
    key: str,
    part,
    *,
    only: bool,
    unavailable: Callable[[], str | None] = brokers.FJORD.unavailable,
    run: Callable[..., tuple[dict, bool]] | None = None,
) -> int:
    """A benchmark part measured on Fjord alone (`part` has REFERENCE_NOTE, QUICK, FULL, run
    and markdown, `run` standing in for part.run); its results go to
    bench/results/latest-<key>.md."""
    reason = unavailable()
    if reason:
        print(f"== {title}: skipped, {reason}", flush=True)
        return 2 if args.only or only else 0
    print(f"\n== {title}, fjord ({part.REFERENCE_NOTE})", flush=True)
    header = _header(args)  # the load average before this part's own load
    section, ok = (run or part.run)(part.QUICK if args.quick else part.FULL)
    result = {**header, key: section}
    print()
    print(part.markdown(result))
    stem = f"-{key}" + ("-quick" if args.quick else "")
    for path in report.write(result, stem, part.markdown):
        print(f"wrote {path.relative_to(brokers.REPO_DIR)}")
    return 0 if ok else 1


def _header(args: argparse.Namespace) -> dict:
    return {
        "label": ("quick" if args.quick else "full") + (f", {args.only} only" if args.only else ""),
        "timestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": _machine(),
        "versions": {
            "librdkafka": confluent_kafka.libversion()[0],
            "fjord_commit": _commit(),
        },
    }


def _run(kinds: list[brokers.BrokerKind], binary: Path, plan: workload.Workload) -> dict:
    """Each kind's status and metrics, the repetitions of the kinds interleaved."""
    samples = {kind.name: workload.Samples() for kind in kinds}
    failures: dict[str, str] = {}

    def attempt(kind: brokers.BrokerKind, measure: Callable[..., None], *args) -> None:
        if kind.name in failures:
            return
        try:
            measure(kind, binary, plan, *args, samples[kind.name])
        except brokers.BrokerError as error:
            print(f"\n{kind.name} failed: {error}", file=sys.stderr, flush=True)
            failures[kind.name] = f"failed: {str(error).splitlines()[0]}"

    for rep, kind in workload.interleaved(kinds, plan):
        print(f"== {kind.name} ({kind.storage}), run {rep + 1}/{plan.repetitions}", flush=True)
        attempt(kind, workload.measure_repetition, rep)
        # A p99 of one run is a few dozen records, which one stall of this machine decides:
        # each run measures it, and the figure is the median.
        attempt(kind, workload.measure_latency)
    outcomes = {}
    for kind in kinds:
        if kind.name in failures:
            outcomes[kind.name] = {"status": failures[kind.name]}
            continue
        metrics = samples[kind.name].figures()
        errors = [entry["error"] for entry in metrics.values() if "error" in entry]
        outcomes[kind.name] = {
            "status": f"failed: {errors[0]}" if errors else "ok",
            "metrics": metrics,
        }
    return outcomes


def _machine() -> dict:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_1min_at_start": os.getloadavg()[0],
    }


def _commit() -> str:
    result = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=brokers.REPO_DIR,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() or "no commit"


if __name__ == "__main__":
    sys.exit(main())
