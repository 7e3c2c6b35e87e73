"""Transaction version 2 (KIP-890 part 2) at the protocol level: Produce v12 adds its partition
to the transaction, TxnOffsetCommit v5 the group's, EndTxn v5 bumps the epoch at every end and
answers the next identity, the markers carry the bumped epoch; Produce v13 names topics by id.
A cluster at transaction.version 1 refuses a transactional Produce v12 (UNSUPPORTED_VERSION)
and serves EndTxn v5 and TxnOffsetCommit v5 as Kafka does."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_produce_fetch import fetch_request, fetched, produce_request
from test_transactions_api import (
    TOPIC,
    TV2_END_TXN,
    TV2_TXN_OFFSET_COMMIT,
    begin,
    end_txn,
    finalize_transaction_version,
    init_producer_id,
    offset_fetch,
    produce,
    txn_batch,
    txn_offset_commit,
)

from broker.coordinator.transaction_coordinator import LAST_EPOCH, MAX_PRODUCER_EPOCH, TxnResult
from broker.coordinator.transaction_records import TransactionState
from broker.records.batch import build_batch

TV2_PRODUCE = 12
TV1_PRODUCE = 11
# The background abort of timed-out transactions stays out of the way; tests run it.
NO_TIMER = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}


async def init(client, txn="t"):
    response = await client.send(init_producer_id(txn))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


async def commit_offset_v5(client, pid, epoch, offset) -> ErrorCode:
    """TxnOffsetCommit v5 of `offset` for group "g" in transaction "t"; its error."""
    response = await client.send(
        txn_offset_commit("t", pid, epoch, "g", offset, v=TV2_TXN_OFFSET_COMMIT)
    )
    return response.topics[0].partitions[0].error_code


async def committed_offset(client) -> int:
    """Group "g"'s committed offset (-1 while a transaction holds it)."""
    fetched = await client.send(offset_fetch("g"))
    return fetched.groups[0].topics[0].partitions[0].committed_offset


def offsets_partition_in_transaction(broker) -> bool:
    partition = broker.group_coordinator.partition_for("g")
    partitions = broker.transaction_coordinator.transactions["t"].partitions
    return partitions == {("__consumer_offsets", partition)}


async def end(client, txn, pid, epoch, commit):
    return await client.send(end_txn(txn, pid, epoch, commit, v=TV2_END_TXN))


def rewrite_state(broker, txn="t", **changes):
    """The id's transaction state as `changes` make it (say, the epoch after that many
    transactions), written to `__transaction_state` as a transition is."""
    meta = dataclasses.replace(broker.transaction_coordinator.transactions[txn], **changes)
    broker.transaction_runtime.apply(TxnResult([meta.record()]))


def stable(log) -> bool:
    return log.last_stable_offset == log.high_watermark


async def test_produce_v12_joins_the_transaction_and_every_end_bumps_the_epoch(
    broker, broker_client
):
    topic = await broker.create_topic(TOPIC, 2, {})
    pid, epoch = await init(broker_client)
    log = broker.replica_manager.log(TOPIC, 0)
    for n, commit in enumerate((True, False, True)):
        batch = txn_batch(pid, epoch, 0, 2)  # sequences restart at 0 with every epoch
        written = await produce(broker_client, batch, txn="t", v=TV2_PRODUCE)
        assert written.error_code == ErrorCode.none
        meta = broker.transaction_coordinator.transactions["t"]
        assert (meta.state.display_name, meta.partitions) == ("Ongoing", {(TOPIC, 0)})
        assert log.last_stable_offset < log.high_watermark
        ended = await end(broker_client, "t", pid, epoch, commit)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
        assert log.last_stable_offset == log.high_watermark == 3 * (n + 1)
        (producer,) = log.producers()
        assert producer.producer_epoch == epoch + 1  # the marker's
        # The previous epoch is fenced from the next transaction.
        stale = await produce(broker_client, txn_batch(pid, epoch, 2), txn="t", v=TV2_PRODUCE)
        assert stale.error_code == ErrorCode.invalid_producer_epoch
        epoch += 1
    _, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    assert [h.producer_epoch for h, _ in batches if h.is_control] == [1, 2, 3]
    # Nothing joined the partition nobody produced to.
    assert broker.replica_manager.log(TOPIC, 1).log_end_offset == 0


async def test_a_retried_end_txn_with_the_previous_epoch_gets_the_same_answer(
    broker, broker_client
):
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await init(broker_client)
    await produce(broker_client, txn_batch(pid, epoch, 0), txn="t", v=TV2_PRODUCE)
    first = await end(broker_client, "t", pid, epoch, True)
    retried = await end(broker_client, "t", pid, epoch, True)
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (
        ErrorCode.none,
        first.producer_id,
        first.producer_epoch,
    )
    other = await end(broker_client, "t", pid, epoch, False)
    assert other.error_code == ErrorCode.invalid_txn_state
    assert (other.producer_id, other.producer_epoch) == (-1, -1)
    assert broker.replica_manager.log(TOPIC, 0).log_end_offset == 2  # one marker
    # An empty abort bumps too; an empty commit is refused.
    assert (await end(broker_client, "t", pid, epoch + 1, True)).error_code == (
        ErrorCode.invalid_txn_state
    )
    aborted = await end(broker_client, "t", pid, epoch + 1, False)
    assert (aborted.error_code, aborted.producer_epoch) == (ErrorCode.none, epoch + 2)


async def test_init_producer_id_fences_a_transaction_version_2_producer(broker, broker_client):
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await init(broker_client)
    await produce(broker_client, txn_batch(pid, epoch, 0), txn="t", v=TV2_PRODUCE)
    fencing = await broker_client.send(init_producer_id("t"))
    assert fencing.error_code == ErrorCode.concurrent_transactions
    log = broker.replica_manager.log(TOPIC, 0)
    assert log.last_stable_offset == log.high_watermark  # aborted
    for commit in (True, False):
        fenced = await end(broker_client, "t", pid, epoch, commit)
        assert fenced.error_code == ErrorCode.producer_fenced
    stale = await produce(broker_client, txn_batch(pid, epoch, 1), txn="t", v=TV2_PRODUCE)
    assert stale.error_code == ErrorCode.invalid_producer_epoch


async def test_txn_offset_commit_v5_adds_the_groups_partition(broker, broker_client):
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await init(broker_client)
    assert await commit_offset_v5(broker_client, pid, epoch, 42) == ErrorCode.none
    assert offsets_partition_in_transaction(broker)
    assert await committed_offset(broker_client) == -1
    ended = await end(broker_client, "t", pid, epoch, True)
    assert (ended.error_code, ended.producer_epoch) == (ErrorCode.none, epoch + 1)
    assert await committed_offset(broker_client) == 42
    # The old epoch cannot commit offsets into the next transaction.
    assert await commit_offset_v5(broker_client, pid, epoch, 43) == ErrorCode.producer_fenced


async def test_version_1_requests_still_work_on_a_version_2_cluster(broker, broker_client):
    """A client that does not turn transaction version 2 on keeps AddPartitionsToTxn and its
    epoch; the markers of a version 1 end carry the records' epoch."""
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await begin(broker_client, "t")
    await produce(broker_client, txn_batch(pid, epoch, 0), txn="t")
    ended = await broker_client.send(end_txn("t", pid, epoch, True))
    assert ended.error_code == ErrorCode.none
    assert broker.transaction_coordinator.transactions["t"].producer_epoch == epoch


async def test_a_version_1_cluster_refuses_produce_v12_and_serves_end_txn_v5(broker, broker_client):
    """Kafka serves EndTxn v5 and TxnOffsetCommit v5 as transaction version 2 by the request's
    version alone (a request of a version the broker can handle is handled); a transactional
    Produce v12 is refused, as Confluent's brokers do."""
    await finalize_transaction_version(broker_client, 1)
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await init(broker_client)
    produced = await produce(broker_client, txn_batch(pid, epoch, 0), txn="t", v=TV2_PRODUCE)
    assert produced.error_code == ErrorCode.unsupported_version
    assert await commit_offset_v5(broker_client, pid, epoch, 1) == ErrorCode.none
    assert offsets_partition_in_transaction(broker)
    ended = await end(broker_client, "t", pid, epoch, True)
    assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
    assert await committed_offset(broker_client) == 1
    # Produce v12 without a transaction is v11's.
    records = build_batch([(None, b"v", [], int(time.time() * 1000))])
    plain = await broker_client.send(produce_request(TOPIC, records, v=TV2_PRODUCE))
    assert plain.responses[0].partition_responses[0].error_code == ErrorCode.none


def produce_by_id(topic_id, records, v=13):
    part = req(0, v, "PartitionProduceData", index=0, records=records)
    return req(
        0,
        v,
        "ProduceRequest",
        acks=-1,
        timeout=ms(5000),
        transactional_id="t",
        topic_data=(req(0, v, "TopicProduceData", topic_id=topic_id, partition_data=(part,)),),
    )


@pytest.mark.parametrize("known", [True, False])
async def test_produce_v13_names_topics_by_id(broker, broker_client, known):
    topic = await broker.create_topic(TOPIC, 1, {})
    topic_id = topic.topic_id if known else uuid.uuid4()
    pid, epoch = await init(broker_client)
    response = await broker_client.send(produce_by_id(topic_id, txn_batch(pid, epoch, 0)))
    (answer,) = response.responses
    assert answer.topic_id == topic_id
    code = answer.partition_responses[0].error_code
    assert code == (ErrorCode.none if known else ErrorCode.unknown_topic_id)
    assert broker.replica_manager.log(TOPIC, 0).log_end_offset == (1 if known else 0)


async def test_the_bumped_state_survives_a_restart(tmp_path):
    async with running_broker(tmp_path / "logs") as (broker, client):
        await broker.create_topic(TOPIC, 1, {})
        pid, epoch = await init(client)
        await produce(client, txn_batch(pid, epoch, 0), txn="t", v=TV2_PRODUCE)
        assert (await end(client, "t", pid, epoch, True)).error_code == ErrorCode.none
    async with running_broker(tmp_path / "logs") as (broker, client):
        retried = await end(client, "t", pid, epoch, True)
        assert (retried.error_code, retried.producer_epoch) == (ErrorCode.none, epoch + 1)
        written = await produce(client, txn_batch(pid, epoch + 1, 0), txn="t", v=TV2_PRODUCE)
        assert written.error_code == ErrorCode.none


async def test_produce_v12_answers_concurrent_transactions_as_it_is(broker, broker_client):
    """While the transaction ends, Kafka 4.x answers a version 2 Produce CONCURRENT_TRANSACTIONS,
    which such clients retry; version 1 ones get the retriable NOT_ENOUGH_REPLICAS."""
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await init(broker_client)
    await produce(broker_client, txn_batch(pid, epoch, 0), txn="t", v=TV2_PRODUCE)
    # Caught between its Prepare record and its markers (as a crash leaves it).
    rewrite_state(broker, state=TransactionState.PREPARE_COMMIT)
    v2 = await produce(broker_client, txn_batch(pid, epoch, 1), txn="t", v=TV2_PRODUCE)
    assert v2.error_code == ErrorCode.concurrent_transactions
    v1 = await produce(broker_client, txn_batch(pid, epoch, 1), txn="t", v=TV1_PRODUCE)
    assert v1.error_code == ErrorCode.not_enough_replicas


async def test_end_txn_v5_allocates_a_producer_id_only_for_an_end_that_rotates(
    broker, broker_client
):
    await broker.create_topic(TOPIC, 1, {})
    pid, _ = await init(broker_client)
    rewrite_state(broker, producer_epoch=MAX_PRODUCER_EPOCH)
    await produce(broker_client, txn_batch(pid, MAX_PRODUCER_EPOCH, 0), txn="t", v=TV2_PRODUCE)
    for zombie_epoch in (MAX_PRODUCER_EPOCH - 1, MAX_PRODUCER_EPOCH - 2):
        fenced = await end(broker_client, "t", pid, zombie_epoch, True)
        assert fenced.error_code == ErrorCode.producer_fenced
    ended = await end(broker_client, "t", pid, MAX_PRODUCER_EPOCH, True)
    assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid + 1, 0)
    retried = await end(broker_client, "t", pid, MAX_PRODUCER_EPOCH, True)
    assert (retried.error_code, retried.producer_id) == (ErrorCode.none, pid + 1)
    # Ids are handed out in order: only the rotation used one up.
    other, _ = await init(broker_client, "other")
    assert other == pid + 2


@pytest.mark.parametrize("epoch", [MAX_PRODUCER_EPOCH - 1, MAX_PRODUCER_EPOCH])
@pytest.mark.parametrize("how", ["timeout", "new instance"])
async def test_a_fence_at_the_last_epochs_closes_the_partitions_transaction(tmp_path, epoch, how):
    """The coordinator's abort of a transaction at epoch 32765 or 32766 writes its marker at
    32767, above whatever the partition saw, so the partition's transaction closes; the id
    moves to a new producer id and the producer that was fenced cannot write again."""
    async with running_broker(tmp_path / "logs", **NO_TIMER) as (broker, client):
        await broker.create_topic(TOPIC, 1, {})
        pid, _ = await init(client)
        rewrite_state(broker, producer_epoch=epoch)
        written = await produce(client, txn_batch(pid, epoch, 0, 2), txn="t", v=TV2_PRODUCE)
        assert written.error_code == ErrorCode.none
        log = broker.replica_manager.log(TOPIC, 0)
        assert not stable(log)
        if how == "timeout":
            await broker.transaction_runtime.abort_timed_out(int(time.time() * 1000) + 61_000)
        else:
            fencing = await client.send(init_producer_id("t"))
            assert fencing.error_code == ErrorCode.concurrent_transactions
        assert stable(log) and log.last_stable_offset == 3  # the records and the marker
        (producer,) = log.producers()
        assert (producer.producer_id, producer.producer_epoch) == (pid, LAST_EPOCH)
        meta = broker.transaction_coordinator.transactions["t"]
        new_pid = meta.producer_id
        assert (meta.state, meta.producer_epoch, meta.previous_producer_id) == (
            TransactionState.COMPLETE_ABORT,
            0,
            pid,
        )
        assert new_pid != pid
        # The fenced producer writes nothing more, under either protocol, and cannot commit.
        for v in (TV2_PRODUCE, TV1_PRODUCE):
            stale = await produce(client, txn_batch(pid, epoch, 2), txn="t", v=v)
            assert stale.error_code != ErrorCode.none
        assert log.log_end_offset == 3
        committed = await end(client, "t", pid, epoch, True)
        assert committed.error_code != ErrorCode.none
        # The id goes on under the new producer id, also after a restart.
    async with running_broker(tmp_path / "logs", **NO_TIMER) as (broker, client):
        again = await client.send(init_producer_id("t"))
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, new_pid, 1)
        written = await produce(client, txn_batch(new_pid, 1, 0), txn="t", v=TV2_PRODUCE)
        assert written.error_code == ErrorCode.none
        ended = await end(client, "t", new_pid, 1, True)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, new_pid, 2)
        log = broker.replica_manager.log(TOPIC, 0)
        assert stable(log) and log.last_stable_offset == 5


async def test_an_overflowing_end_is_retried_across_a_restart(tmp_path):
    async with running_broker(tmp_path / "logs", **NO_TIMER) as (broker, client):
        await broker.create_topic(TOPIC, 1, {})
        pid, _ = await init(client)
        rewrite_state(broker, producer_epoch=MAX_PRODUCER_EPOCH)
        await produce(client, txn_batch(pid, MAX_PRODUCER_EPOCH, 0), txn="t", v=TV2_PRODUCE)
        ended = await end(client, "t", pid, MAX_PRODUCER_EPOCH, True)
        new_pid = ended.producer_id
        assert (ended.error_code, ended.producer_epoch) == (ErrorCode.none, 0) and new_pid != pid
        assert stable(broker.replica_manager.log(TOPIC, 0))
    async with running_broker(tmp_path / "logs", **NO_TIMER) as (broker, client):
        retried = await end(client, "t", pid, MAX_PRODUCER_EPOCH, True)
        assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (
            ErrorCode.none,
            new_pid,
            0,
        )
        other = await end(client, "t", pid, MAX_PRODUCER_EPOCH, False)
        assert other.error_code == ErrorCode.invalid_txn_state
        written = await produce(client, txn_batch(new_pid, 0, 0), txn="t", v=TV2_PRODUCE)
        assert written.error_code == ErrorCode.none


async def test_init_producer_id_naming_the_epoch_before_an_end_is_a_retry(broker, broker_client):
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await init(broker_client)
    await produce(broker_client, txn_batch(pid, epoch, 0), txn="t", v=TV2_PRODUCE)
    assert (await end(broker_client, "t", pid, epoch, True)).producer_epoch == epoch + 1
    retried = await broker_client.send(init_producer_id("t", producer_id=pid, producer_epoch=epoch))
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (
        ErrorCode.none,
        pid,
        epoch + 1,
    )


async def test_a_refused_marker_leaves_the_transaction_prepared(broker, broker_client):
    """A partition that saw a newer epoch of the producer refuses the marker; the transaction
    is then not completed (Kafka stops sending its markers), as completing it would leave
    that partition's transaction open with nothing to close it."""
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await begin(broker_client, "t")
    await produce(broker_client, txn_batch(pid, epoch, 0), txn="t")
    # The partition sees a later epoch of the producer than the coordinator has.
    rewrite_state(broker, producer_epoch=epoch + 5)
    later = await produce(broker_client, txn_batch(pid, epoch + 5, 0), txn="t")
    assert later.error_code == ErrorCode.none
    rewrite_state(broker, producer_epoch=epoch)
    ended = await broker_client.send(end_txn("t", pid, epoch, True))
    assert ended.error_code == ErrorCode.none
    meta = broker.transaction_coordinator.transactions["t"]
    assert meta.state is TransactionState.PREPARE_COMMIT
    retried = await broker_client.send(end_txn("t", pid, epoch, True))
    assert retried.error_code == ErrorCode.concurrent_transactions
