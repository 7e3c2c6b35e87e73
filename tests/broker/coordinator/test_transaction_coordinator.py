"""The transaction coordinator's state machine, sans-io: every transition goes through its
record (appended, then replayed), as the runtime does it."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from broker.coordinator.transaction_coordinator import (
    MAX_PRODUCER_EPOCH,
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TxnResult,
)
from broker.coordinator.transaction_records import (
    TransactionLogKey,
    TransactionState,
    decode_transaction_record,
    encode_transaction_record,
)

S = TransactionState
T0 = 1_000_000


class Harness:
    """Applies results like the runtime: records through the codec and replay; markers are
    'written' by recording them, then the transaction completes. New producer ids are handed
    out as the runtime does, only when the coordinator asks for one (`next_pid` is the last)."""

    def __init__(self, **config) -> None:
        self.coordinator = TransactionCoordinator(TransactionCoordinatorConfig(**config))
        self.log: list = []
        self.markers: list = []
        self.next_pid = 1000

    def _replay(self, records) -> None:
        for record in records:
            encoded = encode_transaction_record(record)
            self.log.append(encoded)
            self.coordinator.replay(decode_transaction_record(*encoded))

    def apply(self, result, now_ms=T0, *, complete=True):
        self._replay(result.records)
        for job in result.markers:
            self.markers.append(job)
            if complete:
                self._replay(self.coordinator.complete(job.transactional_id, now_ms))
        return result.response

    def with_producer_id(self, op, *, complete=True):
        """TransactionRuntime.run_with_producer_id: `op(fresh)` without a new producer id,
        then with one as long as the coordinator asks for it."""
        fresh = -1
        while True:
            result = op(fresh)
            response = self.apply(result, complete=complete)
            if not result.needs_producer_id:
                return response
            self.next_pid += 1
            fresh = self.next_pid

    def init(self, txn="t", timeout_ms=60_000, pid=-1, epoch=-1, now_ms=T0, **two_phase):
        return self.with_producer_id(
            lambda fresh: self.coordinator.init_producer_id(
                txn, timeout_ms, pid, epoch, fresh, now_ms, **two_phase
            )
        )

    def add(self, txn, pid, epoch, *partitions, now_ms=T0):
        return self.apply(self.coordinator.add_partitions(txn, pid, epoch, partitions, now_ms))

    def end(self, txn, pid, epoch, commit, now_ms=T0, *, complete=True):
        return self.end_v(txn, pid, epoch, commit, now_ms, complete=complete).error

    def end_v(self, txn, pid, epoch, commit, now_ms=T0, *, complete=True, version=0):
        """The whole EndTxn answer; `version` 2 is EndTxn v5 (KIP-890 part 2)."""
        return self.with_producer_id(
            lambda fresh: self.coordinator.end_transaction(
                txn,
                pid,
                epoch,
                commit,
                now_ms,
                transaction_version=version,
                fresh_producer_id=fresh,
            ),
            complete=complete,
        )

    def abort_timed_out(self, now_ms, version=0):
        return self.with_producer_id(
            lambda fresh: self.coordinator.abort_timed_out(now_ms, version, fresh)
        )

    def state(self, txn="t"):
        return self.coordinator.transactions[txn].state

    def replayed(self) -> TransactionCoordinator:
        fresh = TransactionCoordinator(self.coordinator.config)
        for encoded in self.log:
            fresh.replay(decode_transaction_record(*encoded))
        return fresh


def test_init_gives_a_fresh_producer_then_bumps_the_epoch():
    h = Harness()
    first = h.init()
    assert (first.error, first.producer_epoch) == (ErrorCode.none, 0)
    second = h.init()
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    assert h.state() is S.EMPTY


def test_timeout_beyond_the_maximum_is_refused():
    h = Harness(max_timeout_ms=1000)
    assert h.init(timeout_ms=1001).error is ErrorCode.invalid_transaction_timeout
    assert h.init(timeout_ms=0).error is ErrorCode.invalid_transaction_timeout
    assert "t" not in h.coordinator.transactions


def test_commit_writes_markers_to_every_partition_then_completes():
    h = Harness()
    p = h.init()
    assert h.add("t", p.producer_id, 0, ("a", 0), ("a", 1)) is ErrorCode.none
    assert h.state() is S.ONGOING
    assert h.add("t", p.producer_id, 0, ("b", 0)) is ErrorCode.none
    assert h.end("t", p.producer_id, 0, True) is ErrorCode.none
    (job,) = h.markers
    assert job.commit and job.partitions == {("a", 0), ("a", 1), ("b", 0)}
    assert h.state() is S.COMPLETE_COMMIT
    assert h.coordinator.transactions["t"].partitions == frozenset()
    # A retried EndTxn of the same outcome succeeds; the other outcome is refused.
    assert h.end("t", p.producer_id, 0, True) is ErrorCode.none
    assert h.end("t", p.producer_id, 0, False) is ErrorCode.invalid_txn_state
    assert len(h.markers) == 1


def test_end_without_a_transaction_and_with_wrong_ids():
    h = Harness()
    p = h.init()
    assert h.end("t", p.producer_id, 0, True) is ErrorCode.invalid_txn_state
    assert h.end("t", p.producer_id + 1, 0, True) is ErrorCode.invalid_producer_id_mapping
    assert h.end("nope", p.producer_id, 0, True) is ErrorCode.invalid_producer_id_mapping
    h.add("t", p.producer_id, 0, ("a", 0))
    assert h.end("t", p.producer_id, 1, True) is ErrorCode.producer_fenced
    assert h.add("t", p.producer_id, 1, ("a", 1)) is ErrorCode.producer_fenced


def test_a_new_instance_fences_the_old_and_aborts_its_transaction():
    h = Harness()
    old = h.init()
    h.add("t", old.producer_id, 0, ("a", 0))
    # The new instance is told to retry while the old transaction is aborted under epoch 1.
    assert h.init().error is ErrorCode.concurrent_transactions
    (job,) = h.markers
    assert (job.commit, job.producer_epoch) == (False, 1)
    assert h.state() is S.COMPLETE_ABORT
    new = h.init()
    assert (new.error, new.producer_id, new.producer_epoch) == (ErrorCode.none, old.producer_id, 2)
    assert h.end("t", old.producer_id, 0, True) is ErrorCode.producer_fenced


def test_prepared_but_not_completed_is_finished_after_a_restart():
    h = Harness()
    p = h.init()
    h.add("t", p.producer_id, 0, ("a", 0))
    h.end("t", p.producer_id, 0, True, complete=False)  # crash before the markers
    restarted = h.replayed()
    assert restarted.transactions["t"].state is S.PREPARE_COMMIT
    (job,) = restarted.pending_markers()
    assert job.commit and job.partitions == {("a", 0)}
    # Meanwhile a new instance must wait.
    response = restarted.init_producer_id("t", 60_000, -1, -1, 9, T0).response
    assert response.error is ErrorCode.concurrent_transactions


def test_timed_out_transactions_are_aborted_with_a_bumped_epoch():
    h = Harness()
    p = h.init(timeout_ms=1000)
    h.add("t", p.producer_id, 0, ("a", 0), now_ms=T0)
    assert h.apply(h.coordinator.abort_timed_out(T0 + 999)) is None
    assert h.state() is S.ONGOING
    h.apply(h.coordinator.abort_timed_out(T0 + 1000))
    (job,) = h.markers
    assert (job.commit, job.producer_epoch) == (False, 1)
    assert h.state() is S.COMPLETE_ABORT
    assert h.end("t", p.producer_id, 0, True) is ErrorCode.producer_fenced
    # Fenced by the timeout, the old epoch is no KIP-360 retry.
    resumed = h.init(pid=p.producer_id, epoch=0)
    assert resumed.error is ErrorCode.producer_fenced


def test_kip_360_resume_and_retry():
    h = Harness()
    p = h.init()
    bumped = h.init(pid=p.producer_id, epoch=0)
    assert (bumped.error, bumped.producer_epoch) == (ErrorCode.none, 1)
    # The same request again (its answer was lost): the same answer, no second bump.
    again = h.init(pid=p.producer_id, epoch=0)
    assert (again.error, again.producer_epoch) == (ErrorCode.none, 1)
    assert h.replayed().transactions["t"].producer_epoch == 1
    assert h.init(pid=p.producer_id + 7, epoch=1).error is ErrorCode.producer_fenced


def test_exhausted_epoch_moves_to_a_new_producer_id():
    h = Harness()
    p = h.init()
    h.coordinator.transactions["t"].producer_epoch = MAX_PRODUCER_EPOCH
    bumped = h.init()
    assert bumped.producer_id != p.producer_id and bumped.producer_epoch == 0
    assert h.coordinator.transactions["t"].previous_producer_id == p.producer_id


def test_verify_partition_for_transactional_produce():
    h = Harness()
    p = h.init()
    pid = p.producer_id
    verify = h.coordinator.verify_partition
    assert verify("t", pid, 0, ("a", 0)) is ErrorCode.transaction_abortable
    h.add("t", pid, 0, ("a", 0))
    assert verify("t", pid, 0, ("a", 0)) is ErrorCode.none
    assert verify("t", pid, 0, ("a", 1)) is ErrorCode.transaction_abortable
    assert verify("t", pid + 1, 0, ("a", 0)) is ErrorCode.invalid_producer_id_mapping
    assert verify("other", pid, 0, ("a", 0)) is ErrorCode.invalid_producer_id_mapping
    h.init()  # fences epoch 0
    assert verify("t", pid, 0, ("a", 0)) is ErrorCode.producer_fenced


def test_idle_ids_expire_but_open_transactions_do_not():
    h = Harness(id_expiration_ms=1000)
    h.init("idle", now_ms=T0)
    busy = h.init("busy", now_ms=T0)
    h.add("busy", busy.producer_id, 0, ("a", 0), now_ms=T0)
    records = h.coordinator.expire_transactional_ids(T0 + 1000)
    assert [r.key for r in records] == [TransactionLogKey("idle")]
    h.apply(TxnResult(records))
    assert set(h.coordinator.transactions) == {"busy"}
    assert set(h.replayed().transactions) == {"busy"}


@pytest.mark.parametrize("state", list(S))
def test_records_round_trip(state):
    h = Harness()
    p = h.init()
    h.add("t", p.producer_id, 0, ("a", 0), ("b", 3))
    meta = h.coordinator.transactions["t"]
    meta.state = state
    encoded = encode_transaction_record(meta.record())
    assert decode_transaction_record(*encoded) == meta.record()


def test_unloading_a_partition_forgets_its_transactional_ids():
    h = Harness(state_log_partitions=4)
    ids = [f"t{i}" for i in range(12)]
    for txn in ids:
        h.init(txn)
    lost = h.coordinator.partition_for("t0")
    h.coordinator.unload(lost)
    assert set(h.coordinator.transactions) == {
        t for t in ids if h.coordinator.partition_for(t) != lost
    }
