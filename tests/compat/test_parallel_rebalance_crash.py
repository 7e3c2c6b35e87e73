"""Seed 002's parallel-rebalance mode under SIGKILL: a consumer process (a member in
parallel mode, parallel_consumer_worker.py) is killed again and again while a producer runs and
while gaps are open in its commit logs, and restarted each time. At the end:

- every offset produced was processed at least once;
- every offset processed twice lay in the uncommitted window of a kill it was processed before
  (what the committed logs did not cover: the child's gaps past its progress, the primary's
  part past its position): duplicates, only where a crash allows them;
- the committed offset (the low-water mark other clients resume at) never went backwards.

`make soak` runs it with FJORD_SOAK=1: more kills."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from broker_process import FAST_GROUP_OVERRIDES
from compat_support import topic_name, wait_until
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.client import Consumer
from broker.client.consumer.gaps import TOKEN_PREFIX, PartitionGaps
from broker.client.models import OffsetAndMetadata
from broker.client.models import TopicPartition as TP

PARTITIONS = 2
KILLS = 30 if os.environ.get("FJORD_SOAK") else 3
RATE = 400  # records/s, over both partitions (the worker processes up to 600/s)
PROGRESS = 200  # records processed by each worker before it may be killed
STALL_S = 30  # how long the worker may process no new offset while some are left
WORKER = Path(__file__).resolve().parent / "parallel_consumer_worker.py"

pytestmark = pytest.mark.timeout(600 if os.environ.get("FJORD_SOAK") else 240)


class SteadyProducer(threading.Thread):
    """RATE records/s round robin over the partitions until stopped; the ends it reached."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.stopped = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.stopped.wait(0.05):  # the pace, not a synchronization
            for _ in range(RATE // 20):
                self.producer.produce(self.topic, b"x", partition=self.sent % PARTITIONS)
                self.sent += 1
            self.producer.poll(0)
        assert self.producer.flush(30) == 0


class Worker:
    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def processed(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    if lines and not path.read_text().endswith("\n"):
        lines.pop()  # a line being written
    return [tuple(map(int, line.split())) for line in lines]


def spans(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as [first, last] runs, for a readable failure."""
    runs: list[list[int]] = []
    for o in offsets:
        if runs and runs[-1][1] == o - 1:
            runs[-1][1] = o
        else:
            runs.append([o, o])
    return [tuple(r) for r in runs]


def committed(bootstrap: str, group: str, topic: str) -> dict[int, OffsetAndMetadata]:
    """The group's committed offsets and metadata, read by a consumer outside the group."""

    async def fetch() -> dict[int, OffsetAndMetadata]:
        async with Consumer(bootstrap, group_id=group) as reader:
            found = {p: await reader.committed(TP(topic, p)) for p in range(PARTITIONS)}
        return {p: logs for p, logs in found.items() if logs is not None}

    return asyncio.run(fetch())


def uncommitted(logs: OffsetAndMetadata | None):
    """What a crash with these committed logs leaves to process again: a predicate."""
    if logs is None:
        return lambda offset: True
    gaps = PartitionGaps.restore(logs)
    return lambda offset: (
        offset >= gaps.primary or any(r.progress <= offset < r.end for r in gaps.ranges)
    )


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_parallel_consumer_killed_while_gaps_are_open(make_broker_process, tmp_path, protocol):
    broker = make_broker_process(*FAST_GROUP_OVERRIDES).start()
    topic, group = topic_name("parallel-crash"), topic_name("g")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    log = tmp_path / "processed.log"
    worker = Worker([broker.bootstrap, topic, group, protocol, str(log)])
    producer = SteadyProducer(broker.bootstrap, topic)
    high_marks: dict[int, int] = {}

    def committed_never_goes_back() -> dict[int, OffsetAndMetadata]:
        now = committed(broker.bootstrap, group, topic)
        for p, logs in now.items():
            assert logs.offset >= high_marks.get(p, 0), (p, logs.offset, high_marks)
            high_marks[p] = logs.offset
        return now

    kills = []  # (records processed before the kill, uncommitted predicate per partition)
    producer.start()
    worker.start()
    try:
        for k in range(KILLS):
            start = len(processed(log))

            def ready(start=start, k=k):
                now = committed_never_goes_back()
                # The first kill once every partition has a commit to restart from (and so a
                # gap at the restart), each later one while gaps are open.
                if k == 0:
                    gaps = len(now) == PARTITIONS
                else:
                    gaps = any(m.metadata.startswith(TOKEN_PREFIX) for m in now.values())
                return gaps and len(processed(log)) >= start + PROGRESS

            wait_until(ready, 60, f"progress and open gaps before kill #{k + 1}")
            worker.kill()
            logs = committed_never_goes_back()
            windows = {p: uncommitted(logs.get(p)) for p in range(PARTITIONS)}
            kills.append((len(processed(log)), windows))
            worker.start()
        producer.stopped.set()
        producer.join()
        ends = {p: len(range(p, producer.sent, PARTITIONS)) for p in range(PARTITIONS)}

        def unprocessed() -> dict[int, list[int]]:
            seen = set(processed(log))
            return {p: [o for o in range(ends[p]) if (p, o) not in seen] for p in range(PARTITIONS)}

        def everything_processed():
            committed_never_goes_back()
            return not any(unprocessed().values())

        def left() -> int:
            return sum(map(len, unprocessed().values()))

        # The backlog the kills left (each one's downtime of traffic) takes as long as it takes
        # at the worker's pace: what fails is a worker that stops getting new records.
        while not everything_processed():
            before = left()
            try:
                wait_until(
                    lambda before=before: everything_processed() or left() < before,
                    STALL_S,
                    f"an unprocessed offset processed (none for {STALL_S}s)",
                )
            except AssertionError as e:
                missing = {p: spans(offsets) for p, offsets in unprocessed().items() if offsets}
                logs = committed(broker.bootstrap, group, topic)
                raise AssertionError(f"{e}: {missing}, ends {ends}, committed {logs}") from None
    finally:
        worker.kill()
        producer.stopped.set()

    records = processed(log)
    counts = Counter(records)
    at: dict[tuple[int, int], list[int]] = {}
    for i, record in enumerate(records):
        at.setdefault(record, []).append(i)
    for (p, o), places in at.items():
        # Between two processings of an offset a kill came whose window held it.
        for first, again in zip(places, places[1:], strict=False):
            assert any(first < before <= again and w[p](o) for before, w in kills), (
                f"offset {o} of partition {p} processed again outside a crash window"
            )
    duplicates = sum(n - 1 for n in counts.values())
    print(f"{len(kills)} kills, {len(records)} processed, {duplicates} duplicates")
    assert broker.stop() == 0, "".join(broker.output[-50:])
