"""KIP-939 in the transaction coordinator's state machine, sans-io: a two-phase commit
transaction has no timeout, InitProducerId with keepPreparedTxn leaves the ongoing transaction
open and gives the new process an identity of its own, with which it alone ends the
transaction, and every step survives replay of `__transaction_state`."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from test_transaction_coordinator import T0, Harness

from broker.coordinator.transaction_coordinator import (
    MAX_PRODUCER_EPOCH,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
)
from broker.coordinator.transaction_records import TransactionState

S = TransactionState
TWO_PC = {"two_phase_commit": True}
KEEP = {"two_phase_commit": True, "keep_prepared_txn": True}


def prepared(h: Harness, txn="t"):
    """A 2PC transaction with data on one partition, as the first process leaves it."""
    p = h.init(txn, **TWO_PC)
    assert h.add(txn, p.producer_id, p.producer_epoch, ("a", 0)) is ErrorCode.none
    return p


def test_a_two_phase_commit_transaction_never_times_out():
    h = Harness(max_timeout_ms=1000)
    # transaction.max.timeout.ms does not bound it: Kafka marks it with Integer.MAX_VALUE.
    p = h.init("2pc", timeout_ms=10**9, **TWO_PC)
    assert p.error is ErrorCode.none
    h.add("2pc", p.producer_id, 0, ("a", 0))
    plain = h.init("plain", timeout_ms=1000)
    h.add("plain", plain.producer_id, 0, ("a", 1))
    h.apply(h.coordinator.abort_timed_out(T0 + 10**10))
    assert (h.state("2pc"), h.state("plain")) == (S.ONGOING, S.COMPLETE_ABORT)
    restarted = h.replayed().transactions["2pc"]
    assert restarted.two_phase_commit and restarted.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS
    # A later InitProducerId without enable2Pc makes the id's transactions time out again.
    h.end("2pc", p.producer_id, 0, True)
    h.init("2pc", timeout_ms=1000)
    assert not h.coordinator.transactions["2pc"].two_phase_commit


def test_keep_prepared_txn_keeps_the_transaction_and_answers_its_identity():
    h = Harness()
    p = prepared(h)
    kept = h.init(**KEEP)
    assert (kept.error, kept.producer_id, kept.producer_epoch) == (ErrorCode.none, p.producer_id, 1)
    assert (kept.ongoing_producer_id, kept.ongoing_producer_epoch) == (p.producer_id, 0)
    assert h.state() is S.ONGOING and h.markers == []
    for meta in (h.coordinator.transactions["t"], h.replayed().transactions["t"]):
        assert (meta.producer_id, meta.producer_epoch, meta.partitions) == (
            p.producer_id,
            0,
            {("a", 0)},
        )
        assert meta.owner == (p.producer_id, 1)


@pytest.mark.parametrize("commit", [True, False])
def test_the_new_process_ends_the_transaction_and_the_markers_fence_the_old(commit):
    h = Harness()
    p = prepared(h)
    kept = h.init(**KEEP)
    # The process that prepared it may not end it any more.
    assert h.end("t", p.producer_id, 0, commit) is ErrorCode.producer_fenced
    assert h.end("t", kept.producer_id, kept.producer_epoch, commit) is ErrorCode.none
    (job,) = h.markers
    assert (job.commit, job.producer_id, job.producer_epoch) == (commit, p.producer_id, 1)
    assert job.partitions == {("a", 0)}
    meta = h.coordinator.transactions["t"]
    assert meta.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    assert (meta.producer_id, meta.producer_epoch, meta.taken_over) == (p.producer_id, 1, False)
    # A retried EndTxn is answered as before; the next transaction is the new process's.
    assert h.end("t", kept.producer_id, kept.producer_epoch, commit) is ErrorCode.none
    assert h.add("t", kept.producer_id, kept.producer_epoch, ("a", 0)) is ErrorCode.none
    assert h.coordinator.verify_partition("t", p.producer_id, 0, ("a", 0)) is (
        ErrorCode.producer_fenced
    )


def test_the_new_process_may_only_end_the_transaction():
    h = Harness()
    p = prepared(h)
    kept = h.init(**KEEP)
    new_identity = (kept.producer_id, kept.producer_epoch)
    assert h.add("t", *new_identity, ("a", 1)) is ErrorCode.invalid_txn_state
    # The new process may only end the transaction: its epoch is not the transaction's.
    assert h.coordinator.verify_partition("t", *new_identity, ("a", 0)) is (
        ErrorCode.producer_fenced
    )
    # Until the markers, the old process still writes into its transaction (as in Kafka).
    assert h.coordinator.verify_partition("t", p.producer_id, 0, ("a", 0)) is ErrorCode.none


def test_a_second_take_over_fences_the_first():
    h = Harness()
    p = prepared(h)
    first = h.init(**KEEP)
    second = h.init(**KEEP)
    assert (second.producer_epoch, second.ongoing_producer_epoch) == (2, 0)
    assert second.ongoing_producer_id == p.producer_id
    assert h.end("t", first.producer_id, first.producer_epoch, True) is ErrorCode.producer_fenced
    assert h.end("t", second.producer_id, second.producer_epoch, True) is ErrorCode.none


def test_a_take_over_at_the_exhausted_epoch_moves_to_a_new_producer_id():
    h = Harness()
    p = prepared(h)
    h.coordinator.transactions["t"].producer_epoch = MAX_PRODUCER_EPOCH
    kept = h.init(**KEEP)
    assert kept.producer_id != p.producer_id and kept.producer_epoch == 0
    assert (kept.ongoing_producer_id, kept.ongoing_producer_epoch) == (
        p.producer_id,
        MAX_PRODUCER_EPOCH,
    )
    assert h.end("t", kept.producer_id, 0, True) is ErrorCode.none
    meta = h.coordinator.transactions["t"]
    assert (meta.producer_id, meta.producer_epoch) == (kept.producer_id, 0)
    assert meta.previous_producer_id == p.producer_id
    # The markers fence the process that prepared it with the epoch above its last one.
    assert h.markers[-1].producer_epoch == MAX_PRODUCER_EPOCH + 1
    restarted = h.replayed().transactions["t"]
    assert (restarted.producer_id, restarted.producer_epoch) == (kept.producer_id, 0)


def test_a_new_instance_without_keep_aborts_a_taken_over_transaction_and_fences_both():
    h = Harness()
    p = prepared(h)
    kept = h.init(**KEEP)
    assert h.init(**TWO_PC).error is ErrorCode.concurrent_transactions
    (job,) = h.markers
    assert (job.commit, job.producer_epoch) == (False, 1)
    assert h.end("t", kept.producer_id, kept.producer_epoch, True) is ErrorCode.producer_fenced
    fresh = h.init(**TWO_PC)
    assert (fresh.producer_id, fresh.producer_epoch) == (p.producer_id, kept.producer_epoch + 2)


def test_keep_prepared_txn_without_an_ongoing_transaction_is_an_ordinary_init():
    h = Harness()
    p = h.init(**KEEP)
    assert (p.error, p.ongoing_producer_id, p.ongoing_producer_epoch) == (ErrorCode.none, -1, -1)
    again = h.init(**KEEP)
    assert (again.producer_id, again.producer_epoch) == (p.producer_id, 1)
    assert again.ongoing_producer_id == -1
    # Keeping is for a new process; a producer resuming its own id (KIP-360) may not.
    resumed = h.init(pid=p.producer_id, epoch=1, **KEEP)
    assert resumed.error is ErrorCode.invalid_request
