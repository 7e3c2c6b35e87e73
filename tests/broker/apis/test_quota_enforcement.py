"""Quota enforcement: Kafka's precedence of quota entities, its sampled rate and token bucket,
and a broker throttling controller mutations, produce requests and new connections."""

from __future__ import annotations

import asyncio

from in_process_broker import running_broker
from kafka_requests import ms, req
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.errors import ErrorCode
from test_api_versions_sweep import TOPIC, fetch, produce

from broker.client.connection import BrokerConnection
from broker.quota.client_quotas import ClientQuotaEntity, ClientQuotas
from broker.quota.quota_manager import ClientQuotaManager
from broker.quota.rate import Rate, TokenBucket
from broker.records.batch import iter_batches

P = "producer_byte_rate"


def quotas(*entries) -> ClientQuotas:
    return ClientQuotas({ClientQuotaEntity.of(e): {P: v} for e, v in entries})


def test_precedence_and_metric_tags_as_kafkas_default_callback():
    everything = quotas(
        ({"user": "u", "client-id": "c"}, 1),
        ({"user": "u", "client-id": None}, 2),
        ({"user": "u"}, 3),
        ({"user": None, "client-id": "c"}, 4),
        ({"user": None, "client-id": None}, 5),
        ({"user": None}, 6),
        ({"client-id": "c"}, 7),
        ({"client-id": None}, 8),
    )
    assert everything.resolve(P, "u", "c") == (("u", "c"), 1)
    assert everything.resolve(P, "u", "other") == (("u", "other"), 2)
    assert everything.resolve(P, "v", "c") == (("v", "c"), 4)
    assert everything.resolve(P, "v", "other") == (("v", "other"), 5)
    # A quota on a user is shared by its client ids; a default one applies to each user.
    assert quotas(({"user": "u"}, 3)).resolve(P, "u", "c") == (("u", ""), 3)
    assert quotas(({"user": None}, 6)).resolve(P, "w", "c") == (("w", ""), 6)
    assert quotas(({"client-id": None}, 8)).resolve(P, "w", "c") == (("", "c"), 8)
    assert quotas(({"client-id": "c"}, 7)).resolve(P, "w", "d") == (("", "d"), None)
    assert not quotas().enabled(P)


def test_sampled_rate_spans_at_least_samples_minus_one_windows():
    rate = Rate(samples=3, window_ms=1000)
    rate.record(4000, now_ms=0)
    assert rate.window_size_ms(0) == 2000
    assert rate.measure(0) == 2000.0
    # 4000 bytes over 2 s against a quota of 1000/s: wait until they spread over 4 s.
    assert rate.throttle_ms(1000, 0) == 2000
    assert rate.throttle_ms(4000, 0) == 0
    # Samples older than samples x window are forgotten.
    assert rate.measure(3000) == 0.0


def test_token_bucket_starts_full_and_may_be_overdrawn():
    bucket = TokenBucket(rate=2, samples=5, window_ms=1000)
    assert bucket.tokens(0) == 10
    bucket.record(14, 0)
    assert bucket.throttle_ms(0) == 2000
    assert bucket.throttle_ms(1000) == 1000
    assert bucket.throttle_ms(2000) == 0


def test_a_changed_rate_keeps_the_credit_already_spent():
    bucket = TokenBucket(rate=2, samples=5, window_ms=1000)
    bucket.record(10, 0)
    bucket.reconfigure(4, 0)
    assert (bucket.burst, bucket.tokens(0)) == (20, 0)
    assert bucket.throttle_ms(0) == 0
    bucket.record(4, 0)
    assert bucket.throttle_ms(0) == 1000


def test_throttle_times_fit_the_wire_int32():
    manager = ClientQuotaManager("produce", P, samples=11, window_ms=1000)
    tags, throttle = manager.record(quotas(({"client-id": "c"}, 1)), "u", "c", 1e12, 0)
    assert (tags, throttle) == (("", "c"), 2**31 - 1)


async def _set(client, entity: dict, key: str, value: float) -> None:
    response = await client.send(
        alter_v1.AlterClientQuotasRequest(
            entries=(
                alter_v1.EntryData(
                    entity=tuple(
                        alter_v1.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()
                    ),
                    ops=(alter_v1.OpData(key=key, value=value, remove=False),),
                ),
            ),
            validate_only=False,
        )
    )
    assert response.entries[0].error_code == ErrorCode.none


def _create(version: int, *topics: tuple[str, int]):
    return req(
        19,
        version,
        "CreateTopicsRequest",
        topics=tuple(
            req(
                19,
                version,
                "CreatableTopic",
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                assignments=(),
                configs=(),
            )
            for name, partitions in topics
        ),
        timeout=ms(30000),
        validate_only=False,
    )


async def test_controller_mutation_rate_refuses_topics_once_spent(tmp_path):
    async with running_broker(tmp_path) as (broker, client):
        # 1 partition a second with 11 one-second samples: a burst of 11 partitions.
        await _set(client, {"client-id": "fjord-test"}, "controller_mutation_rate", 1.0)
        response = await client.send(_create(7, ("a", 8), ("b", 8), ("c", 1)))
        codes = {t.name: t.error_code for t in response.topics}
        # a fits the burst; b is admitted with credit left and overdraws it; c is refused.
        assert codes == {
            "a": ErrorCode.none,
            "b": ErrorCode.none,
            "c": ErrorCode.throttling_quota_exceeded,
        }
        assert response.throttle_time.total_seconds() > 0
        assert broker.image.topic("c") is None
        # Versions before THROTTLING_QUOTA_EXCEEDED are throttled, not refused.
        older = await client.send(_create(5, ("d", 1)))
        assert older.topics[0].error_code == ErrorCode.none
        assert older.throttle_time.total_seconds() > 0


async def test_a_throttled_producer_is_muted_and_others_are_not(tmp_path):
    async with running_broker(tmp_path) as (broker, client):
        await _set(client, {"client-id": "slow"}, "producer_byte_rate", 1.0)
        await client.send(_create(7, (TOPIC, 1)))
        host, port = broker.bound["PLAINTEXT"]
        slow = await BrokerConnection.open(host, port, client_id="slow")
        fast = await BrokerConnection.open(host, port, client_id="fast")
        try:
            for connection, throttled in ((slow, True), (fast, False)):
                response = await connection.send(produce(11, None))
                assert (response.throttle_time.total_seconds() > 0) == throttled
                assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
            muted = [c for c in broker.connections if c._muted_until > 0]
            assert len(muted) == 1
        finally:
            await slow.close()
            await fast.close()


async def test_connections_over_their_address_rate_are_closed(tmp_path):
    # Two 10-second windows: a rate is measured over at least 10 s, so 1 a second admits 10
    # connections however slowly the machine opens them.
    windows = {"quota_window_num": "2", "quota_window_size_seconds": "10"}
    async with running_broker(tmp_path, **windows) as (broker, client):
        await _set(client, {"ip": "127.0.0.1"}, "connection_creation_rate", 1.0)
        host, port = broker.bound["PLAINTEXT"]
        opened = [await asyncio.open_connection(host, port) for _ in range(13)]
        try:
            throttled = broker.quotas.connection_rate.throttled
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while len(broker.connections) + sum(throttled.values()) < 1 + 13:
                assert loop.time() < deadline, "the broker did not see every connection"
                await asyncio.sleep(0.01)
            assert throttled == {"127.0.0.1": 3}
            assert len(broker.connections) == 1 + 10  # the fixture's connection and 10 new
            assert len(broker.held_connections) == 3
            # A throttled connection is closed, unserved, once its throttle time is over.
            reader = opened[-1][0]
            assert await asyncio.wait_for(reader.read(), timeout=30) == b""
            while broker.held_connections:
                assert loop.time() < deadline + 30, "held connections were not closed"
                await asyncio.sleep(0.01)
        finally:
            for _, writer in opened:
                writer.close()


async def test_a_consumer_fetches_no_more_than_its_quota_allows_in_the_window(tmp_path):
    async with running_broker(tmp_path, quota_window_num="2") as (broker, client):
        await client.send(_create(7, (TOPIC, 1)))
        for _ in range(5):
            await client.send(produce(11, None))
        # 10 bytes a second over one window: less than a batch, and the first batch of a
        # fetch is always returned whole.
        await _set(client, {"client-id": "capped"}, "consumer_byte_rate", 10.0)
        host, port = broker.bound["PLAINTEXT"]
        capped = await BrokerConnection.open(host, port, client_id="capped")
        try:
            answers = [await c.send(fetch(12, None)) for c in (client, capped)]
        finally:
            await capped.close()
        whole, part = (bytes(a.responses[0].partitions[0].records) for a in answers)
        assert len(list(iter_batches(whole))) == 5
        assert len(list(iter_batches(part))) == 1
        assert answers[1].throttle_time.total_seconds() > 0
