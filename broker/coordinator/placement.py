"""Which partition of a coordinator's internal topic owns a key — Kafka's placement, so group and
transactional ids land where Kafka would put them: abs(key.hashCode()) % partitions."""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % partitions  # Kafka's Utils.abs


def everywhere(_key: str) -> bool:
    """The scope of an operation on every key, whichever partition owns it."""
    return True
