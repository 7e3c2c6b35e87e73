"""The `fjord` sink against a real broker and a real SparkSession: Spark's Kafka sink's columns,
and the exactly-once mode's transactions, decisions and recovery."""

from __future__ import annotations

import asyncio

import pytest
from test_spark_source import create_topic, produce, read_batch, topic_name

from broker.client import AdminClient, Producer
from pipelines.spark.options import sink_options
from pipelines.spark.sink import last_decision, settle_open_transactions, write_decision

pytestmark = pytest.mark.timeout(300)


def committed_values(spark, bootstrap: str, topic: str) -> list[str]:
    df = read_batch(
        spark, bootstrap, subscribe=topic, **{"kafka.isolation.level": "read_committed"}
    )
    return sorted(bytes(r.value).decode() for r in df.collect())


def open_transactions(bootstrap: str, prefix: str) -> list[str]:
    async def listed() -> list[str]:
        async with AdminClient(bootstrap) as admin:
            found = await admin.list_transactions(states=("Ongoing",))
        return [t.transactional_id for t in found if t.transactional_id.startswith(prefix)]

    return asyncio.run(listed())


def test_batch_write_takes_kafkas_columns(spark, eos_broker):
    topic = topic_name("sink-batch")
    create_topic(eos_broker.bootstrap, topic, partitions=2)
    rows = [(f"k{i}", f"v{i}", i % 2, [("h", f"{i}".encode())]) for i in range(20)]
    df = spark.createDataFrame(
        rows,
        "key string, value string, partition int, headers array<struct<key: string, value: binary>>",
    )
    df.write.format("fjord").mode("append").option(
        "kafka.bootstrap.servers", eos_broker.bootstrap
    ).option("topic", topic).save()
    got = read_batch(spark, eos_broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert sorted(
        (
            bytes(r.key).decode(),
            bytes(r.value).decode(),
            r.partition,
            [(h.key, bytes(h.value)) for h in r.headers],
        )
        for r in got.collect()
    ) == sorted(rows)


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "needs the option 'topic' or a 'topic' column"),
        ({"topic": "t", "exactlyOnce": "true"}, "'transactionalIdPrefix': must be given"),
        ({"topic": "t", "kafka.linger.ms": "soon"}, "kafka.linger.ms"),
        ({"topic": "t", "colour": "x"}, "option 'colour': unknown option of the fjord sink"),
    ],
)
def test_bad_sink_options_fail_naming_the_option(spark, eos_broker, options, message):
    writer = spark.createDataFrame([("v",)], "value string").write.format("fjord").mode("append")
    writer = writer.option("kafka.bootstrap.servers", eos_broker.bootstrap)
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=message):
        writer.save()


def test_exactly_once_streaming_copy(spark, eos_broker, tmp_path):
    source, sink, prefix = topic_name("eos-in"), topic_name("eos-out"), topic_name("eos")
    create_topic(eos_broker.bootstrap, source, partitions=3)
    create_topic(eos_broker.bootstrap, sink, partitions=2)
    produce(eos_broker.bootstrap, source, [{"value": f"r{i}".encode()} for i in range(3000)])
    stream = (
        spark.readStream.format("fjord")
        .option("kafka.bootstrap.servers", eos_broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .load()
        .selectExpr("upper(cast(value as string)) as value")
    )
    query = (
        stream.writeStream.format("fjord")
        .option("kafka.bootstrap.servers", eos_broker.bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", prefix)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    assert len(query.recentProgress) >= 3  # maxOffsetsPerTrigger made several batches
    assert committed_values(spark, eos_broker.bootstrap, sink) == sorted(
        f"R{i}" for i in range(3000)
    )
    assert open_transactions(eos_broker.bootstrap, prefix) == []


def test_what_a_dead_driver_left_is_settled_by_its_last_decision(spark, eos_broker):
    """What a driver that died mid-commit leaves: two prepared transactions, the decision
    naming one of them. The next commit settles them: that one committed, the other aborted."""
    topic, prefix = topic_name("eos-recover"), topic_name("eos-recover")
    create_topic(eos_broker.bootstrap, topic)
    options = sink_options(
        {
            "kafka.bootstrap.servers": eos_broker.bootstrap,
            "topic": topic,
            "exactlyOnce": "true",
            "transactionalIdPrefix": prefix,
        }
    )

    async def prepare(task: int, value: bytes):
        async with Producer(
            eos_broker.bootstrap,
            transactional_id=f"{prefix}-{task}",
            transaction_two_phase_commit_enable=True,
        ) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send(topic, value)
            return await producer.prepare_transaction()

    async def died_mid_commit() -> None:
        decided = await prepare(0, b"decided")
        await prepare(1, b"undecided")
        await write_decision(options, 7, [decided])

    asyncio.run(died_mid_commit())
    assert open_transactions(eos_broker.bootstrap, prefix) == [f"{prefix}-0", f"{prefix}-1"]
    asyncio.run(settle_open_transactions(options, asyncio.run(last_decision(options))))
    assert open_transactions(eos_broker.bootstrap, prefix) == []
    assert committed_values(spark, eos_broker.bootstrap, topic) == ["decided"]
