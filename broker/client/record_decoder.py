"""A consumer's reading of a partition's fetched bytes (Kafka's CompletedFetch), shared by the
PartitionReader and the consumer's fetcher: compressed batches opened, magic 0/1 entries of
old-format topics read, control batches skipped, and in read_committed the records of aborted
transactions dropped."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.client.errors import KafkaAdminError
from broker.client.models import ConsumerRecord
from broker.records.batch import MAGIC_V2, BatchHeader, decode_batch, iter_batches
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


def decode_records(
    topic: str,
    partition: int,
    fetch_offset: int,
    raw: bytes | memoryview,
    aborted: Sequence[Any] | None,
    isolation: int,
    max_records: int | None,
) -> FetchedChunk:
    """A consumer's reading of a partition's fetched bytes (Kafka's CompletedFetch): a partial
    entry at the end is left for the next fetch."""
    chunk = FetchedChunk(next_offset=fetch_offset)
    # read_committed: the aborted transactions whose first offset the batches reached, by
    # producer; an ABORT marker ends one.
    pending = sorted((a.first_offset, a.producer_id) for a in aborted or ()) if isolation else []
    aborting: set[int] = set()
    view = memoryview(raw)
    try:
        for pos, header in iter_batches(view):
            if max_records is not None and len(chunk.records) >= max_records:
                break
            entry = view[pos : pos + header.size]
            if header.magic != MAGIC_V2:
                _add_legacy(chunk, topic, partition, fetch_offset, entry, max_records)
                continue
            while pending and pending[0][0] <= header.last_offset:
                aborting.add(heapq.heappop(pending)[1])
            if header.is_control:
                if header.producer_id in aborting and _is_abort_marker(entry):
                    aborting.discard(header.producer_id)
                chunk.next_offset = max(chunk.next_offset, header.next_offset)
                continue
            if header.is_transactional and header.producer_id in aborting:
                chunk.next_offset = max(chunk.next_offset, header.next_offset)
                continue
            _add_batch(chunk, topic, partition, fetch_offset, header, entry, max_records)
    except InvalidRecordError as e:
        raise KafkaAdminError.from_code(e.error_code, str(e), f"{topic}-{partition}") from e
    return chunk


def _add_batch(
    chunk: FetchedChunk,
    topic: str,
    partition: int,
    fetch_offset: int,
    header: BatchHeader,
    entry: memoryview,
    max_records: int | None,
) -> None:
    _, records = decode_batch(entry)
    for record in records:
        offset = header.record_offset(record)
        if offset < fetch_offset:
            continue  # the batch began before the requested offset
        if max_records is not None and len(chunk.records) >= max_records:
            return
        chunk.records.append(
            ConsumerRecord(
                topic,
                partition,
                offset,
                header.record_timestamp(record),
                header.timestamp_type,
                record.key,
                record.value,
                list(record.headers),
                header.partition_leader_epoch,
            )
        )
        chunk.next_offset = offset + 1
    # Every record of the batch is read: compaction may have left holes past its last one.
    chunk.next_offset = max(chunk.next_offset, header.next_offset)


def _add_legacy(
    chunk: FetchedChunk,
    topic: str,
    partition: int,
    fetch_offset: int,
    entry: memoryview,
    max_records: int | None,
) -> None:
    messages = decode_message_set(entry)
    for m in messages:
        if m.offset < fetch_offset:
            continue
        if max_records is not None and len(chunk.records) >= max_records:
            return
        chunk.records.append(
            ConsumerRecord(
                topic,
                partition,
                m.offset,
                m.timestamp,
                NO_TIMESTAMP_TYPE if m.magic == MAGIC_V0 else m.timestamp_type,
                m.key,
                m.value,
                [],
            )
        )
        chunk.next_offset = m.offset + 1
    if messages:
        chunk.next_offset = max(chunk.next_offset, messages[-1].offset + 1)


def _is_abort_marker(entry: memoryview) -> bool:
    _, records = decode_batch(entry)
    if not records:
        return False
    try:
        control_type, _ = parse_marker(records[0].key, records[0].value)
    except InvalidRecordError:
        return False  # a control record of a kind this client does not know: skipped
    return control_type == ABORT
