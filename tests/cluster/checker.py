"""Checkers in the style of Jepsen's Kafka workload, over what the clients saw and a final drain
of every partition read to its end after the faults healed.

- lost: an acknowledged record is not at its acknowledged offset in the drain.
- duplicated: a value is at more than one offset of the drain (idempotence failed).
- reordered: one producer's values on a partition are not in its send order.
- stray: the drain holds a value nobody sent.
- vanished_reads: a consumer saw (partition, offset, value) that the drain does not have (it
  read data that was later truncated away, or a different record at that offset).
- aborted_reads: a read_committed consumer saw a value of an aborted transaction, or one the
  read_committed drain does not have.
- torn_transactions: a committed transaction is not wholly visible to read_committed, or one
  of unknown outcome is partly visible; aborted_visible: an aborted one is visible at all.
- lost_commits: a group's final committed offset is below one it acknowledged;
  offset_regressions: an offset commit acknowledged lower than one acknowledged before it
  was sent (the group went back past data a consumer had already committed).

Values are strings "<producer>-<seq>" (p1-17, t2-5): seq grows with each send of a producer.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Drain = Mapping[int, Mapping[int, str]]  # partition -> offset -> value
Outcome = Literal["committed", "aborted", "unknown"]
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
VALUE = re.compile(r"^(?P<producer>[a-z]+\d+)-(?P<seq>\d+)$")
ANOMALIES = (
    "lost",
    "duplicated",
    "reordered",
    "stray",
    "vanished_reads",
    "aborted_reads",
    "torn_transactions",
    "aborted_visible",
    "lost_commits",
    "offset_regressions",
)
SHOWN = 10  # details printed per kind of anomaly


@dataclass(frozen=True)
class Send:
    """One produced record: acknowledged at `offset`, or not (`error` says why; the record
    may or may not have been written)."""

    value: str
    partition: int
    offset: int | None = None
    error: str | None = None

    @property
    def acknowledged(self) -> bool:
        return self.offset is not None


@dataclass(frozen=True)
class Txn:
    """One transaction of a transactional producer: its sends and how it ended, as far as the
    producer knows (unknown when the commit or abort itself failed)."""

    producer: str
    sends: tuple[Send, ...]
    outcome: Outcome


@dataclass(frozen=True)
class Read:
    consumer: str
    partition: int
    offset: int
    value: str
    isolation: str = READ_UNCOMMITTED


@dataclass(frozen=True)
class OffsetCommit:
    """A group offset commit the coordinator acknowledged: sent at `started`, answered at
    `acked` (time.monotonic() of the test process)."""

    partition: int
    offset: int
    started: float
    acked: float


@dataclass
class CheckResult:
    counts: dict[str, int] = field(default_factory=dict)
    anomalies: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in ANOMALIES})

    def add(self, kind: str, detail: str) -> None:
        self.anomalies[kind].append(detail)

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def format(self) -> str:
        c = self.counts
        lines = [
            f"sent {c['sent']}: acknowledged {c['acknowledged']}, unacknowledged "
            f"{c['unacknowledged']} ({c['recovered']} of them in the drain); drained "
            f"{c['drained']}",
            f"reads {c['reads']} ({c['read_committed_reads']} read_committed)",
            f"transactions: committed {c['committed']}, aborted {c['aborted']}, unknown "
            f"{c['unknown']}",
            f"offset commits {c['offset_commits']}",
            ", ".join(f"{kind} {len(self.anomalies[kind])}" for kind in ANOMALIES),
        ]
        for kind in ANOMALIES:
            found = self.anomalies[kind]
            if found:
                more = f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else ""
                lines.append(f"{kind}{more}:")
                lines.extend(f"  {d}" for d in found[:SHOWN])
        return "\n".join(lines)

    def assert_valid(self) -> None:
        assert self.valid, "the history has anomalies:\n" + self.format()


def check(
    *,
    drain: Drain,
    sends: Iterable[Send] = (),
    txns: Iterable[Txn] = (),
    reads: Iterable[Read] = (),
    committed_drain: Drain | None = None,
    commits: Iterable[OffsetCommit] = (),
    final_offsets: Mapping[int, int] | None = None,
) -> CheckResult:
    """Check a history. `drain` is read_uncommitted (every record in the log, aborted ones
    too); `committed_drain` is read_committed, needed when there are transactions.
    `final_offsets` are the group's committed offsets at the end, needed with `commits`."""
    sends, txns, reads, commits = list(sends), list(txns), list(reads), list(commits)
    if txns and committed_drain is None:
        raise ValueError("transactions are checked against a read_committed drain")
    if commits and final_offsets is None:
        raise ValueError("offset commits are checked against the final committed offsets")
    result = CheckResult()
    all_sends = sends + [s for t in txns for s in t.sends]
    durable = sends + [s for t in txns if t.outcome == "committed" for s in t.sends]
    _check_drain(result, drain, all_sends, durable)
    _check_reads(result, drain, committed_drain, txns, reads)
    if txns:
        _check_transactions(result, committed_drain, txns)
    _check_commits(result, commits, final_offsets or {})
    outcomes = Counter(t.outcome for t in txns)
    unacked = [s for s in all_sends if not s.acknowledged]
    drained = {v for records in drain.values() for v in records.values()}
    result.counts.update(
        sent=len(all_sends),
        acknowledged=len(all_sends) - len(unacked),
        unacknowledged=len(unacked),
        recovered=sum(s.value in drained for s in unacked),
        drained=sum(len(records) for records in drain.values()),
        reads=len(reads),
        read_committed_reads=sum(r.isolation == READ_COMMITTED for r in reads),
        committed=outcomes["committed"],
        aborted=outcomes["aborted"],
        unknown=outcomes["unknown"],
        offset_commits=len(commits),
    )
    result.counts.update({kind: len(result.anomalies[kind]) for kind in ANOMALIES})
    return result


def _at(drain: Drain, partition: int, offset: int) -> str | None:
    return drain.get(partition, {}).get(offset)


def _check_drain(result: CheckResult, drain: Drain, sends: list[Send], durable: list[Send]) -> None:
    for s in durable:
        if s.acknowledged:
            found = _at(drain, s.partition, s.offset)
            if found != s.value:
                result.add(
                    "lost",
                    f"{s.value} acknowledged at {s.partition}:{s.offset}, "
                    f"the drain has {found!r} there",
                )
    where = defaultdict(list)
    for p in sorted(drain):
        for o in sorted(drain[p]):
            where[drain[p][o]].append(f"{p}:{o}")
    for value, places in where.items():
        if len(places) > 1:
            result.add("duplicated", f"{value} at {', '.join(places)}")
    sent = {s.value for s in sends}
    for value in where.keys() - sent:
        result.add("stray", f"{value} at {where[value][0]} was never sent")
    for p in sorted(drain):
        last: dict[str, tuple[int, int]] = {}  # producer -> (seq, offset) of its latest value
        for o in sorted(drain[p]):
            m = VALUE.match(drain[p][o])
            if m is None or where[drain[p][o]][0] != f"{p}:{o}":
                continue  # a repeat of a value is a duplicate, not also a reordering
            producer, seq = m["producer"], int(m["seq"])
            before = last.get(producer)
            if before is not None and before[0] > seq:
                result.add(
                    "reordered",
                    f"{drain[p][o]} at {p}:{o} after {producer}-{before[0]} at {p}:{before[1]}",
                )
            last[producer] = max(before or (seq, o), (seq, o))


def _check_reads(
    result: CheckResult,
    drain: Drain,
    committed_drain: Drain | None,
    txns: list[Txn],
    reads: list[Read],
) -> None:
    aborted = {s.value for t in txns if t.outcome == "aborted" for s in t.sends}
    for r in reads:
        found = _at(drain, r.partition, r.offset)
        if found != r.value:
            result.add(
                "vanished_reads",
                f"{r.consumer} read {r.value} at {r.partition}:{r.offset}, "
                f"the drain has {found!r} there",
            )
        if r.isolation != READ_COMMITTED:
            continue
        if r.value in aborted:
            result.add(
                "aborted_reads",
                f"{r.consumer} read {r.value} of an aborted transaction at "
                f"{r.partition}:{r.offset}",
            )
        elif committed_drain is not None:
            committed = _at(committed_drain, r.partition, r.offset)
            if committed != r.value:
                result.add(
                    "aborted_reads",
                    f"{r.consumer} read {r.value} at {r.partition}:{r.offset}, the "
                    f"read_committed drain has {committed!r} there",
                )


def _check_transactions(result: CheckResult, committed_drain: Drain, txns: list[Txn]) -> None:
    visible = {v for records in committed_drain.values() for v in records.values()}
    for t in txns:
        values = [s.value for s in t.sends]
        seen = [v for v in values if v in visible]
        summary = f"{t.outcome} transaction of {t.producer} {values}: {len(seen)} visible"
        if t.outcome == "aborted" and seen:
            result.add("aborted_visible", f"{summary} ({seen})")
        elif t.outcome == "committed" and len(seen) < len(values):
            result.add("torn_transactions", summary)
        elif t.outcome == "unknown" and 0 < len(seen) < len(values):
            result.add("torn_transactions", f"{summary} ({seen})")


def _check_commits(
    result: CheckResult, commits: list[OffsetCommit], final_offsets: Mapping[int, int]
) -> None:
    by_partition: dict[int, list[OffsetCommit]] = defaultdict(list)
    for c in commits:
        by_partition[c.partition].append(c)
    for p, cs in sorted(by_partition.items()):
        highest = max(cs, key=lambda c: c.offset)
        final = final_offsets.get(p)
        if final is None or final < highest.offset:
            result.add(
                "lost_commits",
                f"partition {p}: offset {highest.offset} was committed, the group ends at {final}",
            )
        # A commit sent after another was acknowledged follows it in real time: it must not
        # be lower. Concurrent commits are not ordered and not compared.
        cs = sorted(cs, key=lambda c: c.acked)
        acked_at = [c.acked for c in cs]
        running_max: list[OffsetCommit] = []
        for c in cs:
            running_max.append(
                c if not running_max or c.offset > running_max[-1].offset else running_max[-1]
            )
        for c in cs:
            before = bisect.bisect_left(acked_at, c.started)
            if before and running_max[before - 1].offset > c.offset:
                result.add(
                    "offset_regressions",
                    f"partition {p}: offset {c.offset} committed after "
                    f"{running_max[before - 1].offset} had been",
                )
