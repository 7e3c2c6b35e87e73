"""Reading and writing the partitions of a coordinator's internal topic (`__consumer_offsets`,
`__transaction_state`): batches of encoded records appended as one write, read back in offset
order at start-up, and compaction by restating the live state.

Compaction here is the coordinators' own: once a partition's log is much larger than its live
state last was, the live state is appended to a fresh segment and everything before it is
deleted. A crash midway leaves old records followed by (part of) the restatement, and replay
gives the same state either way, so start-up replay stays proportional to the live state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from broker.records.batch import BatchHeader, build_batch, decode_batch, iter_batches, read_header
from broker.storage import Log

READ_CHUNK = 1 << 20
COMPACTION_GROWTH = 2
SNAPSHOT_BATCH_RECORDS = 1000

EncodedRecord = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class LiveBatch:
    """Records a compaction restates together; with a producer, as a transactional batch of
    that producer (offsets still pending on its transaction)."""

    records: Sequence[EncodedRecord]
    producer_id: int = -1
    producer_epoch: int = -1


def append_records(
    log_: Log,
    records: Sequence[EncodedRecord],
    now_ms: int,
    leader_epoch: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    transactional: bool = False,
) -> None:
    """Append `records` as one batch: one write, so all or nothing after a crash. Kafka's
    coordinators write transactional batches without a sequence: a producer numbers only
    what it sends itself."""
    batch = build_batch(
        [(key, value, [], now_ms) for key, value in records],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=transactional,
    )
    log_.append(batch, read_header(batch), now_ms=now_ms, leader_epoch=leader_epoch)


def read_batches(log_: Log) -> Iterator[tuple[BatchHeader, list]]:
    """Every batch of the log with its decoded records, in offset order."""
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        data = log_.read(offset, READ_CHUNK)
        if not data.size:
            break
        buf = b"".join(bytes(c) for c in data.records)
        for pos, header in iter_batches(buf):
            yield decode_batch(buf[pos : pos + header.size])
            offset = header.next_offset


class Compactor:
    """Decides when a coordinator partition is compacted and does it."""

    def __init__(self, min_bytes: int) -> None:
        self.min_bytes = min_bytes
        self._live_bytes: dict[int, int] = {}  # partition -> size right after its last compaction

    def due(self, partition: int, log_: Log) -> bool:
        limit = max(self.min_bytes, COMPACTION_GROWTH * self._live_bytes.get(partition, 0))
        return log_.size_in_bytes >= limit

    def compact(
        self,
        partition: int,
        log_: Log,
        live: Iterable[LiveBatch],
        now_ms: int,
        leader_epoch: int,
    ) -> int:
        """Restate `live` in a fresh segment and drop everything before it; returns the
        number of records restated."""
        log_.roll(now_ms)
        start = log_.log_end_offset
        restated = 0
        for batch in live:
            records = batch.records
            for i in range(0, len(records), SNAPSHOT_BATCH_RECORDS):
                append_records(
                    log_,
                    records[i : i + SNAPSHOT_BATCH_RECORDS],
                    now_ms,
                    leader_epoch,
                    producer_id=batch.producer_id,
                    producer_epoch=batch.producer_epoch,
                    transactional=batch.producer_id >= 0,
                )
            restated += len(records)
        log_.delete_records_before(start)
        self._live_bytes[partition] = log_.size_in_bytes
        return restated
