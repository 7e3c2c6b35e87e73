"""The source's micro-batch planning, as plain functions."""

from __future__ import annotations

from broker.client.models import TopicPartition
from pipelines.spark.offsets import rate_limit

A, B, C = (TopicPartition("t", p) for p in range(3))


def test_a_limit_that_divides_the_backlog_gives_full_batches():
    start = {A: 0, B: 0, C: 0}
    batches, end = [], {A: 50_000, B: 50_000, C: 50_000}
    while start != end:
        limited = rate_limit(start, end, 50_000)
        batches.append(sum(limited[tp] - start[tp] for tp in end))
        start = limited
    assert batches == [50_000, 50_000, 50_000]


def test_shares_follow_each_partitions_backlog_and_none_is_starved():
    limited = rate_limit({A: 0, B: 0, C: 10}, {A: 1000, B: 3, C: 10}, 100)
    assert limited == {A: 99, B: 1, C: 10}
    assert rate_limit({A: 5, B: 0}, {A: 10, B: 2}, 100) == {A: 10, B: 2}


def test_the_remainder_goes_to_the_largest_fractions_then_in_partition_order():
    # 10 over backlogs 7:7:7 is 3.33 each: the floors leave one record, for the first partition.
    assert rate_limit({}, {A: 7, B: 7, C: 7}, 10) == {A: 4, B: 3, C: 3}
    # 10 over 6:3:1 is 6.0, 3.0, 1.0: nothing left over.
    assert rate_limit({}, {A: 60, B: 30, C: 10}, 10) == {A: 6, B: 3, C: 1}
