"""The consumer's reading of fetched bytes without a broker (CompletedFetch): records taken in
any slices across batches, where the next fetch starts, and what a corrupt entry does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.client.errors import KafkaAdminError
from broker.client.record_decoder import CompletedFetch, decode_records
from broker.records.batch import LOG_APPEND_TIME, Record, build_batch, encode_batch
from broker.records.control import build_control_batch

TS = 1_700_000_000_000


def batch(base_offset: int, count: int, **kwargs) -> bytes:
    return build_batch(
        [(None, b"v%d" % (base_offset + i), [], TS + i) for i in range(count)],
        base_offset=base_offset,
        **kwargs,
    )


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    data = bytearray(build_control_batch(producer_id, 0, commit, 0, TS))
    data[:8] = offset.to_bytes(8, "big")  # outside the CRC
    return bytes(data)


def fetch(raw: bytes, fetch_offset: int = 0, aborted=None) -> CompletedFetch:
    return CompletedFetch("t", 0, fetch_offset, raw, aborted, 1 if aborted is not None else 0)


def test_records_are_taken_in_any_slices_across_batches():
    records = fetch(batch(0, 3) + batch(3, 4) + batch(7, 2))
    taken = [records.take(2), records.take(4), records.take(10)]
    assert [[r.offset for r in t] for t in taken] == [[0, 1], [2, 3, 4, 5], [6, 7, 8]]
    assert records.done and records.next_offset == 9
    assert [r.value for r in taken[1]] == [b"v2", b"v3", b"v4", b"v5"]
    assert records.take(5) == []


def test_next_offset_follows_what_was_taken_and_skips_what_has_no_records():
    # Starts inside the first batch; a compacted batch ends past its last record; a commit
    # marker ends the fetch; a torn batch at the end is left for the next fetch.
    compacted = encode_batch(
        [Record(0, 0, None, b"x"), Record(2, 0, None, b"y")],
        last_offset_delta=4,
        base_offset=5,
        base_timestamp=TS,
        max_timestamp=TS,
    )
    raw = batch(0, 5) + compacted + marker(10, 7, commit=True) + batch(11, 3)[:-1]
    records = fetch(raw, fetch_offset=2)
    assert [r.offset for r in records.take(2)] == [2, 3]
    assert records.next_offset == 4
    assert [r.offset for r in records.take(2)] == [4, 5]
    assert records.next_offset == 6 and not records.done
    assert [r.offset for r in records.take(10)] == [7]
    assert records.done and records.next_offset == 11


def test_aborted_transactions_are_dropped_in_read_committed():
    aborted = [SimpleNamespace(producer_id=7, first_offset=0)]
    raw = (
        batch(0, 2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
        + marker(2, 7, commit=False)
        + batch(3, 2, producer_id=7, producer_epoch=0, base_sequence=2, transactional=True)
        + marker(5, 7, commit=True)
    )
    assert [r.offset for r in fetch(raw, aborted=aborted).take(10)] == [3, 4]
    assert [r.offset for r in fetch(raw).take(10)] == [0, 1, 3, 4]


def test_log_append_time_and_large_fields():
    value = bytes(range(256)) * 80  # a length of three varint bytes
    raw = build_batch(
        [(b"k", value, [("h", b"1"), ("n", None)], TS), (None, None, [], TS - 5)],
        timestamp_type=LOG_APPEND_TIME,
        partition_leader_epoch=4,
    )
    first, second = fetch(raw).take(2)
    assert (first.key, first.value, first.headers) == (b"k", value, [("h", b"1"), ("n", None)])
    assert (second.key, second.value, second.headers) == (None, None, [])
    assert first.timestamp_ms == second.timestamp_ms == TS  # the batch's max
    assert first.timestamp_type == LOG_APPEND_TIME and first.leader_epoch == 4


def test_a_corrupt_entry_ends_the_records_and_is_raised_when_none_come_before_it():
    good = batch(0, 2)
    bad = bytearray(batch(2, 2))
    bad[61] = 0x7E  # the first record's size: past the end of the batch
    records = fetch(good + bytes(bad))
    assert [r.offset for r in records.take(10)] == [0, 1]
    assert records.done and records.next_offset == 2
    assert records.error is not None
    with pytest.raises(KafkaAdminError):
        records.take(10)
    with pytest.raises(KafkaAdminError):
        decode_records("t", 0, 2, bytes(bad), None, 0, None)
    # A limit reached before the corrupt entry returns the records without raising.
    assert [r.offset for r in decode_records("t", 0, 0, good + bytes(bad), None, 0, 2).records] == [
        0,
        1,
    ]
