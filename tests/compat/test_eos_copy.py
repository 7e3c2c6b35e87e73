"""Exactly-once consume-transform-produce under crashes, like Kafka's transactions system test.

A copier (confluent-kafka or Fjord's own client, in a subprocess: a read_committed consumer in a group without
auto-commit, and a transactional producer that sends the consumer's positions with
send_offsets_to_transaction and commits every TXN_RECORDS records) copies RECORDS records from
a 3-partition input topic to a 3-partition output topic, each record to the partition it came
from. Meanwhile the broker is SIGKILLed and restarted and the copier is SIGKILLed and
restarted, alternately, each time a read_committed consumer of the output has seen another
slice of the copy and the output holds records of an open transaction. At the end that
consumer, and a fresh one, see every input record exactly once, in per-partition order, and
a read_uncommitted one also sees the aborted records of the killed transactions.

The copier handles errors as confluent-kafka documents for transactional producers: a
retriable error retries the call, an abortable one aborts the transaction and rewinds the
consumer to the last committed offsets, a fatal one exits the process; the test restarts a
copier that exited.

This file is also the copier: `python test_eos_copy.py copy <bootstrap> <input> <output>
<group> <transactional.id>`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, deque
from pathlib import Path

RECORDS = 100_000
PARTITIONS = 3
TXN_RECORDS = 2000
# The copier stands for an application whose transform has a cost: it copies at most this many
# records per second, so that the copy lasts long enough (~20 s) for all the kills to land in
# it. Without it the copy of 100k small records takes about 3 s.
COPY_RATE = 5000
# Alternating kills, each once the output has grown by another 1/8 of the copy.
EVENTS = ["broker", "copier"] * 3
MAX_UNPLANNED_EXITS = 10
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
COPIER_TXN_TIMEOUT_MS = 30_000
FATAL_EXIT = 3
# For every librdkafka client that lives through a broker kill: reconnect soon after the
# restart (by default the backoff grows to 10 s), and no re-bootstrap. With the default
# (rebootstrap), losing the only broker makes librdkafka 2.16 decommission its broker handle
# while it is still cached as a coordinator: send_offsets_to_transaction then hangs past its
# timeout (confluentinc/librdkafka issue #5511, fix proposed in PR #5512), and an AdminClient
# request can abort the process on an assertion (rd_kafka_enq_once_del_source_return).
THROUGH_KILLS = {"metadata.recovery.strategy": "none", "reconnect.backoff.max.ms": 500}


# -- the copier (runs in its own process) ----------------------------------------------------


def copier(bootstrap: str, source: str, sink: str, group: str, txn_id: str) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer

    def log(*what) -> None:
        print(f"copier[{os.getpid()}]", *what, flush=True)

    class Fatal(Exception):
        pass

    class Abortable(Exception):
        pass

    def txn_call(what: str, op):
        """A transactional call, retried while its error is retriable."""
        while True:
            try:
                return op()
            except KafkaException as e:
                err = e.args[0]
                if err.fatal():
                    raise Fatal(f"{what}: {err}") from e
                if err.txn_requires_abort():
                    raise Abortable(f"{what}: {err}") from e
                if err.retriable():
                    log(f"{what}: retriable {err}, retrying")
                    continue
                raise Fatal(f"{what}: {err}, neither retriable nor abortable") from e

    def consumer_call(what: str, op):
        """A consumer call (offset fetch, seek): retried a while on errors, e.g. while the
        broker restarts."""
        for attempt in range(100):
            try:
                return op()
            except KafkaException as e:
                err = e.args[0]
                if err.fatal() or attempt == 99:
                    raise Fatal(f"{what}: {err}") from e
                log(f"{what}: {err}, retrying")
                time.sleep(0.1)  # retry backoff of this client application

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            **THROUGH_KILLS,
            "error_cb": lambda err: log("consumer error:", err),
        }
    )
    # No per-record delivery callback: a failed record makes the transaction abortable, which
    # commit_transaction reports (and confluent-kafka 2.16 runs delivery callbacks with a fatal
    # error's exception still set, turning them into SystemErrors).
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": COPIER_TXN_TIMEOUT_MS,
            "linger.ms": 10,
            **THROUGH_KILLS,
            "error_cb": lambda err: log("producer error:", err),
        }
    )
    state = {"open": False, "pending": 0, "generation": 0, "commits": 0}

    def abort() -> None:
        if state["open"]:
            txn_call("abort_transaction", lambda: producer.abort_transaction(30))
        state["open"], state["pending"] = False, 0

    def rewind() -> None:
        """Every assigned partition back to its last committed offset."""
        assignment = consumer.assignment()
        if not assignment:
            return
        committed = consumer_call("committed", lambda: consumer.committed(assignment, 30))
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            try:
                consumer.seek(tp)
            except KafkaException as e:
                # _STATE: not fetched from yet, so it starts from the committed offset anyway.
                if e.args[0].code() != KafkaError._STATE:
                    raise Fatal(f"seek {tp}: {e.args[0]}") from e
        log("rewound to", {tp.partition: tp.offset for tp in committed})

    def commit() -> None:
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        metadata = consumer.consumer_group_metadata()
        txn_call(
            "send_offsets_to_transaction",
            lambda: producer.send_offsets_to_transaction(positions, metadata, 30),
        )
        txn_call("commit_transaction", lambda: producer.commit_transaction(30))
        state["open"], state["pending"] = False, 0
        state["commits"] += 1
        log("committed", {tp.partition: tp.offset for tp in positions})

    def on_revoke(_consumer, partitions) -> None:
        # What this transaction copied from the revoked partitions cannot be committed with
        # their offsets any more: abort it; whoever gets them starts from the committed ones.
        state["generation"] += 1
        log("revoked", [tp.partition for tp in partitions])
        abort()

    def produce(msg) -> None:
        while True:
            try:
                producer.produce(sink, msg.value(), msg.key(), partition=msg.partition())
                return
            except BufferError:
                producer.poll(0.1)

    try:
        txn_call("init_transactions", lambda: producer.init_transactions(30))
        consumer.subscribe(
            [source],
            on_assign=lambda _c, ps: log("assigned", [tp.partition for tp in ps]),
            on_revoke=on_revoke,
            on_lost=on_revoke,
        )
        log("started")
        paced_until = time.monotonic()
        parent = os.getppid()
        while os.getppid() == parent:  # ends with the test process, whatever way it ends
            generation = state["generation"]
            messages = consumer.consume(500, 0.2)
            # Time lost (a broker restart) is not made up for by a burst afterwards.
            paced_until = max(paced_until, time.monotonic()) + len(messages) / COPY_RATE
            time.sleep(max(0.0, paced_until - time.monotonic()))
            if state["generation"] != generation:
                # A rebalance ran inside consume(): the batch may hold records of the old
                # assignment, and the new one's positions may already be past it.
                rewind()
                continue
            try:
                for msg in messages:
                    if msg.error():
                        if msg.error().fatal():
                            raise Fatal(f"consumer: {msg.error()}")
                        log("consumer error:", msg.error())
                        continue
                    if not state["open"]:
                        txn_call("begin_transaction", producer.begin_transaction)
                        state["open"] = True
                    txn_call("produce", lambda msg=msg: produce(msg))
                    state["pending"] += 1
                txn_call("poll", lambda: producer.poll(0))
                # Commit every TXN_RECORDS records, and whatever is pending once caught up.
                if state["pending"] >= TXN_RECORDS or (state["pending"] and not messages):
                    commit()
            except Abortable as e:
                log(f"aborting: {e}")
                abort()
                rewind()
    except Fatal as e:
        log(f"fatal: {e}")
        sys.stdout.flush()
        os._exit(FATAL_EXIT)
    os._exit(0)  # the test is gone: no clean-up that could wait for a broker


if __name__ == "__main__" and sys.argv[1:2] == ["copy"]:
    sys.exit(copier(*sys.argv[2:7]))

# -- the test --------------------------------------------------------------------------------

if __name__ != "__main__":
    import pytest
    from compat_support import finalize_transaction_version, topic_name, wait_until
    from confluent_kafka import (
        OFFSET_BEGINNING,
        Consumer,
        ConsumerGroupTopicPartitions,
        KafkaError,
        Producer,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient, NewTopic
    from test_transactions_compat import READ_COMMITTED, READ_UNCOMMITTED, end_offsets, wait_stable

    pytestmark = pytest.mark.timeout(300)


# The copier's command line by client: this file's confluent-kafka copier, or Fjord's own
# client (eos_fjord_copier.py), the same loop over broker.client's Consumer and Producer.
HERE = Path(__file__).resolve().parent
COPIERS = {
    "confluent-kafka": [str(HERE / "test_eos_copy.py"), "copy"],
    "fjord": [str(HERE / "eos_fjord_copier.py")],
}


class CopierProcess:
    """The copier as a subprocess; its output kept for failure messages."""

    def __init__(
        self, kind: str, bootstrap: str, source: str, sink: str, group: str, txn_id: str
    ) -> None:
        self.args = [sys.executable, *COPIERS[kind], bootstrap, source, sink, group, txn_id]
        self.proc: subprocess.Popen | None = None
        self.output: deque[str] = deque(maxlen=200)
        self.starts = 0
        self.unplanned_exits: list[int] = []

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.starts += 1

        def pump(proc=self.proc):
            for line in proc.stdout:
                self.output.append(line)

        threading.Thread(target=pump, daemon=True).start()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def supervise(self) -> None:
        """Restarts a copier that exited by itself (a fatal error), a bounded number of times."""
        code = self.proc.poll()
        if code is None:
            return
        self.unplanned_exits.append(code)
        assert len(self.unplanned_exits) <= MAX_UNPLANNED_EXITS, (
            f"the copier keeps exiting ({self.unplanned_exits}):\n{self.tail()}"
        )
        self.start()

    def tail(self, lines: int = 40) -> str:
        return "".join(list(self.output)[-lines:])


class OutputWatcher:
    """A consumer of the output (read_committed unless told), alive through every kill."""

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_committed") -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "eos-watcher-unused",
                "isolation.level": isolation,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
                **THROUGH_KILLS,
            }
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        self.got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.reached = dict.fromkeys(range(PARTITIONS), 0)

    def poll(self) -> int:
        """Reads whatever is readable now; the number of records read so far."""
        while messages := self.consumer.consume(10_000, 0.05):
            for msg in messages:
                p = msg.partition()
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        self.reached[p] = max(self.reached[p], msg.offset())
                    continue  # transport errors while the broker is down
                self.got[p].append(msg.value())
                self.reached[p] = max(self.reached[p], msg.offset() + 1)
        return self.count()

    def count(self) -> int:
        return sum(map(len, self.got.values()))

    def read_to(self, ends: dict[int, int], what: str) -> dict[int, list[bytes]]:
        def done():
            self.poll()
            return all(self.reached[p] >= end for p, end in ends.items())

        wait_until(done, 60, what)
        return self.got

    def close(self) -> None:
        self.consumer.close()


def input_values() -> dict[int, list[bytes]]:
    return {p: [b"%d" % n for n in range(p, RECORDS, PARTITIONS)] for p in range(PARTITIONS)}


def produce_input(bootstrap: str, topic: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for p, values in input_values().items():
        for v in values:
            while True:
                try:
                    producer.produce(topic, v, partition=p)
                    break
                except BufferError:
                    producer.poll(0.1)
    assert producer.flush(60) == 0


def committed_offsets(bootstrap: str, group: str, topic: str, stable: bool = True):
    """The group's committed offsets (with `stable`, none while a transaction that commits
    offsets for it is pending: the broker answers UNSTABLE_OFFSET_COMMIT). A new admin client
    each time: none lives through a broker kill."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **THROUGH_KILLS})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    try:
        result = admin.list_consumer_group_offsets(
            [request], require_stable=stable, request_timeout=10
        )[group]
        return {tp.partition: tp.offset for tp in result.result(timeout=30).topic_partitions}
    except Exception:  # the broker is (re)starting, or the transaction's offsets are pending
        return {}


def describe(expected: list[bytes], got: list[bytes]) -> str:
    counts = Counter(got)
    duplicated = [v for v, c in counts.items() if c > 1]
    missing = [v for v in expected if v not in counts]
    order = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
    return (
        f"{len(got)} records for {len(expected)}: {len(duplicated)} duplicated "
        f"(first {duplicated[:3]}), {len(missing)} missing (first {missing[:3]}), "
        f"first difference at index {order}"
    )


# The copiers speak the transactions v1 protocol (librdkafka has no KIP-890 yet); on a cluster
# at transaction.version 2 the broker also verifies each transactional produce (KIP-890 part 1).
@pytest.mark.parametrize(
    ("copier", "transaction_version"),
    [("confluent-kafka", 2), ("confluent-kafka", 1), ("fjord", 2)],
)
def test_exactly_once_copy_survives_broker_and_copier_kills(
    make_broker_process, copier, transaction_version
):
    broker = make_broker_process(
        "group.initial.rebalance.delay.ms=0",
        "group.min.session.timeout.ms=1000",
        # Fjord's copier is a consumer-protocol member, whose session timeout and heartbeat
        # interval are the broker's (45 s and 5 s by default): the classic copier's here, so
        # that a killed copier's partitions move to the next one as soon with either client.
        f"group.consumer.session.timeout.ms={SESSION_TIMEOUT_MS}",
        f"group.consumer.min.session.timeout.ms={SESSION_TIMEOUT_MS}",
        f"group.consumer.heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}",
        f"group.consumer.min.heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}",
    ).start()
    if transaction_version == 1:
        finalize_transaction_version(broker.bootstrap, 1)
    source, sink = topic_name("eos-in"), topic_name("eos-out")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics(
        [NewTopic(source, PARTITIONS, 1), NewTopic(sink, PARTITIONS, 1)], operation_timeout=30
    )
    for f in futures.values():
        f.result(timeout=30)
    del admin, futures  # see THROUGH_KILLS
    produce_input(broker.bootstrap, source)
    expected = input_values()
    input_ends = {p: len(v) for p, v in expected.items()}

    group = f"eos-copier-{uuid.uuid4().hex[:8]}"
    copy = CopierProcess(copier, broker.bootstrap, source, sink, group, f"{group}-txn")
    watcher = OutputWatcher(broker.bootstrap, sink)
    # What the copier had committed of the input at each kill: the copy still under way.
    committed_at_kill = []
    copy.start()
    try:
        for k, event in enumerate(EVENTS):
            threshold = RECORDS * (k + 1) // (len(EVENTS) + 2)

            def progressed(threshold=threshold):
                copy.supervise()
                return watcher.poll() >= threshold

            def inside_a_transaction():
                # Records of an open transaction in the output: the kill lands inside it.
                lso = end_offsets(broker.bootstrap, sink, READ_COMMITTED)
                return lso != end_offsets(broker.bootstrap, sink, READ_UNCOMMITTED)

            wait_until(
                progressed, 120, f"{threshold} records copied before the {event} kill #{k + 1}"
            )
            wait_until(inside_a_transaction, 60, f"an open transaction for the {event} kill")
            committed = committed_offsets(broker.bootstrap, group, source, stable=False)
            committed_at_kill.append(sum(max(0, o) for o in committed.values()))
            if event == "broker":
                broker.kill()
                broker.start()
            else:
                copy.kill()
                copy.start()

        def finished():
            copy.supervise()
            watcher.poll()
            return committed_offsets(broker.bootstrap, group, source) == input_ends

        wait_until(finished, 120, "the copier's committed offsets at the end of the input")
    except AssertionError as e:
        raise AssertionError(f"{e}\ncopier output:\n{copy.tail()}") from None
    finally:
        copy.kill()

    output_ends = wait_stable(broker.bootstrap, sink)
    # The watcher lived through every kill: it never saw an aborted record either.
    watcher.read_to(output_ends, "the watcher at the end of the output")
    watcher.close()
    fresh = OutputWatcher(broker.bootstrap, sink)
    fresh.read_to(output_ends, "a fresh read_committed consumer at the end of the output")
    fresh.close()
    everything = OutputWatcher(broker.bootstrap, sink, "read_uncommitted")
    everything.read_to(output_ends, "a read_uncommitted consumer at the end of the output")
    everything.close()
    for name, got in (("the watcher", watcher.got), ("a fresh consumer", fresh.got)):
        for p in range(PARTITIONS):
            assert got[p] == expected[p], f"{name}, partition {p}: " + describe(expected[p], got[p])
    # The copier was killed inside transactions: the log holds their aborted records.
    assert everything.count() > RECORDS, everything.count()
    # Every kill landed while the copy was under way.
    assert all(0 < c < RECORDS for c in committed_at_kill), committed_at_kill
    print(
        f"copier started {copy.starts} times, unplanned exits {copy.unplanned_exits}; "
        f"input records copied and committed at the kills: {committed_at_kill}; "
        f"{everything.count() - RECORDS} aborted records in the output"
    )
    assert broker.stop() == 0, "".join(broker.output[-50:])
