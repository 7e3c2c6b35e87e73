"""Clients for the fault-injection tests, over confluent-kafka, each recording what it saw for
tests/cluster/checker.py: idempotent acks=all producers, transactional producers that commit
and abort in turn, consumer group members that commit offsets, and the final drain.

Each runs on threads of its own between start() and stop(); producers write a fixed number of
records (their stop() waits until every one is resolved), consumers read until stopped.
Values are "<producer>-<seq>", unique in a run, which is what lets the checker find lost,
duplicated and reordered records."""

from __future__ import annotations

import itertools
import json
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from checker import READ_COMMITTED, READ_UNCOMMITTED, OffsetCommit, Outcome, Read, Send, Txn
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

# Clients that ride out a failover: they notice a dead or paused broker in seconds (socket
# and request timeouts), refresh metadata often to find the new leader, and keep retrying an
# acks=all write for two minutes before giving up on it.
RESILIENT = {
    "socket.timeout.ms": 10_000,
    "socket.connection.setup.timeout.ms": 5_000,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 500,
    "topic.metadata.refresh.interval.ms": 1_000,
}
PRODUCER = {
    **RESILIENT,
    "acks": "all",
    "enable.idempotence": True,
    "max.in.flight.requests.per.connection": 5,
    "linger.ms": 5,
    "request.timeout.ms": 10_000,
    "message.timeout.ms": 120_000,
}
TXN_CALL_TIMEOUT = 30  # seconds for one init/commit/abort call
TXN_ATTEMPTS = 10  # retriable errors of one commit or abort before its outcome is unknown


class _Workers:
    """Threads that record into one history under one condition; an exception in a thread
    fails stop() (and any wait) with it."""

    def __init__(self, bootstrap: str, topic: str, config: dict) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.config = config
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.client_errors: list[str] = []  # what the clients reported on the way (diagnostics)
        self.fatal_errors: list[str] = []  # errors that ended a client: a failed guarantee
        self._threads: list[threading.Thread] = []
        self._failure: str | None = None

    def _spawn(self, target: Callable[[int], None], count: int) -> None:
        def guarded(i: int) -> None:
            try:
                target(i)
            except BaseException as e:
                # As text: a traceback would keep the thread's clients, and their
                # connections, alive.
                with self.changed:
                    self._failure = "".join(traceback.format_exception(e))
                    self.changed.notify_all()

        self._threads = [
            threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(1, count + 1)
        ]
        for t in self._threads:
            t.start()

    def _note(self, error: object) -> None:
        if isinstance(error, KafkaException):
            error = error.args[0]
        with self.changed:
            self.client_errors.append(str(error))
            if isinstance(error, KafkaError) and error.fatal():
                self.fatal_errors.append(str(error))

    def _wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not condition():
                if self._failure is not None:
                    raise AssertionError(f"a client thread failed:\n{self._failure}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"timed out after {timeout}s waiting for {what}; client errors: "
                        f"{self.client_errors[-5:]}{self._stalled()}"
                    )
                self.changed.wait(remaining)

    def _stalled(self) -> str:
        """What the clients were waiting on, for a wait that timed out (diagnostics)."""
        return ""

    def abort(self, timeout: float = 60) -> None:
        """Stop early, without a history: for the teardown of a test that failed."""
        self.stopping.set()
        self._join_threads(timeout)

    def _join_threads(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _join(self, timeout: float) -> None:
        self._join_threads(timeout)
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            raise AssertionError(f"client threads still running after {timeout}s: {stuck}")
        if self._failure is not None:
            raise AssertionError(f"a client thread failed:\n{self._failure}")


class IdempotentProducers(_Workers):
    """`producers` idempotent acks=all producers, each writing `records` values "p<i>-<seq>" on
    partitions seq % partitions, at most `max_unresolved` of them awaiting an answer."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        producers: int = 2,
        records: int = 1000,
        config: dict | None = None,
        max_unresolved: int = 200,
    ) -> None:
        super().__init__(bootstrap, topic, {**PRODUCER, **(config or {})})
        self.partitions = partitions
        self.producers = producers
        self.records = records
        self.max_unresolved = max_unresolved
        self.sends: list[Send] = []
        self.acknowledged = 0
        self._pending: dict[int, dict[str, int]] = {}  # by producer: value -> partition
        self._statistics: dict[int, dict] = {}  # by producer: librdkafka's latest, for _stalled

    def start(self) -> IdempotentProducers:
        self._spawn(self._produce, self.producers)
        return self

    def wait_for_acks(self, count: int, timeout: float = 120) -> None:
        """Until `count` records in all have been acknowledged."""
        self._wait(lambda: self.acknowledged >= count, timeout, f"{count} acknowledged records")

    def _stalled(self) -> str:
        # dict(): a copy taken at once, while the producers' threads go on.
        unanswered = {
            i: dict(Counter(dict(pending).values())) for i, pending in self._pending.items()
        }
        views = "".join(
            f"\nproducer {i}'s librdkafka: {self._client_view(i, partitions)}"
            for i, partitions in unanswered.items()
            if partitions
        )
        return f"; unanswered records by partition, of each producer: {unanswered}{views}"

    def _client_view(self, i: int, partitions: dict[int, int]) -> str:
        """Where librdkafka holds the unanswered records: its view of their partitions (leader,
        queued, in flight, idempotence sequence) and of the brokers (state, requests waiting)."""
        stats = self._statistics.get(i)
        if stats is None:
            return "no statistics yet"
        topic = stats["topics"].get(self.topic, {}).get("partitions", {})
        keys = (
            "leader",
            "msgq_cnt",
            "xmit_msgq_cnt",
            "msgs_inflight",
            "next_ack_seq",
            "next_err_seq",
            "acked_msgid",
        )
        by_partition = {p: {k: topic.get(str(p), {}).get(k) for k in keys} for p in partitions}
        brokers = {
            b["nodeid"]: {
                "state": b["state"],
                "stateage_ms": b["stateage"] // 1000,
                "outbuf_cnt": b["outbuf_cnt"],
                "waitresp_cnt": b["waitresp_cnt"],
                "partitions": sorted(b.get("toppars", {})),
            }
            for b in stats["brokers"].values()
        }
        return f"partitions {by_partition}, brokers {brokers}"

    def stop(self, timeout: float = 300) -> list[Send]:
        """Wait until every record has been sent and answered (or given up on); the history."""
        self._join(timeout)
        return list(self.sends)

    def _produce(self, i: int) -> None:
        def statistics(text: str) -> None:
            self._statistics[i] = json.loads(text)

        producer = Producer(
            {
                **self.config,
                "bootstrap.servers": self.bootstrap,
                "error_cb": self._note,
                "statistics.interval.ms": 1000,
                "stats_cb": statistics,
            }
        )
        pending = self._pending[i] = {}  # value -> partition, until its delivery report

        def delivered(err, msg) -> None:
            value = msg.value().decode()
            del pending[value]
            send = Send(value, msg.partition(), None if err else msg.offset(), err and str(err))
            with self.changed:
                self.sends.append(send)
                self.acknowledged += err is None
                self.changed.notify_all()

        seq = 0
        while seq < self.records and not self.stopping.is_set():
            value, partition = f"p{i}-{seq}", seq % self.partitions
            while len(pending) >= self.max_unresolved and not self.stopping.is_set():
                producer.poll(0.1)
            if self.stopping.is_set():
                break
            try:
                producer.produce(
                    self.topic, value=value.encode(), partition=partition, on_delivery=delivered
                )
            except BufferError:  # librdkafka's queue is full: not sent, try it again
                producer.poll(0.1)
                continue
            except KafkaException as e:
                # A fatal error (noted by error_cb too) ends this producer; what it sent
                # before is still history.
                self._note(e)
                break
            pending[value] = partition
            producer.poll(0)
            seq += 1
        if self.stopping.is_set():
            producer.purge()
        # message.timeout.ms bounds how long a record can stay unanswered.
        producer.flush(self.config["message.timeout.ms"] / 1000 + 30)
        with self.changed:
            self.sends.extend(Send(v, p, None, "no delivery report") for v, p in pending.items())


class TransactionalProducers(_Workers):
    """`producers` transactional producers, each running `transactions` transactions of
    `records_per_txn` values "t<i>-<seq>" spread over the partitions, committing even-numbered
    ones and aborting odd-numbered ones. A transaction whose end the client cannot establish is
    recorded as unknown, and the producer is replaced (its successor's init_transactions
    fences it and settles the transaction)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        producers: int = 1,
        transactions: int = 20,
        records_per_txn: int = 4,
        config: dict | None = None,
    ) -> None:
        config = {**PRODUCER, "transaction.timeout.ms": 120_000, **(config or {})}
        super().__init__(bootstrap, topic, config)
        self.partitions = partitions
        self.producers = producers
        self.transactions = transactions
        self.records_per_txn = records_per_txn
        self.txns: list[Txn] = []

    def start(self) -> TransactionalProducers:
        self._spawn(self._run, self.producers)
        return self

    def wait_for_transactions(self, count: int, timeout: float = 120) -> None:
        self._wait(lambda: len(self.txns) >= count, timeout, f"{count} finished transactions")

    def stop(self, timeout: float = 600) -> list[Txn]:
        self._join(timeout)
        return list(self.txns)

    def _open(self, transactional_id: str) -> Producer:
        producer = Producer(
            {
                **self.config,
                "bootstrap.servers": self.bootstrap,
                "transactional.id": transactional_id,
                "error_cb": self._note,
            }
        )
        attempts = 0
        while True:
            try:
                producer.init_transactions(TXN_CALL_TIMEOUT)
                return producer
            except KafkaException as e:
                self._note(e)
                attempts += 1
                if not e.args[0].retriable() or attempts == TXN_ATTEMPTS:
                    raise

    def _run(self, i: int) -> None:
        name = f"t{i}"
        transactional_id = f"{self.topic}-{name}-{uuid.uuid4().hex[:8]}"
        producer = self._open(transactional_id)
        seq = itertools.count()
        for t in range(self.transactions):
            if self.stopping.is_set():
                break
            values = [
                (f"{name}-{next(seq)}", (t * self.records_per_txn + j) % self.partitions)
                for j in range(self.records_per_txn)
            ]
            reports: dict[str, Send] = {}

            def delivered(err, msg, reports=reports) -> None:
                value = msg.value().decode()
                reports[value] = Send(
                    value, msg.partition(), None if err else msg.offset(), err and str(err)
                )

            outcome = self._transaction(producer, values, delivered, commit=t % 2 == 0)
            producer.poll(0)
            sends = tuple(reports.get(v, Send(v, p, None, "no delivery report")) for v, p in values)
            with self.changed:
                self.txns.append(Txn(name, sends, outcome))
                self.changed.notify_all()
            if outcome == "unknown":
                producer = self._open(transactional_id)

    def _transaction(self, producer: Producer, values, delivered, commit: bool) -> Outcome:
        try:
            producer.begin_transaction()
            for value, partition in values:
                producer.produce(
                    self.topic, value=value.encode(), partition=partition, on_delivery=delivered
                )
            # Delivered before the end, so that aborted records too have offsets in the log.
            producer.flush(TXN_CALL_TIMEOUT)
        except KafkaException as e:
            self._note(e)
            if e.args[0].fatal():
                return "unknown"
            commit = False
        return self._end(producer, commit)

    def _end(self, producer: Producer, commit: bool) -> Outcome:
        """Commit (or abort), retrying retriable errors and aborting after an abortable one;
        what happened, as far as the client can tell."""
        attempts = 0
        while True:
            try:
                if commit:
                    producer.commit_transaction(TXN_CALL_TIMEOUT)
                    return "committed"
                producer.abort_transaction(TXN_CALL_TIMEOUT)
                return "aborted"
            except KafkaException as e:
                self._note(e)
                error: KafkaError = e.args[0]
                attempts += 1
                if error.retriable() and attempts < TXN_ATTEMPTS:
                    continue
                if commit and error.txn_requires_abort():
                    commit, attempts = False, 0
                    continue
                return "unknown"


@dataclass
class ConsumerHistory:
    reads: list[Read]
    commits: list[OffsetCommit]


class GroupConsumers(_Workers):
    """`members` consumers of `group` subscribed to `topic` (classic protocol) at `isolation`,
    each committing the offsets it has consumed, synchronously, every `commit_every` records,
    when a partition is revoked, and at the end."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        isolation: str = READ_COMMITTED,
        members: int = 2,
        commit_every: int = 50,
        config: dict | None = None,
    ) -> None:
        config = {
            **RESILIENT,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
            **(config or {}),
        }
        super().__init__(bootstrap, topic, config)
        self.group = group
        self.isolation = isolation
        self.members = members
        self.commit_every = commit_every
        self.reads: list[Read] = []
        self.commits: list[OffsetCommit] = []
        self._read_at: set[tuple[int, int]] = set()

    def start(self) -> GroupConsumers:
        self._spawn(self._consume, self.members)
        return self

    @property
    def distinct_reads(self) -> int:
        """How many (partition, offset) the members have read between them."""
        return len(self._read_at)

    def wait_for_reads(self, count: int, timeout: float = 120) -> None:
        self._wait(lambda: len(self._read_at) >= count, timeout, f"{count} distinct reads")

    def stop(self, timeout: float = 60) -> ConsumerHistory:
        self.stopping.set()
        self._join(timeout)
        return ConsumerHistory(list(self.reads), list(self.commits))

    def _consume(self, i: int) -> None:
        name = f"{self.group}-{i}"
        consumer = Consumer(
            {
                **self.config,
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "isolation.level": self.isolation,
                "error_cb": self._note,
            }
        )
        positions: dict[int, int] = {}  # partition -> next offset, for the partitions it owns

        def revoked(c: Consumer, partitions: list[TopicPartition]) -> None:
            self._commit(
                c,
                {
                    tp.partition: positions[tp.partition]
                    for tp in partitions
                    if tp.partition in positions
                },
            )
            for tp in partitions:
                positions.pop(tp.partition, None)

        def lost(_c: Consumer, partitions: list[TopicPartition]) -> None:
            for tp in partitions:
                positions.pop(tp.partition, None)

        consumer.subscribe([self.topic], on_revoke=revoked, on_lost=lost)
        since_commit = 0
        try:
            while not self.stopping.is_set():
                for msg in consumer.consume(100, 0.2):
                    if msg.error():
                        self._note(msg.error())
                        continue
                    p, o = msg.partition(), msg.offset()
                    read = Read(name, p, o, msg.value().decode(), self.isolation)
                    with self.changed:
                        self.reads.append(read)
                        self._read_at.add((p, o))
                        self.changed.notify_all()
                    positions[p] = o + 1
                    since_commit += 1
                if since_commit >= self.commit_every:
                    self._commit(consumer, positions)
                    since_commit = 0
            self._commit(consumer, positions)
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer, positions: dict[int, int]) -> None:
        if not positions:
            return
        offsets = [TopicPartition(self.topic, p, o) for p, o in positions.items()]
        started = time.monotonic()
        try:
            done = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            self._note(e)
            return
        acked = time.monotonic()
        with self.changed:
            self.commits.extend(
                OffsetCommit(tp.partition, tp.offset, started, acked)
                for tp in done
                if tp.error is None
            )


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition that has one."""
    consumer = Consumer({**RESILIENT, "bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, 60) if tp.offset >= 0}
    finally:
        consumer.close()


def drain(
    bootstrap: str, topic: str, isolation: str = READ_UNCOMMITTED, timeout: float = 120
) -> dict[int, dict[int, str]]:
    """Every record of every partition of `topic`, from the beginning to the end offset it has
    when the drain starts (the last stable offset for read_committed): partition -> offset ->
    value."""
    consumer = Consumer(
        {
            **RESILIENT,
            "bootstrap.servers": bootstrap,
            "group.id": f"drain-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "check.crcs": True,
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30, cached=False)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: dict[int, dict[int, str]] = {p: {} for p in partitions}
        # How far each partition has been read: past its last record, or to where an
        # end-of-partition event said it ends (past trailing markers or aborted records).
        reached = dict.fromkeys(partitions, 0)
        deadline = time.monotonic() + timeout
        while any(reached[p] < ends[p] for p in partitions):
            if time.monotonic() > deadline:
                raise AssertionError(f"drain of {topic} stuck at {reached}, ends {ends}")
            for msg in consumer.consume(1000, 0.5):
                p = msg.partition()
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        reached[p] = max(reached[p], msg.offset())
                    continue
                records[p][msg.offset()] = msg.value().decode()
                reached[p] = max(reached[p], msg.offset() + 1)
        return records
    finally:
        consumer.close()
