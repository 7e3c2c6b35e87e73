"""The producer's I/O loop, after Kafka's Sender: drains ready batches per partition leader
into Produce requests, keeps at most max.in.flight.requests.per.connection of them per broker,
and settles each batch from its partition's answer (written, retried, split, or failed).

Before producing, it does what the TransactionManager asks for: a producer id for an
idempotent producer, an epoch bump once no request is in flight, AddPartitionsToTxn for the
partitions a transaction has just started writing to."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client.connection import ConnectionClosed
from broker.client.errors import KafkaAdminError, KafkaTimeoutError
from broker.client.models import TopicPartition
from broker.client.producer.accumulator import ProducerBatch, RecordAccumulator
from broker.client.producer.coordinator import CoordinatorRequests
from broker.client.producer.transaction_manager import TransactionManager, TxnState, kafka_error
from broker.client.routing import STALE_ROUTES, RoutingClient
from broker.client.session import Session

PRODUCE = 0
log = logging.getLogger(__name__)


# A Produce request's turn on its node's connection: the previous request's "written" future
# (None for the first) and its own.
_Turn = tuple[asyncio.Future[None] | None, asyncio.Future[None]]


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Sender:
    def __init__(
        self,
        client: RoutingClient,
        accumulator: RecordAccumulator,
        txn: TransactionManager,
        coordinator: CoordinatorRequests,
        config: SimpleNamespace,
    ) -> None:
        self.client = client
        self.accumulator = accumulator
        self.txn = txn
        self.coordinator = coordinator
        self.config = config
        self.loop = asyncio.get_running_loop()  # made by Producer.start, on its loop
        self.memory_freed = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._in_flight: dict[int, int] = defaultdict(int)  # node -> Produce requests
        self._in_flight_partitions: set[TopicPartition] = set()
        self._requests: set[asyncio.Task] = set()
        # Per node, resolved once the Produce request drained last is on the wire: the next
        # one waits for it (see _send).
        self._written: dict[int, asyncio.Future[None]] = {}
        self._running = True
        self._task: asyncio.Task | None = None
        self._metadata_backoff_until = 0

    def start(self) -> None:
        self._task = self.loop.create_task(self._run(), name="fjord-producer-sender")

    def wakeup(self) -> None:
        self._wakeup.set()

    async def stop(self) -> None:
        """Stop after the requests in flight are answered; queued batches are the caller's."""
        self._running = False
        self.wakeup()
        if self._task is not None:
            await self._task
        if self._requests:
            await asyncio.gather(*self._requests, return_exceptions=True)

    @property
    def requests_in_flight(self) -> int:
        return sum(self._in_flight.values())

    async def _run(self) -> None:
        while self._running:
            self._wakeup.clear()
            try:
                delay_ms = await self._run_once()
            except Exception:  # never let one bad round strand every pending future
                log.exception("producer sender round failed")
                delay_ms = self.config.retry_backoff_ms
            if self._wakeup.is_set() or not self._running:
                continue
            timer = None
            if delay_ms >= 0:
                timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._wakeup.set)
            await self._wakeup.wait()
            if timer is not None:
                timer.cancel()

    async def _run_once(self) -> int:
        """One round; how long until the next is due (-1: on the next wakeup)."""
        now = now_ms()
        self._expire(now)
        txn = self.txn
        if txn.state in (
            TxnState.ABORTABLE_ERROR,
            TxnState.ABORTING_TRANSACTION,
            TxnState.FATAL_ERROR,
        ):
            # Nothing more goes out in a transaction that will not commit.
            error = txn.last_error or KafkaAdminError.from_code(
                ErrorCode.transaction_abortable, "the transaction is being aborted"
            )
            self._fail_queued(error)
        if not await self._prepare_producer_state():
            return self.config.retry_backoff_ms
        ready, next_ms = self.accumulator.ready(now)
        by_node = await self._ready_by_leader(ready)
        for node, tps in by_node.items():
            if self._in_flight[node] >= self.config.max_in_flight_requests_per_connection:
                continue
            batches = self.accumulator.drain(tps, self.config.max_request_size, now, self._may_send)
            if batches:
                for batch in batches:
                    txn.assign_sequence(batch)
                self._spawn(node, batches)
        if ready and not by_node:
            return self.config.retry_backoff_ms  # leaders unknown: look again shortly
        return next_ms

    async def _prepare_producer_state(self) -> bool:
        """A producer id, an epoch bump, partitions added to the transaction, as needed;
        False when the batches must wait."""
        txn = self.txn
        if not txn.idempotent:
            return True
        if not txn.is_transactional:
            if txn.epoch_bump_required:
                if self.requests_in_flight:
                    return True  # batches wait (may_send) until the answers are in
                txn.bump_epoch_locally()
            if not txn.has_producer_id and next(self.accumulator.queued(), None) is not None:
                try:
                    response = await self.coordinator.init_producer_id()
                except KafkaAdminError as e:
                    self._fail_queued(e)
                    return False
                txn.set_producer_id(response.producer_id, response.producer_epoch)
        elif txn.pending_partitions and txn.state in (
            TxnState.IN_TRANSACTION,
            TxnState.COMMITTING_TRANSACTION,
        ):
            tps = set(txn.pending_partitions)
            try:
                await self.coordinator.add_partitions(tps)
            except KafkaAdminError as e:
                txn.fail_abortable(e)  # fatal ones are recorded as such by the coordinator
                return False
        return True

    def _fail_queued(self, error: BaseException) -> None:
        for batch in self.accumulator.take_all():
            self._fail(batch, error)

    def _may_send(self, batch: ProducerBatch) -> bool:
        if batch.tp in self._in_flight_partitions:
            return False  # one request per partition when order must hold without sequences
        return self.txn.may_send(batch)

    async def _ready_by_leader(self, ready: Sequence[TopicPartition]) -> dict[int, list]:
        by_node: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in ready:
            route = self.client.cached_route(tp.topic)
            if route is None:
                if now_ms() < self._metadata_backoff_until:
                    continue
                try:
                    route = await self.client.route(tp.topic)
                except (KafkaAdminError, ConnectionError, OSError):
                    self._metadata_backoff_until = now_ms() + self.config.retry_backoff_ms
                    continue
            leader = route.leaders.get(tp.partition, -1)
            if leader < 0:
                self.client.forget_route(tp.topic, None)
                continue
            by_node[leader].append(tp)
        return by_node

    def _spawn(self, node: int, batches: list[ProducerBatch]) -> None:
        self._in_flight[node] += 1
        if self.config.max_in_flight_requests_per_connection == 1 and not self.txn.idempotent:
            self._in_flight_partitions.update(b.tp for b in batches)
        turn = (self._written.get(node), self.loop.create_future())
        self._written[node] = turn[1]
        task = asyncio.create_task(self._produce(node, batches, turn))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _produce(self, node: int, batches: list[ProducerBatch], turn: _Turn) -> None:
        try:
            try:
                response = await self._send(node, batches, turn)
            except (ConnectionClosed, OSError, TimeoutError, KafkaAdminError) as e:
                code = e.code if isinstance(e, KafkaAdminError) else ErrorCode.network_exception
                for batch in batches:
                    self._settle(batch, code, None, str(e) or type(e).__name__)
                return
            if response is None:  # acks=0: nothing to wait for, no offsets
                for batch in batches:
                    self._complete(batch, -1)
                return
            answered = {
                TopicPartition(t.name, p.index): p
                for t in response.responses
                for p in t.partition_responses
            }
            for batch in batches:
                self._settle(batch, None, answered.get(batch.tp), None)
        finally:
            self._in_flight[node] -= 1
            self._in_flight_partitions.difference_update(b.tp for b in batches)
            self.wakeup()

    async def _send(self, node: int, batches: list[ProducerBatch], turn: _Turn) -> Any:
        """Write the request once the one drained before it for the node is written (or has
        failed), then wait for the answer. Requests waiting for a connection being opened are
        let through one per loop turn while later ones find it open: without this turn, an
        idempotent producer's later sequences could reach the broker first, which writes them
        (a first write may start at any sequence) and refuses the earlier ones for good."""
        previous, written = turn
        try:
            session = await self.client.session(node)
            if previous is not None and not previous.done():
                await asyncio.wait((previous,))
            request = self._request(session, batches)
            if self.config.acks == 0:
                await session.connection.send_raw(request, expect_response=False)
                return None
            # The task's first step writes the request; tasks start in the order made.
            answer = asyncio.ensure_future(session.send(request))
        finally:
            if not written.done():
                written.set_result(None)
        try:
            return await asyncio.wait_for(answer, self.config.request_timeout_ms / 1000)
        except TimeoutError:
            # Answers come in order: whatever is behind a lost one is lost too, so the
            # connection goes and every request on it is retried.
            await session.close()
            raise

    def _request(self, session: Session, batches: list[ProducerBatch]) -> Any:
        transactional = self.txn.is_transactional
        by_topic: dict[str, list[ProducerBatch]] = defaultdict(list)
        for batch in batches:
            by_topic[batch.tp.topic].append(batch)
        return session.request(
            PRODUCE,
            "ProduceRequest",
            transactional_id=self.txn.transactional_id,
            acks=self.config.acks,
            timeout=timedelta(milliseconds=self.config.request_timeout_ms),
            topic_data=tuple(
                session.request(
                    PRODUCE,
                    "TopicProduceData",
                    name=topic,
                    partition_data=tuple(
                        session.request(
                            PRODUCE,
                            "PartitionProduceData",
                            index=b.tp.partition,
                            records=b.frame(transactional),
                        )
                        for b in topic_batches
                    ),
                )
                for topic, topic_batches in by_topic.items()
            ),
        )

    def _settle(
        self, batch: ProducerBatch, code: int | None, answer: Any, message: str | None
    ) -> None:
        """One partition's outcome: `answer` is its part of the Produce response, or None
        with `code` when the request as a whole failed."""
        if answer is not None:
            code = answer.error_code
            message = answer.error_message
            if answer.record_errors:
                message = "; ".join(
                    e.batch_index_error_message or f"record {e.batch_index}"
                    for e in answer.record_errors
                )
        elif code is None:
            code = ErrorCode.unknown_server_error
            message = "the broker did not answer for this partition"
        if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
            # A duplicate was written by an earlier attempt (KIP-98): a success.
            appended = answer.log_append_time if answer is not None else None
            appended_ms = int(appended.timestamp() * 1000) if appended is not None else -1
            self._complete(batch, answer.base_offset if answer is not None else -1, appended_ms)
            return
        now = now_ms()
        if code in STALE_ROUTES or code == ErrorCode.unknown_topic_or_partition:
            self.client.forget_route(batch.tp.topic, None)
        if code == ErrorCode.message_too_large and batch.count > 1:
            parts = self.accumulator.split_and_reenqueue(batch)
            self.txn.replace_batch(batch, parts)
            return
        resource = f"{batch.tp.topic}-{batch.tp.partition}"
        error = kafka_error(code, message, resource)
        if batch.attempts < self.config.retries and self.txn.can_retry(batch, code):
            if now - batch.created_ms < self.config.delivery_timeout_ms:
                self.accumulator.reenqueue(batch, now)
                return
            error = KafkaTimeoutError(
                f"{batch.count} record(s) not delivered within delivery_timeout_ms "
                f"({self.config.delivery_timeout_ms} ms), the last attempt answered {error}",
                resource,
            )
        self._fail(batch, error)

    def _complete(self, batch: ProducerBatch, base_offset: int, appended_ms: int = -1) -> None:
        self.txn.batch_done(batch, succeeded=True)
        batch.complete(base_offset, appended_ms)
        self._release(batch)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        batch.fail(self.txn.batch_failed(batch, error))
        self._release(batch)

    def _release(self, batch: ProducerBatch) -> None:
        self.accumulator.deallocate(batch)
        self.memory_freed.set()

    def _expire(self, now: int) -> None:
        for batch in self.accumulator.expire(now, self.config.delivery_timeout_ms):
            self._fail(
                batch,
                KafkaTimeoutError(
                    f"{batch.count} record(s) expired: {now - batch.created_ms} ms passed "
                    f"since the batch was created (delivery_timeout_ms)",
                    f"{batch.tp.topic}-{batch.tp.partition}",
                ),
            )
