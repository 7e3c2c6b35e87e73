"""Our producer (broker.client.Producer) judged by the other clients, against broker
processes: what it writes confluent-kafka, kafka-python and aiokafka read back exactly (every
codec, keys, headers, explicit timestamps); read_committed over its transactions sees the
committed records and none of the aborted ones; its idempotent records survive a broker
kill -9 exactly once and in order; a second producer with the same transactional id fences
the first; offsets sent with a transaction are the group's committed offsets for a
confluent consumer, and a member fenced out of the group cannot commit them (KIP-447); a
transaction prepared by one producer is completed by another (KIP-939)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import test_aiokafka
import test_confluent_kafka
import test_kafka_python
from compat_support import CODECS, PARTITIONS, assert_same_records, make_records, topic_name
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kio.schema.errors import ErrorCode
from test_transactions_compat import CLIENTS, READ_COMMITTED, READ_UNCOMMITTED, wait_stable

from broker.client import AdminClient, KafkaAdminError, Producer
from broker.client.errors import (
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
)
from broker.client.models import ConsumerGroupMetadata, NewTopic, OffsetAndMetadata
from broker.client.producer import PreparedTxnState

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


async def create_topic(bootstrap: str, prefix: str, partitions: int = PARTITIONS) -> str:
    name = topic_name(prefix)
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    return name


@pytest.mark.parametrize("codec", CODECS)
async def test_every_codec_read_by_three_clients(broker_process, codec):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, f"ours-{codec}")
    records = make_records()
    async with Producer(bootstrap, compression_type=codec, linger_ms=20) as producer:
        futures = [
            await producer.send(
                topic, r.value, r.key, r.partition, list(r.headers), timestamp_ms=r.timestamp
            )
            for r in records
        ]
        acked = [await f for f in futures]
    for p in range(PARTITIONS):
        offsets = [m.offset for m in acked if m.partition == p]
        assert offsets == list(range(len(offsets))), f"partition {p} acked {offsets}"
    assert [m.timestamp_ms for m in acked] == [r.timestamp for r in records]
    n = len(records)
    assert_same_records(records, test_confluent_kafka.consume_all(bootstrap, topic, PARTITIONS, n))
    assert_same_records(records, test_kafka_python.consume_all(bootstrap, topic, PARTITIONS, n))
    assert_same_records(records, await test_aiokafka.consume_all(bootstrap, topic, PARTITIONS, n))


async def test_read_committed_over_our_transactions(broker_process):
    """Transactions over every partition, committed and aborted in turn, with plain
    idempotent records between them; every client reads the committed ones only."""
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, "ours-txn")
    committed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    everything: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    async with (
        Producer(bootstrap, transactional_id=topic_name("txn")) as producer,
        Producer(bootstrap) as plain,
    ):
        await producer.init_transactions()
        for round_ in range(4):
            commit = round_ % 2 == 0
            producer.begin_transaction()
            for i in range(3 * PARTITIONS):
                value = b"r%d-%d-%s" % (round_, i, b"c" if commit else b"a")
                await producer.send(topic, value, partition=i % PARTITIONS)
                everything[i % PARTITIONS].append(value)
                if commit:
                    committed[i % PARTITIONS].append(value)
            await producer.flush()  # the aborted records reach the log too (abort drops queued)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
            value = b"plain-%d" % round_
            await plain.send_and_wait(topic, value, partition=round_ % PARTITIONS)
            committed[round_ % PARTITIONS].append(value)
            everything[round_ % PARTITIONS].append(value)
    ends = wait_stable(bootstrap, topic)
    for client in CLIENTS:
        # In a thread: the aiokafka reader runs a loop of its own.
        got = await asyncio.to_thread(client.read, bootstrap, topic, READ_COMMITTED, ends)
        assert {p: [v for _, v in rows] for p, rows in got.items()} == committed, client.name
    got = CLIENTS[0].read(bootstrap, topic, READ_UNCOMMITTED, ends)
    assert {p: sorted(v for _, v in rows) for p, rows in got.items()} == {
        p: sorted(vs) for p, vs in everything.items()
    }


@pytest.mark.timeout(180)
async def test_idempotent_records_survive_a_broker_kill_9_exactly_once(make_broker_process):
    """Records keep being sent while the broker is killed and restarted on its log dir: every
    one is acknowledged, and the log holds each exactly once, in the order sent (retries of
    batches written before the kill are recognised by their sequences)."""
    broker = make_broker_process("log.flush.interval.messages=1").start()
    topic = await create_topic(broker.bootstrap, "ours-crash")
    per_round = 600
    sent: list[tuple[int, bytes]] = []
    futures = []
    async with Producer(broker.bootstrap, linger_ms=2, batch_size=2048) as producer:

        async def send(count: int) -> None:
            for _ in range(count):
                i = len(sent)
                sent.append((i % PARTITIONS, b"n-%d" % i))
                futures.append(await producer.send(topic, sent[-1][1], partition=i % PARTITIONS))
                if i % 50 == 0:
                    await asyncio.sleep(0)  # let the sender run between bursts

        for _ in range(2):
            await send(per_round)
            # Killed while records are still being answered.
            while sum(f.done() for f in futures) < len(futures) - per_round // 2:
                await asyncio.sleep(0.001)
            broker.kill()
            await send(per_round // 2)
            await asyncio.to_thread(broker.start)
        await send(per_round)
        acked = [await f for f in futures]
    assert len(acked) == len(sent)
    got = test_confluent_kafka.consume_all(
        broker.bootstrap, topic, PARTITIONS, len(sent), row=lambda m: (m.offset(), m.value())
    )
    for p in range(PARTITIONS):
        expected = [v for q, v in sent if q == p]
        assert [v for _, v in got[p]] == expected, f"partition {p}: duplicated, lost or reordered"
        assert sorted(m.offset for m in acked if m.partition == p) == [o for o, _ in got[p]]
    assert broker.stop() == 0, "".join(broker.output[-50:])


async def test_buffer_memory_blocks_and_undelivered_records_time_out(make_broker_process):
    """With the broker gone, a send that needs more than buffer_memory fails after
    max_block_ms, a queued record after delivery_timeout_ms; once the broker is back the
    producer goes on (at a new epoch: the expired batch's sequence was left unresolved)."""
    broker = make_broker_process().start()
    topic = await create_topic(broker.bootstrap, "ours-timeouts")
    async with Producer(
        broker.bootstrap,
        linger_ms=0,
        batch_size=16_384,
        buffer_memory=20_000,
        max_block_ms=300,
        request_timeout_ms=500,
        delivery_timeout_ms=1_500,
    ) as producer:
        assert (await producer.send_and_wait(topic, b"before", partition=0)).offset == 0
        broker.kill()
        queued = await producer.send(topic, b"lost", partition=0)
        with pytest.raises(KafkaTimeoutError, match="buffer_memory"):
            await producer.send(topic, b"no room", partition=1)
        with pytest.raises(KafkaTimeoutError, match="delivery_timeout_ms"):
            await queued
        await asyncio.to_thread(broker.start)
        assert (await producer.send_and_wait(topic, b"after", partition=0)).offset == 1
    got = test_confluent_kafka.consume_all(
        broker.bootstrap, topic, PARTITIONS, 2, row=lambda m: m.value()
    )
    assert got == {0: [b"before", b"after"], 1: [], 2: []}
    assert broker.stop() == 0, "".join(broker.output[-50:])


async def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    broker_process,
):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, "ours-fence", partitions=1)
    txn_id = topic_name("fenced")
    async with Producer(bootstrap, transactional_id=txn_id) as first:
        await first.init_transactions()
        first.begin_transaction()
        await first.send_and_wait(topic, b"zombie", partition=0)
        async with Producer(bootstrap, transactional_id=txn_id) as second:
            await second.init_transactions()  # aborts the first one's transaction
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
            # Fatal: the first producer can only be closed.
            with pytest.raises(ProducerFencedError):
                first.begin_transaction()
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"again", partition=0)
            second.begin_transaction()
            await second.send(topic, b"successor", partition=0)
            await second.commit_transaction()
    ends = wait_stable(bootstrap, topic, partitions=1)
    got = CLIENTS[0].read(bootstrap, topic, READ_COMMITTED, ends)
    assert [v for _, v in got[0]] == [b"successor"]


async def test_a_failed_record_makes_the_transaction_abortable_and_abort_bumps_the_epoch(
    broker_process,
):
    """A record the broker refuses leaves its sequence unresolved: the transaction can only
    be aborted, and the abort takes the next epoch (InitProducerId with the current id and
    epoch, KIP-360) so the next transaction's sequences start afresh."""
    bootstrap = broker_process.bootstrap
    topic = topic_name("ours-abortable")
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1, {"max.message.bytes": "1000"})])
    txn_id = topic_name("abortable")

    async def epoch() -> int:
        async with AdminClient(bootstrap) as admin:
            return (await admin.describe_transaction(txn_id)).producer_epoch

    async with Producer(bootstrap, transactional_id=txn_id) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send_and_wait(topic, b"first", partition=0)
        with pytest.raises(KafkaAdminError, match="MESSAGE_TOO_LARGE"):
            await producer.send_and_wait(topic, b"x" * 5000, partition=0)
        with pytest.raises(TransactionAbortableError, match="MESSAGE_TOO_LARGE"):
            await producer.commit_transaction()
        before = await epoch()
        await producer.abort_transaction()
        assert await epoch() == before + 1
        producer.begin_transaction()
        await producer.send(topic, b"second", partition=0)
        await producer.commit_transaction()
    ends = wait_stable(bootstrap, topic, partitions=1)
    got = await asyncio.to_thread(CLIENTS[0].read, bootstrap, topic, READ_COMMITTED, ends)
    assert [v for _, v in got[0]] == [b"second"]


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([ConfluentTopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        consumer.close()


async def test_offsets_sent_with_a_transaction_are_the_groups_once_committed(broker_process):
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, "ours-offsets", partitions=1)
    group = topic_name("ours-group")
    async with Producer(bootstrap, transactional_id=topic_name("offsets")) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send(topic, b"out", partition=0)
        await producer.send_offsets_to_transaction(
            {(topic, 0): OffsetAndMetadata(42, "note")}, ConsumerGroupMetadata(group)
        )
        await producer.commit_transaction()
        assert committed_offset(bootstrap, group, topic) == 42
        producer.begin_transaction()
        await producer.send_offsets_to_transaction({(topic, 0): 50}, group)
        await producer.abort_transaction()
        assert committed_offset(bootstrap, group, topic) == 42


async def test_a_member_fenced_out_of_the_group_cannot_commit_offsets(broker_process):
    """KIP-447: the group coordinator checks the member id and generation the producer
    passes on; a stale member's offsets make the transaction abortable."""
    bootstrap = broker_process.bootstrap
    topic = await create_topic(bootstrap, "ours-447", partitions=1)
    group = topic_name("ours-447")
    member = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic"}
    )
    member.subscribe([topic])
    try:
        while not member.assignment():
            message = member.poll(0.2)
            assert message is None or message.error().code() == KafkaError._PARTITION_EOF
        stale = ConsumerGroupMetadata(group, generation_id=1, member_id="gone-member")
        async with Producer(bootstrap, transactional_id=topic_name("447")) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send(topic, b"out", partition=0)
            with pytest.raises(TransactionAbortableError) as raised:
                await producer.send_offsets_to_transaction({(topic, 0): 7}, stale)
            assert raised.value.code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation)
            with pytest.raises(TransactionAbortableError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            producer.begin_transaction()  # usable again
            await producer.abort_transaction()
    finally:
        member.close()


async def test_two_phase_commit_needs_the_broker_property(broker_process):
    async with Producer(
        broker_process.bootstrap,
        transactional_id=topic_name("2pc-off"),
        transaction_two_phase_commit_enable=True,
    ) as producer:
        with pytest.raises(KafkaAdminError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
            await producer.init_transactions()


# A process that prepares a transaction, prints its state and waits to be killed.
PREPARE = """
import asyncio, sys
from broker.client.producer import Producer

async def main(bootstrap, topic, txn_id):
    producer = Producer(
        bootstrap, transactional_id=txn_id, transaction_two_phase_commit_enable=True
    )
    await producer.start()
    await producer.init_transactions()
    producer.begin_transaction()
    for value in (b"c0", b"c1"):
        await producer.send(topic, value, partition=0)
    print(await producer.prepare_transaction(), flush=True)
    await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_prepared_transaction_is_completed_by_another_producer(make_broker_process):
    """KIP-939: one process prepares and hands its state over as text, then is killed; a
    second producer with the same transactional id keeps the prepared transaction at
    init_transactions and commits it, because the state matches; a state that does not
    match aborts."""
    broker = make_broker_process("transaction.two.phase.commit.enable=true").start()
    bootstrap = broker.bootstrap
    topic = await create_topic(bootstrap, "ours-2pc", partitions=1)
    txn_id = topic_name("2pc")
    options = dict(transactional_id=txn_id, transaction_two_phase_commit_enable=True)

    preparer = subprocess.Popen(
        [sys.executable, "-c", PREPARE, bootstrap, topic, txn_id],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        handed_over = await asyncio.to_thread(preparer.stdout.readline)
    finally:
        preparer.kill()
        preparer.wait()
    async with Producer(bootstrap, **options) as second:
        await second.init_transactions(keep_prepared_txn=True)
        await second.complete_transaction(PreparedTxnState.from_json(handed_over))
        # Its own transactions go on with its own epoch.
        second.begin_transaction()
        await second.send(topic, b"next", partition=0)
        stale = await second.prepare_transaction()
    async with Producer(bootstrap, **options) as third:
        await third.init_transactions(keep_prepared_txn=True)
        wrong = PreparedTxnState(txn_id, stale.producer_id, stale.producer_epoch + 7)
        await third.complete_transaction(wrong)
    ends = wait_stable(bootstrap, topic, partitions=1)
    got = CLIENTS[0].read(bootstrap, topic, READ_COMMITTED, ends)
    assert [v for _, v in got[0]] == [b"c0", b"c1"]
    assert broker.stop() == 0, "".join(broker.output[-50:])
