"""The transaction APIs at the protocol level, at every advertised version, against an
in-process broker: a transaction's life (InitProducerId, AddPartitionsToTxn, produce,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn) and the operators' views and abort (KIP-664)."""

from __future__ import annotations

import asyncio
import time

import pytest
from in_process_broker import running_broker
from kafka_requests import PRODUCE_V, ms, req
from kio.schema.errors import ErrorCode
from test_features_api import SAFE_DOWNGRADE, UPGRADE, update_features
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


# AddPartitionsToTxn's client versions; v4+ is the brokers' own form (KIP-890).
CLIENT_ADD_PARTITIONS_VERSIONS = range(API_SPECS[24].min_version, 4)


def add_partitions(txn, pid, epoch, partitions, v=CLIENT_ADD_PARTITIONS_VERSIONS[-1]):
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


# The last versions of transaction version 1; TV2_* are KIP-890 part 2's.
TV1_END_TXN = TV1_TXN_OFFSET_COMMIT = 4
TV2_END_TXN = TV2_TXN_OFFSET_COMMIT = 5


def end_txn(txn, pid, epoch, commit, v=TV1_END_TXN):
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


def txn_offset_commit(txn, pid, epoch, group, offset, v=TV1_TXN_OFFSET_COMMIT):
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


async def produce(client, records, partition=0, *, txn, v=PRODUCE_V):
    """The partition leader checks the batch's partition against the transactional id's
    transaction (KIP-890): v12+ adds it there, older versions verify it was added."""
    request = produce_request(TOPIC, records, partition=partition, transactional_id=txn, v=v)
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
        txn = f"t-{v}-{commit}"
        assert (await produce(broker_client, txn_batch(pid, epoch, 0, 2), txn=txn)).error_code == 0
        log = broker.replica_manager.log(TOPIC, 0)
        assert log.last_stable_offset < log.high_watermark
        response = await broker_client.send(end_txn(f"t-{v}-{commit}", pid, epoch, commit, v=v))
        assert response.error_code == ErrorCode.none
        assert log.last_stable_offset == log.high_watermark
    _, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    controls = [h for h, _ in batches if h.is_control]
    assert len(controls) == 2


@pytest.mark.parametrize("v", CLIENT_ADD_PARTITIONS_VERSIONS)
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


@pytest.mark.parametrize("v", range(4, API_SPECS[24].max_version + 1))
async def test_brokers_verify_transactions_with_their_coordinator(broker, broker_client, v):
    """The inter-broker form (KIP-890): a partition leader asks whether partitions are in a
    producer's ongoing transaction (verify_only), or adds them (transaction version 2)."""
    await broker.create_topic(TOPIC, 2, {})
    pid = (await broker_client.send(init_producer_id("t"))).producer_id
    await broker_client.send(add_partitions("t", pid, 0, [(TOPIC, 0)]))

    def check(partitions, verify_only, epoch=0):
        transaction = req(
            24,
            v,
            "AddPartitionsToTxnTransaction",
            transactional_id="t",
            producer_id=pid,
            producer_epoch=epoch,
            verify_only=verify_only,
            topics=(req(24, v, "AddPartitionsToTxnTopic", name=TOPIC, partitions=partitions),),
        )
        return req(24, v, "AddPartitionsToTxnRequest", transactions=(transaction,))

    async def codes(request):
        response = await broker_client.send(request)
        (result,) = response.results_by_transaction
        return {
            p.partition_index: p.partition_error_code
            for t in result.topic_results
            for p in t.results_by_partition
        }

    assert await codes(check((0, 1), verify_only=True)) == {
        0: ErrorCode.none,
        1: ErrorCode.transaction_abortable,
    }
    assert await codes(check((0,), verify_only=True, epoch=1)) == {0: ErrorCode.producer_fenced}
    assert await codes(check((1,), verify_only=False)) == {1: ErrorCode.none}
    assert await codes(check((0, 1), verify_only=True)) == dict.fromkeys((0, 1), ErrorCode.none)


async def finalize_transaction_version(client, level):
    """What kafka-features.sh sends; a downgrade is a safe one."""
    update = ("transaction.version", level, UPGRADE if level == 2 else SAFE_DOWNGRADE)
    assert (await client.send(update_features(update))).error_code == ErrorCode.none


@pytest.mark.parametrize("tv", [1, 2])
@pytest.mark.parametrize("v", versions(22))
async def test_init_producer_id_fences_and_aborts_the_open_transaction(
    broker, broker_client, v, tv
):
    """The abort that fences bumps the epoch once under transaction version 1, twice under 2
    (the fence and the end's own bump, as Kafka); the retried InitProducerId once more."""
    await finalize_transaction_version(broker_client, tv)
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await begin(broker_client, "t")
    await produce(broker_client, txn_batch(pid, epoch, 0), txn="t")
    fencing = await broker_client.send(init_producer_id("t", v=v))
    assert fencing.error_code == ErrorCode.concurrent_transactions
    log = broker.replica_manager.log(TOPIC, 0)
    assert log.last_stable_offset == log.high_watermark  # aborted
    retried = await broker_client.send(init_producer_id("t", v=v))
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (
        ErrorCode.none,
        pid,
        epoch + 1 + tv,
    )
    stale = await produce(broker_client, txn_batch(pid, epoch, 1), txn="t")
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
    await produce(broker_client, txn_batch(pid, epoch, 0, 3), partition=1, txn="open")
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


def list_transactions(v=API_SPECS[66].max_version, states=(), **kw):
    return req(
        66,
        v,
        "ListTransactionsRequest",
        state_filters=states,
        producer_id_filters=(),
        duration_filter=kw.pop("duration_filter", -1),
        **kw,
    )


async def listed_ids(client, **kw) -> list[str]:
    response = await client.send(list_transactions(**kw))
    assert response.error_code == ErrorCode.none
    return sorted(s.transactional_id for s in response.transaction_states)


async def test_list_transactions_v2_filters_by_a_transactional_id_pattern(broker, broker_client):
    """KIP-1152: the pattern must match the whole id; null or empty lists every one."""
    await broker.create_topic(TOPIC, 1, {})
    for txn in ("app-1", "app-2", "other"):
        await broker_client.send(init_producer_id(txn))
    everything = ["app-1", "app-2", "other"]
    assert await listed_ids(broker_client, transactional_id_pattern="app-.*") == everything[:2]
    assert await listed_ids(broker_client, transactional_id_pattern="app") == []
    assert await listed_ids(broker_client, transactional_id_pattern="o.*|app-2") == [
        "app-2",
        "other",
    ]
    assert await listed_ids(broker_client, transactional_id_pattern="") == everything
    assert await listed_ids(broker_client, transactional_id_pattern=None) == everything
    # The other filters still apply (a logical and).
    pattern = "app-.*"
    assert (
        await listed_ids(broker_client, transactional_id_pattern=pattern, states=("Ongoing",)) == []
    )
    assert await listed_ids(broker_client, v=1) == everything  # no pattern before v2


@pytest.mark.parametrize("pattern", ["(unclosed", "(?=lookahead)t"])
async def test_an_invalid_transactional_id_pattern_is_invalid_regular_expression(
    broker, broker_client, pattern
):
    """Kafka throws InvalidRegularExpression, answered as the API's error response; its
    patterns are RE2/J's, so Python's lookaround is refused too."""
    await broker_client.send(init_producer_id("t"))
    response = await broker_client.send(
        list_transactions(transactional_id_pattern=pattern, states=("Bogus",))
    )
    assert response.error_code == ErrorCode.invalid_regular_expression
    assert (response.unknown_state_filters, response.transaction_states) == ((), ())


async def test_list_transactions_duration_filter_as_kafka_applies_it(broker, broker_client):
    """KIP-994 (v1): only ids whose transaction started more than `duration_filter` ms ago.
    Kafka's TransactionStateManager compares the start time whatever the state, so an id
    without a transaction (start -1) passes any duration; -1 turns the filter off."""
    await broker.create_topic(TOPIC, 1, {})
    await broker_client.send(init_producer_id("idle"))
    await begin(broker_client, "open")
    hour = 3_600_000
    assert await listed_ids(broker_client, v=1, duration_filter=hour) == ["idle"]
    assert await listed_ids(broker_client, v=1, duration_filter=-1) == ["idle", "open"]
    started = broker.transaction_coordinator.transactions["open"].start_ms
    while int(time.time() * 1000) - started <= 1:
        await asyncio.sleep(0.001)  # until the transaction is older than 1 ms: a condition
    assert await listed_ids(broker_client, duration_filter=1) == ["idle", "open"]


async def write_marker(client, pid, epoch, partitions, *, topic=TOPIC, commit=False, **kw):
    """One WriteTxnMarkers marker; the error code of each partition. `kw`: the marker's other
    fields (transaction_version, v2) and `v`, the request's version."""
    v = kw.pop("v", API_SPECS[27].max_version)
    marker = req(
        27,
        v,
        "WritableTxnMarker",
        producer_id=pid,
        producer_epoch=epoch,
        transaction_result=commit,
        topics=(req(27, v, "WritableTxnMarkerTopic", name=topic, partition_indexes=partitions),),
        coordinator_epoch=0,
        **kw,
    )
    response = await client.send(req(27, v, "WriteTxnMarkersRequest", markers=(marker,)))
    return [p.error_code for p in response.markers[0].topics[0].partitions]


@pytest.mark.parametrize("v", versions(27))
async def test_write_txn_markers_aborts_a_hanging_transaction(broker, broker_client, v):
    """What kafka-transactions.sh abort sends (KIP-664): the LSO moves past the data. Its
    markers have no transaction version (v2's default 0: the records' epoch will do)."""
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await begin(broker_client, "hanging")
    await produce(broker_client, txn_batch(pid, epoch, 0, 2), txn="hanging")
    log = broker.replica_manager.log(TOPIC, 0)
    assert log.last_stable_offset == 0
    codes = await write_marker(broker_client, pid, epoch, (0, 3), v=v)
    assert codes == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert log.last_stable_offset == log.high_watermark == 3


async def test_a_transaction_version_2_marker_must_be_above_the_partitions_epoch(
    broker, broker_client
):
    """KIP-1228: transaction version 2 ends each transaction under a bumped epoch, so its
    marker at the epoch of the records is a late or duplicate one, refused with
    INVALID_PRODUCER_EPOCH, as Kafka's ProducerAppendInfo does, on data partitions and on the
    group's partition of __consumer_offsets alike; nothing is written."""
    await broker.create_topic(TOPIC, 1, {})
    pid, epoch = await begin(broker_client, "tv2")
    await produce(broker_client, txn_batch(pid, epoch, 0, 2), txn="tv2")
    assert (await broker_client.send(add_offsets("tv2", pid, epoch, "g"))).error_code == 0
    committed = await broker_client.send(txn_offset_commit("tv2", pid, epoch, "g", 42))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    offsets = broker.group_coordinator.partition_for("g")
    log = broker.replica_manager.log(TOPIC, 0)

    async def committed_offset():
        fetched_ = await broker_client.send(offset_fetch("g"))
        return fetched_.groups[0].topics[0].partitions[0].committed_offset

    for topic, partition in ((TOPIC, 0), ("__consumer_offsets", offsets)):
        stale = await write_marker(
            broker_client, pid, epoch, (partition,), topic=topic, commit=True, transaction_version=2
        )
        assert stale == [ErrorCode.invalid_producer_epoch]
    assert log.last_stable_offset == 0 and log.high_watermark == 2
    assert await committed_offset() == -1  # still pending
    for topic, partition in ((TOPIC, 0), ("__consumer_offsets", offsets)):
        bumped = await write_marker(
            broker_client,
            pid,
            epoch + 1,
            (partition,),
            topic=topic,
            commit=True,
            transaction_version=2,
        )
        assert bumped == [ErrorCode.none]
    assert log.last_stable_offset == log.high_watermark == 3
    assert await committed_offset() == 42


@pytest.mark.parametrize("v", range(3, 12))
async def test_transactional_produce_needs_the_partition_in_the_transaction(
    broker, broker_client, v
):
    """KIP-890 part 1: a transaction version 1 Produce is verified with the coordinator;
    v11 clients know TRANSACTION_ABORTABLE, older ones get INVALID_TXN_STATE."""
    await broker.create_topic(TOPIC, 2, {})
    pid, epoch = await begin(broker_client, "t", (TOPIC, 0))
    unadded = await produce(broker_client, txn_batch(pid, epoch, 0), partition=1, txn="t", v=v)
    expected = ErrorCode.transaction_abortable if v >= 11 else ErrorCode.invalid_txn_state
    assert unadded.error_code == expected
    if v >= 8:  # error messages came with v8 (KIP-467)
        assert unadded.error_message == "Partition was not added to the transaction"
    assert broker.replica_manager.log(TOPIC, 1).log_end_offset == 0
    # Another transactional id's producer, or an older epoch, is no member of it.
    other = await produce(broker_client, txn_batch(pid, epoch, 0), txn="other", v=v)
    assert other.error_code == ErrorCode.invalid_producer_id_mapping
    await broker_client.send(init_producer_id("t"))  # fences epoch 0
    stale = await produce(broker_client, txn_batch(pid, epoch, 0), txn="t", v=v)
    assert stale.error_code == ErrorCode.invalid_producer_epoch
    assert broker.replica_manager.log(TOPIC, 0).log_end_offset == 1  # the fence's marker


async def test_partition_verification_can_be_turned_off(tmp_path):
    overrides = {"transaction.partition.verification.enable": "false"}
    async with running_broker(tmp_path / "logs", **overrides) as (broker, client):
        await broker.create_topic(TOPIC, 1, {})
        init = await client.send(init_producer_id("t"))
        batch = txn_batch(init.producer_id, init.producer_epoch, 0)
        assert (await produce(client, batch, txn="t")).error_code == ErrorCode.none


async def test_state_survives_a_restart_and_a_timed_out_transaction_is_aborted(tmp_path):
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}
    async with running_broker(tmp_path / "logs", **overrides) as (broker, client):
        await broker.create_topic(TOPIC, 1, {})
        pid, epoch = await begin(client, "t", timeout_ms=1)
        await produce(client, txn_batch(pid, epoch, 0), txn="t")
    async with running_broker(tmp_path / "logs", **overrides) as (broker, client):
        meta = broker.transaction_coordinator.transactions["t"]
        assert (meta.producer_id, meta.state.display_name) == (pid, "Ongoing")
        log = broker.replica_manager.log(TOPIC, 0)
        assert log.last_stable_offset == 0
        await broker.transaction_runtime.abort_timed_out(int(time.time() * 1000))
        # Transaction version 2 (the default) bumps twice: the fence and the end's own bump.
        assert broker.transaction_coordinator.transactions["t"].producer_epoch == epoch + 2
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
