"""The `fjord` format's source: Spark's Kafka source over Fjord's client, batch and streaming.

The driver plans (offsets resolved by `OffsetReader`, ranges by `plan_ranges`); each Spark task
reads one `OffsetRange` with a consumer of its own and yields Arrow record batches. A range
always reads the same records: its ends are offsets fixed in Spark's checkpoint before any task
runs, and under read_committed they lie at or below the last stable offset."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from broker.client.consumer import Consumer
from broker.client.errors import OffsetOutOfRangeError
from broker.client.models import ConsumerRecord, TopicPartition
from pipelines.spark import clients
from pipelines.spark.offsets import (
    DataLossError,
    OffsetRange,
    OffsetReader,
    Offsets,
    check_no_data_loss,
    from_json,
    missing_partitions,
    plan_ranges,
    rate_limit,
    to_json,
)
from pipelines.spark.options import SourceOptions

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
COLUMNS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
]
SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
HEADERS_SCHEMA = SCHEMA + ", headers array<struct<key: string, value: binary>>"
ARROW_BATCH = 10_000  # records an Arrow batch, as Spark's arrow.maxRecordsPerBatch
# And bytes: batches of large records cost the JVM more per byte than smaller ones (1 KB records
# copied 10 % faster in batches of 2,000 than of 10,000; 100 B records the same either way).
ARROW_BATCH_BYTES = 2 * 1024 * 1024
POLL_SLICE_MS = 1000


def arrow_batches(records: list[ConsumerRecord], include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The records of one partition (read_range's) as Arrow batches of at most
    ARROW_BATCH_BYTES of keys and values (and at least one record)."""
    start, size = 0, 0
    for i, r in enumerate(records):
        n = len(r.value or b"") + len(r.key or b"")
        if size + n > ARROW_BATCH_BYTES and i > start:
            yield arrow_batch(records[start:i], include_headers)
            start, size = i, 0
        size += n
    yield arrow_batch(records[start:], include_headers)


def arrow_batch(records: list[ConsumerRecord], include_headers: bool) -> pa.RecordBatch:
    first = records[0]
    arrays = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        # The same in every row: filled by Arrow, not from a Python list.
        pa.repeat(pa.scalar(first.topic, pa.string()), len(records)),
        pa.repeat(pa.scalar(first.partition, pa.int32()), len(records)),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp_ms * 1000 for r in records], pa.int64()).cast(COLUMNS[5][1]),
        pa.array([max(r.timestamp_type, 0) for r in records], pa.int32()),
    ]
    names = [name for name, _ in COLUMNS]
    if include_headers:
        arrays.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records],
                pa.list_(HEADER),
            )
        )
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)


def read_range(options: SourceOptions, span: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of `span` as Arrow batches, in offset order. A task's generator drives the
    process' event loop a step per batch, so that records stream out instead of piling up; its
    consumer (assigned, then positioned, anew for each range) stays with the Python worker for
    the ranges of its later tasks."""
    name = clients.key("consumer", options.client, options.read_committed)

    def make() -> Consumer:
        return Consumer(
            options.client.bootstrap_servers,
            security=options.client.security(),
            **{
                "client_id": "fjord-spark",
                **options.client.options,
                "isolation_level": "read_committed"
                if options.read_committed
                else "read_uncommitted",
                "auto_offset_reset": "none",
                "enable_auto_commit": False,
                "max_poll_records": ARROW_BATCH,
            },
        )

    tp = TopicPartition(span.topic, span.partition)
    consumer = clients.take(name, make)
    failed = True
    try:
        # The range's stop is the fetcher's too: nothing past it is fetched ahead, for nothing.
        consumer.assign([])
        consumer.subscriptions.assign_range(tp, span.from_offset, span.until_offset)
        while True:
            records = clients.run(_next_records(consumer, tp, span, options))
            if records is None:
                failed = False
                return
            if records:
                yield from arrow_batches(records, options.include_headers)
    finally:
        clients.give_back(name, consumer, failed)


async def _next_records(
    consumer: Consumer, tp: TopicPartition, span: OffsetRange, options: SourceOptions
) -> list[ConsumerRecord] | None:
    """The next records of the range, or None past its end. Control batches and aborted
    transactions move the position without giving records; a position that does not move for
    kafkaConsumer.pollTimeoutMs is a timeout, as Spark's. Offsets deleted meanwhile are data
    loss, or under failOnDataLoss=false skipped to the log's start."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + options.poll_timeout_ms / 1000
    while (position := await consumer.position(tp)) < span.until_offset:
        try:
            got = await consumer.getmany(tp, timeout_ms=POLL_SLICE_MS)
        except OffsetOutOfRangeError:
            start = (await consumer.beginning_offsets([tp]))[tp]
            if options.fail_on_data_loss:
                raise DataLossError(
                    f"partition {span.topic}-{span.partition}: offset {position} is no longer in "
                    f"the log (which now starts at {start}); some data was lost. Set "
                    f"failOnDataLoss=false to go on from the log's start"
                ) from None
            if start >= span.until_offset:
                return None
            consumer.seek(tp, max(start, position))
            continue
        records = [r for r in got.get(tp, ()) if r.offset < span.until_offset]
        if records:
            return records
        if await consumer.position(tp) > position:
            deadline = loop.time() + options.poll_timeout_ms / 1000
        elif loop.time() >= deadline:
            raise TimeoutError(
                f"partition {span.topic}-{span.partition}: cannot read offsets [{position}, "
                f"{span.until_offset}) within kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms}"
            )
    return None


class _Planning:
    """What the batch and the streaming reader share: options and the driver's look-ups.
    Pickled to the tasks, which need only the options."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    @property
    def offsets(self) -> OffsetReader:
        return OffsetReader(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # nothing to read: Spark still runs one task, with no range
        return read_range(self.options, partition)


class FjordBatchReader(_Planning, DataSourceReader):
    """A batch query: startingOffsets to endingOffsets, resolved once when Spark plans it."""

    def partitions(self) -> list[OffsetRange]:
        reader = self.offsets
        tps = reader.partitions()
        start = reader.resolve(self.options.starting, tps, "startingOffsets")
        end = reader.resolve(self.options.ending, tps, "endingOffsets")
        start = check_no_data_loss(start, reader.earliest(tps), end, self.options.fail_on_data_loss)
        for tp in tps:
            if start[tp] > end[tp]:
                raise ValueError(
                    f"partition {tp.topic}-{tp.partition}: its starting offset {start[tp]} is "
                    f"past its ending offset {end[tp]}"
                )
        return plan_ranges(start, end, self.options.min_partitions)


class FjordStreamReader(_Planning, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming query. Its offsets are Spark's checkpoint JSON; partitions that appear
    later (new partitions, or new topics matching the pattern) are read from offset 0."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._available_now: Offsets | None = None
        # The latest offsets latestOffset() just read, for reportLatestOffset(), which Spark
        # calls right after it each trigger: one look-up for both.
        self._latest: Offsets | None = None

    def initialOffset(self) -> dict:
        reader = self.offsets
        tps = reader.partitions()
        return to_json(reader.resolve(self.options.starting, tps, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        reader = self.offsets
        self._available_now = reader.latest(reader.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        reader = self.offsets
        begin = from_json(start)
        if self._available_now is not None:
            end = dict(self._available_now)
        else:
            tps = reader.partitions()
            gone = missing_partitions(begin, tps)
            if gone and self.options.fail_on_data_loss:
                raise DataLossError(
                    f"partition {gone[0].topic}-{gone[0].partition} is gone (its topic was "
                    f"deleted); set failOnDataLoss=false to go on without it"
                )
            end = reader.latest(tps)
        # As Spark's Kafka source: under Trigger.AvailableNow the latest reported is the end
        # it reads to.
        self._latest = dict(end)
        for tp, offset in end.items():
            if offset < begin.get(tp, 0) and self.options.fail_on_data_loss:
                raise DataLossError(
                    f"partition {tp.topic}-{tp.partition}: its end went back from "
                    f"{begin[tp]} to {offset} (truncated, or its topic recreated); some data "
                    f"may have been lost. Set failOnDataLoss=false to read it from its start"
                )
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        latest, self._latest = self._latest, None
        if latest is None:
            reader = self.offsets
            latest = reader.latest(reader.partitions())
        return to_json(latest)

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        begin, until = from_json(start), from_json(end)
        reader = self.offsets
        new = [tp for tp in until if tp not in begin]
        begin |= dict.fromkeys(new, 0)
        earliest = reader.earliest(until)
        # A partition whose end went back (failOnDataLoss=false): read anew from its start.
        begin |= {tp: earliest[tp] for tp in until if begin[tp] > until[tp]}
        begin = check_no_data_loss(
            {tp: begin[tp] for tp in until}, earliest, until, self.options.fail_on_data_loss
        )
        return plan_ranges(begin, until, self.options.min_partitions)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to Kafka."""

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_available_now": None, "_latest": None}


__all__ = ["FjordBatchReader", "FjordStreamReader", "SCHEMA", "HEADERS_SCHEMA", "DataLossError"]
