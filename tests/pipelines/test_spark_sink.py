"""The `fjord` sink against a real broker and a real SparkSession: Spark's Kafka sink's columns,
and the exactly-once mode's transactions, decisions and recovery."""

from __future__ import annotations

import asyncio

import pytest
from pyspark.sql.types import StringType, StructField, StructType
from streaming_copy import copy_exactly_once, source_view
from test_spark_source import create_topic, produce, read_batch, topic_name

from broker.client import AdminClient, Producer
from broker.client.models import NewTopic
from pipelines.spark.options import SinkOptions, sink_options
from pipelines.spark.sink import (
    PreparedPart,
    abort_batch,
    check_schema,
    commit_batch,
    last_decision,
    settle_open_transactions,
    write_decision,
)

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


def test_the_topic_option_overrides_a_topic_column(spark, eos_broker):
    """As Spark's Kafka sink: with the `topic` option, a row's own topic is ignored, so a
    pipeline's SQL cannot send its rows elsewhere."""
    topic, elsewhere = topic_name("sink-option"), topic_name("sink-column")
    create_topic(eos_broker.bootstrap, topic)
    create_topic(eos_broker.bootstrap, elsewhere)
    df = spark.createDataFrame(
        [(f"v{i}", elsewhere) for i in range(5)], "value string, topic string"
    )
    df.write.format("fjord").mode("append").option(
        "kafka.bootstrap.servers", eos_broker.bootstrap
    ).option("topic", topic).save()
    assert committed_values(spark, eos_broker.bootstrap, topic) == [f"v{i}" for i in range(5)]
    assert committed_values(spark, eos_broker.bootstrap, elsewhere) == []


VALUE = StructField("value", StringType())


def test_a_pinned_sink_refuses_a_topic_column():
    """A pipeline's sink: a `topic` column is refused before the pipeline is saved."""
    pinned = SinkOptions(None, "sink", False, None, pinned_topic=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'topic' column is refused"):
        check_schema(StructType([VALUE, StructField("topic", StringType())]), pinned)
    check_schema(StructType([VALUE]), pinned)


def test_records_the_broker_refuses_fail_the_write(spark, eos_broker):
    """At-least-once loses nothing silently: a record the broker refuses (larger than the
    topic's max.message.bytes) fails the task, and the query with it once Spark's retries are
    spent, instead of the write reporting success."""
    topic = topic_name("sink-refused")

    async def create() -> None:
        async with AdminClient(eos_broker.bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, 1, configs={"max.message.bytes": "200"})])

    asyncio.run(create())
    df = spark.createDataFrame([("small",), ("x" * 1000,)], "value string").coalesce(1)
    writer = df.write.format("fjord").mode("append").option("topic", topic)
    with pytest.raises(Exception, match="MESSAGE_TOO_LARGE|RECORD_LIST_TOO_LARGE"):
        writer.option("kafka.bootstrap.servers", eos_broker.bootstrap).save()


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


@pytest.mark.parametrize(
    "transformation, kept",
    [
        ("SELECT upper(cast(value AS string)) AS value FROM source", range(3000)),
        # Tasks of partitions 1 and 2 write nothing: empty parts of a batch commit too.
        (
            "SELECT upper(cast(value AS string)) AS value FROM source WHERE partition = 0",
            range(0, 3000, 3),
        ),
    ],
)
def test_exactly_once_streaming_copy(spark, eos_broker, tmp_path, transformation, kept):
    source, sink, prefix = topic_name("eos-in"), topic_name("eos-out"), topic_name("eos")
    create_topic(eos_broker.bootstrap, source, partitions=3)
    create_topic(eos_broker.bootstrap, sink, partitions=2)
    produce(
        eos_broker.bootstrap,
        source,
        [{"value": f"r{i}".encode(), "partition": i % 3} for i in range(3000)],
    )
    source_view(spark, eos_broker.bootstrap, source, maxOffsetsPerTrigger="1000")
    query = copy_exactly_once(
        spark.sql(transformation), eos_broker.bootstrap, sink, prefix, tmp_path / "checkpoint"
    )
    assert len(query.recentProgress) >= 3  # maxOffsetsPerTrigger made several batches
    assert committed_values(spark, eos_broker.bootstrap, sink) == sorted(f"R{i}" for i in kept)
    assert open_transactions(eos_broker.bootstrap, prefix) == []


def eos_options(bootstrap: str, topic: str, prefix: str):
    return sink_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "topic": topic,
            "exactlyOnce": "true",
            "transactionalIdPrefix": prefix,
        }
    )


async def prepare(bootstrap: str, topic: str, transactional_id: str, value: bytes):
    """A task's part: `value` written in a transaction prepared, not committed."""
    async with Producer(
        bootstrap, transactional_id=transactional_id, transaction_two_phase_commit_enable=True
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send(topic, value)
        return await producer.prepare_transaction()


def test_what_a_dead_driver_left_is_settled_by_its_last_decision(spark, eos_broker):
    """What a driver that died mid-commit leaves: two prepared transactions, the decision
    naming one of them. The next commit settles them: that one committed, the other aborted."""
    topic, prefix = topic_name("eos-recover"), topic_name("eos-recover")
    create_topic(eos_broker.bootstrap, topic)
    options = eos_options(eos_broker.bootstrap, topic, prefix)

    async def died_mid_commit() -> None:
        decided = await prepare(eos_broker.bootstrap, topic, f"{prefix}-0-0", b"decided")
        await prepare(eos_broker.bootstrap, topic, f"{prefix}-1-0", b"undecided")
        await write_decision(options, 7, [decided])

    asyncio.run(died_mid_commit())
    assert open_transactions(eos_broker.bootstrap, prefix) == [f"{prefix}-0-0", f"{prefix}-1-0"]
    asyncio.run(settle_open_transactions(options, asyncio.run(last_decision(options))))
    assert open_transactions(eos_broker.bootstrap, prefix) == []
    assert committed_values(spark, eos_broker.bootstrap, topic) == ["decided"]


def test_an_abort_after_the_decision_commits_what_it_names(spark, eos_broker):
    """A commit that raised once the batch's decision was written (a timeout, a coordinator
    move): Spark calls abort, which must commit, since the replay will find the decision and
    drop its own records."""
    topic, prefix = topic_name("eos-abort"), topic_name("eos-abort")
    create_topic(eos_broker.bootstrap, topic)
    options = eos_options(eos_broker.bootstrap, topic, prefix)

    async def decided_then_failed() -> None:
        states = [
            await prepare(eos_broker.bootstrap, topic, f"{prefix}-{task}-0", b"r%d" % task)
            for task in range(2)
        ]
        await write_decision(options, 3, states)
        messages = [PreparedPart(1, s.to_json()) for s in states]
        await abort_batch(options, messages, 3)

    asyncio.run(decided_then_failed())
    assert committed_values(spark, eos_broker.bootstrap, topic) == ["r0", "r1"]
    assert open_transactions(eos_broker.bootstrap, prefix) == []


def test_decisions_past_the_batch_are_another_checkpoints(eos_broker):
    """A query started on a new checkpoint with an old prefix: its batch 0 is not a replay of
    the old query's batch 0 (which would drop it), it is refused."""
    topic, prefix = topic_name("eos-foreign"), topic_name("eos-foreign")
    create_topic(eos_broker.bootstrap, topic)
    options = eos_options(eos_broker.bootstrap, topic, prefix)
    asyncio.run(write_decision(options, 9, []))
    with pytest.raises(RuntimeError, match="a query with a new checkpoint needs a new prefix"):
        asyncio.run(commit_batch(options, [], 2))
