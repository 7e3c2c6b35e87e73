"""InitProducerId and idempotent Produce at the protocol level, against an in-process broker."""

from __future__ import annotations

import asyncio
import time

import pytest
from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.errors import ErrorCode
from test_produce_fetch import fetch_request, fetched, produce_request

from broker.apis.registry import API_SPECS
from broker.records.batch import build_batch

INIT_PRODUCER_ID = API_SPECS[22]
VERSIONS = range(INIT_PRODUCER_ID.min_version, INIT_PRODUCER_ID.max_version + 1)


def init_producer_id(v=INIT_PRODUCER_ID.max_version, transactional_id=None, **fields):
    return req(
        22,
        v,
        "InitProducerIdRequest",
        transactional_id=transactional_id,
        transaction_timeout=ms(60000),
        **fields,
    )


def idempotent_batch(pid, seq, count=1, epoch=0):
    now = int(time.time() * 1000)
    records = [(None, b"s%d" % (seq + i), [], now) for i in range(count)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


async def produce(client, records):
    response = await client.send(produce_request("idem", records))
    return response.responses[0].partition_responses[0]


@pytest.mark.parametrize("v", VERSIONS)
async def test_init_producer_id_gives_fresh_ids_at_epoch_zero(broker_client, v):
    first = await broker_client.send(init_producer_id(v))
    second = await broker_client.send(init_producer_id(v))
    assert type(first).__version__ == v
    assert first.error_code == second.error_code == ErrorCode.none
    assert first.producer_epoch == second.producer_epoch == 0
    assert 0 <= first.producer_id < second.producer_id


@pytest.mark.parametrize("v", VERSIONS)
async def test_transactional_ids_must_not_be_empty(broker_client, v):
    empty = await broker_client.send(init_producer_id(v, ""))
    assert empty.error_code == ErrorCode.invalid_request


async def test_init_producer_id_needs_both_id_and_epoch_or_neither(broker_client):
    response = await broker_client.send(init_producer_id(producer_id=5, producer_epoch=-1))
    assert response.error_code == ErrorCode.invalid_request
    # Without a transactional id the named producer is not resumed: a new id comes back.
    resumed = await broker_client.send(init_producer_id(producer_id=5, producer_epoch=0))
    assert (resumed.error_code, resumed.producer_epoch) == (ErrorCode.none, 0)


async def test_producer_ids_are_never_reused_across_restarts(tmp_path):
    seen = []
    for _ in range(2):
        async with running_broker(tmp_path / "logs") as (_, client):
            seen += [(await client.send(init_producer_id())).producer_id for _ in range(3)]
    assert len(set(seen)) == 6
    assert seen[:3] == sorted(seen[:3]) and min(seen[3:]) > max(seen[:3])


async def test_duplicate_is_answered_with_the_original_offset_and_not_written(
    broker, broker_client
):
    topic = await broker.create_topic("idem", 1, {})
    pid = (await broker_client.send(init_producer_id())).producer_id
    first = idempotent_batch(pid, 0, count=3)
    assert (await produce(broker_client, first)).base_offset == 0
    assert (await produce(broker_client, idempotent_batch(pid, 3, count=2))).base_offset == 3
    retry = await produce(broker_client, first)
    assert (retry.error_code, retry.base_offset) == (ErrorCode.duplicate_sequence_number, 0)
    part, batches = fetched(await broker_client.send(fetch_request(topic.topic_id)))
    assert part.high_watermark == 5
    assert [h.base_sequence for h, _ in batches] == [0, 3]


async def test_sequence_gap_and_old_epoch_are_rejected(broker, broker_client):
    await broker.create_topic("idem", 1, {})
    pid = (await broker_client.send(init_producer_id())).producer_id
    await produce(broker_client, idempotent_batch(pid, 0, count=2, epoch=1))
    gap = await produce(broker_client, idempotent_batch(pid, 5, epoch=1))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    old = await produce(broker_client, idempotent_batch(pid, 2, epoch=0))
    assert old.error_code == ErrorCode.invalid_producer_epoch
    new_epoch = await produce(broker_client, idempotent_batch(pid, 3, epoch=2))
    assert new_epoch.error_code == ErrorCode.out_of_order_sequence_number
    ok = await produce(broker_client, idempotent_batch(pid, 2, epoch=1))
    assert (ok.error_code, ok.base_offset) == (ErrorCode.none, 2)


async def test_state_survives_a_restart_and_is_counted_in_metrics(tmp_path):
    async with running_broker(tmp_path / "logs") as (broker, client):
        await broker.create_topic("idem", 2, {})
        pid = (await client.send(init_producer_id())).producer_id
        await produce(client, idempotent_batch(pid, 0, count=4))
        assert b"fjord_producer_ids_live 1.0" in broker.metrics.render()
    async with running_broker(tmp_path / "logs") as (broker, client):
        retry = await produce(client, idempotent_batch(pid, 0, count=4))
        assert (retry.error_code, retry.base_offset) == (ErrorCode.duplicate_sequence_number, 0)
        assert broker.replica_manager.lookup("idem", 0)[0].log_end_offset == 4
        assert b"fjord_producer_ids_live 1.0" in broker.metrics.render()


async def test_expired_producers_are_forgotten(tmp_path):
    async with running_broker(
        tmp_path / "logs",
        **{"producer.id.expiration.ms": "1", "producer.id.expiration.check.interval.ms": "10"},
    ) as (broker, client):
        await broker.create_topic("idem", 1, {})
        await produce(client, idempotent_batch(1000, 0))
        log = broker.replica_manager.lookup("idem", 0)[0]
        while len(log.producer_state):  # the check runs every 10 ms on the broker's loop
            await asyncio.sleep(0.01)
        # Forgotten: the next sequence from anywhere is accepted again (KIP-360).
        assert (await produce(client, idempotent_batch(1000, 9))).error_code == ErrorCode.none


async def test_producers_expired_while_the_broker_was_down_stay_forgotten(tmp_path):
    async with running_broker(tmp_path / "logs") as (broker, client):
        await broker.create_topic("idem", 1, {})
        await produce(client, idempotent_batch(1000, 0))
    # The periodic check would not run for an hour: the snapshot alone must not revive it.
    async with running_broker(
        tmp_path / "logs",
        **{"producer.id.expiration.ms": "1", "producer.id.expiration.check.interval.ms": "3600000"},
    ) as (broker, client):
        assert len(broker.replica_manager.lookup("idem", 0)[0].producer_state) == 0


async def test_a_batch_behind_one_refused_for_replicas_is_refused_alike(broker, broker_client):
    """Two pipelined batches: the first is refused for want of in-sync replicas, and the
    cause is gone before the second comes (here min.insync.replicas lowered; in a cluster,
    the ISR grown). Kafka answers the second OUT_OF_ORDER_SEQUENCE_NUMBER, which makes
    librdkafka bump its epoch and renumber records it may have written elsewhere (issue
    #4953); Fjord answers it NOT_ENOUGH_REPLICAS, as had it come a moment earlier, and the
    retries of both are written in order."""
    await broker.create_topic("idem", 1, {})
    pid = (await broker_client.send(init_producer_id())).producer_id
    assert (await produce(broker_client, idempotent_batch(pid, 0))).error_code == ErrorCode.none
    await broker.set_topic_configs("idem", {"min.insync.replicas": "2"})  # one broker: short
    first, second = idempotent_batch(pid, 1, count=2), idempotent_batch(pid, 3, count=2)
    refused = await produce(broker_client, first)
    assert refused.error_code == ErrorCode.not_enough_replicas
    await broker.set_topic_configs("idem", {"min.insync.replicas": "1"})
    behind = await produce(broker_client, second)
    assert behind.error_code == ErrorCode.not_enough_replicas
    assert [(await produce(broker_client, b)).base_offset for b in (first, second)] == [1, 3]
    # Written, the producer is in order again: a gap now is out of order.
    gap = await produce(broker_client, idempotent_batch(pid, 7))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
