"""Transaction version 2 (KIP-890 part 2) at the protocol level: Produce v12 adds its partition
to the transaction, TxnOffsetCommit v5 the group's, EndTxn v5 bumps the epoch at every end and
answers the next identity, the markers carry the bumped epoch; Produce v13 names topics by id.
A cluster at transaction.version 1 answers these versions UNSUPPORTED_VERSION."""

from __future__ import annotations

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

from broker.records.batch import build_batch

TV2_PRODUCE = 12


async def init(client, txn="t"):
    response = await client.send(init_producer_id(txn))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


async def end(client, txn, pid, epoch, commit):
    return await client.send(end_txn(txn, pid, epoch, commit, v=TV2_END_TXN))


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
    committed = await broker_client.send(
        txn_offset_commit("t", pid, epoch, "g", 42, v=TV2_TXN_OFFSET_COMMIT)
    )
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    partition = broker.group_coordinator.partition_for("g")
    meta = broker.transaction_coordinator.transactions["t"]
    assert meta.partitions == {("__consumer_offsets", partition)}
    pending = await broker_client.send(offset_fetch("g"))
    assert pending.groups[0].topics[0].partitions[0].committed_offset == -1
    ended = await end(broker_client, "t", pid, epoch, True)
    assert (ended.error_code, ended.producer_epoch) == (ErrorCode.none, epoch + 1)
    fetched_offsets = await broker_client.send(offset_fetch("g"))
    assert fetched_offsets.groups[0].topics[0].partitions[0].committed_offset == 42
    # The old epoch cannot commit offsets into the next transaction.
    stale = await broker_client.send(
        txn_offset_commit("t", pid, epoch, "g", 43, v=TV2_TXN_OFFSET_COMMIT)
    )
    assert stale.topics[0].partitions[0].error_code == ErrorCode.producer_fenced


async def test_version_1_requests_still_work_on_a_version_2_cluster(broker, broker_client):
    """A client that does not turn transaction version 2 on keeps AddPartitionsToTxn and its
    epoch; the markers of a version 1 end carry the records' epoch."""
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await begin(broker_client, "t")
    await produce(broker_client, txn_batch(pid, epoch, 0), txn="t")
    ended = await broker_client.send(end_txn("t", pid, epoch, True))
    assert ended.error_code == ErrorCode.none
    assert broker.transaction_coordinator.transactions["t"].producer_epoch == epoch


async def test_a_version_1_cluster_refuses_the_version_2_requests(broker, broker_client):
    await finalize_transaction_version(broker_client, 1)
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await init(broker_client)
    produced = await produce(broker_client, txn_batch(pid, epoch, 0), txn="t", v=TV2_PRODUCE)
    assert produced.error_code == ErrorCode.unsupported_version
    committed = await broker_client.send(
        txn_offset_commit("t", pid, epoch, "g", 1, v=TV2_TXN_OFFSET_COMMIT)
    )
    assert committed.topics[0].partitions[0].error_code == ErrorCode.unsupported_version
    ended = await end(broker_client, "t", pid, epoch, False)
    assert ended.error_code == ErrorCode.unsupported_version
    assert broker.transaction_coordinator.transactions["t"].state.display_name == "Empty"
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
