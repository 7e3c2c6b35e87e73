"""What a log entry holds, whatever its format: the records of a v2 batch or of a magic 0/1
entry (a message or a compressed wrapper), for the readers that look inside entries of a log
that may mix both (timestamp lookups, the cleaner)."""

from __future__ import annotations

from dataclasses import dataclass

from broker.records.batch import MAGIC_OFFSET, MAGIC_V2, decode_batch
from broker.records.legacy import decode_message_set


@dataclass(slots=True, frozen=True)
class EntryRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def entry_records(data: bytes | memoryview) -> list[EntryRecord]:
    """The records of the one whole entry `data`, with absolute offsets and the timestamps a
    consumer sees (-1 in magic 0)."""
    if data[MAGIC_OFFSET] == MAGIC_V2:
        header, records = decode_batch(data)
        return [
            EntryRecord(header.record_offset(r), header.record_timestamp(r), r.key, r.value)
            for r in records
        ]
    return [EntryRecord(m.offset, m.timestamp, m.key, m.value) for m in decode_message_set(data)]
