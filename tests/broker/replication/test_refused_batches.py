"""RefusedBatches: which gap a refusal explains, for how long, and until when."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.records.batch import build_batch, validate_produce_batch
from broker.replication.refused_batches import MAX_REFUSALS, RefusedBatches

TP = ("t", 0)
NOT_LEADER = ErrorCode.not_leader_or_follower
SHORT_ISR = ErrorCode.not_enough_replicas


def header(seq: int, epoch: int = 0, pid: int = 7, count: int = 1):
    records = [(None, b"v", [], 0)] * count
    batch = build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    return validate_produce_batch(batch)


def test_a_batch_behind_the_refused_one_gets_its_error():
    refused = RefusedBatches()
    refused.refused(TP, header(5, count=3), NOT_LEADER, now_ms=0)
    assert refused.behind_refusal(TP, header(8), next_sequence=5, now_ms=10) == NOT_LEADER
    # None known here (a new leader that has no batch of the producer): still behind.
    assert refused.behind_refusal(TP, header(8), next_sequence=None, now_ms=10) == NOT_LEADER


def test_only_the_gap_the_refusal_opened_is_explained():
    refused = RefusedBatches()
    refused.refused(TP, header(5), SHORT_ISR, now_ms=0)
    assert refused.behind_refusal(TP, header(5), next_sequence=5, now_ms=1) is None  # the retry
    assert refused.behind_refusal(TP, header(9), next_sequence=3, now_ms=1) is None  # older gap
    assert refused.behind_refusal(TP, header(9, epoch=1), next_sequence=0, now_ms=1) is None
    assert refused.behind_refusal(TP, header(9, pid=8), next_sequence=5, now_ms=1) is None
    assert refused.behind_refusal(("t", 1), header(9), next_sequence=5, now_ms=1) is None


def test_the_gap_may_start_at_any_recent_refusal_and_the_latest_error_is_answered():
    refused = RefusedBatches()
    refused.refused(TP, header(5), NOT_LEADER, now_ms=0)
    # Batch 5 written at the leader and replicated here; then 10 refused here too.
    refused.refused(TP, header(10), SHORT_ISR, now_ms=1)
    assert refused.behind_refusal(TP, header(7), next_sequence=5, now_ms=2) == SHORT_ISR
    assert refused.behind_refusal(TP, header(12), next_sequence=10, now_ms=2) == SHORT_ISR
    assert refused.behind_refusal(TP, header(12), next_sequence=None, now_ms=2) == SHORT_ISR
    assert refused.behind_refusal(TP, header(12), next_sequence=7, now_ms=2) is None


def test_a_zombie_epochs_refusal_leaves_the_current_epochs_holes():
    refused = RefusedBatches()
    refused.refused(TP, header(0, epoch=3), NOT_LEADER, now_ms=0)
    refused.refused(TP, header(40, epoch=2), NOT_LEADER, now_ms=1)
    assert refused.behind_refusal(TP, header(4, epoch=3), next_sequence=0, now_ms=2) == NOT_LEADER
    refused.refused(TP, header(0, epoch=4), SHORT_ISR, now_ms=3)  # a new epoch starts afresh
    assert refused.behind_refusal(TP, header(4, epoch=3), next_sequence=0, now_ms=4) is None


def test_refusals_are_bounded_in_number_the_oldest_going_first():
    refused = RefusedBatches()
    for pid in range(MAX_REFUSALS + 5):
        refused.refused(TP, header(5, pid=pid), NOT_LEADER, now_ms=0)
    assert len(refused) == MAX_REFUSALS
    assert refused.behind_refusal(TP, header(9, pid=0), next_sequence=5, now_ms=1) is None
    last = MAX_REFUSALS + 4
    assert refused.behind_refusal(TP, header(9, pid=last), next_sequence=5, now_ms=1) == NOT_LEADER


def test_an_append_or_the_window_ends_it():
    refused = RefusedBatches(window_ms=100)
    refused.refused(TP, header(5), NOT_LEADER, now_ms=0)
    refused.appended(TP, 7)
    assert not refused
    assert refused.behind_refusal(TP, header(9), next_sequence=5, now_ms=1) is None
    refused.refused(TP, header(5), NOT_LEADER, now_ms=0)
    refused.refused(TP, header(5, pid=8), NOT_LEADER, now_ms=60)
    assert refused.behind_refusal(TP, header(9), next_sequence=5, now_ms=100) is None
    assert len(refused) == 1  # the expired one went; the later one stays for its window
    assert refused.behind_refusal(TP, header(9, pid=8), next_sequence=5, now_ms=100) == NOT_LEADER


def test_batches_without_a_producer_are_not_remembered():
    refused = RefusedBatches()
    refused.refused(TP, header(-1, pid=-1, epoch=-1), NOT_LEADER, now_ms=0)
    assert not refused
