"""Reads as file slices (Log.read with as_slice): the same batches a read returns, sent from
the segment file by the network; never a slice of a few small batches."""

import os
import random
import shutil

import pytest

from broker.records.batch import build_batch, validate_produce_batch
from broker.storage import Log, LogConfig
from broker.storage.file_slice import FileSlice
from broker.storage.log import SLICE_MAX_BATCHES, SLICE_MIN_BYTES

CONFIG = LogConfig(segment_bytes=4 << 20, file_delete_delay_ms=0)


def append(log: Log, count: int, size: int, seed: int) -> None:
    rng = random.Random(seed)
    data = build_batch([(None, rng.randbytes(size), [], 1000 + i) for i in range(count)])
    log.append(data, validate_produce_batch(data), now_ms=1000)


def content(part) -> bytes:
    """What the network would send of `part`: a slice's bytes as sendfile reads them."""
    if isinstance(part, FileSlice):
        return os.pread(part.fd, part.size, part.position)
    return bytes(part)


def as_bytes(read) -> bytes:
    return b"".join(content(part) for part in read.records)


def mixed_log(path) -> Log:
    """Batches of 20 KB to 300 KB, and runs of small ones, over several segments."""
    log = Log.open(path, CONFIG)
    rng = random.Random(7)
    for i in range(60):
        if i % 7 == 3:
            for j in range(SLICE_MAX_BATCHES + 4):  # more small batches than a walk takes
                append(log, 1, 200, seed=i * 100 + j)
        else:
            append(log, rng.randrange(1, 15), 20_000, seed=i)
    return log


def test_a_slice_holds_exactly_what_a_read_returns(tmp_path):
    log = mixed_log(tmp_path / "t-0")
    assert len(log.segments) > 1
    rng = random.Random(11)
    end = log.log_end_offset
    slices = 0
    for _ in range(400):
        offset = rng.randrange(0, end)
        max_bytes = rng.choice([1, 30_000, SLICE_MIN_BYTES, 200_000, 1 << 20])
        max_offset = rng.choice([None, end, rng.randrange(offset, end + 1)])
        first = rng.random() < 0.8
        expected = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=first)
        read = log.read(
            offset, max_bytes, max_offset=max_offset, min_one_batch=first, as_slice=True
        )
        assert (read.size, read.first_offset) == (expected.size, expected.first_offset)
        if expected.size:
            assert read.next_offset == expected.next_offset
        assert as_bytes(read) == as_bytes(expected)
        if any(isinstance(part, FileSlice) for part in read.records):
            slices += 1
            assert read.size >= SLICE_MIN_BYTES
    assert slices > 50  # the comparison covered slices, not only reads
    log.close()


def test_small_batches_are_read_not_sliced(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    for i in range(2_000):
        append(log, 1, 100, seed=i)  # about 170 bytes a batch
    read = log.read(0, 1 << 20, as_slice=True)
    assert read.size >= SLICE_MIN_BYTES
    assert not any(isinstance(part, FileSlice) for part in read.records)
    log.close()


def test_a_slice_outlives_its_segment_file(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    append(log, 10, 50_000, seed=1)
    expected = as_bytes(log.read(0, 1 << 20))
    read = log.read(0, 1 << 20, as_slice=True)
    (part,) = read.records
    assert isinstance(part, FileSlice)
    log.close()
    shutil.rmtree(tmp_path / "t-0")  # the partition deleted before the response is written
    assert content(part) == expected


def test_a_dropped_slice_closes_its_descriptor(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    append(log, 10, 50_000, seed=1)
    (part,) = log.read(0, 1 << 20, as_slice=True).records
    fd = part.fd
    os.fstat(fd)  # open while the slice lives
    del part
    with pytest.raises(OSError):
        os.fstat(fd)
    log.close()


def test_past_the_slices_share_of_descriptors_reads_go_through_memory(tmp_path, monkeypatch):
    log = Log.open(tmp_path / "t-0", CONFIG)
    append(log, 10, 50_000, seed=1)
    append(log, 10, 50_000, seed=2)
    monkeypatch.setattr(FileSlice, "budget", FileSlice.held + 1)
    first = log.read(0, 600_000, as_slice=True)
    second = log.read(10, 600_000, as_slice=True)
    assert isinstance(first.records[0], FileSlice)
    assert not isinstance(second.records[0], FileSlice)  # the share is spent
    assert as_bytes(second) == as_bytes(log.read(10, 600_000))
    first.records[0].close()
    assert isinstance(log.read(10, 600_000, as_slice=True).records[0], FileSlice)
    log.close()
