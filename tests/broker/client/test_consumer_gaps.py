"""Seed 002's two commit logs for one partition, without a broker: gaps opened on take-over,
the split of commits between the primary and the child, the low-water mark, and tokens that
cannot be trusted counting as absent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.client.consumer.gaps import (
    TOKEN_PREFIX,
    GapRange,
    PartitionGaps,
    decode_token,
    encode_token,
)
from broker.client.models import OffsetAndMetadata


def test_seed_example_70_120_then_140_190():
    # The primary crashed with 70 committed; on restart the log ends at 120.
    gaps, gap = PartitionGaps.restore(OffsetAndMetadata(70)).open_gap(120)
    assert gap == GapRange(70, 120, 70) and gaps.primary == 120
    assert gaps.to_commit().offset == 70  # a plain consumer would resume at 70
    # The child finishes 70-120; the primary gets to 140 and commits, then crashes at 170.
    gaps = gaps.advance(120, gap).advance(140)
    assert gaps.ranges == () and gaps.to_commit() == OffsetAndMetadata(140)
    # Restarted when the log ends at 190: the child takes 140-190, the primary 190 on.
    gaps, gap = PartitionGaps.restore(gaps.to_commit()).open_gap(190)
    assert gap == GapRange(140, 190, 140) and gaps.primary == 190
    assert gaps.low_water == 140


def test_crash_before_the_child_is_done_keeps_its_progress():
    gaps, first = PartitionGaps(70).open_gap(120)
    gaps = gaps.advance(100, first).advance(150)
    committed = gaps.to_commit()
    assert committed.offset == 100 and committed.metadata.startswith(TOKEN_PREFIX)
    restored = PartitionGaps.restore(committed)
    assert restored == gaps
    restored, second = restored.open_gap(190)
    assert [(r.start, r.end, r.progress) for r in restored.ranges] == [
        (70, 120, 100),
        (150, 190, 150),
    ]
    assert second == GapRange(150, 190, 150)
    assert restored.low_water == 100


def test_commit_split_between_the_logs():
    gaps, gap = PartitionGaps(70).open_gap(120)
    assert gaps.owner(90) == gap and gaps.owner(120) is None and gaps.owner(69) is None
    gaps = gaps.advance(90)  # inside the gap: the child's
    assert gaps.ranges[0].progress == 90 and gaps.primary == 120
    gaps = gaps.advance(130)  # past it: the primary's
    assert gaps.primary == 130 and gaps.ranges[0].progress == 90
    # The end of a gap is the primary's start: never read as "the child is done".
    gaps = gaps.advance(120)
    assert gaps.ranges[0].progress == 90 and gaps.primary == 120
    # An offset the child has passed already changes nothing: the primary never goes back.
    gaps = gaps.advance(80)
    assert gaps.ranges[0].progress == 90 and gaps.primary == 120


def test_low_water_never_goes_back_as_the_logs_advance():
    gaps, a = PartitionGaps(10).open_gap(50)
    marks = [gaps.to_commit().offset]
    for offset, which in [(20, a), (70, None), (50, a), (90, None)]:
        gaps = gaps.advance(offset, which)
        marks.append(gaps.to_commit().offset)
        gaps = PartitionGaps.restore(gaps.to_commit())
    gaps, _ = gaps.open_gap(120)
    marks.append(gaps.to_commit().offset)
    assert marks == sorted(marks) and marks[-1] == 90


def test_user_metadata_survives_the_token():
    gaps, _ = PartitionGaps(5).with_user_metadata("app-note").open_gap(9)
    restored = PartitionGaps.restore(gaps.to_commit())
    assert restored.user_metadata == "app-note"
    assert PartitionGaps(9, user_metadata="x").to_commit() == OffsetAndMetadata(9, "x")


@pytest.mark.parametrize(
    "metadata",
    [
        "",
        "not a token",
        TOKEN_PREFIX,
        TOKEN_PREFIX + "zz:{}",
        TOKEN_PREFIX + "00000000:{}",
    ],
)
def test_untrusted_tokens_count_as_absent(metadata):
    restored = PartitionGaps.restore(OffsetAndMetadata(70, metadata))
    assert restored.primary == 70 and restored.ranges == ()


def test_a_token_that_does_not_match_the_offset_is_absent():
    gaps, _ = PartitionGaps(70).open_gap(120)
    token = gaps.to_commit().metadata
    # Someone committed 60 with our old token: their offset wins, nothing is taken as done.
    assert PartitionGaps.restore(OffsetAndMetadata(60, token)) == PartitionGaps(
        60, user_metadata=token
    )


def test_tampered_token_is_absent():
    gaps, _ = PartitionGaps(70).open_gap(120)
    token = gaps.to_commit().metadata.replace("120", "121")
    assert decode_token(token) is None


def test_oversized_token_falls_back_to_the_low_water_mark():
    gaps = PartitionGaps(0)
    for _ in range(400):
        gaps, _ = gaps.advance(gaps.primary + 1).open_gap(gaps.primary + 3)
    committed = gaps.to_commit(metadata_max_bytes=4096)
    assert committed == OffsetAndMetadata(gaps.low_water, "")


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 20), st.booleans()), min_size=1, max_size=30
    )
)
def test_token_round_trips_and_low_water_is_what_is_processed(steps):
    """Random crash/progress histories: the decoded token equals the logs, and no offset below
    the low-water mark was left unprocessed."""
    processed: set[int] = set()
    gaps = PartitionGaps(0)
    for skip, grow, child_step in steps:
        if child_step and gaps.ranges:
            r = gaps.ranges[0]
            upto = min(r.end, r.progress + grow)
            processed.update(range(r.progress, upto))
            gaps = gaps.advance(upto, r)
        else:
            processed.update(range(gaps.primary, gaps.primary + skip))
            gaps = gaps.advance(gaps.primary + skip)
            gaps = PartitionGaps.restore(gaps.to_commit())
            gaps, _ = gaps.open_gap(gaps.primary + grow)
        assert decode_token(encode_token(gaps)) == gaps
        assert set(range(gaps.low_water)) <= processed
