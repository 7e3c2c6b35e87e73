"""confluent-kafka's idempotent producer (enable.idempotence=true) against a real broker
process: InitProducerId, then every record exactly once and in order with five requests in
flight."""

from __future__ import annotations

import pytest
from compat_support import topic_name
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from test_crash_recovery import read_whole_topic

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3
RECORDS = 3000


def test_idempotent_producer_writes_each_record_once_in_order(broker_process):
    topic = topic_name("idempotent")
    admin = AdminClient({"bootstrap.servers": broker_process.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    errors = []
    producer = Producer(
        {
            "bootstrap.servers": broker_process.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 1,
            "batch.num.messages": 50,
        }
    )
    for i in range(RECORDS):
        producer.produce(
            topic,
            value=b"n-%d" % i,
            partition=i % PARTITIONS,
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    got = read_whole_topic(broker_process.bootstrap, topic, PARTITIONS)
    for p, rows in got.items():
        assert [v for _, v in rows] == [b"n-%d" % i for i in range(p, RECORDS, PARTITIONS)]
