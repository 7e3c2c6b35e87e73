"""Transaction version 2 (KIP-890 part 2) in the coordinator's state machine: every end
bumps the epoch, a retried EndTxn one epoch behind is recognised (after a restart too), an
exhausted epoch moves to a new producer id (on the coordinator's fence path too), and the
coordinator's own aborts fence."""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode
from test_transaction_coordinator import T0, Harness

from broker.coordinator.transaction_coordinator import (
    LAST_EPOCH,
    MAX_PRODUCER_EPOCH,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnResult,
)
from broker.coordinator.transaction_records import TransactionState as S

V1, V2 = 1, 2


def started(h: Harness, *partitions, txn="t"):
    p = h.init(txn)
    for tp in partitions:
        assert h.add(txn, p.producer_id, p.producer_epoch, tp) is ErrorCode.none
    return p


def add_v2(h: Harness, txn, pid, epoch, *partitions):
    return h.apply(h.coordinator.add_partitions(txn, pid, epoch, partitions, T0, V2))


def at_epoch(h: Harness, epoch: int, txn="t") -> int:
    """The id's producer at `epoch`, as after that many transactions: written to the log
    as a transition is, so that a replay finds it too. Returns the producer id."""
    meta = dataclasses.replace(h.coordinator.transactions[txn], producer_epoch=epoch)
    h.apply(TxnResult([meta.record()]))
    return meta.producer_id


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
    h.init()
    pid = at_epoch(h, MAX_PRODUCER_EPOCH)  # as after 32766 transactions
    add_v2(h, "t", pid, MAX_PRODUCER_EPOCH, ("a", 0))
    allocated = h.next_pid
    # A zombie's or a wrong request uses no producer id up.
    assert h.end_v("t", pid, MAX_PRODUCER_EPOCH - 1, True, version=V2).error is (
        ErrorCode.producer_fenced
    )
    assert h.end_v("t", pid + 1, MAX_PRODUCER_EPOCH, True, version=V2).error is (
        ErrorCode.invalid_producer_id_mapping
    )
    assert h.next_pid == allocated
    answer = h.end_v("t", pid, MAX_PRODUCER_EPOCH, True, version=V2)
    new_pid = h.next_pid
    assert new_pid == allocated + 1
    assert answer == EndTxnResponse(ErrorCode.none, new_pid, 0)
    assert h.markers[-1].producer_id == pid
    assert h.markers[-1].producer_epoch == LAST_EPOCH
    meta = h.replayed().transactions["t"]
    assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (new_pid, 0, pid)
    # The retry names the old identity and gets the new one, also after a restart, and
    # allocates nothing.
    retry = h.end_v("t", pid, MAX_PRODUCER_EPOCH, True, version=V2)
    assert retry == EndTxnResponse(ErrorCode.none, new_pid, 0)
    h.coordinator = h.replayed()
    retry = h.end_v("t", pid, MAX_PRODUCER_EPOCH, True, version=V2)
    assert retry == EndTxnResponse(ErrorCode.none, new_pid, 0)
    assert h.end_v("t", pid, MAX_PRODUCER_EPOCH, False, version=V2).error is (
        ErrorCode.invalid_txn_state
    )
    assert h.next_pid == new_pid and len(h.markers) == 1
    assert add_v2(h, "t", new_pid, 0, ("a", 0)) is ErrorCode.none


def test_an_end_asks_for_a_producer_id_only_once_it_is_found_valid():
    h = Harness()
    h.init()
    pid = at_epoch(h, MAX_PRODUCER_EPOCH)
    add_v2(h, "t", pid, MAX_PRODUCER_EPOCH, ("a", 0))
    end = h.coordinator.end_transaction
    zombie = end("t", pid, MAX_PRODUCER_EPOCH - 1, False, T0, transaction_version=V2)
    assert not zombie.needs_producer_id
    valid = end("t", pid, MAX_PRODUCER_EPOCH, False, T0, transaction_version=V2)
    assert valid.needs_producer_id and (valid.records, valid.markers) == ([], [])
    assert h.state() is S.ONGOING


@pytest.mark.parametrize("epoch", [MAX_PRODUCER_EPOCH - 1, MAX_PRODUCER_EPOCH])
@pytest.mark.parametrize("how", ["timeout", "new instance"])
def test_a_fence_at_the_last_epochs_ends_under_a_new_producer_id(epoch, how):
    """The coordinator's abort takes the last epoch (32767) for its markers, which a partition
    that saw the producer's last one takes, and moves the id to a new producer id: recent
    Kafka rotates on the fence path too."""
    h = Harness(max_timeout_ms=1000)
    h.init(timeout_ms=1000)
    pid = at_epoch(h, epoch)
    add_v2(h, "t", pid, epoch, ("a", 0))
    if how == "timeout":
        h.abort_timed_out(T0 + 1000, V2)
    else:
        assert h.init(timeout_ms=1000, transaction_version=V2) == InitProducerIdResponse(
            ErrorCode.concurrent_transactions
        )
    new_pid = h.next_pid
    (job,) = h.markers
    assert (job.producer_id, job.producer_epoch, job.commit) == (pid, LAST_EPOCH, False)
    assert job.transaction_version == 2
    for meta in (h.coordinator.transactions["t"], h.replayed().transactions["t"]):
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (
            S.COMPLETE_ABORT,
            new_pid,
            0,
        )
        assert meta.previous_producer_id == pid
    # The old producer cannot join or commit; its abort at the exhausted epoch is that of a
    # retry of an overflowing end, as in Kafka (retryOnOverflow), also after a restart.
    h.coordinator = h.replayed()
    assert add_v2(h, "t", pid, epoch, ("a", 0)) is ErrorCode.invalid_producer_id_mapping
    committed = h.end_v("t", pid, epoch, True, version=V2)
    aborted = h.end_v("t", pid, epoch, False, version=V2)
    if epoch == MAX_PRODUCER_EPOCH:
        assert committed == EndTxnResponse(ErrorCode.invalid_txn_state)
        assert aborted == EndTxnResponse(ErrorCode.none, new_pid, 0)
    else:  # fenced: that is no retry of anything
        assert committed == aborted == EndTxnResponse(ErrorCode.invalid_producer_id_mapping)
    assert h.next_pid == new_pid and len(h.markers) == 1
    # The new instance goes on under the new producer id.
    again = h.init(timeout_ms=1000, transaction_version=V2)
    assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.none, new_pid, 1)


def test_a_version_1_fence_at_the_exhausted_epoch_takes_the_last_one():
    h = Harness(max_timeout_ms=1000)
    h.init(timeout_ms=1000)
    pid = at_epoch(h, MAX_PRODUCER_EPOCH)
    assert h.add("t", pid, MAX_PRODUCER_EPOCH, ("a", 0)) is ErrorCode.none
    h.abort_timed_out(T0 + 1000, V1)
    (job,) = h.markers
    assert (job.producer_id, job.producer_epoch) == (pid, LAST_EPOCH)
    meta = h.coordinator.transactions["t"]
    assert (meta.state, meta.producer_id, meta.producer_epoch) == (S.COMPLETE_ABORT, pid, 32767)
    assert h.end("t", pid, MAX_PRODUCER_EPOCH, False) is ErrorCode.producer_fenced
    # The next InitProducerId moves to a new producer id.
    again = h.init(timeout_ms=1000)
    assert (again.producer_id, again.producer_epoch) == (h.next_pid, 0)


def test_timeouts_that_need_producer_ids_each_get_one():
    h = Harness(max_timeout_ms=1000)
    pids = {}
    for txn in ("a", "b", "c"):
        h.init(txn, timeout_ms=1000)
        pids[txn] = at_epoch(h, MAX_PRODUCER_EPOCH if txn != "c" else 5, txn)
        add_v2(h, txn, pids[txn], h.coordinator.transactions[txn].producer_epoch, ("p", 0))
    allocated = h.next_pid
    h.abort_timed_out(T0 + 1000, V2)
    assert h.next_pid == allocated + 2
    ids = {txn: h.coordinator.transactions[txn].producer_id for txn in pids}
    assert ids["c"] == pids["c"] and {ids["a"], ids["b"]} == {allocated + 1, allocated + 2}
    assert {h.state(txn) for txn in pids} == {S.COMPLETE_ABORT}


def test_init_producer_id_with_the_epoch_before_a_version_2_end_is_a_retry():
    """Kafka's prepareAbortOrCommit keeps the epoch before the end's bump as the last one:
    an InitProducerId naming it is a retry, answered without another bump."""
    h = Harness()
    pid = h.init().producer_id
    add_v2(h, "t", pid, 0, ("a", 0))
    assert h.end_v("t", pid, 0, True, version=V2).producer_epoch == 1
    retry = h.init(pid=pid, epoch=0)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, pid, 1)
    # Not so after the coordinator's own abort: that fences.
    add_v2(h, "t", pid, 1, ("a", 0))
    assert h.init(transaction_version=V2).error is ErrorCode.concurrent_transactions
    assert h.init(pid=pid, epoch=1).error is ErrorCode.producer_fenced


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
    assert h.end_v("t", pid, 0, True) == EndTxnResponse(ErrorCode.none, pid, 0)  # a retry
    # An error carries no identity, as in Kafka.
    assert h.end_v("t", pid, 0, False) == EndTxnResponse(ErrorCode.invalid_txn_state)
