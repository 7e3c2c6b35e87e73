"""Clients kept across micro-batches (pipelines/spark/clients.py), against a real broker: a
process' consumer reads range after range each exactly, and a kept client that broke is
replaced instead of failing the next call."""

from __future__ import annotations

import pytest
from test_spark_source import create_topic, produce, topic_name

from pipelines.spark import clients
from pipelines.spark.offsets import OffsetRange
from pipelines.spark.options import source_options
from pipelines.spark.source import read_range

pytestmark = pytest.mark.timeout(120)


def values(options, span: OffsetRange) -> list[bytes]:
    return [v for batch in read_range(options, span) for v in batch.column("value").to_pylist()]


def test_a_kept_consumer_reads_each_range_exactly(eos_broker):
    topic = topic_name("kept-ranges")
    create_topic(eos_broker.bootstrap, topic, partitions=2)
    produce(
        eos_broker.bootstrap,
        topic,
        [{"value": b"%d-%d" % (i % 2, i // 2), "partition": i % 2} for i in range(60)],
    )
    options = source_options(
        {"kafka.bootstrap.servers": eos_broker.bootstrap, "subscribe": topic}, streaming=False
    )
    # Ranges as micro-batches give them: one partition after the other, back to one read
    # before, and a range abandoned half-way (its consumer is closed, not kept).
    spans = [(0, 0, 10), (0, 10, 25), (1, 0, 30), (0, 25, 30), (1, 5, 6), (0, 0, 30)]
    for partition, low, high in spans:
        span = OffsetRange(topic, partition, low, high)
        assert values(options, span) == [b"%d-%d" % (partition, i) for i in range(low, high)]
    abandoned = read_range(options, OffsetRange(topic, 1, 0, 30))
    next(abandoned)
    abandoned.close()
    assert values(options, OffsetRange(topic, 1, 20, 30)) == [b"1-%d" % i for i in range(20, 30)]


def test_a_kept_client_is_the_same_until_it_breaks(eos_broker):
    topic = topic_name("kept-admin")
    create_topic(eos_broker.bootstrap, topic)
    client = source_options(
        {"kafka.bootstrap.servers": eos_broker.bootstrap, "subscribe": topic}, streaming=False
    ).client

    async def the_admin(admin):
        return admin

    async def names(admin):
        return {t.name for t in await admin.list_topics()}

    first = clients.run(clients.admin_call(client, the_admin))
    assert clients.run(clients.admin_call(client, the_admin)) is first
    clients.run(first.close())  # as a connection the broker closed
    assert topic in clients.run(clients.admin_call(client, names))


def test_clients_with_other_passwords_are_kept_apart_and_no_password_is_shown():
    def options(password):
        jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{password}";'
        return source_options(
            {
                "kafka.bootstrap.servers": "127.0.0.1:9",
                "subscribe": "t",
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.jaas.config": jaas,
            },
            streaming=False,
        ).client

    first, second = options("first-secret"), options("second-secret")
    assert clients.key("admin", first) != clients.key("admin", second)
    assert "secret" not in repr(first)
