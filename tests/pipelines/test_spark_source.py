"""The `fjord` source against a real broker and a real SparkSession: Spark's Kafka source's
options and columns, batch and streaming."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.client import AdminClient, Producer
from broker.client.models import NewTopic

pytestmark = pytest.mark.timeout(300)


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    async def create() -> None:
        async with AdminClient(bootstrap) as admin:
            await admin.create_topics([NewTopic(name, partitions)])

    asyncio.run(create())


def produce(bootstrap: str, topic: str, records: list[dict], **options) -> None:
    async def send() -> None:
        async with Producer(bootstrap, **options) as producer:
            for r in records:
                await producer.send(topic, **r)
            await producer.flush()

    asyncio.run(send())


def read_batch(spark, bootstrap: str, **options):
    reader = spark.read.format("fjord").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_batch_read_gives_every_record_with_kafkas_columns(spark, eos_broker, codec):
    topic = topic_name(f"src-{codec}")
    create_topic(eos_broker.bootstrap, topic, partitions=2)
    sent = [
        {
            "value": f"v{i}".encode(),
            "key": f"k{i}".encode() if i % 2 else None,
            "partition": i % 2,
            "headers": [("h", f"{i}".encode())] if i % 3 == 0 else [],
            "timestamp_ms": 1_700_000_000_000 + i,
        }
        for i in range(50)
    ]
    produce(eos_broker.bootstrap, topic, sent, compression_type=codec)
    df = read_batch(spark, eos_broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    rows = sorted(df.collect(), key=lambda r: int(r.value[1:]))
    assert [bytes(r.value) for r in rows] == [r["value"] for r in sent]
    assert [r.key and bytes(r.key) for r in rows] == [r["key"] for r in sent]
    assert [r.partition for r in rows] == [r["partition"] for r in sent]
    assert [r.offset for r in rows] == [i // 2 for i in range(50)]
    assert [[(h.key, bytes(h.value)) for h in r.headers] for r in rows] == [
        r["headers"] for r in sent
    ]
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}
    assert [int(r.timestamp.timestamp() * 1000) for r in rows] == [r["timestamp_ms"] for r in sent]


def transactional_records(bootstrap: str, topic: str) -> None:
    """Offsets 0-2 committed, 3-5 aborted (then the abort marker at 6), 7-8 committed (marker
    at 9)."""

    async def write() -> None:
        async with Producer(bootstrap, transactional_id=topic_name("txn")) as producer:
            await producer.init_transactions()
            for values, commit in (([b"c0", b"c1", b"c2"], True), ([b"a0", b"a1", b"a2"], False)):
                producer.begin_transaction()
                for v in values:
                    await producer.send(topic, v, partition=0)
                await producer.flush()  # written, so that the abort has records to hide
                await (producer.commit_transaction() if commit else producer.abort_transaction())
            producer.begin_transaction()
            for v in (b"c3", b"c4"):
                await producer.send(topic, v, partition=0)
            await producer.commit_transaction()

    asyncio.run(write())


@pytest.mark.parametrize(
    "isolation, expected",
    [
        ("read_committed", [b"c0", b"c1", b"c2", b"c3", b"c4"]),
        ("read_uncommitted", [b"c0", b"c1", b"c2", b"a0", b"a1", b"a2", b"c3", b"c4"]),
    ],
)
def test_read_committed_hides_aborted_transactions(spark, eos_broker, isolation, expected):
    topic = topic_name("src-txn")
    create_topic(eos_broker.bootstrap, topic)
    transactional_records(eos_broker.bootstrap, topic)
    df = read_batch(
        spark, eos_broker.bootstrap, subscribe=topic, **{"kafka.isolation.level": isolation}
    )
    assert [bytes(r.value) for r in df.orderBy("offset").collect()] == expected


def test_offsets_by_json_and_by_timestamp(spark, eos_broker):
    topic = topic_name("src-offsets")
    create_topic(eos_broker.bootstrap, topic, partitions=2)
    sent = [
        {"value": f"{p}-{i}".encode(), "partition": p, "timestamp_ms": 1_000_000 + 10 * i}
        for p in (0, 1)
        for i in range(10)
    ]
    produce(eos_broker.bootstrap, topic, sent)

    def values(**options):
        df = read_batch(spark, eos_broker.bootstrap, **options)
        return sorted(bytes(r.value).decode() for r in df.collect())

    offsets = f'{{"{topic}":{{"0":7,"1":-2}}}}'
    ends = f'{{"{topic}":{{"0":9,"1":2}}}}'
    assert values(subscribe=topic, startingOffsets=offsets, endingOffsets=ends) == [
        "0-7",
        "0-8",
        "1-0",
        "1-1",
    ]
    assert values(assign=f'{{"{topic}":[1]}}', startingTimestamp="1000075") == ["1-8", "1-9"]
    by_time = f'{{"{topic}":{{"0":1000090,"1":1000000}}}}'
    got = values(subscribe=topic, startingOffsetsByTimestamp=by_time)
    assert got == ["0-9"] + [f"1-{i}" for i in range(10)]
    with pytest.raises(Exception, match="no record of .*-0 has a timestamp"):
        values(subscribe=topic, startingTimestamp="2000000")
    assert (
        values(
            subscribe=topic,
            startingTimestamp="2000000",
            startingOffsetsByTimestampStrategy="latest",
        )
        == []
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"subscribe": "t", "color": "blue"}, "option 'color': unknown option"),
        ({}, "exactly one of subscribe, subscribePattern and assign"),
        ({"subscribe": "t", "assign": '{"t":[0]}'}, "given: subscribe, assign"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "cannot be latest for batch"),
        ({"subscribe": "t", "kafka.group.id": "g"}, "'kafka.group.id': is set by the fjord"),
        ({"subscribe": "t", "kafka.fetch.max.wait.ms": "x"}, "kafka.fetch.max.wait.ms"),
        ({"subscribe": "t", "startingOffsets": "{bad"}, "'startingOffsets': invalid JSON"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "5"}, "for streaming queries only"),
    ],
)
def test_bad_options_fail_the_query_naming_the_option(spark, eos_broker, options, message):
    with pytest.raises(Exception, match=message):
        read_batch(spark, eos_broker.bootstrap, **options).collect()


def test_offsets_below_the_log_start_fail_or_skip(spark, eos_broker):
    topic = topic_name("src-loss")
    create_topic(eos_broker.bootstrap, topic)
    produce(eos_broker.bootstrap, topic, [{"value": f"{i}".encode()} for i in range(10)])

    async def delete() -> None:
        async with AdminClient(eos_broker.bootstrap) as admin:
            await admin.delete_records({(topic, 0): 4})

    asyncio.run(delete())
    start = f'{{"{topic}":{{"0":2}}}}'
    with pytest.raises(Exception, match=f"partition {topic}-0: offset 2 is no longer in the log"):
        read_batch(spark, eos_broker.bootstrap, subscribe=topic, startingOffsets=start).collect()
    df = read_batch(
        spark, eos_broker.bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    )
    assert [r.offset for r in df.orderBy("offset").collect()] == list(range(4, 10))


def test_min_partitions_splits_ranges_and_reads_each_record_once(spark, eos_broker):
    topic = topic_name("src-split")
    create_topic(eos_broker.bootstrap, topic)
    produce(eos_broker.bootstrap, topic, [{"value": f"{i}".encode()} for i in range(100)])
    df = read_batch(spark, eos_broker.bootstrap, subscribe=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in df.collect()) == list(range(100))


def test_stream_resumes_from_its_checkpoint_and_picks_up_new_partitions(
    spark, eos_broker, tmp_path
):
    topic = topic_name("src-stream")
    create_topic(eos_broker.bootstrap, topic)
    produce(eos_broker.bootstrap, topic, [{"value": f"a{i}".encode()} for i in range(20)])
    seen: list[tuple[str, int, int]] = []

    def run_until_caught_up() -> None:
        stream = (
            spark.readStream.format("fjord")
            .option("kafka.bootstrap.servers", eos_broker.bootstrap)
            .option("subscribePattern", f"{topic}.*")
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            stream.writeStream.foreachBatch(
                lambda df, _: seen.extend(
                    (r.topic, r.partition, r.offset)
                    for r in df.select("topic", "partition", "offset").collect()
                )
            )
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    run_until_caught_up()
    assert sorted(seen) == [(topic, 0, i) for i in range(20)]

    async def grow() -> None:
        async with AdminClient(eos_broker.bootstrap) as admin:
            await admin.create_partitions({topic: 2})
            await admin.create_topics([NewTopic(f"{topic}-more", 1)])

    asyncio.run(grow())
    produce(eos_broker.bootstrap, topic, [{"value": b"b", "partition": p} for p in (0, 1, 1)])
    produce(eos_broker.bootstrap, f"{topic}-more", [{"value": b"c"}])
    seen.clear()
    run_until_caught_up()
    assert sorted(seen) == [(topic, 0, 20), (topic, 1, 0), (topic, 1, 1), (f"{topic}-more", 0, 0)]


def test_a_recreated_topic_is_data_loss_for_a_stream(spark, eos_broker, tmp_path):
    topic = topic_name("src-recreated")
    create_topic(eos_broker.bootstrap, topic)
    produce(eos_broker.bootstrap, topic, [{"value": b"old"} for _ in range(10)])

    def run(**options):
        stream = (
            spark.readStream.format("fjord")
            .option("kafka.bootstrap.servers", eos_broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
        )
        for key, value in options.items():
            stream = stream.option(key, value)
        seen: list[bytes] = []
        query = (
            stream.load()
            .writeStream.foreachBatch(
                lambda df, _: seen.extend(bytes(r.value) for r in df.collect())
            )
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
        except Exception as e:  # the query's failure, as Spark raises it
            return seen, e
        return seen, None

    assert run() == ([b"old"] * 10, None)

    async def recreate() -> None:
        async with AdminClient(eos_broker.bootstrap) as admin:
            await admin.delete_topics([topic])
            await admin.create_topics([NewTopic(topic, 1)])

    asyncio.run(recreate())
    produce(eos_broker.bootstrap, topic, [{"value": b"new"} for _ in range(3)])
    seen, error = run()
    assert seen == [] and "its end went back from 10 to 3" in str(error)
    assert run(failOnDataLoss="false") == ([b"new"] * 3, None)
