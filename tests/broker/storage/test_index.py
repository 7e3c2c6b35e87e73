import os
import struct

import pytest

from broker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_append_lookup_and_reload(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, max_entries=3)
    assert index.lookup(150) == (100, 0)
    index.append(110, 4000)
    index.append(120, 8100)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 4000)
    assert index.lookup(119) == (110, 4000)
    assert index.lookup(500) == (120, 8100)
    assert not index.is_full
    index.append(130, 9000)
    assert index.is_full
    with pytest.raises(ValueError):
        index.append(130, 9500)
    index.close()
    raw = path.read_bytes()
    assert raw == struct.pack(">iiiiii", 10, 4000, 20, 8100, 30, 9000)  # Kafka's format
    again = OffsetIndex(path, 100, max_entries=3)
    again.load(log_size=10000)
    assert again.lookup(125) == (120, 8100)
    assert again.last_entry == (130, 9000)
    again.close()


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00" * 7,  # not whole entries
        struct.pack(">iiii", 20, 100, 10, 200),  # offsets going backwards
        struct.pack(">ii", 10, 99999),  # position beyond the log
        struct.pack(">ii", -4, 0),
    ],
)
def test_offset_index_sanity_check(tmp_path, raw):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(raw)
    index = OffsetIndex(path, 0, max_entries=100)
    with pytest.raises(CorruptIndexError):
        index.load(log_size=1000)
    index.close()


def test_time_index_only_appends_larger_timestamps(tmp_path):
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, max_entries=10)
    assert index.lookup(1000) == 50
    assert index.last_entry == (-1, 50)
    index.maybe_append(1000, 55)
    index.maybe_append(1000, 56)  # not larger: ignored
    index.maybe_append(900, 57)
    index.maybe_append(2000, 60)
    assert len(index) == 2
    assert index.lookup(999) == 50
    assert index.lookup(1500) == 55
    assert index.lookup(2000) == 60
    index.close()
    assert path.read_bytes() == struct.pack(">qiqi", 1000, 5, 2000, 10)
    again = TimeIndex(path, 50, max_entries=10)
    again.load()
    assert again.last_entry == (2000, 60)
    again.reset()
    assert len(again) == 0 and path.stat().st_size == 0
    again.close()


def test_time_index_sanity_check(tmp_path):
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(struct.pack(">qiqi", 2000, 5, 1000, 6))
    index = TimeIndex(path, 0, max_entries=10)
    with pytest.raises(CorruptIndexError):
        index.load()
    index.close()


def test_entries_reach_the_file_on_flush_only_and_no_descriptor_stays_open(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, max_entries=10)
    index.reset()
    index.append(5, 100)
    assert path.read_bytes() == b""
    index.flush()
    index.append(9, 300)
    assert path.read_bytes() == struct.pack(">ii", 5, 100)
    index.flush()
    assert path.read_bytes() == struct.pack(">iiii", 5, 100, 9, 300)
    assert str(path) not in open_files()
    index.append(12, 400)
    index.close(persist=False)  # a segment being deleted: nothing more is written
    assert len(path.read_bytes()) == 16


def open_files() -> set[str]:
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.add(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:  # the descriptor listdir itself used
            pass
    return names
