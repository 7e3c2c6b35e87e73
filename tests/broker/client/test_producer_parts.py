"""The producer's sans-io parts without a broker: the accumulator's batching, linger,
draining, retries in sequence order, splitting and expiry; the partitioner (murmur2 keys,
KIP-480 sticky partitions); the transaction manager's state machine and KIP-98/KIP-360
sequence rules; the option table's idempotence rules."""

from __future__ import annotations

import asyncio
import random
import traceback

import pytest
from kio.schema.errors import ErrorCode

from broker.client.errors import (
    IllegalStateError,
    KafkaAdminError,
    ProducerFencedError,
    TransactionAbortableError,
)
from broker.client.models import RecordMetadata, TopicPartition
from broker.client.options import ConfigError
from broker.client.producer import PreparedTxnState, Producer
from broker.client.producer.accumulator import RecordAccumulator, record_size
from broker.client.producer.config import producer_config
from broker.client.producer.partitioner import Partitioner
from broker.client.producer.transaction_manager import TransactionManager, TxnState
from broker.client.routing import partition_for_key
from broker.records import compression as codecs
from broker.records.batch import decode_batch, validate_produce_batch

TP = TopicPartition("t", 0)


def accumulator(**overrides) -> RecordAccumulator:
    options = dict(
        batch_size=1000,
        linger_ms=5,
        compression=codecs.NONE,
        buffer_memory=10_000,
        retry_backoff_ms=100,
        retry_backoff_max_ms=1000,
    )
    return RecordAccumulator(**{**options, **overrides})


def append(acc: RecordAccumulator, value: bytes, now: int = 0, tp: TopicPartition = TP):
    """What Producer.send does: the open batch, else a new one."""
    headers = [("h", b"1")]
    size = record_size(b"k", value, headers)
    batch = acc.try_append(tp, b"k", value, headers, 1000 + now, size)
    if batch is None:
        batch = acc.create_batch(tp, b"k", value, headers, 1000 + now, size, now)
    return batch, batch.last_future()


def always(_batch) -> bool:
    return True


async def test_records_fill_a_batch_then_open_the_next():
    acc = accumulator()
    first, _ = append(acc, b"x" * 400)
    assert append(acc, b"x" * 400)[0] is first
    second, _ = append(acc, b"x" * 400)
    assert second is not first and first.count == 2
    assert acc.memory_used == 2000
    # A full batch goes at once; the partition's last one waits for linger.ms.
    assert acc.ready(0) == ([TP], -1)
    [drained] = acc.drain([TP], 1_000_000, 0, always)
    assert drained is first and acc.ready(1) == ([], 4) and acc.ready(5) == ([TP], -1)


async def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own():
    acc = accumulator()
    batch, _ = append(acc, b"x" * 5000)
    assert batch.capacity > 5000 and batch.is_full
    assert append(acc, b"y")[0] is not batch


async def test_drained_batch_is_a_valid_compressed_v2_batch_and_resolves_its_futures():
    acc = accumulator(compression=codecs.ZSTD, batch_size=100_000)
    futures = [append(acc, b"value %d" % i, now=i)[1] for i in range(3)]
    acc.closing = True
    [batch] = acc.drain([TP], 1_000_000, 0, always)
    batch.set_producer_state(7, 2, 40)
    data = batch.frame(transactional=True)
    header = validate_produce_batch(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.is_transactional and header.compression == codecs.ZSTD
    _, records = decode_batch(data)
    assert [r.value for r in records] == [b"value 0", b"value 1", b"value 2"]
    batch.complete(100)
    assert [f.result() for f in futures] == [
        RecordMetadata("t", 0, 100 + i, 1000 + i) for i in range(3)
    ]


async def test_drain_respects_max_request_size_but_always_sends_one_batch():
    acc = accumulator(linger_ms=0)
    tps = [TopicPartition("t", p) for p in range(3)]
    for tp in tps:
        append(acc, b"x" * 600, tp=tp)
    assert len(acc.drain(tps, 10, 0, always)) == 1
    assert len(acc.drain(tps, 1500, 0, always)) == 2


async def test_retries_go_back_ahead_of_new_batches_in_sequence_order():
    acc = accumulator(linger_ms=0, batch_size=100)
    batches = [append(acc, b"x" * 80)[0] for _ in range(3)]
    drained = acc.drain([TP], 10_000, 0, always) + acc.drain([TP], 10_000, 0, always)
    for sequence, batch in enumerate(drained):
        batch.set_producer_state(1, 0, sequence)
    acc.reenqueue(drained[1], now_ms=10)
    acc.reenqueue(drained[0], now_ms=10)
    assert list(acc.batches[TP]) == [drained[0], drained[1], batches[2]]
    # The retry backoff holds them back, longer after each attempt (up to its maximum).
    assert acc.ready(50) == ([], 60)
    assert acc.drain([TP], 10_000, 50, always) == []
    assert acc.drain([TP], 10_000, 110, always) == [drained[0]]
    acc.reenqueue(drained[0], now_ms=200)
    assert acc.retry_due_ms(drained[0]) == 400
    drained[0].attempts = 12
    assert acc.retry_due_ms(drained[0]) == 1200


async def test_split_keeps_records_futures_and_sequences():
    acc = accumulator(linger_ms=0, batch_size=10_000)
    futures = [append(acc, b"v%d" % i)[1] for i in range(5)]
    # Waiting since before the split: they follow their records into the halves.
    waiting = [asyncio.ensure_future(f) for f in (futures[0], futures[4])]
    called = []
    futures[3].add_done_callback(called.append)
    [batch] = acc.drain([TP], 100_000, 0, always)
    batch.set_producer_state(3, 1, 20)
    first, second = acc.split_and_reenqueue(batch)
    assert (first.count, first.base_sequence, second.count, second.base_sequence) == (2, 20, 3, 22)
    assert list(acc.batches[TP]) == [first, second]
    assert acc.memory_used == first.capacity + second.capacity
    await asyncio.sleep(0)
    assert not any(f.done() for f in futures + waiting) and not called
    for part, base in ((first, 0), (second, 2)):
        acc.drain([TP], 100_000, 0, always)
        part.complete(base)
    assert [f.result().offset for f in futures] == [0, 1, 2, 3, 4]
    assert [(await w).offset for w in waiting] == [0, 4]
    await asyncio.sleep(0)
    assert called == [futures[3]]


async def test_records_settle_with_their_batch_and_can_be_awaited_again():
    acc = accumulator(batch_size=100_000)
    futures = [append(acc, b"v%d" % i)[1] for i in range(3)]
    assert not futures[0].done() and not futures[0].cancelled()
    with pytest.raises(asyncio.InvalidStateError):
        futures[0].result()
    # A caller that gives up waiting (a timeout, a cancelled task) leaves the others waiting.
    given_up = asyncio.ensure_future(futures[0])
    await asyncio.sleep(0)
    given_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await given_up
    later = asyncio.ensure_future(futures[1])
    [batch] = acc.take_all()
    error = KafkaAdminError.from_code(ErrorCode.not_enough_replicas, None, "t-0")
    batch.fail(error)
    batch.complete(7)  # the first outcome stands
    for future in futures:
        assert future.done() and future.exception() is error
        for _ in range(2):
            with pytest.raises(KafkaAdminError) as raised:
                await future
            assert raised.value is error
    with pytest.raises(KafkaAdminError):
        await later
    # Each raise starts from the same traceback instead of growing it.
    depths = []
    for _ in range(3):
        with pytest.raises(KafkaAdminError) as raised:
            futures[2].result()
        depths.append(len(traceback.extract_tb(raised.value.__traceback__)))
    assert len(set(depths)) == 1


async def test_queued_batches_expire_after_delivery_timeout():
    acc = accumulator()
    old, _ = append(acc, b"x" * 900, now=0)
    new, _ = append(acc, b"x" * 900, now=50)
    assert acc.expire(60, delivery_timeout_ms=30) == [old]
    assert list(acc.batches[TP]) == [new]
    # One sent, then put back for a retry, expires by its creation time too.
    [sent] = acc.drain([TP], 10_000, 60, always)
    assert acc.expire(85, delivery_timeout_ms=30) == [] and not acc.batches
    acc.reenqueue(sent, now_ms=85)
    assert acc.expire(90, delivery_timeout_ms=30) == [sent]


def test_keyed_records_hash_and_keyless_ones_stick_until_a_new_batch():
    partitioner = Partitioner(rng=random.Random(3))
    assert partitioner.partition("t", b"key", 7, range(7)) == partition_for_key(b"key", 7)
    sticky = partitioner.partition("t", None, 7, range(7))
    assert {partitioner.partition("t", None, 7, range(7)) for _ in range(20)} == {sticky}
    partitioner.on_new_batch("t", sticky, 7, range(7))
    moved = partitioner.partition("t", None, 7, range(7))
    assert moved != sticky
    # Another topic's new batch, or a stale report, moves nothing.
    partitioner.on_new_batch("t", sticky, 7, range(7))
    assert partitioner.partition("t", None, 7, range(7)) == moved
    # Only partitions with a leader are chosen.
    assert {Partitioner().partition("u", None, 7, [4]) for _ in range(5)} == {4}
    ignoring = Partitioner(ignore_keys=True, rng=random.Random(1))
    assert len({ignoring.partition("t", b"k%d" % i, 7, range(7)) for i in range(20)}) == 1


def transactional(two_phase: bool = False) -> TransactionManager:
    txn = TransactionManager("tid", two_phase_commit=two_phase)
    txn.begin_init()
    txn.complete_init(5, 0)
    return txn


def test_transaction_state_machine_refuses_calls_out_of_turn():
    txn = TransactionManager("tid")
    with pytest.raises(IllegalStateError, match="init_transactions"):
        txn.begin_transaction()
    with pytest.raises(IllegalStateError, match="cannot send"):
        txn.check_send()
    txn.begin_init()
    txn.complete_init(5, 0)
    with pytest.raises(IllegalStateError, match="init_transactions in state READY"):
        txn.begin_init()
    with pytest.raises(IllegalStateError, match="commit_transaction in state READY"):
        txn.begin_commit()
    txn.begin_transaction()
    with pytest.raises(IllegalStateError, match="begin_transaction in state IN_TRANSACTION"):
        txn.begin_transaction()
    txn.check_send()
    txn.begin_commit()
    txn.end_transaction()
    assert txn.state is TxnState.READY
    with pytest.raises(IllegalStateError, match="no transactional_id"):
        TransactionManager(None).begin_transaction()
    with pytest.raises(IllegalStateError, match="two_phase_commit"):
        transactional().prepare()


def test_an_abortable_error_must_be_aborted_and_a_fatal_one_ends_everything():
    txn = transactional()
    txn.begin_transaction()
    error = txn.transaction_error(ErrorCode.topic_authorization_failed, None, "t")
    assert isinstance(error, TransactionAbortableError)
    assert error.code == ErrorCode.topic_authorization_failed
    for call in (txn.check_send, txn.begin_commit):
        with pytest.raises(TransactionAbortableError):
            call()
    txn.begin_abort()
    txn.end_transaction()
    txn.begin_transaction()
    fenced = txn.transaction_error(ErrorCode.producer_fenced, None, "tid")
    assert isinstance(fenced, ProducerFencedError) and txn.state is TxnState.FATAL_ERROR
    for call in (txn.check_send, txn.begin_abort, txn.begin_commit, txn.begin_transaction):
        with pytest.raises(ProducerFencedError):
            call()


def test_prepared_state_round_trips_and_complete_compares_it():
    txn = transactional(two_phase=True)
    txn.begin_transaction()
    state = txn.prepare()
    assert state == PreparedTxnState("tid", 5, 0)
    assert PreparedTxnState.from_json(str(state)) == state
    assert PreparedTxnState.from_json(state.to_json()) == state
    with pytest.raises(ValueError, match="not a prepared"):
        PreparedTxnState.from_json('{"producer_id": 1}')
    other = TransactionManager("tid", two_phase_commit=True)
    other.begin_init(keep_prepared_txn=True)
    other.complete_init(5, 2, ongoing_producer_id=5, ongoing_producer_epoch=0)
    assert other.state is TxnState.PREPARED_TRANSACTION and other.ongoing_txn == state
    assert (other.producer_id, other.producer_epoch) == (5, 2)


async def test_sequences_survive_retries_and_an_unresolved_one_bumps_the_epoch():
    acc = accumulator(linger_ms=0, batch_size=100)
    txn = TransactionManager(None)
    txn.set_producer_id(9, 0)
    for _ in range(3):
        append(acc, b"x" * 80)
    sent = []
    for _ in range(3):
        [batch] = acc.drain([TP], 10_000, 0, txn.may_send)
        txn.assign_sequence(batch)
        sent.append(batch)
    assert [b.base_sequence for b in sent] == [0, 1, 2]
    first, second, third = sent
    # The first is lost on the way: the two behind it are out of order, retried as they are.
    assert txn.can_retry(second, ErrorCode.out_of_order_sequence_number)
    assert not txn.epoch_bump_required
    acc.reenqueue(second, 0)
    # Only the earliest unanswered batch of a partition may go again.
    assert not txn.may_send(second)
    txn.batch_done(first, succeeded=True)
    assert txn.may_send(second)
    # Right after the last written sequence, OUT_OF_ORDER means a lost write: new epoch.
    assert txn.can_retry(second, ErrorCode.out_of_order_sequence_number)
    assert txn.epoch_bump_required and not txn.may_send(third)
    txn.batch_done(third, succeeded=False)
    assert txn.bump_epoch_locally()
    assert (txn.producer_id, txn.producer_epoch, second.base_sequence) == (9, 1, -1)
    txn.assign_sequence(second)
    assert second.base_sequence == 0 and second.producer_epoch == 1


async def test_a_transactional_producer_fails_a_lost_sequence_and_must_abort():
    acc = accumulator(linger_ms=0)
    txn = transactional()
    txn.begin_transaction()
    append(acc, b"x")
    assert acc.drain([TP], 10_000, 0, txn.may_send) == []  # not yet added to the transaction
    txn.partitions_added({TP})
    [batch] = acc.drain([TP], 10_000, 0, txn.may_send)
    txn.assign_sequence(batch)
    assert not txn.can_retry(batch, ErrorCode.out_of_order_sequence_number)
    error = KafkaAdminError.from_code(ErrorCode.out_of_order_sequence_number)
    assert txn.batch_failed(batch, error) is error
    assert txn.state is TxnState.ABORTABLE_ERROR and txn.epoch_bump_required
    with pytest.raises(TransactionAbortableError, match="OUT_OF_ORDER"):
        txn.begin_commit()
    txn.begin_abort()


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"enable_idempotence": True, "acks": 1}, "acks"),
        ({"enable_idempotence": True, "retries": 0}, "retries"),
        ({"enable_idempotence": True, "max_in_flight_requests_per_connection": 6}, "max_in"),
        ({"transactional_id": "t", "acks": 0}, "acks"),
        ({"transactional_id": "t", "enable_idempotence": False}, "enable_idempotence"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"acks": "most"}, "acks"),
        ({"compression_type": "brotli"}, "compression_type"),
        ({"lingerms": 5}, "lingerms"),
        ({"delivery_timeout_ms": 1000}, "delivery_timeout_ms"),
        ({"transaction_two_phase_commit_enable": True}, "transaction_two_phase_commit_enable"),
    ],
)
def test_options_are_checked_at_construction(options, option):
    with pytest.raises(ConfigError) as raised:
        Producer("127.0.0.1:9092", **options)
    assert raised.value.option.startswith(option)


def test_idempotence_left_at_its_default_gives_way_to_settings_it_cannot_work_with():
    assert producer_config({}).enable_idempotence
    assert producer_config({}).acks == -1
    assert not producer_config({"acks": 1}).enable_idempotence
    assert not producer_config({"acks": "0"}).enable_idempotence
    assert not producer_config({"max_in_flight_requests_per_connection": 10}).enable_idempotence
    # A default delivery timeout below linger + request timeout is raised to it.
    assert producer_config({"linger_ms": 200_000}).delivery_timeout_ms == 230_000


def test_errors_are_kafka_errors_with_their_names():
    fenced = ProducerFencedError.from_code(ErrorCode.producer_fenced)
    assert isinstance(fenced, KafkaAdminError) and fenced.name == "PRODUCER_FENCED"
