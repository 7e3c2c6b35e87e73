"""The Jepsen-style checkers on synthetic histories: a valid history passes with the right
counts, and each checker catches the history made to break it."""

from __future__ import annotations

import pytest
from checker import (
    ANOMALIES,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    OffsetCommit,
    Read,
    Send,
    Txn,
    check,
)


def good_history() -> dict:
    """Two partitions: p1 acknowledged four records, one more answered with an error that did
    get written; a committed and an aborted transaction; reads at both isolation levels; a
    group that committed twice per partition."""
    sends = [
        Send("p1-0", 0, 0),
        Send("p1-1", 1, 0),
        Send("p1-2", 0, 1),
        Send("p1-3", 1, 1),
        Send("p1-4", 0, None, "Local: Message timed out"),
    ]
    committed = Txn("t1", (Send("t1-0", 0, 3), Send("t1-1", 1, 2)), "committed")
    aborted = Txn("t1", (Send("t1-2", 0, 5), Send("t1-3", 1, 4)), "aborted")
    # Offsets 4 and 6 of partition 0 and 3 and 5 of partition 1 are transaction markers.
    drain = {
        0: {0: "p1-0", 1: "p1-2", 2: "p1-4", 3: "t1-0", 5: "t1-2"},
        1: {0: "p1-1", 1: "p1-3", 2: "t1-1", 4: "t1-3"},
    }
    committed_drain = {
        0: {0: "p1-0", 1: "p1-2", 2: "p1-4", 3: "t1-0"},
        1: {0: "p1-1", 1: "p1-3", 2: "t1-1"},
    }
    reads = [
        Read("c1", 0, 0, "p1-0", READ_COMMITTED),
        Read("c1", 0, 3, "t1-0", READ_COMMITTED),
        Read("c2", 1, 4, "t1-3", READ_UNCOMMITTED),
    ]
    commits = [
        OffsetCommit(0, 1, started=1.0, acked=1.5),
        OffsetCommit(1, 2, started=1.0, acked=1.5),
        OffsetCommit(0, 4, started=2.0, acked=2.5),
        OffsetCommit(1, 3, started=2.0, acked=2.5),
    ]
    return {
        "sends": sends,
        "txns": [committed, aborted],
        "reads": reads,
        "drain": drain,
        "committed_drain": committed_drain,
        "commits": commits,
        "final_offsets": {0: 4, 1: 3},
    }


def anomalies(result) -> dict[str, int]:
    return {kind: n for kind in ANOMALIES if (n := result.counts[kind])}


def test_a_valid_history_passes_with_its_counts():
    result = check(**good_history())
    result.assert_valid()
    c = result.counts
    assert (c["sent"], c["acknowledged"], c["unacknowledged"], c["recovered"]) == (9, 8, 1, 1)
    assert (c["drained"], c["reads"], c["read_committed_reads"]) == (9, 3, 2)
    assert (c["committed"], c["aborted"], c["unknown"], c["offset_commits"]) == (1, 1, 0, 4)
    text = result.format()
    assert "acknowledged 8" in text and "lost 0" in text and "offset_regressions 0" in text


def test_an_acknowledged_record_missing_or_replaced_is_lost():
    h = good_history()
    del h["drain"][0][1]  # p1-2, acknowledged at 0:1
    h["drain"][1][1] = "p1-9"  # p1-3's offset now holds another value
    h["sends"].append(Send("p1-9", 1, None, "Local: Message timed out"))
    result = check(**h)
    assert anomalies(result) == {"lost": 2}
    assert "p1-2 acknowledged at 0:1, the drain has None there" in result.format()
    with pytest.raises(AssertionError, match="lost 2"):
        result.assert_valid()


def test_a_lost_record_of_a_committed_transaction_counts_and_an_aborted_one_does_not():
    h = good_history()
    h["txns"][0] = Txn("t1", (Send("t1-0", 0, 3), Send("t1-1", 1, 7)), "committed")
    del h["drain"][0][5]  # the aborted transaction's record, gone from the log
    assert anomalies(check(**h)) == {"lost": 1}


def test_a_value_at_two_offsets_is_duplicated():
    h = good_history()
    h["drain"][0][7] = "p1-0"
    result = check(**h)
    assert anomalies(result) == {"duplicated": 1}
    assert "p1-0 at 0:0, 0:7" in result.format()


def test_values_of_one_producer_out_of_send_order_are_reordered():
    h = good_history()
    h["drain"][0][0], h["drain"][0][1] = "p1-2", "p1-0"
    h["sends"][0] = Send("p1-0", 0, 1)
    h["sends"][2] = Send("p1-2", 0, 0)
    h["reads"][0] = Read("c1", 0, 1, "p1-0", READ_COMMITTED)
    h["committed_drain"][0].update({0: "p1-2", 1: "p1-0"})
    assert anomalies(check(**h)) == {"reordered": 1}


def test_a_value_nobody_sent_is_stray():
    h = good_history()
    h["drain"][1][9] = "p7-0"
    assert anomalies(check(**h)) == {"stray": 1}


def test_a_read_of_a_record_the_drain_lacks_vanished():
    h = good_history()
    h["reads"].append(Read("c2", 1, 3, "p1-5", READ_UNCOMMITTED))  # truncated away later
    h["reads"].append(Read("c2", 1, 1, "p1-1", READ_UNCOMMITTED))  # a different record there
    result = check(**h)
    assert anomalies(result) == {"vanished_reads": 2}
    assert "c2 read p1-5 at 1:3, the drain has None there" in result.format()


def test_read_committed_seeing_aborted_or_uncommitted_data_is_an_aborted_read():
    h = good_history()
    h["reads"].append(Read("c1", 0, 5, "t1-2", READ_COMMITTED))  # of the aborted transaction
    # Of a transaction whose outcome the producer never learned, and that the coordinator
    # aborted: the log has it, read_committed must not.
    h["txns"].append(Txn("t2", (Send("t2-0", 1, 6),), "unknown"))
    h["drain"][1][6] = "t2-0"
    h["reads"].append(Read("c1", 1, 6, "t2-0", READ_COMMITTED))
    result = check(**h)
    assert anomalies(result) == {"aborted_reads": 2}
    assert "c1 read t1-2 of an aborted transaction at 0:5" in result.format()


def test_read_uncommitted_may_see_aborted_data():
    h = good_history()
    h["reads"].append(Read("c2", 0, 5, "t1-2", READ_UNCOMMITTED))
    check(**h).assert_valid()


def test_a_committed_transaction_partly_visible_is_torn():
    h = good_history()
    del h["committed_drain"][1][2]  # t1-1 missing from read_committed
    assert anomalies(check(**h)) == {"torn_transactions": 1}


def test_an_unknown_transaction_must_be_all_or_nothing():
    h = good_history()
    unknown = Txn("t2", (Send("t2-0", 0, 7), Send("t2-1", 1, 6)), "unknown")
    h["txns"].append(unknown)
    h["drain"][0][7], h["drain"][1][6] = "t2-0", "t2-1"
    check(**h).assert_valid()  # invisible to read_committed: it was aborted
    h["committed_drain"][0][7], h["committed_drain"][1][6] = "t2-0", "t2-1"
    check(**h).assert_valid()  # wholly visible: it was committed
    del h["committed_drain"][1][6]
    assert anomalies(check(**h)) == {"torn_transactions": 1}


def test_an_aborted_transaction_visible_to_read_committed():
    h = good_history()
    h["committed_drain"][0][5] = "t1-2"
    assert anomalies(check(**h)) == {"aborted_visible": 1}


def test_final_group_offsets_below_an_acknowledged_commit_are_lost_commits():
    h = good_history()
    h["final_offsets"] = {0: 1}  # partition 0 back at 1 though 4 was committed; 1 has none
    result = check(**h)
    assert anomalies(result) == {"lost_commits": 2}
    assert "partition 1: offset 3 was committed, the group ends at None" in result.format()


def test_a_commit_sent_after_a_higher_one_was_acknowledged_is_a_regression():
    h = good_history()
    h["commits"].append(OffsetCommit(0, 2, started=3.0, acked=3.5))
    result = check(**h)
    assert anomalies(result) == {"offset_regressions": 1}
    assert "partition 0: offset 2 committed after 4 had been" in result.format()


def test_concurrent_commits_are_not_ordered():
    h = good_history()
    # Sent before the commit of 4 was acknowledged (2.5): the two raced.
    h["commits"].append(OffsetCommit(0, 2, started=2.4, acked=3.5))
    check(**h).assert_valid()


def test_transactions_and_commits_need_their_final_state():
    h = good_history()
    with pytest.raises(ValueError, match="read_committed drain"):
        check(**{**h, "committed_drain": None})
    with pytest.raises(ValueError, match="final committed offsets"):
        check(**{**h, "final_offsets": None})


def test_format_lists_details_up_to_a_limit():
    h = good_history()
    h["reads"] += [Read("c9", 0, 100 + i, f"p1-{100 + i}") for i in range(12)]
    text = check(**h).format()
    assert "vanished_reads (and 2 more):" in text
    assert text.count("c9 read") == 10
