"""Freshness after a crash, seed 002's reason to exist: standard against parallel-rebalance mode.

A producer sends RATE records/s (100 B, each carrying the wall time it was produced) to a topic
of PARTITIONS partitions. A consumer process (our client, a static member of a classic group, so
that a restarted process takes its place back at once) consumes and commits every 100 ms; it is
killed with SIGKILL, BACKLOG more records are produced in bulk (the lag a long outage leaves),
and a new process is started. Measured, from the restart:

- time to fresh data: until the first record produced after the restart is handed out;
- the p99 end-to-end latency (handed out minus produced) of the first FRESH_RECORDS records
  produced after the restart.

In standard mode the new process first works through the backlog, so both grow with it; in
parallel mode the primary starts at the log end and a child works through the backlog beside
it. Target: in parallel mode, time to fresh data does not grow with the backlog.
"""

from __future__ import annotations

import asyncio
import json
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace

from confluent_kafka import Producer

from bench.brokers import FJORD, Broker, BrokerError, create_topics, running

PARTITIONS = 3
RATE = 1000
FRESH_RECORDS = 2000
STAMP = struct.Struct(">d")
VALUE_SIZE = 100
MODES = ("standard", "parallel")


@dataclass(frozen=True)
class FreshnessPlan:
    backlogs: tuple[int, ...]
    timeout_s: float


FULL = FreshnessPlan(backlogs=(10_000, 100_000, 1_000_000), timeout_s=300)
QUICK = replace(FULL, backlogs=(10_000, 100_000))


def _value(now: float) -> bytes:
    return STAMP.pack(now).ljust(VALUE_SIZE, b"x")


class SteadyProducer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self.topic = topic
        self.stopped = threading.Event()

    def run(self) -> None:
        sent = 0
        start = time.monotonic()
        while not self.stopped.is_set():
            due = int((time.monotonic() - start) * RATE)
            for _ in range(due - sent):
                self.producer.produce(self.topic, _value(time.time()))
            sent = max(sent, due)
            self.producer.poll(0.001)
        self.producer.flush(30)


def _backlog(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, _value(time.time()))
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)


# -- the consumer process --------------------------------------------------------------------


async def _consume(bootstrap: str, topic: str, group: str, mode: str, since: float) -> None:
    """Consume and commit until killed; with `since` > 0, report the first FRESH_RECORDS
    records produced at or after it (one JSON line) and exit."""
    from broker.client import Consumer

    fresh: list[tuple[float, float]] = []  # (produced, handed out)
    async with Consumer(
        bootstrap,
        group_id=group,
        group_protocol="classic",
        group_instance_id="freshness",
        enable_parallel_rebalance=mode == "parallel",
        enable_auto_commit=True,
        auto_commit_interval_ms=100,
        auto_offset_reset="earliest",
        session_timeout_ms=30_000,
    ) as consumer:
        consumer.subscribe([topic])
        print("started", flush=True)
        while since <= 0 or len(fresh) < FRESH_RECORDS:
            batches = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batches.values():
                for r in records:
                    produced = STAMP.unpack_from(r.value)[0]
                    if since > 0 and produced >= since:
                        fresh.append((produced, now))
    first = min(out for _, out in fresh)
    latencies = sorted(out - produced for produced, out in fresh)
    print(
        json.dumps(
            {
                "time_to_fresh_s": first - since,
                "p99_latency_s": latencies[int(len(latencies) * 0.99) - 1],
                "p50_latency_s": latencies[len(latencies) // 2],
            }
        ),
        flush=True,
    )


def _start(broker: Broker, topic: str, group: str, mode: str, since: float) -> subprocess.Popen:
    # The client's log goes to a file: a pipe nobody reads would block the process once full.
    log = open(broker.log_path.with_name(f"consumer-{mode}.log"), "a")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "bench.freshness", broker.bootstrap, topic, group, mode]
        + [repr(since)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )


def _one(broker: Broker, mode: str, backlog: int, plan: FreshnessPlan) -> dict:
    topic, group = f"bench-fresh-{uuid.uuid4().hex[:8]}", f"bench-fresh-{uuid.uuid4().hex[:8]}"
    create_topics(broker, PARTITIONS, [topic])
    producer = SteadyProducer(broker.bootstrap, topic)
    producer.start()
    try:
        first = _start(broker, topic, group, mode, 0.0)
        assert first.stdout.readline().strip() == "started"
        # Running and committing while the producer goes on; then a crash.
        deadline = time.monotonic() + plan.timeout_s
        while not _committed(broker, group, topic):
            if time.monotonic() > deadline or first.poll() is not None:
                log = broker.log_path.with_name(f"consumer-{mode}.log").read_text()
                raise BrokerError(f"{mode}: the first consumer committed nothing\n{log[-2000:]}")
            time.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        first.wait()
        _backlog(broker.bootstrap, topic, backlog)
        since = time.time()
        second = _start(broker, topic, group, mode, since)
        try:
            out, _ = second.communicate(timeout=plan.timeout_s)
        except subprocess.TimeoutExpired:
            second.kill()
            raise BrokerError(f"{mode}, backlog {backlog}: no fresh data in time") from None
        if second.returncode != 0:
            log = broker.log_path.with_name(f"consumer-{mode}.log").read_text()
            raise BrokerError(f"{mode} consumer failed:\n{log[-2000:]}")
        return json.loads(out.strip().splitlines()[-1])
    finally:
        producer.stopped.set()
        producer.join()


def _committed(broker: Broker, group: str, topic: str) -> bool:
    from broker.client import AdminClient

    async def check() -> bool:
        async with AdminClient(broker.bootstrap) as admin:
            offsets = await admin.list_group_offsets(group)
        return any(tp[0] == topic and o > 0 for tp, o in offsets.items())

    try:
        return asyncio.run(check())
    except Exception:  # the group does not exist yet
        return False


def measure(plan: FreshnessPlan) -> dict:
    figures: dict = {}
    with running(FJORD) as broker:
        for backlog in plan.backlogs:
            for mode in MODES:
                print(f"  freshness: {mode}, backlog {backlog:,}", flush=True)
                figures.setdefault(str(backlog), {})[mode] = _one(broker, mode, backlog, plan)
                broker.check_alive()
    return figures


def run(plan: FreshnessPlan) -> tuple[dict, bool]:
    try:
        return {"status": "ok", "plan": asdict(plan), "by_backlog": measure(plan)}, True
    except BrokerError as error:
        print(f"\nfreshness failed: {error}", flush=True)
        return {"status": f"failed: {str(error).splitlines()[0]}", "plan": asdict(plan)}, False


def markdown_lines(section: dict) -> list[str]:
    lines = [
        "## Freshness after a crash (seed 002)",
        "",
        f"A producer sends {RATE:,} records/s of {VALUE_SIZE} B to {PARTITIONS} partitions; the "
        "consumer (a static member of a classic group, auto-commit every 100 ms) is killed "
        "with SIGKILL, the backlog is produced in bulk, and a new process starts. Time to "
        "fresh data: from the restart to the first record produced after it being handed "
        f"out; latency: produced to handed out, p99 of the first {FRESH_RECORDS:,} records "
        "produced after the restart, and their median. Process start-up (about half a "
        "second) is in both. The records produced between the restart and the take-over (that "
        "half second's traffic) lie in the gap the child works through, behind the backlog: "
        "they make the parallel mode's p99; its median is the primary's.",
        "",
    ]
    if section["status"] != "ok":
        return [*lines, f"failed: {section['status']}"]
    lines += [
        "| backlog | standard: to fresh (s) | parallel: to fresh (s) "
        "| standard: p50 / p99 (s) | parallel: p50 / p99 (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for backlog, by_mode in section["by_backlog"].items():
        s, p = by_mode["standard"], by_mode["parallel"]
        lines.append(
            f"| {int(backlog):,} | {s['time_to_fresh_s']:.2f} | {p['time_to_fresh_s']:.2f} "
            f"| {s['p50_latency_s']:.3f} / {s['p99_latency_s']:.2f} "
            f"| {p['p50_latency_s']:.3f} / {p['p99_latency_s']:.2f} |"
        )
    return lines


if __name__ == "__main__":
    bootstrap, topic, group, mode, since = sys.argv[1:6]
    asyncio.run(_consume(bootstrap, topic, group, mode, float(since)))
