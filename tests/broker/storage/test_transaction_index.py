"""The `.txnindex` file: Kafka's format, reload, truncation, corruption and the search."""

from __future__ import annotations

import struct

import pytest

from broker.storage.index import CorruptIndexError
from broker.storage.transaction_index import AbortedTxn, TransactionIndex


def index_at(tmp_path, base=100) -> TransactionIndex:
    return TransactionIndex(tmp_path / f"{base:020d}.txnindex", base)


def test_created_lazily_in_kafkas_format_and_reloaded(tmp_path):
    index = index_at(tmp_path)
    index.load()
    assert len(index) == 0 and not index.path.exists()
    index.flush()  # nothing to sync, no file made
    assert not index.path.exists()
    assert index.append(7, 90, 120, 121) is True  # created the file
    assert index.append(8, 110, 130, 131) is False
    index.close()
    assert index.path.read_bytes() == struct.pack(
        ">hqqqqhqqqq", 0, 7, 90, 120, 121, 0, 8, 110, 130, 131
    )
    again = index_at(tmp_path)
    again.load()
    assert again.entries() == [AbortedTxn(7, 90, 120, 121), AbortedTxn(8, 110, 130, 131)]
    assert again.last_offset == 130
    with pytest.raises(ValueError):
        again.append(9, 125, 130, 140)  # markers come in offset order
    again.close()


def test_truncate_drops_entries_at_or_beyond_the_offset(tmp_path):
    index = index_at(tmp_path)
    for i in range(4):
        index.append(i, 100 + 10 * i, 105 + 10 * i, 106 + 10 * i)
    index.truncate_to(125)  # the entry ending at 125 goes too
    assert [e.last_offset for e in index.entries()] == [105, 115]
    assert index.path.stat().st_size == 2 * 34
    index.append(9, 120, 126, 127)
    index.truncate_to(10_000)  # nothing beyond: unchanged
    assert len(index) == 3
    index.close()
    again = index_at(tmp_path)
    again.load()
    assert [e.producer_id for e in again.entries()] == [0, 1, 9]
    again.truncate_to(100)  # everything: the file goes
    assert len(again) == 0 and not again.path.exists()


def test_reset_removes_the_file(tmp_path):
    index = index_at(tmp_path)
    index.append(1, 100, 101, 102)
    index.reset()
    assert len(index) == 0 and not index.path.exists()
    assert index.collect(0, 10**9) == ([], False)


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack(">hqqqq", 0, 1, 100, 101, 102)[:-1],  # torn entry
        struct.pack(">hqqqq", 1, 1, 100, 101, 102),  # unknown version
        struct.pack(">hqqqq", 0, 1, 10, 50, 51),  # ends before the segment
        struct.pack(">hqqqq", 0, 1, 150, 140, 151),  # first after last
        struct.pack(">hqqqqhqqqq", 0, 1, 100, 120, 121, 0, 2, 100, 110, 121),  # not in order
    ],
)
def test_corrupt_files_are_detected(tmp_path, raw):
    index = index_at(tmp_path)
    index.path.write_bytes(raw)
    with pytest.raises(CorruptIndexError):
        index.load()


def test_collect_follows_kafka(tmp_path):
    index = index_at(tmp_path, base=0)
    # B (pid 2) starts at 5 and stays open while A (pid 1, 0..100) aborts: A's LSO is 5.
    index.append(1, 0, 100, 5)
    index.append(2, 5, 200, 201)
    index.append(3, 300, 310, 311)
    # [0, 50): A overlaps, but its LSO (5) is below 50, so B may still be ahead: keep going.
    assert index.collect(0, 50) == ([AbortedTxn(1, 0, 100, 5), AbortedTxn(2, 5, 200, 201)], True)
    # From 150: A ended before it; B overlaps and completes the search.
    assert index.collect(150, 250) == ([AbortedTxn(2, 5, 200, 201)], True)
    # [250, 300): nothing overlaps; B's LSO (201) does not reach 300, C's (311) does.
    assert index.collect(250, 300) == ([], True)
    # Beyond everything: incomplete, the next segment must be searched.
    assert index.collect(400, 500) == ([], False)
