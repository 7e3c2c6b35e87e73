"""Crash recovery: the files as the OS holds them after kill -9, torn or corrupted, reopened."""

import os
import shutil

import pytest

from broker.records.batch import build_batch, decode_batch, iter_batches, validate_produce_batch
from broker.storage import Log, LogConfig

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=150)


def make_batch(i, count=2):
    records = [
        (b"k%d" % i, b"value-%d-%d" % (i, j) * 3, [("h", b"x")], 1000 + i * 10 + j)
        for j in range(count)
    ]
    data = build_batch(records, compression=i % 5)
    return data, validate_produce_batch(data)


def write_log(directory, batches, config=CONFIG):
    """Append batches and return (open log, [(base, next) per batch]) without closing it."""
    log = Log.open(directory, config)
    spans = []
    for i in range(batches):
        data, header = make_batch(i)
        result = log.append(data, header, now_ms=0)
        spans.append((result.base_offset, result.last_offset + 1))
    return log, spans


def crash_copy(src, dst):
    """What survives kill -9: exactly the bytes handed to the OS (no close, no final entries)."""
    shutil.copytree(src, dst)
    return dst


def values(log, start=None):
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        buf = b"".join(bytes(c) for c in log.read(offset, 1 << 20).records)
        for pos, h in iter_batches(buf):
            header, records = decode_batch(buf[pos : pos + h.size])
            out += [(header.record_offset(r), r.value) for r in records]
            offset = h.next_offset
    return out


def check_recovered(directory, keep_until, expected, *, reopen=True):
    log = Log.open(directory, CONFIG, recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == keep_until
    assert values(log) == [v for v in expected if v[0] < keep_until]
    data, header = make_batch(99, count=1)
    assert log.append(data, header, now_ms=0).base_offset == keep_until
    assert values(log)[-1] == (keep_until, b"value-99-0" * 3)
    if not reopen:
        log.delete()  # skips the fsyncs of close(); the copy is disposable
        return
    log.close()
    reopened = Log.open(directory, CONFIG, clean_shutdown=True)
    assert reopened.log_end_offset == keep_until + 1
    assert values(reopened)[-1] == (keep_until, b"value-99-0" * 3)
    reopened.close()


def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path):
    log, spans = write_log(tmp_path / "src", 6)
    expected = values(log)
    active = log.active_segment
    last_pos = [pos for pos, _ in active.batches_from(0)][-1]
    for cut in range(last_pos, active.size):
        directory = crash_copy(tmp_path / "src", tmp_path / f"cut{cut}")
        os.truncate(directory / active.log_path.name, cut)
        check_recovered(directory, spans[-1][0], expected, reopen=cut % 16 == 0)
    log.close()


# Bytes 0-7 (base offset) and 12-15 (leader epoch) are outside the CRC by design: Kafka
# cannot detect a corrupted offset that still increases either, so they are not tested.
def _crc_or_frame_covered(i):
    return not (0 <= i < 8 or 12 <= i < 16)


def test_corrupt_byte_anywhere_in_the_last_batch(tmp_path):
    log, spans = write_log(tmp_path / "src", 4)
    expected = values(log)
    active = log.active_segment
    last_pos = [pos for pos, _ in active.batches_from(0)][-1]
    for at in range(last_pos, active.size):
        if not _crc_or_frame_covered(at - last_pos):
            continue
        directory = crash_copy(tmp_path / "src", tmp_path / f"bad{at}")
        path = directory / active.log_path.name
        raw = bytearray(path.read_bytes())
        raw[at] ^= 0x5A
        path.write_bytes(bytes(raw))
        check_recovered(directory, spans[-1][0], expected, reopen=at % 16 == 0)
    log.close()


def test_corruption_in_an_earlier_segment_drops_everything_after_it(tmp_path):
    log, spans = write_log(tmp_path / "src", 40)
    expected = values(log)
    segments = log.segments
    assert len(segments) >= 3
    victim = segments[1]
    batches = list(victim.batches_from(0))
    pos, header = batches[len(batches) // 2]
    directory = crash_copy(tmp_path / "src", tmp_path / "crash")
    path = directory / victim.log_path.name
    raw = bytearray(path.read_bytes())
    raw[pos + 40] ^= 0xFF
    path.write_bytes(bytes(raw))
    check_recovered(directory, header.base_offset, expected)
    names = {p.name for p in directory.iterdir()}
    assert not any(f"{s.base_offset:020d}" in n for s in segments[2:] for n in names)
    log.close()


def test_recovery_starts_at_the_recovery_point(tmp_path):
    log, spans = write_log(tmp_path / "src", 40)
    expected = values(log)
    segments = log.segments
    log.flush(segments[-1].base_offset)  # what advances a recovery point: indexes go too
    directory = crash_copy(tmp_path / "src", tmp_path / "crash")
    # Garbage in a segment below the recovery point is not rescanned (it was fsynced).
    first = directory / segments[0].log_path.name
    raw = bytearray(first.read_bytes())
    raw[-5] ^= 0xFF
    first.write_bytes(bytes(raw))
    last = directory / segments[-1].log_path.name
    os.truncate(last, last.stat().st_size - 3)
    reopened = Log.open(
        directory, CONFIG, recovery_point=segments[-1].base_offset, clean_shutdown=False
    )
    assert reopened.log_end_offset == spans[-1][0]
    assert reopened.segments[0].size == segments[0].size
    assert values(reopened, segments[1].base_offset) == [
        v for v in expected if segments[1].base_offset <= v[0] < spans[-1][0]
    ]
    reopened.close()
    log.close()


def test_clean_flag_with_a_torn_tail_still_recovers(tmp_path):
    log, spans = write_log(tmp_path / "src", 5)
    expected = values(log)
    log.close()
    path = tmp_path / "src" / log.active_segment.log_path.name
    os.truncate(path, path.stat().st_size - 1)
    reopened = Log.open(tmp_path / "src", CONFIG, recovery_point=10**6, clean_shutdown=True)
    assert reopened.log_end_offset == spans[-1][0]
    assert values(reopened) == [v for v in expected if v[0] < spans[-1][0]]
    reopened.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "empty", "wrong-entries"])
def test_missing_or_bad_indexes_are_rebuilt(tmp_path, damage):
    log, _ = write_log(tmp_path / "src", 40)
    expected = values(log)
    lookups = [log.offset_for_timestamp(t) for t in range(990, 1400, 13)]
    log.close()
    directory = tmp_path / "src"
    originals = {p.name: p.read_bytes() for p in directory.iterdir()}
    for name in originals:
        if name.endswith((".index", ".timeindex")):
            path = directory / name
            if damage == "missing":
                path.unlink()
            elif damage == "garbage":
                path.write_bytes(os.urandom(37))
            elif damage == "empty":
                path.write_bytes(b"")
            else:
                raw = originals[name]
                path.write_bytes(raw[len(raw) // 2 :] + raw[: len(raw) // 2])
    reopened = Log.open(directory, CONFIG, recovery_point=10**6, clean_shutdown=True)
    assert values(reopened) == expected
    assert [reopened.offset_for_timestamp(t) for t in range(990, 1400, 13)] == lookups
    reopened.close()
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == originals


def test_leftovers_are_removed_at_load(tmp_path):
    log, _ = write_log(tmp_path / "src", 3)
    log.close()
    directory = tmp_path / "src"
    (directory / "00000000000000000500.index").write_bytes(b"\0" * 8)
    (directory / "00000000000000000000.log.deleted").write_bytes(b"old")
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"old")
    reopened = Log.open(directory, CONFIG, clean_shutdown=True)
    names = {p.name for p in directory.iterdir()}
    assert "00000000000000000500.index" not in names
    assert not any(n.endswith((".deleted", ".cleaned")) for n in names)
    assert reopened.log_end_offset == 6
    reopened.close()


def test_log_start_offset_beyond_what_survived(tmp_path):
    log, _ = write_log(tmp_path / "src", 3)
    log.close()
    reopened = Log.open(tmp_path / "src", CONFIG, log_start_offset=50, clean_shutdown=False)
    assert reopened.log_start_offset == reopened.log_end_offset == 50
    assert [s.base_offset for s in reopened.segments] == [50]
    data, header = make_batch(1)
    assert reopened.append(data, header, now_ms=0).base_offset == 50
    reopened.close()
