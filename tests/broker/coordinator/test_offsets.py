"""Committed offsets as a replayed state machine: commit, fetch, delete, expire."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.coordinator.offsets import CommittedOffset, OffsetCommitRequest, OffsetManager
from broker.coordinator.records import OffsetCommitKey

DAY = 86_400_000


def apply(manager: OffsetManager, records) -> None:
    for record in records:
        manager.replay(record.key, record.value)


def commit(manager, group, *parts, now=1000, expire=-1):
    records, errors = manager.commit_records(
        group, [OffsetCommitRequest(t, p, o, metadata=m) for t, p, o, m in parts], now, expire
    )
    apply(manager, records)
    return errors


def test_commit_then_fetch_and_overwrite():
    m = OffsetManager(metadata_max_bytes=100, retention_ms=DAY)
    commit(m, "g", ("t", 0, 5, "a"), ("t", 1, 7, ""))
    commit(m, "g", ("t", 0, 9, "b"))
    assert m.fetch("g", [("t", 0), ("t", 1), ("t", 2)]) == {
        ("t", 0): CommittedOffset(9, -1, "b"),
        ("t", 1): CommittedOffset(7, -1, ""),
        ("t", 2): None,
    }
    assert set(m.fetch("g", None)) == {("t", 0), ("t", 1)}
    assert m.fetch("other", None) == {}


def test_oversized_metadata_is_refused_per_partition():
    m = OffsetManager(metadata_max_bytes=3, retention_ms=DAY)
    errors = commit(m, "g", ("t", 0, 1, "toolong"), ("t", 1, 2, "ok"))
    assert errors == {("t", 0): ErrorCode.offset_metadata_too_large, ("t", 1): ErrorCode.none}
    assert m.fetch("g", [("t", 0)]) == {("t", 0): None}


def test_the_metadata_limit_counts_utf16_code_units_as_kafka_does():
    """Kafka compares Java's String.length() with offset.metadata.max.bytes: "€" is one unit
    (three UTF-8 bytes), "𝄞" two (a surrogate pair, four UTF-8 bytes)."""
    m = OffsetManager(metadata_max_bytes=4, retention_ms=DAY)
    errors = commit(m, "g", ("t", 0, 1, "€€€€"), ("t", 1, 1, "𝄞𝄞"), ("t", 2, 1, "𝄞𝄞z"))
    assert errors == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.none,
        ("t", 2): ErrorCode.offset_metadata_too_large,
    }
    assert m.fetch("g", [("t", 0)]) == {("t", 0): CommittedOffset(1, -1, "€€€€")}


def test_metadata_the_record_cannot_hold_is_refused_whatever_the_limit():
    """The record's metadata has an int16 length of UTF-8 bytes: 32767 at most."""
    m = OffsetManager(metadata_max_bytes=1 << 20, retention_ms=DAY)
    errors = commit(m, "g", ("t", 0, 1, "z" * 0x7FFF), ("t", 1, 1, "é" * 0x4000))
    assert errors == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.offset_metadata_too_large}


def test_delete_writes_tombstones_that_remove_the_group():
    m = OffsetManager(metadata_max_bytes=100, retention_ms=DAY)
    commit(m, "g", ("t", 0, 1, ""), ("u", 0, 2, ""))
    tombstones = m.delete_records("g", [("t", 0), ("x", 9)])
    assert [(r.key, r.value) for r in tombstones] == [(OffsetCommitKey("g", "t", 0), None)]
    apply(m, tombstones)
    apply(m, m.delete_records("g"))
    assert not m.has_offsets("g") and m.groups() == []


def test_expiry_counts_from_the_commit_or_the_explicit_expire_time():
    m = OffsetManager(metadata_max_bytes=100, retention_ms=DAY)
    commit(m, "g", ("t", 0, 1, ""), now=0)
    commit(m, "g", ("t", 1, 1, ""), now=DAY // 2)
    commit(m, "g", ("t", 2, 1, ""), now=0, expire=10)
    expired = m.expired_records("g", now_ms=DAY)
    assert sorted(r.key.partition for r in expired) == [0, 2]
    apply(m, expired)
    assert set(m.fetch("g", None)) == {("t", 1)}
