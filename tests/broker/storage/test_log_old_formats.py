"""Logs kept in magic 0/1 (message.format.version before 0.11, seed 004): appends place old
entries without losing offsets or timestamps, reads frame them, recovery and timestamp lookups
work over them, also mixed with v2 batches."""

import os
import shutil

import pytest

from broker.records import compression as codecs
from broker.records.batch import (
    InvalidRecordError,
    build_batch,
    iter_batches,
    validate_produce_batch,
)
from broker.records.entries import entry_records
from broker.records.errors import UNSUPPORTED_COMPRESSION_TYPE, UNSUPPORTED_FOR_MESSAGE_FORMAT
from broker.records.legacy import down_convert, iter_entries, to_legacy
from broker.storage import Log, LogConfig

OLD = {0: "0.9.0", 1: "0.10.2-IV0"}


def v2_batch(i, count=3, compression=codecs.NONE, headers=()):
    records = [
        (b"k%d-%d" % (i, j), b"v%d-%d" % (i, j) * 4, list(headers), 5000 + i * 10 + j)
        for j in range(count)
    ]
    return build_batch(records, compression=compression)


def read_all(log, start=None):
    """(offset, timestamp, key, value) of every record from `start`, entry by entry."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        buf = b"".join(bytes(c) for c in data.records)
        for pos, header in iter_batches(buf):
            for r in entry_records(buf[pos : pos + header.size]):
                if r.offset >= offset:
                    out.append((r.offset, r.timestamp, r.key, r.value))
        offset = data.next_offset
    return out


def expected(batches, count=3, magic=1):
    out = []
    offset = 0
    for i in batches:
        for j in range(count):
            ts = 5000 + i * 10 + j if magic else -1
            out.append((offset, ts, b"k%d-%d" % (i, j), b"v%d-%d" % (i, j) * 4))
            offset += 1
    return out


def fill(log, magic, batches=range(12)):
    for i in batches:
        log.append_legacy(to_legacy(v2_batch(i, compression=i % 4), magic), now_ms=9000)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_format_log_round_trip_and_reopen(tmp_path, magic):
    config = LogConfig(
        segment_bytes=700, index_interval_bytes=60, message_format_version=OLD[magic]
    )
    log = Log.open(tmp_path, config)
    fill(log, magic)
    assert len(log.segments) > 2
    assert log.log_end_offset == 36
    assert read_all(log) == expected(range(12), magic=magic)
    assert read_all(log, 17) == expected(range(12), magic=magic)[17:]
    # On disk: only entries of the topic's magic, uncompressed ones one message each.
    magics = {
        header.magic for s in log.segments for _, header in iter_batches(s.read_at(0, s.size))
    }
    assert magics == {magic}
    log.close()
    again = Log.open(tmp_path, config, recovery_point=log.log_end_offset, clean_shutdown=True)
    assert again.log_end_offset == 36 and read_all(again) == expected(range(12), magic=magic)
    again.close()


def test_time_index_and_timestamp_lookup_over_magic_1(tmp_path):
    config = LogConfig(segment_bytes=700, index_interval_bytes=60, message_format_version="0.10.1")
    log = Log.open(tmp_path, config)
    fill(log, 1)
    assert log.offset_for_timestamp(5000) == (0, 5000)
    assert log.offset_for_timestamp(5051) == (16, 5051)  # batch 5: offsets 15-17, 5050-5052
    assert log.offset_for_timestamp(5112) == (35, 5112)
    assert log.offset_for_timestamp(5113) is None
    assert log.max_timestamp_offset() == (35, 5112)
    log.close()


def test_magic_0_has_no_timestamps_to_look_up(tmp_path):
    log = Log.open(tmp_path, LogConfig(message_format_version="0.9.0"))
    fill(log, 0, range(3))
    assert log.offset_for_timestamp(0) is None
    log.close()


def test_log_append_time_stamps_each_shallow_entry_of_magic_1(tmp_path):
    config = LogConfig(message_format_version="0.10.2", message_timestamp_type="LogAppendTime")
    log = Log.open(tmp_path, config)
    result = log.append_legacy(to_legacy(v2_batch(0), 1), now_ms=7777)
    log.append_legacy(to_legacy(v2_batch(1, compression=codecs.GZIP), 1), now_ms=8888)
    assert result.log_append_time_ms == 7777
    assert [r[:2] for r in read_all(log)] == [(0, 7777), (1, 7777), (2, 7777)] + [
        (3, 8888),
        (4, 8888),
        (5, 8888),
    ]
    log.close()


@pytest.mark.parametrize("magic", [0, 1])
def test_unclean_shutdown_recovers_old_entries_torn_anywhere(tmp_path, magic):
    config = LogConfig(
        segment_bytes=100_000, index_interval_bytes=60, message_format_version=OLD[magic]
    )
    src = tmp_path / "src"
    log = Log.open(src, config)
    fill(log, magic, range(4))
    ends = []
    position = 0
    segment = log.segments[-1]
    for _, header in iter_batches(segment.read_at(0, segment.size)):
        position += header.size
        ends.append((position, header.next_offset))
    size = segment.size
    name = segment.log_path.name
    for cut in range(size - 40, size + 1):
        crash = tmp_path / f"cut{cut}"
        shutil.copytree(src, crash)
        os.truncate(crash / name, cut)
        reopened = Log.open(crash, config, clean_shutdown=False)
        whole = [(p, n) for p, n in ends if p <= cut]
        assert reopened.log_end_offset == (whole[-1][1] if whole else 0)
        assert read_all(reopened) == expected(range(4), magic=magic)[: reopened.log_end_offset]
        reopened.close()
        shutil.rmtree(crash)
    log.close()


def test_mixed_log_v2_then_magic_1(tmp_path):
    """A topic whose format changes keeps both kinds of entries; readers walk both."""
    log = Log.open(tmp_path, LogConfig(index_interval_bytes=60))
    data = v2_batch(0)
    log.append(data, validate_produce_batch(data), now_ms=9000)
    log.update_config(LogConfig(index_interval_bytes=60, message_format_version="0.10.0"))
    fill(log, 1, range(1, 3))
    assert read_all(log) == expected(range(3))
    # Old consumers get magic 0 from both kinds.
    chunks = log.read(0, 1 << 20).records
    converted = down_convert(chunks, magic=0, fetch_offset=0)
    entries = [m for _, m in iter_entries(converted.records)]
    assert {m.magic for m in entries} == {0}
    log.close()


def test_what_old_formats_cannot_hold_is_refused():
    with pytest.raises(InvalidRecordError) as e:
        to_legacy(v2_batch(0, headers=[("h", b"x")]), 1)
    assert e.value.error_code == UNSUPPORTED_FOR_MESSAGE_FORMAT
    with pytest.raises(InvalidRecordError) as e:
        to_legacy(v2_batch(0, compression=codecs.ZSTD), 1)
    assert e.value.error_code == UNSUPPORTED_COMPRESSION_TYPE
    idempotent = build_batch(
        [(b"k", b"v", [], 1)], producer_id=7, producer_epoch=0, base_sequence=0
    )
    with pytest.raises(InvalidRecordError) as e:
        to_legacy(idempotent, 0)
    assert e.value.error_code == UNSUPPORTED_FOR_MESSAGE_FORMAT


def replicate(leader, follower, now_ms):
    """What a replica fetcher does with a fetch answer: append each entry as the leader has
    it, offsets kept."""
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, 1 << 20)
        buf = memoryview(b"".join(bytes(c) for c in data.records))
        for pos, header in iter_batches(buf):
            if header.next_offset > follower.log_end_offset:
                view = buf[pos : pos + header.size]
                follower.append(view, header, now_ms=now_ms, assign_offsets=False)


def stored(log):
    return b"".join(bytes(s.read_at(0, s.size)) for s in log.segments)


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
@pytest.mark.parametrize("magic", [0, 1, 2])
def test_a_replica_keeps_the_leaders_entries_byte_for_byte(tmp_path, magic, timestamp_type):
    """Whatever the format and timestamp type: a follower neither stamps its own append time
    (Kafka's appendAsFollower keeps the leader's) nor reads a v2 header into an old entry,
    and entries without epochs make it forget its epochs, as the leader did."""
    config = LogConfig(
        segment_bytes=700,
        message_format_version=OLD.get(magic, "3.0"),
        message_timestamp_type=timestamp_type,
    )
    leader = Log.open(tmp_path / "leader", config)
    follower = Log.open(tmp_path / "follower", config, high_watermark_follows_appends=False)
    for i in range(8):
        batch = v2_batch(i, compression=i % 4)
        if magic < 2 and i >= 2:  # the first two from before the topic's format was old
            leader.append_legacy(to_legacy(batch, magic), now_ms=9000 + i)
        else:
            header = validate_produce_batch(batch)
            leader.append(batch, header, now_ms=9000 + i, leader_epoch=3)
        replicate(leader, follower, now_ms=50_000)

    assert follower.log_end_offset == leader.log_end_offset == 24
    assert stored(follower) == stored(leader)
    assert read_all(follower) == read_all(leader)
    assert follower.leader_epochs.latest_epoch == leader.leader_epochs.latest_epoch
    leader.close()
    follower.close()
