"""A consumer's reading of a partition's fetched bytes (Kafka's CompletedFetch), shared by the
PartitionReader and the consumer's fetcher: compressed batches opened, magic 0/1 entries of
old-format topics read, control batches skipped, and in read_committed the records of aborted
transactions dropped.

Records are decoded a batch at a time as they are taken, as Kafka's CompletedFetch does: a
fetch of a few megabytes holds tens of thousands of records, and built all at once they would
outlive several garbage collections while they wait to be handed out; built as the application
polls, they die young.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.client.errors import KafkaAdminError
from broker.client.models import ConsumerRecord
from broker.records.batch import (
    LOG_APPEND_TIME,
    MAGIC_V2,
    BatchHeader,
    batch_records,
    decode_batch,
    iter_batches,
)
from broker.records.control import ABORT, parse_marker
from broker.records.errors import InvalidRecordError
from broker.records.legacy import MAGIC_V0, decode_message_set

ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
NO_TIMESTAMP_TYPE = -1


@dataclass
class FetchedChunk:
    """What one Fetch gave: the records at or past the requested offset, where the next fetch
    starts, and where the readable log ends (high watermark, or LSO in read_committed)."""

    records: list[ConsumerRecord] = field(default_factory=list)
    next_offset: int = 0
    end_offset: int = 0


class CompletedFetch:
    """One partition's fetched bytes, handed out in order with `take`. `next_offset` is where
    the next fetch starts: past every record taken and every batch skipped (control batches,
    aborted transactions, compaction holes at a batch's end); `done` once nothing is left."""

    def __init__(
        self,
        topic: str,
        partition: int,
        fetch_offset: int,
        raw: bytes | memoryview,
        aborted: Sequence[Any] | None,
        isolation: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.next_offset = fetch_offset
        self._raw = raw if isinstance(raw, bytes) else bytes(raw)
        # Framed up front (a header every few kilobytes): where they end is known at once.
        self._framed = list(iter_batches(self._raw))
        self._entries: Iterator[tuple[int, BatchHeader]] = iter(self._framed)
        # read_committed: the aborted transactions whose first offset the batches reached, by
        # producer; an ABORT marker ends one.
        self._pending = (
            sorted((a.first_offset, a.producer_id) for a in aborted or ()) if isolation else []
        )
        self._aborting: set[int] = set()
        self._records: list[ConsumerRecord] = []  # the current entry's, from _index on
        self._index = 0
        self._entry_end = fetch_offset  # where the current entry ends (a legacy entry's
        # offset is that of its last message)
        # The corrupt entry the records end at, if any (KafkaAdminError, as for a fetch error).
        self.error: KafkaAdminError | None = None
        self.done = False
        self._load()

    @property
    def end_offset(self) -> int:
        """Where the next fetch starts once every entry is handed out, from the entries'
        headers (a fetch sent ahead of this one starts there)."""
        return max(self.fetch_offset, self._framed[-1][1].next_offset if self._framed else 0)

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to `max_records` records. A corrupt entry ends them (`error` says why); it is
        raised when no record comes before it."""
        out: list[ConsumerRecord] = []
        while len(out) < max_records and not self.done:
            start = self._index
            self._index = min(len(self._records), start + max_records - len(out))
            out += self._records[start : self._index]
            self.next_offset = out[-1].offset + 1
            if self._index == len(self._records):
                # Every record of the entry is taken: compaction may have left holes past its
                # last one.
                self.next_offset = max(self.next_offset, self._entry_end)
                self._load()
        if not out and self.error is not None:
            raise self.error
        return out

    def _load(self) -> None:
        """Decode the next entry that has records to hand out, moving `next_offset` past those
        skipped; at the end, or at a corrupt entry (raised by the next take), `done`."""
        self._records, self._index = [], 0
        try:
            for pos, header in self._entries:
                records = self._decode(pos, header)
                self._entry_end = header.next_offset
                if records:
                    self._records = records
                    return
                self.next_offset = max(self.next_offset, header.next_offset)
        except InvalidRecordError as e:
            self.error = KafkaAdminError.from_code(
                e.error_code, str(e), f"{self.topic}-{self.partition}"
            )
        self.done = True

    def _decode(self, pos: int, header: BatchHeader) -> list[ConsumerRecord]:
        if header.magic != MAGIC_V2:
            return self._legacy(pos, header)
        pending = self._pending
        while pending and pending[0][0] <= header.last_offset:
            self._aborting.add(heapq.heappop(pending)[1])
        if header.is_control:
            if header.producer_id in self._aborting and self._is_abort_marker(pos, header):
                self._aborting.discard(header.producer_id)
            return []
        if header.is_transactional and header.producer_id in self._aborting:
            return []
        topic, partition, epoch = self.topic, self.partition, header.partition_leader_epoch
        timestamp_type = header.timestamp_type
        # With LogAppendTime every record carries the batch's max timestamp.
        appended = header.max_timestamp if timestamp_type == LOG_APPEND_TIME else None

        def make(offset: int, timestamp: int, key: Any, value: Any, headers: Any, _: int) -> Any:
            return ConsumerRecord(
                topic,
                partition,
                offset,
                timestamp if appended is None else appended,
                timestamp_type,
                key,
                value,
                headers,
                epoch,
            )

        base_offset = header.base_offset
        records = batch_records(self._raw, pos, header, make, base_offset, header.base_timestamp)
        if base_offset < self.fetch_offset:  # the batch began before the requested offset
            records = [r for r in records if r.offset >= self.fetch_offset]
        return records

    def _legacy(self, pos: int, header: BatchHeader) -> list[ConsumerRecord]:
        messages = decode_message_set(memoryview(self._raw)[pos : pos + header.size])
        return [
            ConsumerRecord(
                self.topic,
                self.partition,
                m.offset,
                m.timestamp,
                NO_TIMESTAMP_TYPE if m.magic == MAGIC_V0 else m.timestamp_type,
                m.key,
                m.value,
                [],
            )
            for m in messages
            if m.offset >= self.fetch_offset
        ]

    def _is_abort_marker(self, pos: int, header: BatchHeader) -> bool:
        _, records = decode_batch(memoryview(self._raw)[pos : pos + header.size])
        if not records:
            return False
        try:
            control_type, _ = parse_marker(records[0].key, records[0].value)
        except InvalidRecordError:
            return False  # a control record of a kind this client does not know: skipped
        return control_type == ABORT


def decode_records(
    topic: str,
    partition: int,
    fetch_offset: int,
    raw: bytes | memoryview,
    aborted: Sequence[Any] | None,
    isolation: int,
    max_records: int | None,
) -> FetchedChunk:
    """Every record of a partition's fetched bytes at once, up to `max_records`: a partial
    entry at the end is left for the next fetch. Raises KafkaAdminError for a corrupt entry."""
    fetch = CompletedFetch(topic, partition, fetch_offset, raw, aborted, isolation)
    limit = max_records if max_records is not None else sys.maxsize
    records = fetch.take(limit)
    if len(records) < limit and fetch.error is not None:
        raise fetch.error
    return FetchedChunk(records, fetch.next_offset)
