"""Transaction version 2 (KIP-890 part 2) in the coordinator's state machine: every end
bumps the epoch, a retried EndTxn one epoch behind is recognised (after a restart too), an
exhausted epoch moves to a new producer id, and the coordinator's own aborts fence."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from test_transaction_coordinator import T0, Harness

from broker.coordinator.transaction_coordinator import MAX_PRODUCER_EPOCH, EndTxnResponse
from broker.coordinator.transaction_records import TransactionState as S

V2 = 2


def started(h: Harness, *partitions, txn="t"):
    p = h.init(txn)
    for tp in partitions:
        assert h.add(txn, p.producer_id, p.producer_epoch, tp) is ErrorCode.none
    return p


def add_v2(h: Harness, txn, pid, epoch, *partitions):
    return h.apply(h.coordinator.add_partitions(txn, pid, epoch, partitions, T0, V2))


def test_every_end_bumps_the_epoch_and_the_markers_carry_it():
    h = Harness()
    p = h.init()
    pid = p.producer_id
    for epoch, commit in ((0, True), (1, False), (2, True)):
        assert add_v2(h, "t", pid, epoch, ("a", 0)) is ErrorCode.none
        answer = h.end_v("t", pid, epoch, commit, version=V2)
        assert answer == EndTxnResponse(ErrorCode.none, pid, epoch + 1)
        job = h.markers[-1]
        assert (job.producer_epoch, job.commit, job.transaction_version) == (epoch + 1, commit, 2)
    assert h.state() is S.COMPLETE_COMMIT
    # The old epoch is fenced from the transaction that follows.
    assert add_v2(h, "t", pid, 2, ("a", 0)) is ErrorCode.producer_fenced


def test_a_retried_end_with_the_previous_epoch_succeeds_also_after_a_restart():
    h = Harness()
    p = h.init()
    pid = p.producer_id
    add_v2(h, "t", pid, 0, ("a", 0))
    assert h.end_v("t", pid, 0, True, version=V2).error is ErrorCode.none
    retry = h.end_v("t", pid, 0, True, version=V2)
    assert retry == EndTxnResponse(ErrorCode.none, pid, 1)
    assert h.end_v("t", pid, 0, False, version=V2).error is ErrorCode.invalid_txn_state
    assert len(h.markers) == 1  # a retry writes nothing
    h.coordinator = h.replayed()
    assert h.coordinator.transactions["t"].client_transaction_version == 2
    assert h.end_v("t", pid, 0, True, version=V2) == EndTxnResponse(ErrorCode.none, pid, 1)
    # Two epochs behind is no retry: that producer is fenced.
    add_v2(h, "t", pid, 1, ("a", 0))
    h.end_v("t", pid, 1, True, version=V2)
    assert h.end_v("t", pid, 0, True, version=V2).error is ErrorCode.producer_fenced


def test_an_exhausted_epoch_ends_under_a_new_producer_id():
    h = Harness()
    p = h.init()
    pid = p.producer_id
    meta = h.coordinator.transactions["t"]
    meta.producer_epoch = MAX_PRODUCER_EPOCH  # as after 32766 transactions
    assert h.coordinator.epoch_exhausted("t")
    add_v2(h, "t", pid, MAX_PRODUCER_EPOCH, ("a", 0))
    answer = h.end_v("t", pid, MAX_PRODUCER_EPOCH, True, version=V2)
    new_pid = h.next_pid
    assert answer == EndTxnResponse(ErrorCode.none, new_pid, 0)
    assert h.markers[-1].producer_id == pid
    assert h.markers[-1].producer_epoch == MAX_PRODUCER_EPOCH + 1
    meta = h.replayed().transactions["t"]
    assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (new_pid, 0, pid)
    # The retry names the old identity and gets the new one.
    retry = h.end_v("t", pid, MAX_PRODUCER_EPOCH, True, version=V2)
    assert retry == EndTxnResponse(ErrorCode.none, new_pid, 0)
    assert add_v2(h, "t", new_pid, 0, ("a", 0)) is ErrorCode.none


def test_an_empty_abort_bumps_the_epoch_and_an_empty_commit_is_refused():
    h = Harness()
    pid = h.init().producer_id
    assert h.end_v("t", pid, 0, True, version=V2).error is ErrorCode.invalid_txn_state
    assert h.end_v("t", pid, 0, False, version=V2) == EndTxnResponse(ErrorCode.none, pid, 1)
    assert h.state() is S.COMPLETE_ABORT and not h.markers
    assert h.end_v("t", pid, 0, False, version=V2) == EndTxnResponse(ErrorCode.none, pid, 1)


def test_the_coordinators_own_abort_bumps_twice_and_fences_the_producer():
    h = Harness(max_timeout_ms=1000)
    pid = h.init(timeout_ms=1000).producer_id
    add_v2(h, "t", pid, 0, ("a", 0))
    h.apply(h.coordinator.abort_timed_out(T0 + 1000, V2))
    job = h.markers[-1]
    assert (job.producer_epoch, job.commit, job.transaction_version) == (2, False, 2)
    # One epoch behind looks like a retry only if the abort bumped once: it is fenced.
    assert h.end_v("t", pid, 0, False, version=V2).error is ErrorCode.producer_fenced
    assert h.end_v("t", pid, 0, True, version=V2).error is ErrorCode.producer_fenced


def test_version_1_ends_keep_the_epoch():
    h = Harness()
    pid = started(h, ("a", 0)).producer_id
    assert h.end_v("t", pid, 0, True).error is ErrorCode.none
    assert (h.markers[-1].producer_epoch, h.markers[-1].transaction_version) == (0, 0)
    assert h.coordinator.transactions["t"].producer_epoch == 0
    assert h.end_v("t", pid, 0, True).error is ErrorCode.none  # a retry, as before
