"""The two commit logs of seed 002's parallel-rebalance mode, for one partition, as a plain object.

When a member takes over a partition whose committed offset lags the log end, the primary
consumer seeks to the end and a child consumer works through the gap [committed, end). Each
crash (or hand-over) before the child is done adds a gap: the seed's example opens 70-120, then
140-190. What is processed is then described by two logs:

- the primary's log: the next offset the primary reads, past every gap;
- the child's log: each gap as a range token `start-end` with the child's progress in it.

Both are written in ONE OffsetCommit of the partition, so they change atomically and are fenced
by the group generation / member epoch like any commit (a revoked member's child cannot write):
the record's offset is the low-water mark (the child's progress in its oldest open gap, or the
primary's position once no gap is open) and its metadata is the token. A consumer that does not
know the mode (or another client) resumes at the low-water mark: duplicates, never loss. A token
that cannot be decoded, or that does not match the record's offset (someone else committed since),
counts as absent: everything from the offset is processed again, nothing is taken as done.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, replace

from broker.client.models import OffsetAndMetadata

TOKEN_PREFIX = "fjord-pr1:"


@dataclass(frozen=True)
class GapRange:
    """Offsets [start, end) skipped by the primary; the child has processed [start, progress)."""

    start: int
    end: int
    progress: int

    @property
    def done(self) -> bool:
        return self.progress >= self.end

    def __contains__(self, offset: int) -> bool:
        return self.start <= offset < self.end


@dataclass(frozen=True)
class PartitionGaps:
    """One partition's two logs: the primary's position and the child's open ranges."""

    primary: int
    ranges: tuple[GapRange, ...] = ()
    user_metadata: str = ""  # what the application committed with its offsets

    @classmethod
    def restore(cls, committed: OffsetAndMetadata | None, log_start: int = 0) -> PartitionGaps:
        """The logs as the last commit left them; from `log_start` when nothing is committed.
        Without a valid token the committed offset is all there is (reprocess from it)."""
        if committed is None or committed.offset < 0:
            return cls(log_start)
        decoded = decode_token(committed.metadata)
        if decoded is None or decoded.low_water != committed.offset:
            return cls(committed.offset, user_metadata=committed.metadata)
        return decoded

    @property
    def low_water(self) -> int:
        """Every offset below it has been processed by one consumer or the other."""
        return min([r.progress for r in self.ranges] + [self.primary])

    def open_gap(self, log_end: int) -> tuple[PartitionGaps, GapRange | None]:
        """The primary jumps to `log_end`; what it skips becomes a range for the child."""
        if log_end <= self.primary:
            return self, None
        gap = GapRange(self.primary, log_end, self.primary)
        return replace(self, primary=log_end, ranges=(*self.ranges, gap)), gap

    def advance(self, offset: int, gap: GapRange | None = None) -> PartitionGaps:
        """Record `offset` as the next to process: in `gap` (the child's progress there) or, when
        no gap is named, wherever the seed's split puts it (inside an open range: the child's;
        otherwise the primary's). A range whose progress reaches its end is closed."""
        target = gap or self.owner(offset)
        if target is None:
            return replace(self, primary=offset)
        ranges = tuple(
            replace(r, progress=max(r.progress, min(offset, r.end)))
            if (r.start, r.end) == (target.start, target.end)
            else r
            for r in self.ranges
        )
        return replace(self, ranges=tuple(r for r in ranges if not r.done))

    def owner(self, offset: int) -> GapRange | None:
        """The open range an offset falls in; None: the primary's part of the log."""
        return next((r for r in self.ranges if offset in r), None)

    def with_user_metadata(self, metadata: str) -> PartitionGaps:
        return replace(self, user_metadata=metadata)

    def to_commit(self, metadata_max_bytes: int = 4096) -> OffsetAndMetadata:
        """The OffsetCommit that writes both logs. With no open range the token is left out and
        the record is an ordinary commit of the primary's position; a token over the broker's
        `offset.metadata.max.bytes` is dropped too, leaving the low-water mark: the ranges are
        then processed again in full after a crash (duplicates, never loss)."""
        if not self.ranges:
            return OffsetAndMetadata(self.primary, self.user_metadata)
        token = encode_token(self)
        if len(token.encode()) > metadata_max_bytes:
            return OffsetAndMetadata(self.low_water, self.user_metadata)
        return OffsetAndMetadata(self.low_water, token)


def encode_token(gaps: PartitionGaps) -> str:
    body = json.dumps(
        {
            "p": gaps.primary,
            "r": [[r.start, r.end, r.progress] for r in gaps.ranges],
            "m": gaps.user_metadata,
        },
        separators=(",", ":"),
    )
    return f"{TOKEN_PREFIX}{zlib.crc32(body.encode()):08x}:{body}"


def decode_token(metadata: str) -> PartitionGaps | None:
    """The logs a token describes; None for anything that is not a whole, consistent token."""
    if not metadata.startswith(TOKEN_PREFIX):
        return None
    crc, _, body = metadata[len(TOKEN_PREFIX) :].partition(":")
    try:
        if int(crc, 16) != zlib.crc32(body.encode()):
            return None
        data = json.loads(body)
        primary = data["p"]
        ranges = tuple(GapRange(s, e, p) for s, e, p in data["r"])
        user = data["m"]
    except (ValueError, TypeError, KeyError):
        return None
    ints = [primary, *(v for r in ranges for v in (r.start, r.end, r.progress))]
    if not isinstance(user, str) or not all(type(v) is int and v >= 0 for v in ints):
        return None
    ordered = all(r.start <= r.progress < r.end <= primary for r in ranges)
    disjoint = all(a.end <= b.start for a, b in zip(ranges, ranges[1:], strict=False))
    if not (ordered and disjoint):
        return None
    return PartitionGaps(primary, ranges, user)
