"""Transactions (KIP-98) with real clients against a broker process.

confluent-kafka, kafka-python and aiokafka transactional producers commit and abort
interleaved transactions over several partitions, and each client's own consumer reads them
back: read_committed sees exactly the committed records, read_uncommitted every data record,
and neither sees the COMMIT/ABORT control markers, which take one offset per partition per
finished transaction. An open transaction holds read_committed consumers at the last stable
offset until it ends; a second producer with the same transactional.id fences the first; a
transaction whose producer vanished (killed, or abandoned without closing) is aborted by the
coordinator after its transaction.timeout.ms. KIP-664's admin APIs describe an open
transaction as kafka-transactions.sh would see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AIOTopicPartition
from aiokafka.errors import ProducerFenced
from broker_process import BrokerProcess
from compat_support import finalize_transaction_version, topic_name, wait_until
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KPTopicPartition
from kafka.admin import KafkaAdminClient

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 3
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
# Short enough that a vanished producer's transaction is aborted within a few seconds; the
# coordinator looks for timed-out transactions every CLEANUP_MS (Kafka's default is 10 s).
SHORT_TXN_TIMEOUT_MS = 2000
CLEANUP_MS = 200
TXN_TIMEOUT_MS = 60_000

Values = dict[int, list[bytes]]
Records = dict[int, list[tuple[int, bytes]]]


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("txn-logs"),
        f"transaction.abort.timed.out.transaction.cleanup.interval.ms={CLEANUP_MS}",
    ).start()
    yield broker
    assert broker.stop() == 0, "".join(broker.output[-50:])


@pytest.fixture(scope="module")
def transaction_v1_broker(tmp_path_factory):
    """A broker whose cluster finalized transaction.version 1 (KIP-890's transactions v2
    off), as a cluster upgraded from Kafka 3.x runs until an operator raises it."""
    broker = BrokerProcess(tmp_path_factory.mktemp("txn-v1-logs")).start()
    finalize_transaction_version(broker.bootstrap, 1)
    yield broker
    assert broker.stop() == 0, "".join(broker.output[-50:])


@pytest.fixture(params=["transaction.version=2", "transaction.version=1"])
def any_version_broker(request) -> BrokerProcess:
    """Clients without KIP-890 (these three) run the version 1 protocol on either cluster;
    on a version 2 one the broker verifies each transactional produce (KIP-890 part 1)."""
    name = "txn_broker" if request.param.endswith("2") else "transaction_v1_broker"
    return request.getfixturevalue(name)


def create_topic(bootstrap: str, prefix: str, partitions: int = PARTITIONS) -> str:
    name = topic_name(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)
    futures[name].result(timeout=30)
    return name


def transactional_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def end_offsets(bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS):
    """ListOffsets(latest): the high watermark for read_uncommitted, the last stable offset
    for read_committed."""
    level = (
        IsolationLevel.READ_COMMITTED
        if isolation == READ_COMMITTED
        else IsolationLevel.READ_UNCOMMITTED
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
        isolation_level=level,
        request_timeout=30,
    )
    return {tp.partition: f.result().offset for tp, f in futures.items()}


def wait_stable(bootstrap: str, topic: str, partitions: int = PARTITIONS, timeout: float = 30):
    """The high watermarks, once no transaction holds any partition's last stable offset
    back (markers are written after EndTxn has been answered, so this can take a moment)."""

    def stable():
        hw = end_offsets(bootstrap, topic, READ_UNCOMMITTED, partitions)
        return hw if end_offsets(bootstrap, topic, READ_COMMITTED, partitions) == hw else None

    return wait_until(stable, timeout, f"LSO == high watermark on {topic}")


def plain_produce(bootstrap: str, topic: str, values: Values) -> None:
    """Non-transactional records, acknowledged before this returns."""
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for p, vs in values.items():
        for v in vs:
            producer.produce(
                topic, v, partition=p, on_delivery=lambda e, _m: e and errors.append(e)
            )
    assert producer.flush(30) == 0
    assert errors == []
    producer.close()


def values_of(records: Records) -> Values:
    return {p: [v for _, v in rows] for p, rows in records.items()}


# -- transactional producers, the same calls for every client ---------------------------------


class ConfluentTxn:
    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int = TXN_TIMEOUT_MS) -> None:
        self.errors: list[str] = []
        self.client_errors: list[str] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": txn_id,
                "transaction.timeout.ms": timeout_ms,
                "linger.ms": 5,
                "error_cb": lambda err: self.client_errors.append(str(err)),
            }
        )
        self.producer.init_transactions(30)

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.errors.append(str(err))

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        try:
            self.producer.produce(topic, value, partition=partition, on_delivery=self._delivered)
        except KafkaException as e:
            self.errors.append(str(e))

    def flush(self) -> list[str]:
        """Waits for the records sent since the last flush; their errors."""
        try:
            left = self.producer.flush(30)
        except (KafkaException, SystemError) as e:
            # A fatal error (the fence) is raised out of flush(); confluent-kafka 2.16 then
            # still runs the remaining delivery callbacks with that exception set, which
            # Python turns into a SystemError caused by it.
            self.errors.append(repr(e.__cause__ or e))
            left = 0
        errors, self.errors = self.errors + ([f"{left} undelivered"] if left else []), []
        return errors

    def commit(self) -> None:
        self.producer.commit_transaction(30)

    def abort(self) -> None:
        self.producer.abort_transaction(30)

    def close(self) -> None:
        # Closing aborts an open transaction, which a fenced producer cannot: it warns.
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.producer.close()

    def fenced(self, error: BaseException) -> bool:
        if not isinstance(error, KafkaException):
            return False
        err = error.args[0]
        fence_codes = {
            KafkaError._FENCED,
            KafkaError.PRODUCER_FENCED,
            KafkaError.INVALID_PRODUCER_EPOCH,
        }
        return err.fatal() and err.code() in fence_codes


class KafkaPythonTxn:
    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int = TXN_TIMEOUT_MS) -> None:
        self.errors: list[str] = []
        self.futures = []
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=txn_id,
            transaction_timeout_ms=timeout_ms,
            linger_ms=5,
        )
        self.producer.init_transactions()

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        try:
            self.futures.append(self.producer.send(topic, value=value, partition=partition))
        except Exception as e:  # a producer in an error state refuses at once
            self.errors.append(repr(e))

    def flush(self) -> list[str]:
        self.producer.flush(timeout=30)
        for f in self.futures:
            if not f.is_done:
                self.errors.append("undelivered")
            elif f.failed():
                self.errors.append(repr(f.exception))
        errors, self.errors, self.futures = self.errors, [], []
        return errors

    def commit(self) -> None:
        self.producer.commit_transaction()

    def abort(self) -> None:
        self.producer.abort_transaction()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.producer.close(timeout=5)

    def fenced(self, error: BaseException) -> bool:
        # Either the broker's answer itself, or "Cannot execute transactional method because
        # we are in an error state: <it>" once the producer has seen it on another request.
        return "ProducerFenced" in repr(error) or "InvalidProducerEpoch" in repr(error)


class AiokafkaTxn:
    """aiokafka's asyncio producer driven from this thread: each call runs the loop until
    that call is done (the producer makes no progress between calls, as if busy elsewhere)."""

    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int = TXN_TIMEOUT_MS) -> None:
        self.errors: list[str] = []
        self.reported: list[str] = []
        self.futures = []
        self.loop = asyncio.new_event_loop()

        async def start() -> AIOKafkaProducer:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                transactional_id=txn_id,
                transaction_timeout_ms=timeout_ms,
                linger_ms=5,
            )
            await producer.start()  # InitProducerId
            return producer

        self.producer = self._run(start())

    def _run(self, coro):
        return self.loop.run_until_complete(asyncio.wait_for(coro, 30))

    def begin(self) -> None:
        self._run(self.producer.begin_transaction())

    def send(self, topic: str, partition: int, value: bytes) -> None:
        try:
            self.futures.append(self._run(self.producer.send(topic, value, partition=partition)))
        except Exception as e:
            self.errors.append(repr(e))

    def flush(self) -> list[str]:
        if self.futures:
            results = self._run(asyncio.gather(*self.futures, return_exceptions=True))
            self.errors += [repr(r) for r in results if isinstance(r, BaseException)]
        errors, self.errors, self.futures = self.errors, [], []
        self.reported += errors
        return errors

    def commit(self) -> None:
        self._run(self.producer.commit_transaction())

    def abort(self) -> None:
        self._run(self.producer.abort_transaction())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run(self.producer.stop())
        self.loop.close()

    def fenced(self, error: BaseException) -> bool:
        # aiokafka sends Produce, AddPartitionsToTxn and EndTxn in versions that predate
        # PRODUCER_FENCED, so the broker must answer INVALID_PRODUCER_EPOCH, which aiokafka
        # raises as ProducerFenced. Once a request failed so its producer is in its fatal
        # state, and a commit is refused by the client's own state machine.
        if isinstance(error, ProducerFenced):
            return True
        return "FATAL_ERROR" in str(error) and any("ProducerFenced" in e for e in self.reported)


# -- consumers, each client's own, assigned every partition from the beginning ----------------


class ConfluentReader:
    def __init__(self, bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS):
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "txn-compat-unused",
                "isolation.level": isolation,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
                "check.crcs": True,
            }
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self.got: Records = {p: [] for p in range(partitions)}
        # How far each partition has been read: past the last record, or the end offset an
        # end-of-partition event reported (the LSO for read_committed).
        self.reached = dict.fromkeys(range(partitions), 0)

    def poll(self) -> None:
        for msg in self.consumer.consume(1000, 0.2):
            p = msg.partition()
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                self.reached[p] = max(self.reached[p], msg.offset())
                continue
            self.got[p].append((msg.offset(), msg.value()))
            self.reached[p] = max(self.reached[p], msg.offset() + 1)

    def position(self, partition: int) -> int:
        return self.reached[partition]

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonReader:
    def __init__(self, bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS):
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=isolation,
            check_crcs=True,
        )
        self.tps = [KPTopicPartition(topic, p) for p in range(partitions)]
        self.consumer.assign(self.tps)
        self.consumer.seek_to_beginning()
        self.got: Records = {p: [] for p in range(partitions)}

    def poll(self) -> None:
        for tp, records in self.consumer.poll(timeout_ms=200).items():
            self.got[tp.partition] += [(r.offset, r.value) for r in records]

    def position(self, partition: int) -> int:
        return self.consumer.position(self.tps[partition])

    def close(self) -> None:
        self.consumer.close()


class AiokafkaReader:
    def __init__(self, bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS):
        self.loop = asyncio.new_event_loop()
        self.tps = [AIOTopicPartition(topic, p) for p in range(partitions)]
        self.got: Records = {p: [] for p in range(partitions)}

        async def start() -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level=isolation,
                check_crcs=True,
            )
            await consumer.start()
            consumer.assign(self.tps)
            await consumer.seek_to_beginning(*self.tps)
            return consumer

        self.consumer = self.loop.run_until_complete(start())

    def poll(self) -> None:
        batch = self.loop.run_until_complete(self.consumer.getmany(timeout_ms=200))
        for tp, records in batch.items():
            self.got[tp.partition] += [(r.offset, r.value) for r in records]

    def position(self, partition: int) -> int:
        return self.loop.run_until_complete(self.consumer.position(self.tps[partition]))

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.stop())
        self.loop.close()


def read_to(reader, ends: dict[int, int], timeout: float = 60) -> Records:
    """Polls until the reader's position reaches `ends` on every partition; what it has read."""

    def done():
        reader.poll()
        return all(reader.position(p) >= end for p, end in ends.items())

    wait_until(done, timeout, f"a consumer reaching {ends}")
    return reader.got


@dataclass(frozen=True)
class Client:
    name: str
    producer: Callable[..., ConfluentTxn | KafkaPythonTxn | AiokafkaTxn]
    reader: Callable[..., ConfluentReader | KafkaPythonReader | AiokafkaReader]

    def read(self, bootstrap: str, topic: str, isolation: str, ends: dict[int, int]) -> Records:
        reader = self.reader(bootstrap, topic, isolation, len(ends))
        try:
            return read_to(reader, ends)
        finally:
            reader.close()


CLIENTS = [
    Client("confluent-kafka", ConfluentTxn, ConfluentReader),
    Client("kafka-python", KafkaPythonTxn, KafkaPythonReader),
    Client("aiokafka", AiokafkaTxn, AiokafkaReader),
]


@pytest.fixture(params=CLIENTS, ids=[c.name for c in CLIENTS])
def client(request) -> Client:
    return request.param


# -- commit and abort ------------------------------------------------------------------------

ROUNDS, CHUNKS, PER_CHUNK = 4, 3, 4


def test_interleaved_commits_and_aborts(any_version_broker, client):
    """Two producers write in alternating chunks (each chunk acknowledged before the other
    producer's next one, so the log order is known); per round one commits and the other
    aborts, ending in either order. In later rounds the aborting one writes to one partition
    only, so partitions differ in markers."""
    bootstrap = any_version_broker.bootstrap
    topic = create_topic(bootstrap, "txn-interleaved")
    producers = {name: client.producer(bootstrap, transactional_id(name)) for name in "ab"}
    sent: Values = {p: [] for p in range(PARTITIONS)}
    committed: Values = {p: [] for p in range(PARTITIONS)}
    markers: Counter[int] = Counter()
    try:
        for r in range(ROUNDS):
            committer, aborter = ("a", "b") if r % 2 == 0 else ("b", "a")
            targets = {
                committer: list(range(PARTITIONS)),
                aborter: list(range(PARTITIONS)) if r < 2 else [r % PARTITIONS],
            }
            for producer in producers.values():
                producer.begin()
            for chunk in range(CHUNKS):
                for name, producer in producers.items():
                    for p in targets[name]:
                        for i in range(PER_CHUNK):
                            value = f"{name}-r{r}-c{chunk}-p{p}-{i}".encode()
                            producer.send(topic, p, value)
                            sent[p].append(value)
                            if name == committer:
                                committed[p].append(value)
                    assert producer.flush() == [], f"round {r} chunk {chunk} producer {name}"
            endings = [(committer, "commit"), (aborter, "abort")]
            for name, how in endings if r % 2 == 0 else reversed(endings):
                getattr(producers[name], how)()
                markers.update(targets[name])
    finally:
        for producer in producers.values():
            producer.close()

    hw = wait_stable(bootstrap, topic)
    # Every data record plus one control marker per partition per transaction that wrote to it.
    assert hw == {p: len(sent[p]) + markers[p] for p in range(PARTITIONS)}

    everything = client.read(bootstrap, topic, READ_UNCOMMITTED, hw)
    assert values_of(everything) == sent
    only_committed = client.read(bootstrap, topic, READ_COMMITTED, hw)
    assert values_of(only_committed) == committed
    for p in range(PARTITIONS):
        offset_of = {v: o for o, v in everything[p]}
        assert all(offset_of[v] == o for o, v in only_committed[p]), f"partition {p} offsets"
        # The offsets no data record has are the markers'.
        assert len(set(range(hw[p])) - set(offset_of.values())) == markers[p]


# -- the last stable offset ------------------------------------------------------------------


def test_open_transaction_holds_read_committed_consumers_at_the_lso(txn_broker, client):
    """A transaction open on partitions 0 and 1, with committed records before and after it:
    read_committed stops at its first offset there (not on partition 2) until it commits,
    read_uncommitted reads through."""
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, "txn-lso")

    def numbered(what: str, p: int, n: int) -> list[bytes]:
        return [f"{what}-{p}-{i}".encode() for i in range(n)]

    before = {p: numbered("before", p, 3) for p in range(PARTITIONS)}
    opened = {p: numbered("open", p, 4) for p in (0, 1)}
    after = {p: numbered("after", p, 3) for p in range(PARTITIONS)}
    plain_produce(bootstrap, topic, before)
    txn = client.producer(bootstrap, transactional_id("open"))
    committed_reader = client.reader(bootstrap, topic, READ_COMMITTED)
    uncommitted_reader = client.reader(bootstrap, topic, READ_UNCOMMITTED)
    try:
        txn.begin()
        for p, vs in opened.items():
            for v in vs:
                txn.send(topic, p, v)
        assert txn.flush() == []
        plain_produce(bootstrap, topic, after)

        hw = end_offsets(bootstrap, topic, READ_UNCOMMITTED)
        assert hw == {0: 10, 1: 10, 2: 6}
        lso = end_offsets(bootstrap, topic, READ_COMMITTED)
        assert lso == {0: 3, 1: 3, 2: 6}
        # Read as far as each isolation level may: the held partitions show only what
        # precedes the open transaction, although committed records follow it in the log.
        got = values_of(read_to(committed_reader, lso))
        assert got == {0: before[0], 1: before[1], 2: before[2] + after[2]}
        got = values_of(read_to(uncommitted_reader, hw))
        assert got == {
            0: before[0] + opened[0] + after[0],
            1: before[1] + opened[1] + after[1],
            2: before[2] + after[2],
        }

        txn.commit()
        hw = wait_stable(bootstrap, topic)
        assert hw == {0: 11, 1: 11, 2: 6}
        # The same read_committed consumer, released: the transaction's records and the ones
        # held behind it, in log order.
        got = values_of(read_to(committed_reader, hw))
        assert got == {
            0: before[0] + opened[0] + after[0],
            1: before[1] + opened[1] + after[1],
            2: before[2] + after[2],
        }
    finally:
        txn.close()
        committed_reader.close()
        uncommitted_reader.close()


# -- zombie fencing --------------------------------------------------------------------------


def test_second_producer_with_the_same_transactional_id_fences_the_first(
    any_version_broker, client
):
    """The new instance's InitProducerId bumps the epoch and aborts the zombie's open
    transaction; the zombie's later writes are refused and its commit fails fatally."""
    bootstrap = any_version_broker.bootstrap
    topic = create_topic(bootstrap, "txn-fenced")
    txn_id = transactional_id("zombie")
    zombie = client.producer(bootstrap, txn_id)
    successor = None
    try:
        zombie.begin()
        for i in range(5):
            zombie.send(topic, 0, b"zombie-open-%d" % i)
        assert zombie.flush() == []

        successor = client.producer(bootstrap, txn_id)
        # Partition 0 is in the zombie's transaction already, partition 1 is not: a Produce
        # and an AddPartitionsToTxn with the old epoch.
        for p in (0, 1):
            zombie.send(topic, p, b"zombie-late-%d" % p)
        assert zombie.flush() != [], "the fenced producer's records were acknowledged"
        with pytest.raises(Exception) as failed:
            zombie.commit()
        assert zombie.fenced(failed.value), repr(failed.value)

        successor.begin()
        for i in range(5):
            successor.send(topic, 0, b"successor-%d" % i)
        assert successor.flush() == []
        successor.commit()
    finally:
        zombie.close()
        if successor:
            successor.close()

    hw = wait_stable(bootstrap, topic)
    zombie_open = [b"zombie-open-%d" % i for i in range(5)]
    successor_values = [b"successor-%d" % i for i in range(5)]
    # zombie-open, its ABORT marker, the successor's records and their COMMIT marker.
    assert hw == {0: 12, 1: 0, 2: 0}
    assert values_of(client.read(bootstrap, topic, READ_COMMITTED, hw)) == {
        0: successor_values,
        1: [],
        2: [],
    }
    assert values_of(client.read(bootstrap, topic, READ_UNCOMMITTED, hw)) == {
        0: zombie_open + successor_values,
        1: [],
        2: [],
    }


# -- transaction.timeout.ms ------------------------------------------------------------------

HOLDER = """
import sys
from confluent_kafka import Producer

bootstrap, topic, txn_id, timeout_ms = sys.argv[1:]
producer = Producer({
    "bootstrap.servers": bootstrap,
    "transactional.id": txn_id,
    "transaction.timeout.ms": int(timeout_ms),
})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(5):
    producer.produce(topic, b"doomed-%d" % i, partition=0)
assert producer.flush(30) == 0
print("open", flush=True)
sys.stdin.read()
"""


def test_transaction_of_a_killed_producer_is_aborted_after_its_timeout(txn_broker):
    """A process holding an open transaction is killed; nobody with its transactional.id
    comes back, so only the coordinator's timeout can end the transaction. It aborts it, and
    a later instance with the same id starts cleanly."""
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, "txn-killed")
    txn_id = transactional_id("killed")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, bootstrap, topic, txn_id, str(SHORT_TXN_TIMEOUT_MS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = holder.stdout.readline()
        assert line == "open\n", line + holder.stderr.read()
        after = [b"after-%d" % i for i in range(3)]
        plain_produce(bootstrap, topic, {0: after})
    finally:
        holder.kill()
        holder.wait()

    hw = wait_stable(bootstrap, topic)
    doomed = [b"doomed-%d" % i for i in range(5)]
    assert hw == {0: 5 + 3 + 1, 1: 0, 2: 0}  # and one ABORT marker
    assert values_of(ConfluentClient.read(bootstrap, topic, READ_COMMITTED, hw))[0] == after
    assert values_of(ConfluentClient.read(bootstrap, topic, READ_UNCOMMITTED, hw))[0] == (
        doomed + after
    )

    reborn = ConfluentTxn(bootstrap, txn_id)
    try:
        reborn.begin()
        reborn.send(topic, 0, b"reborn")
        assert reborn.flush() == []
        reborn.commit()
    finally:
        reborn.close()
    hw = wait_stable(bootstrap, topic)
    assert values_of(ConfluentClient.read(bootstrap, topic, READ_COMMITTED, hw))[0] == (
        after + [b"reborn"]
    )


def test_abandoned_transaction_is_aborted_after_its_timeout(txn_broker, client):
    """A producer opens a transaction and then does nothing (never ends it, never closes):
    the coordinator aborts it once transaction.timeout.ms has passed, and the producer can no
    longer commit it."""
    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, "txn-abandoned")
    abandoned = client.producer(bootstrap, transactional_id("abandoned"), SHORT_TXN_TIMEOUT_MS)
    values = {p: [f"abandoned-{p}-{i}".encode() for i in range(4)] for p in (0, 1)}
    try:
        abandoned.begin()
        for p, vs in values.items():
            for v in vs:
                abandoned.send(topic, p, v)
        assert abandoned.flush() == []

        hw = wait_stable(bootstrap, topic)
        assert hw == {0: 5, 1: 5, 2: 0}  # the records and an ABORT marker
        assert values_of(client.read(bootstrap, topic, READ_COMMITTED, hw)) == {0: [], 1: [], 2: []}
        assert values_of(client.read(bootstrap, topic, READ_UNCOMMITTED, hw)) == {**values, 2: []}
        with pytest.raises(Exception):  # noqa: B017 - each client has its own error type
            abandoned.commit()
    finally:
        abandoned.close()
    assert end_offsets(bootstrap, topic, READ_COMMITTED) == hw


# -- KIP-664 admin APIs ----------------------------------------------------------------------


def test_admin_describes_an_open_transaction(txn_broker):
    """kafka-python's KIP-664 admin calls (what kafka-transactions.sh uses) while a
    transaction is open on partitions 0 and 1, and after it commits."""
    from kafka.admin._transactions import TransactionState

    bootstrap = txn_broker.bootstrap
    topic = create_topic(bootstrap, "txn-admin")
    plain_produce(bootstrap, topic, {0: [b"before-0", b"before-1"]})
    txn_id = transactional_id("described")
    txn = ConfluentTxn(bootstrap, txn_id)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    tp = [KPTopicPartition(topic, p) for p in range(PARTITIONS)]
    try:
        txn.begin()
        for p in (0, 1):
            txn.send(topic, p, b"open-%d" % p)
        assert txn.flush() == []

        listed = [t for rows in admin.list_transactions().values() for t in rows]
        mine = [t for t in listed if t.transactional_id == txn_id]
        assert [t.state for t in mine] == [TransactionState.ONGOING], listed
        described = admin.describe_transactions([txn_id])[txn_id]
        assert described.state == TransactionState.ONGOING
        assert described.producer_id == mine[0].producer_id
        assert described.transaction_timeout_ms == TXN_TIMEOUT_MS
        assert described.topic_partitions == {tp[0], tp[1]}

        producers = admin.describe_producers(tp)
        active = producers[tp[0]].active_producers
        assert [(a.producer_id, a.current_transaction_start_offset) for a in active] == [
            (described.producer_id, 2)
        ]
        assert end_offsets(bootstrap, topic, READ_COMMITTED)[0] == 2
        assert [a.current_transaction_start_offset for a in producers[tp[1]].active_producers] == [
            0
        ]
        assert producers[tp[2]].active_producers == []

        txn.commit()
        wait_until(
            lambda: (
                admin.describe_transactions([txn_id])[txn_id].state
                == TransactionState.COMPLETE_COMMIT
            ),
            what="the transaction described as CompleteCommit",
        )
        wait_stable(bootstrap, topic)
        active = admin.describe_producers([tp[0]])[tp[0]].active_producers
        assert [(a.producer_id, a.current_transaction_start_offset) for a in active] == [
            (described.producer_id, -1)
        ]
    finally:
        admin.close()
        txn.close()


ConfluentClient = CLIENTS[0]
