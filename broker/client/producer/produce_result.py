"""What send() answers, after Kafka's ProduceRequestResult and FutureRecordMetadata: one result
per batch, settled once for all its records, and per record a thin handle (the batch's result
and the record's place in it) that builds its RecordMetadata only when asked.

An asyncio.Future and a RecordMetadata per record, set one by one when the batch is answered,
were a third of a small record's cost in the producer; most callers never look at them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any

from broker.client.models import RecordMetadata


class ProduceRequestResult:
    """One batch's outcome: its base offset and log append time, or its error. `settled`
    resolves (always with None, never cancelled) once the outcome is known, or once the batch
    is split in two (`parts`) whose results then stand for its records."""

    __slots__ = (
        "topic",
        "partition",
        "settled",
        "base_offset",
        "log_append_time_ms",
        "error",
        "_traceback",
        "parts",
        "_split_at",
    )

    def __init__(self, topic: str, partition: int, loop: asyncio.AbstractEventLoop) -> None:
        self.topic = topic
        self.partition = partition
        self.settled: asyncio.Future[None] = loop.create_future()
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        self._traceback: TracebackType | None = None
        self.parts: tuple[ProduceRequestResult, ...] = ()
        self._split_at = 0

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        """Written: offset -1 when unknown (acks=0, an old duplicate). The first outcome
        stands, as a Future's result would."""
        if not self.settled.done():
            self.base_offset = base_offset
            self.log_append_time_ms = log_append_time_ms
            self.settled.set_result(None)

    def fail(self, error: BaseException) -> None:
        if not self.settled.done():
            self.error = error
            self._traceback = error.__traceback__
            self.settled.set_result(None)

    def split(self, first: ProduceRequestResult, second: ProduceRequestResult, at: int) -> None:
        """Records [0, at) now belong to `first`, the rest to `second` from its index 0."""
        self.parts = (first, second)
        self._split_at = at
        self.settled.set_result(None)

    def locate(self, index: int) -> tuple[ProduceRequestResult, int]:
        """The result that now holds record `index`, and its index there (after splits)."""
        result = self
        while result.parts:
            first, second = result.parts
            if index < result._split_at:
                result = first
            else:
                result, index = second, index - result._split_at
        return result, index

    def raise_error(self) -> None:
        if self.error is not None:
            # Every record of the batch raises the same error: its traceback is reset each
            # time, so that it does not grow with each raise (as asyncio.Future does).
            raise self.error.with_traceback(self._traceback)


class FutureRecordMetadata:
    """One record's answer to send(): awaiting it gives its RecordMetadata, or raises the
    error its batch failed with; it can be awaited any number of times. It also answers
    asyncio.Future's done(), cancelled(), result(), exception() and add_done_callback(); a
    record is not cancellable once queued (as in Kafka)."""

    __slots__ = ("_result", "_index", "_timestamp_ms")

    def __init__(self, result: ProduceRequestResult, index: int, timestamp_ms: int) -> None:
        self._result = result
        self._index = index
        self._timestamp_ms = timestamp_ms

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        result, index = self._result.locate(self._index)
        while not result.settled.done():
            # Shielded: a cancelled caller must not cancel the whole batch's future. Looked up
            # again after the wait, in case the batch was split meanwhile.
            yield from asyncio.shield(result.settled)
            result, index = self._result.locate(self._index)
        return self._metadata(result, index)

    def _metadata(self, result: ProduceRequestResult, index: int) -> RecordMetadata:
        result.raise_error()
        base = result.base_offset
        appended = result.log_append_time_ms
        return RecordMetadata(
            result.topic,
            result.partition,
            base + index if base >= 0 else -1,
            appended if appended >= 0 else self._timestamp_ms,
        )

    def _settled(self) -> tuple[ProduceRequestResult, int]:
        result, index = self._result.locate(self._index)
        if not result.settled.done():
            raise asyncio.InvalidStateError("the record is not written yet")
        return result, index

    def done(self) -> bool:
        return self._result.locate(self._index)[0].settled.done()

    def cancelled(self) -> bool:
        return False

    def result(self) -> RecordMetadata:
        return self._metadata(*self._settled())

    def exception(self) -> BaseException | None:
        return self._settled()[0].error

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], object]) -> None:
        """fn(self), from the event loop, once the record is written or failed."""
        settled = self._result.locate(self._index)[0].settled
        if settled.done():
            settled.get_loop().call_soon(fn, self)
        else:
            # Registered again when it fires: the batch may have been split in between.
            settled.add_done_callback(lambda _: self.add_done_callback(fn))
