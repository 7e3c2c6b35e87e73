"""Client quotas enforced on a real client: a confluent-kafka producer whose client id has a
producer_byte_rate is held to that rate, and a producer beside it without a quota is never
throttled."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

from compat_support import topic_name
from confluent_kafka import Producer
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.errors import ErrorCode

from broker.client.connection import BrokerConnection

QUOTA = 200_000  # bytes per second
VALUE = b"x" * 1000
# Kafka measures a rate over at least (samples - 1) windows, so a client starts with that much
# credit; with 2 one-second samples, one second's worth. Over shorter spans than a few windows
# the sampled rate swings either way, so the test judges the whole run.
WINDOWS = "quota.window.num=2"
CREDIT_SECONDS = 1.0


class Run:
    """One producer's acknowledgements (time, bytes) and the throttle times librdkafka saw."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.acks: list[tuple[float, int]] = []
        self.throttles: list[int] = []
        self.errors: list[str] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "linger.ms": 50,
                "batch.size": 65536,
                "compression.type": "none",
                "throttle_cb": lambda event: self.throttles.append(event.throttle_time),
            }
        )

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acks.append((time.monotonic(), len(msg.value())))

    def produce(self, topic: str, count: int) -> None:
        for _ in range(count):
            while True:
                try:
                    self.producer.produce(topic, VALUE, on_delivery=self._delivered)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        assert self.producer.flush(60) == 0

    def rate(self) -> float:
        """Bytes of values per second over the whole run and the initial credit."""
        elapsed = self.acks[-1][0] - self.acks[0][0] + CREDIT_SECONDS
        return sum(n for _, n in self.acks) / elapsed


async def _prepare(bootstrap: str, topic: str) -> None:
    host, port = bootstrap.rsplit(":", 1)
    connection = await BrokerConnection.open(host, int(port))
    try:
        altered = await connection.send(
            alter_v1.AlterClientQuotasRequest(
                entries=(
                    alter_v1.EntryData(
                        entity=(alter_v1.EntityData(entity_type="client-id", entity_name="slow"),),
                        ops=(
                            alter_v1.OpData(
                                key="producer_byte_rate", value=float(QUOTA), remove=False
                            ),
                        ),
                    ),
                ),
                validate_only=False,
            )
        )
        assert altered.entries[0].error_code == ErrorCode.none
        created = await connection.send(
            create_v7.CreateTopicsRequest(
                topics=(
                    create_v7.CreatableTopic(
                        name=topic,
                        num_partitions=1,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=timedelta(seconds=30),
                validate_only=False,
            )
        )
        assert created.topics[0].error_code == ErrorCode.none
    finally:
        await connection.close()


async def test_throttled_producer_held_to_its_quota_others_unaffected(make_broker_process):
    broker = make_broker_process(WINDOWS).start()
    topic = topic_name("quota")
    await _prepare(broker.bootstrap, topic)
    slow, fast = Run(broker.bootstrap, "slow"), Run(broker.bootstrap, "fast")
    threads = [
        threading.Thread(target=slow.produce, args=(topic, 1300)),
        threading.Thread(target=fast.produce, args=(topic, 4000)),
    ]
    for t in threads:
        t.start()
    await asyncio.to_thread(lambda: [t.join() for t in threads])
    assert slow.errors == fast.errors == []
    assert len(slow.acks) == 1300 and len(fast.acks) == 4000

    rate = slow.rate()
    print(f"throttled producer: {rate:,.0f} B/s of values against a quota of {QUOTA:,} B/s")
    # Record values are ~97% of the produce request bytes the quota counts.
    assert 0.95 * QUOTA <= rate <= 1.04 * QUOTA
    assert any(ms > 0 for ms in slow.throttles)
    # The producer without a quota is never throttled.
    assert all(ms == 0 for ms in fast.throttles)
