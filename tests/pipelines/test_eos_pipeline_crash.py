"""Exactly once under kills: a Spark pipeline (eos_pipeline.py, its own process group: driver,
JVM and Python workers) copies RECORDS records through a transformation with the fjord sink's
exactlyOnce mode while it dies, again and again:

- once at each step of the driver's commit (the sink's test hook SIGKILLs the process group
  there): before the batch's decision is written, after it, after the first transaction is
  committed, after all are;
- once with a write task that fails after sending its rows (Spark retries it);
- KILLS times by SIGKILL at random points, each once the committed output has grown by a random
  slice.

Each restart resumes from the checkpoint. Then a read_committed consumer sees every expected
record exactly once, and no transaction of the pipeline is left open. `make soak` kills more."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from test_spark_sink import open_transactions
from test_spark_source import create_topic

from pipelines.spark.faults import CRASH_STEPS

RECORDS = 100_000
PARTITIONS = 3
KILLS = 8 if os.environ.get("FJORD_SOAK") else 1
RUN_TIMEOUT_S = 180  # a run that neither progresses nor dies for this long fails the test
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

pytestmark = pytest.mark.timeout(1800 if os.environ.get("FJORD_SOAK") else 900)


class CommittedOutput(threading.Thread):
    """What a read_committed consumer has read of the output so far, read continuously."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = ConfluentConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-check",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.values: Counter[bytes] = Counter()
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for message in self.consumer.consume(1000, 0.2):
                if not message.error():
                    with self.lock:
                        self.values[message.value()] += 1
        self.consumer.close()

    def count(self) -> int:
        with self.lock:
            return sum(self.values.values())


class Pipeline:
    def __init__(self, bootstrap: str, source: str, sink: str, tmp: Path) -> None:
        self.args = [bootstrap, source, sink, f"eos-{uuid.uuid4().hex[:8]}", str(tmp / "ckpt")]
        self.prefix = self.args[3]
        self.faults = tmp / "faults"
        self.faults.mkdir()
        self.logs = tmp
        self.runs = 0
        self.proc: subprocess.Popen | None = None

    def start(self, **env: str) -> None:
        self.runs += 1
        log = open(self.logs / f"run-{self.runs}.log", "wb")  # noqa: SIM115 (the child's)
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "eos_pipeline.py"), *self.args],
            cwd=REPO,
            env={**os.environ, "FJORD_SINK_FAULT_DIR": str(self.faults), **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the hook kills all of it
        )
        log.close()

    def kill(self) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def wait_dead(self, what: str) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"run {self.runs} did not die {what}: {self.tail()}") from None
        assert code == -signal.SIGKILL, f"run {self.runs} exited {code}: {self.tail()}"
        # The rest of its process group (the JVM, Python workers) went with it.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def tail(self) -> str:
        return (self.logs / f"run-{self.runs}.log").read_bytes()[-3000:].decode(errors="replace")


def read_all_committed(bootstrap: str, topic: str) -> Counter[bytes]:
    """Every committed record of the topic, by a fresh read_committed consumer read to the end
    once nothing writes any more."""
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-final",
            "isolation.level": "read_committed",
        }
    )
    ends = {
        p: consumer.get_watermark_offsets(ConfluentTopicPartition(topic, p), 30)[1]
        for p in range(PARTITIONS)
    }
    consumer.assign([ConfluentTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: Counter[bytes] = Counter()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.2):
            if not message.error():
                values[message.value()] += 1
        positions = consumer.position(
            [ConfluentTopicPartition(topic, p) for p in range(PARTITIONS)]
        )
        if all(tp.offset >= ends[tp.partition] for tp in positions):
            break
    consumer.close()
    return values


def test_pipeline_killed_at_every_commit_step_and_at_random_copies_exactly_once(
    eos_broker, tmp_path
):
    bootstrap = eos_broker.bootstrap
    source, sink = f"eos-src-{uuid.uuid4().hex[:8]}", f"eos-dst-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(source, b"%d" % i, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    output = CommittedOutput(bootstrap, sink)
    output.start()
    pipeline = Pipeline(bootstrap, source, sink, tmp_path)
    chance = random.Random(2026)

    def wait_until(done, what: str) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not done():
            assert pipeline.proc.poll() is None, f"run {pipeline.runs} died: {pipeline.tail()}"
            assert time.monotonic() < deadline, f"{what}: {output.count()}; {pipeline.tail()}"
            time.sleep(0.1)

    def wait_output(at_least: int, what: str) -> None:
        wait_until(lambda: output.count() >= at_least, what)

    try:
        for step in CRASH_STEPS:
            pipeline.start(FJORD_SINK_CRASH_AT=step)
            pipeline.wait_dead(f"at {step}")
        pipeline.start(FJORD_SINK_FAIL_TASK="1")
        wait_until(lambda: (pipeline.faults / "task").exists(), "a failed task")
        before = output.count()
        wait_output(before + 1, "a batch past the failed task")
        pipeline.kill()
        for _ in range(KILLS):
            pipeline.start()
            target = min(RECORDS, output.count() + chance.randrange(1, 15_000))
            wait_output(target, "progress before a kill")
            pipeline.kill()
        pipeline.start()
        wait_output(RECORDS, "the whole copy")
        pipeline.kill()
        assert all((pipeline.faults / f"crash-{step}").exists() for step in CRASH_STEPS)
        assert read_all_committed(bootstrap, sink) == Counter(b"%d!" % i for i in range(RECORDS))
        assert open_transactions(bootstrap, pipeline.prefix) == []
    finally:
        if pipeline.proc is not None and pipeline.proc.poll() is None:
            pipeline.kill()
        output.stopped.set()
        output.join(10)
