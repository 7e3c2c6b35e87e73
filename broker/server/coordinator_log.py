"""Reading and writing the partitions of a coordinator's internal topic (`__consumer_offsets`,
`__transaction_state`): batches of encoded records appended as one write, read back in offset
order at start-up.

Both topics have cleanup.policy=compact, as in Kafka: the log cleaner keeps the last record of
every key (tombstones until delete.retention.ms), drops aborted transactional offset commits
and keeps the COMMIT/ABORT markers until their transaction has no data left, so replaying a
cleaned partition gives the state replaying the whole of it would, and start-up replay stays
proportional to the live state plus the uncleaned head of the log.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from broker.records.batch import BatchHeader, build_batch, decode_batch, iter_batches, read_header
from broker.storage import Log

READ_CHUNK = 1 << 20

EncodedRecord = tuple[bytes, bytes | None]


def append_records(
    replica_manager,
    topic: str,
    partition: int,
    records: Sequence[EncodedRecord],
    now_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    transactional: bool = False,
) -> None:
    """Append `records` as one batch: one write, so all or nothing after a crash. Kafka's
    coordinators write transactional batches without a sequence: a producer numbers only
    what it sends itself. Like a produce, the append wakes the fetches and fetch sessions
    waiting on the partition (an operator reading the topic)."""
    batch = build_batch(
        [(key, value, [], now_ms) for key, value in records],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=transactional,
    )
    header = read_header(batch)
    replica_manager.log(topic, partition).append(
        batch, header, now_ms=now_ms, leader_epoch=replica_manager.leader_epoch
    )
    replica_manager.appended((topic, partition), header.size)


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
