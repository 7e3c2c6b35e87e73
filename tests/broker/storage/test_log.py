import dataclasses
import os
import struct

import pytest

from broker.records.batch import (
    LOG_APPEND_TIME,
    build_batch,
    crc_matches,
    decode_batch,
    iter_batches,
    read_header,
    validate_produce_batch,
)
from broker.storage import Log, LogConfig, OffsetOutOfRangeError

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=200, file_delete_delay_ms=0)


def make_batch(count=1, ts=1000, size=20, step=1):
    records = [(None, bytes([65 + i % 26]) * size, [], ts + i * step) for i in range(count)]
    data = build_batch(records)
    return data, validate_produce_batch(data)


def append(log, count=1, ts=1000, size=20, now=None, step=1):
    data, header = make_batch(count, ts, size, step)
    return log.append(data, header, now_ms=ts if now is None else now)


def all_records(log, start=None):
    """(offset, value, timestamp) of every record from `start`, fetching batch by batch."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 20)
        assert fetched.size == sum(len(c) for c in fetched.records)
        buf = b"".join(bytes(c) for c in fetched.records)
        batches = list(iter_batches(buf))
        assert batches and sum(h.size for _, h in batches) == len(buf)
        for pos, h in batches:
            assert crc_matches(buf, pos, h)
            header, records = decode_batch(buf[pos : pos + h.size])
            for r in records:
                if header.record_offset(r) >= offset:
                    out.append((header.record_offset(r), r.value, header.record_timestamp(r)))
        offset = batches[-1][1].next_offset
    return out


def test_append_assigns_offsets_and_rolls_segments(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    results = [append(log, count=3, ts=1000 + i) for i in range(30)]
    assert [r.base_offset for r in results] == list(range(0, 90, 3))
    assert [r.last_offset for r in results] == list(range(2, 92, 3))
    assert all(r.log_append_time_ms == -1 for r in results)
    assert log.log_end_offset == log.high_watermark == 90
    assert len(log.segments) > 3
    names = sorted(os.listdir(tmp_path / "t-0"))
    for segment in log.segments:
        assert segment.size <= SMALL.segment_bytes
        stem = f"{segment.base_offset:020d}"
        assert {stem + ".log", stem + ".index", stem + ".timeindex"} <= set(names)
    assert any(len(s.offset_index) for s in log.segments)
    assert [o for o, _, _ in all_records(log)] == list(range(90))
    log.close()


def test_read_returns_the_batch_containing_the_offset(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    for i in range(40):
        append(log, count=4, ts=i)
    for offset in range(160):
        fetched = log.read(offset, 1)
        header = read_header(fetched.records[0])
        assert header.base_offset <= offset <= header.last_offset
        assert fetched.first_offset == header.base_offset
        assert fetched.size == header.size  # min_one_batch: exactly the first batch
    log.close()


def test_stored_batch_is_the_produced_bytes_with_a_new_offset(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    append(log, count=5)
    data, header = make_batch(count=2, ts=5000)
    log.append(data, header, now_ms=1, leader_epoch=7)
    stored = bytes(log.read(5, 10000).records[0])
    assert struct.unpack_from(">q", stored)[0] == 5
    assert struct.unpack_from(">i", stored, 12)[0] == 7
    assert stored[16:] == data[16:]
    assert stored[8:12] == data[8:12]
    log.close()


def test_read_limits(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    sizes = []
    for _ in range(5):
        data, header = make_batch(count=2, size=50)
        log.append(data, header, now_ms=0)
        sizes.append(header.size)
    two = sizes[0] + sizes[1]
    assert log.read(0, two).size == two
    assert log.read(0, two + sizes[2] - 1).size == two  # whole batches only
    assert log.read(0, 5).size == sizes[0]  # min one batch
    empty = log.read(0, 5, min_one_batch=False)
    assert (empty.records, empty.size, empty.first_offset) == ([], 0, 0)
    assert log.read(0, 1 << 20, max_offset=4).size == two
    assert log.read(3, 1 << 20, max_offset=4).size == sizes[1]
    assert log.read(4, 1 << 20, max_offset=4).size == 0
    assert log.read(10, 100).size == 0  # the log end offset: nothing yet
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(11, 100)
    assert err.value.error_code == 1
    log.close()


def test_log_append_time(tmp_path):
    config = LogConfig(message_timestamp_type="LogAppendTime")
    log = Log.open(tmp_path / "t-0", config)
    data, header = make_batch(count=3, ts=100)
    result = log.append(data, header, now_ms=777_000)
    assert (result.log_append_time_ms, result.max_timestamp) == (777_000, 777_000)
    stored = bytes(log.read(0, 1000).records[0])
    stored_header = validate_produce_batch(stored)
    assert stored_header.timestamp_type == LOG_APPEND_TIME
    assert stored_header.max_timestamp == 777_000
    assert stored[61:] == data[61:]
    assert log.offset_for_timestamp(700_000) == (0, 777_000)
    log.close()


def test_offset_for_timestamp_and_max_timestamp(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    for i in range(30):
        append(log, count=3, ts=1000 + i * 10, step=3)  # records at +0, +3, +6
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (1, 1003)
    assert log.offset_for_timestamp(1007) == (3, 1010)
    assert log.offset_for_timestamp(1153) == (46, 1153)
    assert log.offset_for_timestamp(1154) == (47, 1156)
    assert log.offset_for_timestamp(1296) == (89, 1296)
    assert log.offset_for_timestamp(1297) is None
    assert log.max_timestamp_offset() == (89, 1296)
    # An out-of-order batch: a smaller timestamp later must not move MAX_TIMESTAMP.
    append(log, count=2, ts=10)
    assert log.max_timestamp_offset() == (89, 1296)
    assert log.offset_for_timestamp(1296) == (89, 1296)
    log.close()


def test_max_timestamp_picks_the_earliest_record_with_it(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    assert log.max_timestamp_offset() is None
    records = [(None, b"a", [], 5), (None, b"b", [], 9), (None, b"c", [], 9), (None, b"d", [], 1)]
    data = build_batch(records)
    log.append(data, validate_produce_batch(data), now_ms=0)
    assert log.max_timestamp_offset() == (1, 9)
    assert log.offset_for_timestamp(6) == (1, 9)
    log.close()


def test_time_based_roll_uses_the_first_batch_timestamp(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_ms=1000))
    append(log, ts=10_000)
    append(log, ts=10_999)
    assert len(log.segments) == 1
    append(log, ts=11_001, now=0)  # batch timestamps decide, not the wall clock
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_when_the_index_is_full(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_index_bytes=24, index_interval_bytes=1))
    for i in range(12):
        append(log, ts=i)
    assert len(log.segments) > 1
    assert all(len(s.offset_index) <= 3 for s in log.segments)
    assert [o for o, _, _ in all_records(log)] == list(range(12))
    log.close()


def test_retention_by_time(tmp_path):
    log = Log.open(tmp_path / "t-0", dataclasses.replace(SMALL, retention_ms=1000))
    for i in range(20):
        append(log, count=2, ts=i * 100)
    segments = log.segments
    assert len(segments) >= 3
    now = segments[1].max_timestamp_so_far + 1001  # the first two segments have expired
    assert log.enforce_retention(now) == 2
    assert log.log_start_offset == segments[2].base_offset
    assert not segments[0].log_path.exists() and not segments[1].offset_index.path.exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # Everything expired: the active segment is rolled away too, the log stays usable.
    assert log.enforce_retention(10**9) == len(log.segments)
    assert log.log_start_offset == log.log_end_offset == 40
    assert len(log.segments) == 1 and log.size_in_bytes == 0
    assert log.enforce_retention(10**9) == 0
    assert append(log, ts=10**9).base_offset == 40
    assert all_records(log) == [(40, b"A" * 20, 10**9)]
    log.close()


def test_retention_by_size(tmp_path):
    config = LogConfig(
        segment_bytes=1024, retention_bytes=1500, retention_ms=-1, file_delete_delay_ms=0
    )
    log = Log.open(tmp_path / "t-0", config)
    for i in range(30):
        append(log, count=2, ts=i)
    before = log.size_in_bytes
    deleted = log.enforce_retention(0)
    assert deleted >= 1
    assert log.size_in_bytes <= 1500 + config.segment_bytes
    assert before - log.size_in_bytes >= before - 1500 - config.segment_bytes
    assert log.log_start_offset == log.segments[0].base_offset
    assert log.enforce_retention(0) == 0
    log.close()


def test_retention_keeps_files_for_the_delete_delay(tmp_path):
    config = LogConfig(segment_bytes=512, retention_ms=10, file_delete_delay_ms=5000)
    log = Log.open(tmp_path / "t-0", config)
    for i in range(10):
        append(log, ts=i)
    first = log.segments[0]
    log.enforce_retention(1000)
    assert first.log_path.name.endswith(".log.deleted") and first.log_path.exists()
    log.enforce_retention(6001)
    assert not first.log_path.exists()
    log.close()


def test_delete_records_before(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    for i in range(30):
        append(log, count=3, ts=i)
    third = log.segments[2].base_offset
    assert log.delete_records_before(third + 1) == third + 1
    assert log.segments[0].base_offset == third
    with pytest.raises(OffsetOutOfRangeError):
        log.read(third, 100)
    assert log.read(third + 1, 1).first_offset == third  # the batch holding it
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(log.high_watermark + 1)
    assert log.delete_records_before(5) == third + 1  # never moves backwards
    assert log.delete_records_before(90) == 90
    assert log.read(90, 100).size == 0
    log.close()
    again = Log.open(tmp_path / "t-0", SMALL, log_start_offset=90, clean_shutdown=True)
    assert again.log_start_offset == 90 and again.log_end_offset == 90
    again.close()


def test_reopen_after_close_reads_identically(tmp_path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, SMALL)
    for i in range(25):
        append(log, count=1 + i % 4, ts=2000 + i * 7, size=10 + i)
    expected = all_records(log)
    fetches = [bytes(log.read(o, 300).records[0]) for o in range(0, log.log_end_offset, 5)]
    lookups = [log.offset_for_timestamp(t) for t in range(1990, 2200, 9)]
    end = log.log_end_offset
    log.close()
    indexes = {p.name: p.read_bytes() for p in directory.iterdir()}

    again = Log.open(directory, SMALL, recovery_point=end, clean_shutdown=True)
    assert again.log_end_offset == end and again.recovery_point == end
    assert all_records(again) == expected
    assert [bytes(again.read(o, 300).records[0]) for o in range(0, end, 5)] == fetches
    assert [again.offset_for_timestamp(t) for t in range(1990, 2200, 9)] == lookups
    again.close()
    # Rebuilding every index from scratch yields byte-identical Kafka-format files.
    rebuilt = Log.open(directory, SMALL, recovery_point=0, clean_shutdown=False)
    assert all_records(rebuilt) == expected
    rebuilt.close()
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == indexes
    append_again = Log.open(directory, SMALL, clean_shutdown=True)
    assert append(append_again, ts=9999).base_offset == end
    append_again.close()


def test_flush_interval_messages_says_when_a_flush_is_due(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(flush_interval_messages=5))
    assert not append(log, count=3).flush_due
    assert append(log, count=3).flush_due
    log.flush()
    assert log.recovery_point == 6
    assert not append(log, count=3).flush_due
    log.close()


def test_flush_rolled_segments(tmp_path):
    log = Log.open(tmp_path / "t-0", SMALL)
    for i in range(20):
        append(log, count=2, ts=i)
    assert log.recovery_point == 0
    log.flush_rolled_segments()
    assert log.recovery_point == log.active_segment.base_offset > 0
    log.flush()
    assert log.recovery_point == log.log_end_offset
    log.close()


def test_append_without_assigning_offsets(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    data = build_batch([(None, b"x", [], 1), (None, b"y", [], 2)], base_offset=100)
    header = validate_produce_batch(data)
    with pytest.raises(ValueError):
        log.append(data[:-1], header, now_ms=0)  # shorter than the header says
    assert log.append(data, header, now_ms=0, assign_offsets=False).base_offset == 100
    assert log.log_end_offset == 102
    with pytest.raises(ValueError):
        log.append(data, header, now_ms=0, assign_offsets=False)
    log.close()


def test_update_config_and_delete(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    append(log)
    log.update_config(LogConfig(segment_bytes=100))
    append(log)
    assert len(log.segments) == 2
    log.delete()
    assert not (tmp_path / "t-0").exists()
