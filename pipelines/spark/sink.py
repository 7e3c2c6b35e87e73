"""The `fjord` format's sink: Spark's Kafka sink over Fjord's producer, and an exactly-once mode.

Plain mode is at-least-once, as Spark's Kafka sink: each task produces its rows (idempotent,
acks=all) and flushes; a retried task or a replayed micro-batch writes its rows again.

With exactlyOnce=true every micro-batch's rows are written once, seen by read_committed
consumers (KIP-939 two-phase commit):

1. Each task writes its rows in a transaction of its own, `<prefix>-<task partition>-<attempt>`,
   that it prepares but does not commit; the prepared state (transactional id, producer id,
   epoch) goes to the driver in the task's commit message.
2. The driver's commit(messages, batchId) first writes the batch's decision, the batch id and
   every prepared state, to the sink's compacted topic `_fjord_sink_<prefix>` (acks=all), then
   commits each prepared transaction from its state.
3. A batch Spark replays (its driver died after step 2 began, before Spark's commit log had it)
   finds its decision already written: what the replay's tasks prepared is aborted. When the
   commit fails after the decision (Spark then calls abort), abort commits what the decision
   names. Decisions past the batch belong to another checkpoint: the query is refused.
4. What a dead driver left open is settled by the last decision: committed if it names it,
   aborted otherwise. A task settles what its own transactional id left (InitProducerId with
   keepPreparedTxn) before it writes; the driver's commit settles the ids no task of its batch
   used.

Spark creates the writer anew for each commit (in a Python worker of the driver), so nothing is
settled when a writer is made: only a task, before it writes, and a commit, before it decides.
The clients without a transaction (the decisions' producer and consumer, the admin client, a
plain mode task's producer) stay with the Python process that made them, for its later
commits and tasks (pipelines/spark/clients.py); a transactional producer is made for each
task and each commit. A commit takes its batch's transactions over (InitProducerId with
keepPreparedTxn, which leaves a transaction the identity it was prepared under) while it reads
the last decision, and ends them side by side once the first is committed.

So a driver may die between any two steps: before the decision its batch's transactions are
aborted and the batch replays; after it, they are committed and the replay is dropped. A task
that dies is retried under a new attempt number; its earlier attempt's transaction, undecided,
is aborted by the next commit (as is a zombie attempt's). A batch query (no batch id) writes
no decision: a driver that dies between its commits leaves part of it committed. A broker that dies loses nothing acknowledged: the decision and the prepared data are
written with acks=all, and prepared transactions survive a broker restart and never time out."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Collection, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from broker.client.admin import AdminClient
from broker.client.consumer import Consumer
from broker.client.errors import KafkaAdminError
from broker.client.models import NewTopic, TopicPartition
from broker.client.producer import PreparedTxnState, Producer
from pipelines.spark import clients
from pipelines.spark.faults import crash_point, fail_task_once
from pipelines.spark.options import ClientOptions, SinkOptions

DECISIONS_PREFIX = "_fjord_sink_"
DECISION_READ_TIMEOUT_S = 60
BATCH_ID = "streaming.sql.batchId"  # the local property Spark's micro-batches set
T = TypeVar("T")


def check_schema(schema: StructType, options: SinkOptions) -> None:
    """The columns Spark's Kafka sink takes, with their types; raises naming the column."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ValueError("the fjord sink needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], StringType | BinaryType):
            raise ValueError(f"column '{name}' must be a string or binary, not {fields[name]}")
    if "topic" in fields:
        if options.pinned_topic:
            raise ValueError(
                "a 'topic' column is refused: a pipeline writes only to its sink topic"
            )
        if not isinstance(fields["topic"], StringType):
            raise ValueError(f"column 'topic' must be a string, not {fields['topic']}")
    elif options.topic is None:
        raise ValueError("the fjord sink needs the option 'topic' or a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ValueError(f"column 'partition' must be an int, not {fields['partition']}")


@dataclass
class PreparedPart(WriterCommitMessage):
    """A task's part of a micro-batch: its prepared transaction, as JSON. None in plain mode,
    and for a task that wrote no rows (a filter can leave none): its transaction stayed empty,
    which the coordinator never saw and nothing needs to commit."""

    rows: int
    prepared: str | None = None


def _column(batch: pa.RecordBatch, name: str, as_bytes: bool = False) -> list | None:
    """A column of the batch as Python values (with `as_bytes`, strings as UTF-8 bytes, cast in
    Arrow), or None when the batch has no such column."""
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            column = batch.column(i)
            if as_bytes and (
                pa.types.is_string(field.type)
                or pa.types.is_large_string(field.type)
                or pa.types.is_string_view(field.type)
            ):
                column = column.cast(pa.binary())
            return column.to_pylist()
    return None


async def produce_rows(
    producer: Producer, batches: Iterator[pa.RecordBatch], topic: str | None
) -> int:
    """Send every row and wait until all are written; raises the first row's error, if any
    failed (Spark's Kafka sink fails its task likewise)."""
    rows = 0
    futures = []
    send = producer.send
    for batch in batches:
        values = _column(batch, "value", as_bytes=True)
        keys = _column(batch, "key", as_bytes=True) or [None] * len(values)
        # As Spark's Kafka sink: the `topic` option overrides any topic column.
        topics = _column(batch, "topic") if topic is None else None
        partitions = _column(batch, "partition")
        headers = _column(batch, "headers")
        if topics is None and partitions is None and headers is None:
            # The usual rows, key and value only: the per-row path kept to the send.
            for value, key in zip(values, keys, strict=True):
                futures.append(await send(topic, value, key))  # type: ignore[arg-type]
        else:
            for value, key, to, partition, hs in zip(
                values,
                keys,
                topics or [topic] * len(values),
                partitions or [None] * len(values),
                headers or [None] * len(values),
                strict=True,
            ):
                if to is None:
                    raise ValueError("a row's topic is null and the sink has no 'topic' option")
                futures.append(
                    await send(
                        to,
                        value,
                        key=key,
                        partition=partition,
                        headers=[(h["key"], h["value"]) for h in hs or ()],
                    )
                )
        rows += len(values)
        futures = _unsettled(futures)  # a task of millions of rows keeps only those in flight
    await producer.flush()
    _unsettled(futures)
    return rows


def _unsettled(futures: list) -> list:
    """The records not written yet; raises the error of the first one that failed."""
    left = []
    for future in futures:
        if not future.done():
            left.append(future)
        elif (error := future.exception()) is not None:
            raise error
    return left


# A task hands the producer whole Arrow batches and flushes once at its end: batches larger than
# the Java client's 16 KB mean fewer, larger appends for the broker (librdkafka's default is
# about 1 MB). kafka.batch.size still sets it.
SINK_BATCH_SIZE = 512 * 1024


def producer_for(client: ClientOptions, **extra: object) -> Producer:
    return Producer(
        client.bootstrap_servers,
        security=client.security(),
        **{"client_id": "fjord-spark", "batch_size": SINK_BATCH_SIZE, **client.options, **extra},
    )


class _Writer:
    """What the batch and the streaming writer share."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_schema(schema, options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedPart:
        return clients.run(self._write(iterator))

    async def _write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedPart:
        options = self.options
        if not options.exactly_once:
            name = clients.key("producer", options.client)
            async with clients.kept(name, lambda: producer_for(options.client)) as producer:
                return PreparedPart(await produce_rows(producer, iterator, options.topic))
        context = TaskContext.get()
        # An attempt of its own: a zombie attempt of the same task (speculation, a lost
        # executor still running) cannot abort the one Spark keeps.
        transactional_id = (
            f"{options.transactional_id_prefix}-{context.partitionId()}-{context.attemptNumber()}"
        )
        async with producer_for(
            options.client,
            transactional_id=transactional_id,
            transaction_two_phase_commit_enable=True,
        ) as producer:
            await producer.init_transactions(keep_prepared_txn=True)
            left = producer.prepared_transaction
            if left is not None:  # by an earlier attempt, or a batch whose driver died
                last = await last_decision(options)
                decided = last is not None and left in last[1]
                await producer.complete_transaction(left if decided else _mismatch(left))
            producer.begin_transaction()
            rows = await produce_rows(producer, iterator, options.topic)
            fail_task_once()
            if rows == 0:
                return PreparedPart(0)
            prepared = await producer.prepare_transaction()
        return PreparedPart(rows, prepared.to_json())

    def _commit(self, messages: list[PreparedPart | None], batch_id: int | None) -> None:
        if self.options.exactly_once:
            clients.run(commit_batch(self.options, messages, batch_id))

    def _abort(self, messages: list[PreparedPart | None], batch_id: int | None) -> None:
        if self.options.exactly_once:
            clients.run(abort_batch(self.options, messages, batch_id))


class FjordBatchWriter(_Writer, DataSourceArrowWriter):
    def commit(self, messages: list[PreparedPart | None]) -> None:  # type: ignore[override]
        self._commit(messages, None)

    def abort(self, messages: list[PreparedPart | None]) -> None:  # type: ignore[override]
        self._abort(messages, None)


class FjordStreamWriter(_Writer, DataSourceStreamArrowWriter):
    def commit(self, messages: list[PreparedPart | None], batchId: int) -> None:  # type: ignore[override]
        self._commit(messages, batchId)

    def abort(self, messages: list[PreparedPart | None], batchId: int) -> None:  # type: ignore[override]
        self._abort(messages, batchId)


def _prepared(messages: list[PreparedPart | None]) -> list[PreparedTxnState]:
    return [
        PreparedTxnState.from_json(m.prepared)
        for m in messages
        if m is not None and m.prepared is not None
    ]


# -- the driver's side of exactly-once -------------------------------------------------------


async def commit_batch(
    options: SinkOptions, messages: list[PreparedPart | None], batch_id: int | None
) -> None:
    prepared = _prepared(messages)
    producers: list[Producer] = []
    try:
        # The batch's transactions are taken over while the decision is read: their tasks
        # are done, and a transaction taken over keeps the identity it was prepared under
        # (what the decision records), whoever takes it over next.
        last, listed, _ = await _all(
            last_decision(options),
            open_transactions(options),
            _take_over(options.client, prepared, producers),
        )
        await _decide_and_end(options, batch_id, prepared, producers, last, listed)
    finally:
        await _close(producers)


async def _decide_and_end(
    options: SinkOptions,
    batch_id: int | None,
    prepared: list[PreparedTxnState],
    producers: list[Producer],
    last: tuple[int, list[PreparedTxnState]] | None,
    listed: list[str],
) -> None:
    await settle_open_transactions(
        options, last, skip={s.transactional_id for s in prepared}, listed=listed
    )
    pairs = list(zip(producers, prepared, strict=True))
    if batch_id is not None:
        if last is not None and last[0] > batch_id:
            # Spark replays only its last batch: decisions past it are another checkpoint's.
            raise RuntimeError(
                f"the fjord sink's decisions for transactionalIdPrefix "
                f"{options.transactional_id_prefix} are at batch {last[0]}, past this query's "
                f"batch {batch_id}: a query with a new checkpoint needs a new prefix"
            )
        if last is not None and last[0] == batch_id:
            # A replay of a batch already decided: its first run's transactions are committed
            # (settled above, or by this run's tasks); this run's are dropped.
            await _all(*(_end(p, s, commit=False) for p, s in pairs))
            return
        # Checked before deciding as well: a batch one of whose transactions is gone is
        # not decided (Spark's abort then aborts the others, and the batch runs again).
        for producer, state in pairs:
            _check_held(producer, state)
        crash_point("before-decision")
        await write_decision(options, batch_id, prepared)
        crash_point("after-decision")
    await _all(*(_end(p, s, commit=True, strict=True) for p, s in pairs[:1]))
    crash_point("after-first-commit")
    await _all(*(_end(p, s, commit=True, strict=True) for p, s in pairs[1:]))
    crash_point("after-commits")


async def abort_batch(
    options: SinkOptions, messages: list[PreparedPart | None], batch_id: int | None
) -> None:
    """Spark gave up the batch (a task failed, or its commit raised). Once its decision is
    written the batch is committed whatever failed after: what the decision names is
    committed, not aborted (Spark's replay will find the decision and drop its own)."""
    last = await last_decision(options) if batch_id is not None else None
    if last is not None and last[0] == batch_id:
        await complete_all(options.client, last[1], commit=True)
    else:
        await complete_all(options.client, _prepared(messages), commit=False)


async def complete_all(
    client: ClientOptions, states: list[PreparedTxnState], commit: bool, strict: bool = False
) -> None:
    """Commit (or abort) each prepared transaction from its state, as another process does:
    init_transactions(keep_prepared_txn=True), then complete_transaction; all side by side
    (each has a transactional id of its own). `strict`: a state no longer prepared is an error
    (something aborted a transaction the batch needs), not a transaction settled already."""
    producers: list[Producer] = []
    try:
        await _take_over(client, states, producers)
        await _all(*(_end(p, s, commit, strict) for p, s in zip(producers, states, strict=True)))
    finally:
        await _close(producers)


async def _take_over(
    client: ClientOptions, states: list[PreparedTxnState], producers: list[Producer]
) -> None:
    """A producer for each state's transactional id, added to `producers` in the states' order
    (the caller closes them), each taking over what its id holds, side by side:
    init_transactions(keep_prepared_txn=True)."""
    made = [
        producer_for(
            client,
            transactional_id=state.transactional_id,
            transaction_two_phase_commit_enable=True,
        )
        for state in states
    ]
    producers.extend(made)

    async def take(producer: Producer) -> None:
        await producer.start()
        await producer.init_transactions(keep_prepared_txn=True)

    await _all(*(take(producer) for producer in made))


def _check_held(producer: Producer, state: PreparedTxnState) -> None:
    held = producer.prepared_transaction
    if held != state:
        raise RuntimeError(
            f"transaction {state.transactional_id} is no longer the one prepared "
            f"({state}, now {held}): its records are lost to this batch"
        )


async def _end(
    producer: Producer, state: PreparedTxnState, commit: bool, strict: bool = False
) -> None:
    """Commit (or abort) what `producer` took over, if it is still prepared; `strict`: it
    must be `state`."""
    if strict:
        _check_held(producer, state)
    if producer.prepared_transaction is not None:
        # A state that does not match (abort) is what complete_transaction aborts.
        await producer.complete_transaction(state if commit else _mismatch(state))


async def _close(producers: list[Producer]) -> None:
    await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)


async def _all(*work: Awaitable[T]) -> list[T]:
    """Every result, once all are done; raises the first error (none left running)."""
    results = await asyncio.gather(*work, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def _mismatch(state: PreparedTxnState) -> PreparedTxnState:
    return PreparedTxnState(state.transactional_id, -1, -1)


async def open_transactions(options: SinkOptions) -> list[str]:
    """The transactional ids of the prefix with a transaction open."""
    own = re.compile(re.escape(options.transactional_id_prefix) + r"-\d+-\d+")

    async def listed(admin: AdminClient) -> list:
        # A prepared transaction is Ongoing for its coordinator (KIP-939 prepares client-side).
        return await admin.list_transactions(states=("Ongoing",))

    found = await clients.admin_call(options.client, listed)
    return [t.transactional_id for t in found if own.fullmatch(t.transactional_id)]


async def settle_open_transactions(
    options: SinkOptions,
    last: tuple[int, list[PreparedTxnState]] | None,
    skip: Collection[str] = (),
    listed: list[str] | None = None,
) -> None:
    """Commit the open transactions of the prefix (`listed`, or as listed now) that the last
    decision names, abort the others (left by a driver that died before deciding); those in
    `skip` are left alone."""
    if listed is None:
        listed = await open_transactions(options)
    decided = {s.transactional_id: s for s in last[1]} if last else {}
    left = [t for t in listed if t not in skip]
    await _all(
        complete_all(options.client, [decided[t] for t in left if t in decided], commit=True),
        complete_all(
            options.client,
            [PreparedTxnState(t, -1, -1) for t in left if t not in decided],
            commit=False,
        ),
    )


def decisions_topic(options: SinkOptions) -> TopicPartition:
    return TopicPartition(f"{DECISIONS_PREFIX}{options.transactional_id_prefix}", 0)


async def write_decision(
    options: SinkOptions, batch_id: int, prepared: list[PreparedTxnState]
) -> None:
    value = json.dumps(
        {"batch": batch_id, "transactions": [json.loads(s.to_json()) for s in prepared]}
    ).encode()
    topic, partition = decisions_topic(options)
    await ensure_topic(options.client, topic)
    name = clients.key("decisions-producer", options.client)
    # Not repeated on a kept producer's failure: a decision written twice is harmless (the
    # same batch, the same transactions) but the commit fails instead, as it did before.
    async with clients.kept(name, lambda: producer_for(options.client, acks="all")) as producer:
        await producer.send_and_wait(topic, value, key=b"decision", partition=partition)


async def last_decision(options: SinkOptions) -> tuple[int, list[PreparedTxnState]] | None:
    """The sink's latest decision: the last record of its decisions topic (made here when
    missing), which only the driver's commits write."""
    tp = decisions_topic(options)
    await ensure_topic(options.client, tp.topic)

    def make() -> Consumer:
        return Consumer(
            options.client.bootstrap_servers,
            security=options.client.security(),
            client_id="fjord-spark",
            enable_auto_commit=False,
        )

    async def read(consumer: Consumer) -> dict | None:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        if end == 0:
            return None
        consumer.seek(tp, end - 1)
        found = None
        deadline = asyncio.get_running_loop().time() + DECISION_READ_TIMEOUT_S
        while found is None:
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"could not read the last decision of {tp.topic}")
            for record in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                found = json.loads(record.value)
        return found

    found = await clients.call(clients.key("decisions-consumer", options.client), make, read)
    if found is None:
        return None
    states = [PreparedTxnState.from_json(json.dumps(s)) for s in found["transactions"]]
    return int(found["batch"]), states


# Decisions topics this process knows exist: a commit reads and writes its sink's every batch,
# and a CreateTopics round trip each time would be for nothing (the topic is never deleted).
_EXISTING: set[str] = set()


async def ensure_topic(client: ClientOptions, topic: str) -> None:
    if topic in _EXISTING:
        return

    async def create(admin: AdminClient) -> None:
        try:
            await admin.create_topics([NewTopic(topic, 1, configs={"cleanup.policy": "compact"})])
        except KafkaAdminError as e:
            if e.name != "TOPIC_ALREADY_EXISTS":
                raise

    await clients.admin_call(client, create)
    _EXISTING.add(topic)
