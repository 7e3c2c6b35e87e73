"""Shared helpers for the client compatibility tests: topic names, the record set every client
produces and reads back, and the expectations derived from it."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from polling import wait_for

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def finalize_transaction_version(bootstrap: str, level: int) -> None:
    """Finalize transaction.version `level` on the cluster, as kafka-features.sh does (a lower
    level is a safe downgrade): 1 is a cluster that has not turned KIP-890's transactions v2
    on, as one upgraded from Kafka 3.x runs until an operator raises it."""
    from kafka.admin import KafkaAdminClient, UpdateFeatureType

    kind = UpdateFeatureType.UPGRADE if level >= 2 else UpdateFeatureType.SAFE_DOWNGRADE
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        update = {"transaction.version": (kind, level)}
        assert admin.update_features(update) == {"transaction.version": "OK"}
    finally:
        admin.close()


def wait_until(predicate: Callable[[], object], timeout: float = 30, what: str = "condition"):
    """Poll `predicate` until it returns something truthy, and return that; fail after
    `timeout` seconds (polling.wait_for with the compat tests' default timeout)."""
    return wait_for(predicate, timeout, what)


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def make_records(n: int = 45, partitions: int = PARTITIONS) -> list[Rec]:
    """Records with explicit partitions and CreateTime timestamps one second apart, one hour in
    the past (inside any message.timestamp.*.max.ms window), plus awkward cases: a null key,
    a null value, empty key and value, repeated header keys, incompressible and very
    compressible large values."""
    base_ts = (int(time.time() * 1000) // 1000) * 1000 - 3_600_000
    rng = random.Random(1234)
    records = []
    for i in range(n):
        key: bytes | None = f"key-{i}".encode()
        value: bytes | None = f"value-{i}-".encode() * (1 + i % 5)
        headers: tuple[tuple[str, bytes], ...] = (("i", str(i).encode()), ("kind", b"compat"))
        if i == 3:
            key = None
        elif i == 4:
            value = None
        elif i == 5:
            key, value = b"", b""
        elif i == 6:
            headers = (("dup", b"1"), ("dup", b"2"), ("empty", b""))
        elif i == 7:
            headers = ()
        elif i == 8:
            value = rng.randbytes(40_000)
        elif i == 9:
            value = b"z" * 200_000
        elif i == 10:
            key, value = bytes(range(256)), "ünïcødé ✓".encode()
        records.append(Rec(i % partitions, key, value, headers, base_ts + 1000 * i))
    return records


def by_partition(records: list[Rec], partitions: int = PARTITIONS) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(partitions)}
    for r in records:
        out[r.partition].append(r)
    return out


@dataclass(frozen=True)
class TimeQuery:
    """A ListOffsets-by-timestamp question and Kafka's answer (None: no such record, the
    broker answers offset -1)."""

    partition: int
    timestamp: int
    offset: int | None
    what: str


def time_queries(records: list[Rec], partitions: int = PARTITIONS) -> list[TimeQuery]:
    queries = []
    for p, recs in by_partition(records, partitions).items():
        first, last = recs[0], recs[-1]
        middle = len(recs) // 2
        queries += [
            TimeQuery(p, first.timestamp - 3_600_000, 0, "before the data"),
            TimeQuery(p, first.timestamp, 0, "the first timestamp"),
            TimeQuery(p, recs[middle].timestamp, middle, "an exact timestamp inside"),
            TimeQuery(p, recs[middle].timestamp - 1, middle, "between two records"),
            TimeQuery(p, recs[middle].timestamp + 1, middle + 1, "just after a record"),
            TimeQuery(p, last.timestamp, len(recs) - 1, "the last timestamp"),
            TimeQuery(p, last.timestamp + 1, None, "after the data"),
        ]
    return queries


def assert_same_records(
    expected: list[Rec], got: dict[int, list[tuple[int, Rec]]], partitions: int = PARTITIONS
) -> None:
    """`got` maps partition -> [(offset, Rec)] in the order the consumer returned them."""
    want = by_partition(expected, partitions)
    assert sorted(got) == sorted(want), f"partitions: got {sorted(got)}"
    for p in want:
        offsets = [o for o, _ in got[p]]
        assert offsets == list(range(len(want[p]))), f"partition {p} offsets {offsets}"
        for (offset, g), w in zip(got[p], want[p], strict=True):
            assert g == w, f"partition {p} offset {offset}:\n got  {_short(g)}\n want {_short(w)}"


def _short(r: Rec) -> str:
    def cut(b):
        return b if b is None or len(b) < 60 else b[:40] + b"...(%d bytes)" % len(b)

    return (
        f"Rec(p={r.partition}, key={cut(r.key)!r}, value={cut(r.value)!r}, "
        f"headers={r.headers!r}, ts={r.timestamp})"
    )


def assert_acked_in_order(records: list[Rec], acked: dict[int, list[int]]) -> None:
    """Each partition's records were acknowledged at offsets 0, 1, 2, ... in produce order."""
    for p, recs in by_partition(records).items():
        assert acked[p] == list(range(len(recs))), f"acked offsets of partition {p}"


def numbered_records(n: int = 30) -> list[Rec]:
    """n single-partition records keyed k<i> with values v<i>, timestamps increasing."""
    return [
        Rec(0, b"k%d" % i, b"v%d" % i, (), r.timestamp)
        for i, r in enumerate(make_records(n, partitions=1))
    ]
