"""The transaction APIs at the protocol level, at every advertised version, against an
in-process broker: a transaction's life (InitProducerId, AddPartitionsToTxn, produce,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn) and the operators' views and abort (KIP-664)."""

from __future__ import annotations

import asyncio
import time

import pytest
from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_produce_fetch import fetch_request, fetched, produce_request

from broker.apis import transactions
from broker.apis.registry import API_SPECS
from broker.records.batch import build_batch

TOPIC = "txn"


def versions(key):
    spec = API_SPECS[key]
    return range(spec.min_version, spec.max_version + 1)


def init_producer_id(txn, timeout_ms=60_000, v=API_SPECS[22].max_version, **kw):
    return req(
        22,
        v,
        "InitProducerIdRequest",
        transactional_id=txn,
        transaction_timeout=ms(timeout_ms),
        **kw,
    )


def add_partitions(txn, pid, epoch, partitions, v=API_SPECS[24].max_version):
    topics = {}
    for topic, p in partitions:
        topics.setdefault(topic, []).append(p)
    return req(
        24,
        v,
        "AddPartitionsToTxnRequest",
        v3_and_below_transactional_id=txn,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=tuple(
            req(24, v, "AddPartitionsToTxnTopic", name=t, partitions=tuple(ps))
            for t, ps in topics.items()
        ),
    )


def end_txn(txn, pid, epoch, commit, v=API_SPECS[26].max_version):
    return req(
        26,
        v,
        "EndTxnRequest",
        transactional_id=txn,
        producer_id=pid,
        producer_epoch=epoch,
        committed=commit,
    )


def add_offsets(txn, pid, epoch, group, v=API_SPECS[25].max_version):
    return req(
        25,
        v,
        "AddOffsetsToTxnRequest",
        transactional_id=txn,
        producer_id=pid,
        producer_epoch=epoch,
        group_id=group,
    )


def txn_offset_commit(txn, pid, epoch, group, offset, v=API_SPECS[28].max_version):
    part = req(
        28,
        v,
        "TxnOffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    return req(
        28,
        v,
        "TxnOffsetCommitRequest",
        transactional_id=txn,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=(req(28, v, "TxnOffsetCommitRequestTopic", name=TOPIC, partitions=(part,)),),
    )


def offset_fetch(group, v=9):
    topic = req(9, v, "OffsetFetchRequestTopics", name=TOPIC, partition_indexes=(0,))
    g = req(
        9,
        v,
        "OffsetFetchRequestGroup",
        group_id=group,
        member_id=None,
        member_epoch=-1,
        topics=(topic,),
    )
    return req(9, v, "OffsetFetchRequest", groups=(g,), require_stable=False)


def txn_batch(pid, epoch, seq, count=1):
    now = int(time.time() * 1000)
    records = [(None, b"v%d" % (seq + i), [], now) for i in range(count)]
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True
    )


async def produce(client, records, partition=0):
    # Kafka refuses transactional batches without a transactional id (TRANSACTIONAL_ID_
    # AUTHORIZATION_FAILED); which id does not matter without an authorizer.
    request = produce_request(TOPIC, records, partition=partition, transactional_id="any")
    response = await client.send(request)
    return response.responses[0].partition_responses[0]


async def begin(client, txn, *partitions, timeout_ms=60_000):
    init = await client.send(init_producer_id(txn, timeout_ms))
    assert init.error_code == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch
    response = await client.send(add_partitions(txn, pid, epoch, partitions or [(TOPIC, 0)]))
    codes = [
        p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]
    assert set(codes) == {ErrorCode.none}
    return pid, epoch


async def test_find_coordinator_for_transactions_creates_the_state_topic(broker, broker_client):
    v = API_SPECS[10].max_version
    response = await broker_client.send(
        req(10, v, "FindCoordinatorRequest", key_type=1, coordinator_keys=("t1",))
    )
    (coordinator,) = response.coordinators
    assert (coordinator.error_code, coordinator.node_id) == (ErrorCode.none, broker.node_id)
    assert broker.image.topic("__transaction_state").partitions == 50


@pytest.mark.parametrize("v", versions(26))
async def test_commit_and_abort_write_markers_at_every_end_txn_version(broker, broker_client, v):
    topic = await broker.create_topic(TOPIC, 1, {})
    for commit in (True, False):
        pid, epoch = await begin(broker_client, f"t-{v}-{commit}")
        assert (await produce(broker_client, txn_batch(pid, epoch, 0, 2))).error_code == 0
        log = broker.replica_manager.log(TOPIC, 0)
        assert log.last_stable_offset < log.high_watermark
        response = await broker_client.send(end_txn(f"t-{v}-{commit}", pid, epoch, commit, v=v))
        assert response.error_code == ErrorCode.none
        assert log.last_stable_offset == log.high_watermark
    _, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    controls = [h for h, _ in batches if h.is_control]
    assert len(controls) == 2


@pytest.mark.parametrize("v", versions(24))
async def test_add_partitions_refuses_unknown_partitions_and_stale_epochs(broker, broker_client, v):
    await broker.create_topic(TOPIC, 1, {})
    init = await broker_client.send(init_producer_id("t"))
    pid = init.producer_id
    response = await broker_client.send(add_partitions("t", pid, 0, [(TOPIC, 0), (TOPIC, 5)], v=v))
    codes = {
        p.partition_index: p.partition_error_code
        for p in response.results_by_topic_v3_and_below[0].results_by_partition
    }
    assert codes == {0: ErrorCode.operation_not_attempted, 5: ErrorCode.unknown_topic_or_partition}
    await broker_client.send(init_producer_id("t"))  # epoch 1 fences epoch 0
    response = await broker_client.send(add_partitions("t", pid, 0, [(TOPIC, 0)], v=v))
    code = response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    assert code == (ErrorCode.producer_fenced if v >= 2 else ErrorCode.invalid_producer_epoch)


@pytest.mark.parametrize("v", versions(22))
async def test_init_producer_id_fences_and_aborts_the_open_transaction(broker, broker_client, v):
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await begin(broker_client, "t")
    await produce(broker_client, txn_batch(pid, epoch, 0))
    fencing = await broker_client.send(init_producer_id("t", v=v))
    assert fencing.error_code == ErrorCode.concurrent_transactions
    log = broker.replica_manager.log(TOPIC, 0)
    assert log.last_stable_offset == log.high_watermark  # aborted
    retried = await broker_client.send(init_producer_id("t", v=v))
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (
        ErrorCode.none,
        pid,
        epoch + 2,
    )
    stale = await produce(broker_client, txn_batch(pid, epoch, 1))
    assert stale.error_code == ErrorCode.invalid_producer_epoch


@pytest.mark.parametrize("v", versions(28))
async def test_offsets_committed_in_a_transaction_appear_with_the_commit(broker, broker_client, v):
    await broker.create_topic(TOPIC, 1, {})
    txn, group = f"t{v}", f"g{v}"
    pid, epoch = await begin(broker_client, txn)
    assert (await broker_client.send(add_offsets(txn, pid, epoch, group))).error_code == 0
    response = await broker_client.send(txn_offset_commit(txn, pid, epoch, group, 42, v=v))
    assert response.topics[0].partitions[0].error_code == ErrorCode.none

    async def committed():
        fetched_ = await broker_client.send(offset_fetch(group))
        return fetched_.groups[0].topics[0].partitions[0].committed_offset

    assert await committed() == -1  # pending until the marker
    assert (await broker_client.send(end_txn(txn, pid, epoch, True))).error_code == 0
    assert await committed() == 42


@pytest.mark.parametrize("v", versions(25))
async def test_add_offsets_needs_the_current_epoch(broker, broker_client, v):
    init = await broker_client.send(init_producer_id("t"))
    ok = await broker_client.send(add_offsets("t", init.producer_id, 0, "g", v=v))
    assert ok.error_code == ErrorCode.none
    stale = await broker_client.send(add_offsets("t", init.producer_id, 1, "g", v=v))
    assert stale.error_code == (
        ErrorCode.producer_fenced if v >= 2 else ErrorCode.invalid_producer_epoch
    )
    empty = await broker_client.send(add_offsets("t", init.producer_id, 0, "", v=v))
    assert empty.error_code == ErrorCode.invalid_group_id


async def test_list_and_describe_transactions_and_producers(broker, broker_client):
    await broker.create_topic(TOPIC, 2, {})
    pid, epoch = await begin(broker_client, "open", (TOPIC, 0), (TOPIC, 1))
    await produce(broker_client, txn_batch(pid, epoch, 0, 3), partition=1)
    done_pid, done_epoch = await begin(broker_client, "done")
    await broker_client.send(end_txn("done", done_pid, done_epoch, True))
    metrics = broker.metrics.render().decode()
    assert "fjord_transactional_ids_active 2.0" in metrics
    assert "fjord_transactions_ongoing 1.0" in metrics
    assert "fjord_transactions_oldest_ongoing_age_seconds " in metrics

    for v in versions(66):
        listed = await broker_client.send(
            req(
                66,
                v,
                "ListTransactionsRequest",
                state_filters=("Ongoing", "Bogus"),
                producer_id_filters=(),
                duration_filter=-1,
            )
        )
        assert [s.transactional_id for s in listed.transaction_states] == ["open"]
        assert listed.unknown_state_filters == ("Bogus",)
    everything = await broker_client.send(
        req(
            66,
            1,
            "ListTransactionsRequest",
            state_filters=(),
            producer_id_filters=(done_pid,),
            duration_filter=-1,
        )
    )
    assert [(s.transactional_id, s.transaction_state) for s in everything.transaction_states] == [
        ("done", "CompleteCommit")
    ]

    described = await broker_client.send(
        req(65, 0, "DescribeTransactionsRequest", transactional_ids=("open", "missing"))
    )
    open_, missing = described.transaction_states
    assert (open_.transaction_state, open_.producer_id) == ("Ongoing", pid)
    assert [(t.topic, t.partitions) for t in open_.topics] == [(TOPIC, (0, 1))]
    assert missing.error_code == ErrorCode.transactional_id_not_found

    producers = await broker_client.send(
        req(
            61,
            0,
            "DescribeProducersRequest",
            topics=(req(61, 0, "TopicRequest", name=TOPIC, partition_indexes=(1, 7)),),
        )
    )
    p1, p7 = producers.topics[0].partitions
    (state,) = p1.active_producers
    assert (state.producer_id, state.last_sequence, state.current_txn_start_offset) == (pid, 2, 0)
    assert p7.error_code == ErrorCode.unknown_topic_or_partition


async def test_write_txn_markers_aborts_a_hanging_transaction(broker, broker_client):
    """What kafka-transactions.sh abort sends (KIP-664): the LSO moves past the data."""
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await begin(broker_client, "hanging")
    await produce(broker_client, txn_batch(pid, epoch, 0, 2))
    log = broker.replica_manager.log(TOPIC, 0)
    assert log.last_stable_offset == 0
    v = API_SPECS[27].max_version
    marker = req(
        27,
        v,
        "WritableTxnMarker",
        producer_id=pid,
        producer_epoch=epoch,
        transaction_result=False,
        topics=(req(27, v, "WritableTxnMarkerTopic", name=TOPIC, partition_indexes=(0, 3)),),
        coordinator_epoch=0,
    )
    response = await broker_client.send(req(27, v, "WriteTxnMarkersRequest", markers=(marker,)))
    codes = [p.error_code for p in response.markers[0].topics[0].partitions]
    assert codes == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert log.last_stable_offset == log.high_watermark == 3


async def test_transactional_produce_needs_the_partition_in_the_transaction(broker, broker_client):
    await broker.create_topic(TOPIC, 2, {})
    pid, epoch = await begin(broker_client, "t", (TOPIC, 0))
    unadded = await produce(broker_client, txn_batch(pid, epoch, 0), partition=1)
    assert unadded.error_code == ErrorCode.invalid_txn_state
    assert broker.replica_manager.log(TOPIC, 1).log_end_offset == 0


async def test_state_survives_a_restart_and_a_timed_out_transaction_is_aborted(tmp_path):
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}
    async with running_broker(tmp_path / "logs", **overrides) as (broker, client):
        await broker.create_topic(TOPIC, 1, {})
        pid, epoch = await begin(client, "t", timeout_ms=1)
        await produce(client, txn_batch(pid, epoch, 0))
    async with running_broker(tmp_path / "logs", **overrides) as (broker, client):
        meta = broker.transaction_coordinator.transactions["t"]
        assert (meta.producer_id, meta.state.display_name) == (pid, "Ongoing")
        log = broker.replica_manager.log(TOPIC, 0)
        assert log.last_stable_offset == 0
        broker.transaction_runtime.abort_timed_out(int(time.time() * 1000))
        assert broker.transaction_coordinator.transactions["t"].producer_epoch == epoch + 1
        assert log.last_stable_offset == log.high_watermark
        fenced = await client.send(end_txn("t", pid, epoch, True))
        assert fenced.error_code == ErrorCode.producer_fenced


def test_every_transaction_api_version_is_exercised_here():
    """The general sweep leaves these APIs to this file."""
    assert {s.key for s in transactions.SPECS} == {24, 25, 26, 27, 28, 61, 65, 66}


async def test_idle_transactional_ids_expire(tmp_path):
    overrides = {
        "transactional.id.expiration.ms": "1",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "10",
    }
    async with running_broker(tmp_path / "logs", **overrides) as (broker, client):
        await client.send(init_producer_id("idle"))
        transactions = broker.transaction_coordinator.transactions
        while "idle" in transactions:  # the removal runs every 10 ms on the broker's loop
            await asyncio.sleep(0.01)
    async with running_broker(tmp_path / "logs", **overrides) as (broker, client):
        assert "idle" not in broker.transaction_coordinator.transactions  # a tombstone
