"""kill -9 durability: a producer writes numbered records while the broker is SIGKILLed and
restarted on the same log directory several times. Every record acknowledged with acks=all
must be found afterwards at the offset the broker gave it, in acknowledgement order, in a log
whose batches all parse and whose offsets are dense.

Without idempotence a retried batch whose first attempt was written but not acknowledged may
appear twice; that is allowed. A lost acknowledged record is not.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
from compat_support import topic_name
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

KILLS = 4
ACKS_PER_ROUND = 1500
MAX_UNACKED = 2000  # flow control: the producer thread waits once this many are unresolved


@dataclass
class ProducerRun:
    """A producer writing "n-<i>" values on a background thread; acknowledgements in order."""

    bootstrap: str
    topic: str
    partitions: int
    acked: list[tuple[int, int, bytes]] = field(default_factory=list)  # partition, offset, value
    failed: list[tuple[bytes, str]] = field(default_factory=list)
    produced: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                # One request in flight: a retry can only duplicate, never reorder, so the
                # acknowledgement order is the log order.
                "max.in.flight.requests.per.connection": 1,
                "linger.ms": 2,
                "batch.num.messages": 200,
                "message.timeout.ms": 180_000,
                "retries": 1_000_000,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 500,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 500,
                "socket.connection.setup.timeout.ms": 5000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        with self.changed:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.failed.append((msg.value(), str(err)))
            self.changed.notify_all()

    def resolved(self) -> int:
        return len(self.acked) + len(self.failed)

    def _run(self) -> None:
        try:
            i = 0
            while not self.stop.is_set():
                if self.produced - self.resolved() >= MAX_UNACKED:
                    self.producer.poll(0.05)
                    continue
                try:
                    self.producer.produce(
                        self.topic,
                        value=b"n-%d" % i,
                        partition=i % self.partitions,
                        on_delivery=self._delivered,
                    )
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                i += 1
                self.produced = i
                self.producer.poll(0)
        except BaseException as e:  # surfaced by the main thread
            self.error = e
            with self.changed:
                self.changed.notify_all()

    def wait_for_acks(self, count: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(self.acked) < count:
                assert self.error is None, self.error
                remaining = deadline - time.monotonic()
                assert remaining > 0, (
                    f"only {len(self.acked)} of {count} records acknowledged; "
                    f"failures: {self.failed[:5]}"
                )
                self.changed.wait(min(remaining, 1))

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        assert self.error is None, self.error
        remaining = self.producer.flush(120)
        assert remaining == 0, f"{remaining} records never resolved"
        self.producer.close()


def read_whole_topic(
    bootstrap: str, topic: str, partitions: int
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, up to the high watermark, with a fresh consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fjord-crash-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "check.crcs": True,
            "enable.partition.eof": True,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in range(partitions)
        }
        for p, (low, _) in ends.items():
            assert low == 0, f"partition {p} log start offset {low}"
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        done = {p for p, (_, high) in ends.items() if high == 0}
        deadline = time.monotonic() + 120
        while len(done) < partitions:
            assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            p = msg.partition()
            got[p].append((msg.offset(), msg.value()))
            if msg.offset() == ends[p][1] - 1:
                done.add(p)
        return got
    finally:
        consumer.close()


def check_log(run: ProducerRun, got: dict[int, list[tuple[int, bytes]]]) -> None:
    for p, rows in got.items():
        offsets = [o for o, _ in rows]
        # Dense, strictly increasing, starting at 0: no gaps, no duplicated offsets.
        assert offsets == list(range(len(rows))), f"partition {p}: offsets not dense"
    at = {(p, o): v for p, rows in got.items() for o, v in rows}
    lost = [(p, o, v) for p, o, v in run.acked if at.get((p, o)) != v]
    assert not lost, (
        f"{len(lost)} acknowledged records missing or different, first: "
        f"{[(p, o, v, at.get((p, o))) for p, o, v in lost[:5]]}"
    )
    for p in got:
        acked_offsets = [o for q, o, _ in run.acked if q == p]
        assert acked_offsets == sorted(set(acked_offsets)), (
            f"partition {p}: acknowledgement order differs from offset order"
        )
        acked_numbers = [int(v[2:]) for q, _, v in run.acked if q == p]
        assert acked_numbers == sorted(set(acked_numbers)), (
            f"partition {p}: records acknowledged out of production order"
        )
    # Every value in the log was produced by the run (duplicates of retries allowed).
    stray = [
        v
        for rows in got.values()
        for _, v in rows
        if not v.startswith(b"n-") or int(v[2:]) >= run.produced
    ]
    assert not stray, stray[:5]


def crash_loop(
    make_broker_process, partitions: int, *overrides: str, min_segments: int = 1
) -> None:
    broker = make_broker_process(*overrides).start()
    topic = topic_name("crash")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
    futures[topic].result(timeout=30)

    run = ProducerRun(broker.bootstrap, topic, partitions)
    run.thread.start()
    try:
        for _ in range(KILLS):
            run.wait_for_acks(len(run.acked) + ACKS_PER_ROUND)
            broker.kill()
            broker.start()
        run.wait_for_acks(len(run.acked) + ACKS_PER_ROUND)
    finally:
        run.finish()

    assert run.failed == [], f"{len(run.failed)} records failed: {run.failed[:5]}"
    got = read_whole_topic(broker.bootstrap, topic, partitions)
    check_log(run, got)
    assert sum(map(len, got.values())) >= run.produced

    # Recovery is repeatable: a kill with nothing in flight changes nothing, and a clean
    # shutdown after it exits 0 and keeps the log as it was.
    broker.kill()
    broker.start()
    assert read_whole_topic(broker.bootstrap, topic, partitions) == got
    assert broker.stop() == 0, "".join(broker.output[-50:])
    broker.start()
    assert read_whole_topic(broker.bootstrap, topic, partitions) == got
    assert broker.stop() == 0, "".join(broker.output[-50:])
    for p in range(partitions):
        segments = list((broker.log_dir / f"{topic}-{p}").glob("*.log"))
        assert len(segments) >= min_segments, f"partition {p}: {len(segments)} segment(s)"


@pytest.mark.timeout(240)
def test_acknowledged_records_survive_kill_9(make_broker_process):
    crash_loop(make_broker_process, 1)


@pytest.mark.timeout(240)
def test_acknowledged_records_survive_kill_9_three_partitions_small_segments(make_broker_process):
    """Segments roll every 8 KiB, so kills land around rolls and recovery rebuilds indexes
    of several segments per partition."""
    crash_loop(
        make_broker_process,
        3,
        "log.segment.bytes=8192",
        "log.index.interval.bytes=512",
        min_segments=3,
    )


@pytest.mark.timeout(240)
def test_acknowledged_records_survive_kill_9_flush_every_message(make_broker_process):
    crash_loop(make_broker_process, 1, "log.flush.interval.messages=1")


@pytest.mark.timeout(120)
def test_admin_changes_survive_kill_9(make_broker_process):
    """Topics, partition counts, config overrides, deletions and DeleteRecords are durable
    once the admin request has been answered."""
    broker = make_broker_process().start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    kept, grown, gone = topic_name("kept"), topic_name("grown"), topic_name("gone")
    futures = admin.create_topics(
        [
            NewTopic(kept, 1, 1, config={"retention.ms": "3600000"}),
            NewTopic(grown, 1, 1),
            NewTopic(gone, 2, 1),
        ],
        operation_timeout=30,
    )
    for f in futures.values():
        f.result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": False}
    )
    for i in range(10):
        producer.produce(kept, b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    producer.close()
    admin.create_partitions([NewPartitions(grown, 4)])[grown].result(timeout=30)
    resource = ConfigResource(
        ResourceType.TOPIC,
        kept,
        incremental_configs=[
            ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    admin.delete_topics([gone], operation_timeout=30)[gone].result(timeout=30)
    [(_, f)] = admin.delete_records([TopicPartition(kept, 0, 4)]).items()
    assert f.result(timeout=30).low_watermark == 4
    del admin

    broker.kill()
    broker.start()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=30).topics
    assert len(topics[kept].partitions) == 1
    assert len(topics[grown].partitions) == 4
    assert gone not in topics
    described = ConfigResource(ResourceType.TOPIC, kept)
    configs = admin.describe_configs([described])[described].result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value == "1048576"
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        assert consumer.get_watermark_offsets(TopicPartition(kept, 0), timeout=30) == (4, 10)
    finally:
        consumer.close()
    assert broker.stop() == 0, "".join(broker.output[-50:])
