"""Importing a topic export: the JSON-lines file export_topic writes (api.jobs._exported) read
back into records, line by line with the line's number in every error, and produced through a
Producer with a bounded number of records awaiting acknowledgement, counting what was written.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import deque
from collections.abc import Awaitable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from broker.client import AdminClient, FutureRecordMetadata, KafkaAdminError, Producer
from broker.client.options import INT32_MAX
from broker.records.record import Header


class ImportFileError(ValueError):
    """A line of an import file that is not a record as export_topic writes it."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"Line {line}: {reason}")
        self.line = line


class ImportedRecord(NamedTuple):
    partition: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


class ImportSummary(NamedTuple):
    records: int
    highest_partition: int  # -1 for a file without records


def imported_records(lines: Iterable[bytes]) -> Iterator[tuple[int, ImportedRecord]]:
    """The records of an exported file with their line numbers (blank lines are no records);
    ImportFileError at the first line that is not one."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = _imported(json.loads(line))
        except (ValueError, RecursionError) as e:  # bad JSON and UTF-8 are ValueErrors
            raise ImportFileError(number, str(e)) from None
        yield number, record


def scan_import(lines: Iterable[bytes]) -> ImportSummary:
    """What an upload holds, read through before any of it is produced: a bad line refuses
    the whole file, so that nothing is half imported."""
    records, highest = 0, -1
    for _, record in imported_records(lines):
        records += 1
        highest = max(highest, record.partition)
    return ImportSummary(records, highest)


def _imported(line: Any) -> ImportedRecord:
    """_exported's inverse; its offset is the target log's to give, so it is not read."""
    if not isinstance(line, dict):
        raise ValueError("not a JSON object")
    missing = [f for f in ("partition", "timestamp", "key", "value", "headers") if f not in line]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    headers = line["headers"]
    if not isinstance(headers, list) or not all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) for h in headers
    ):
        raise ValueError("headers must be a list of [name, base64 value] pairs")
    return ImportedRecord(
        partition=_integer(line, "partition", 0, INT32_MAX),
        # -1: no timestamp (a record of the old message formats).
        timestamp_ms=_integer(line, "timestamp", -1, 2**63 - 1),
        key=_unbase64(line["key"], "key"),
        value=_unbase64(line["value"], "value"),
        headers=[(name, _unbase64(data, f"header {name!r}")) for name, data in headers],
    )


def _integer(line: dict[str, Any], field: str, low: int, high: int) -> int:
    value = line[field]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{field} must be an integer from {low} to {high}")
    return value


def _unbase64(text: Any, what: str) -> bytes | None:
    if text is None:
        return None
    if isinstance(text, str):
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error:
            pass
    raise ValueError(f"{what} must be base64 or null")


class Deliveries:
    """The futures of queued records, oldest first, with their lines: at most `limit` wait
    unacknowledged; `written` counts the acknowledged, as they come (for the progress bar)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending: deque[tuple[int, FutureRecordMetadata]] = deque()
        self.written = 0
        self.failed_line: int | None = None

    async def add(self, line: int, queued: Awaitable[FutureRecordMetadata]) -> None:
        """`queued`: Producer.send's answer for the record of `line`."""
        with self._failing_at(line):
            future = await queued
        self.pending.append((line, future))
        while self.pending and (len(self.pending) > self.limit or self.pending[0][1].done()):
            await self._settle_oldest()

    async def settle(self) -> None:
        """Wait for every pending record; the first failure is raised."""
        while self.pending:
            await self._settle_oldest()

    async def _settle_oldest(self) -> None:
        line, future = self.pending[0]
        with self._failing_at(line):
            await future
        self.pending.popleft()
        self.written += 1

    @contextmanager
    def _failing_at(self, line: int) -> Iterator[None]:
        try:
            yield
        except Exception:
            self.failed_line = line
            raise

    def count_settled(self) -> None:
        """After a failure, once the producer is closed (every future is then done): the
        records written all the same."""
        for _, future in self.pending:
            if future.done() and not future.cancelled() and future.exception() is None:
                self.written += 1
        self.pending.clear()


async def produce_step(
    producer: Producer,
    deliveries: Deliveries,
    topic: str,
    step: list[tuple[int, ImportedRecord]],
    keep_partitions: bool,
    keep_timestamps: bool,
) -> None:
    """Queue the records of a step, each in its exported partition or the partitioner's, with
    its exported timestamp or the producer's clock."""
    for line, record in step:
        queued = producer.send(
            topic,
            record.value,
            record.key,
            partition=record.partition if keep_partitions else None,
            headers=record.headers,
            timestamp_ms=(
                record.timestamp_ms if keep_timestamps and record.timestamp_ms >= 0 else None
            ),
        )
        await deliveries.add(line, queued)


async def check_import_target(admin: AdminClient, topic: str, highest_partition: int) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION, as a producer would meet it, for a topic that does not exist
    or lacks a partition the file's records are to keep (-1: none is kept)."""
    (described,) = await admin.describe_topics([topic])
    count = len(described.partitions)
    if highest_partition >= count:
        raise KafkaAdminError.from_code(
            ErrorCode.unknown_topic_or_partition,
            f"the file has records of partition {highest_partition} and {topic} has "
            f"{count} partitions: add partitions, or let the partitioner place the records",
            f"{topic}-{highest_partition}",
        )
