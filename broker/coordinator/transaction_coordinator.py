"""The transaction coordinator (KIP-98, seed 000): one state machine per transactional id.

Sans-io like the group coordinator (see coordinator/runtime.py): an operation validates the
request against the id's metadata and returns the `__transaction_state` record of the
transition plus its response; the runtime appends the record, replays it here and answers.

Ending a transaction is two-phase, as in Kafka: PrepareCommit/PrepareAbort is written first
(from then on the outcome is decided and survives a crash), then the runtime writes a COMMIT or
ABORT marker to every partition of the transaction (`MarkerJob`), then CompleteCommit /
CompleteAbort. Start-up replay finds the transactions caught between the two and finishes them.

Two-phase commit (KIP-939): a producer that enables it gets no transaction timeout (Kafka marks
such a transaction by a timeout of Integer.MAX_VALUE, which the record keeps), so a prepared
transaction waits for its outcome however long an external coordinator takes. InitProducerId
with keepPreparedTxn leaves an ongoing transaction open and hands the new process an identity of
its own (the "next" producer id and epoch, as Kafka's coordinator does), with which it alone may
end the transaction; the markers then fence the process that prepared it.

Transaction version 2 (KIP-890 part 2; EndTxn v5, Produce v12, TxnOffsetCommit v5): partitions
join the transaction through the partition leader and the group coordinator, and every end
bumps the producer epoch, so that nothing the producer sent for one transaction can land in
the next. The markers carry the bumped epoch and the response hands it to the producer; once
the epoch is exhausted the transaction ends under a new producer id (`next_producer_id` while
the markers are written, `previous_producer_id` after, for a retry of the EndTxn). The record
keeps the version the transaction was ended with, so a retried EndTxn is recognised after a
restart too.

A new producer id is allocated outside (the allocation waits for the metadata store): an
operation that needs one and was given none answers `needs_producer_id` and writes nothing,
and the caller runs it again with one (TransactionRuntime.run_with_producer_id). So only an
operation that really moves to a new producer id uses one up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from broker.coordinator.placement import partition_for
from broker.coordinator.runtime import Record
from broker.coordinator.transaction_records import (
    TransactionLogKey,
    TransactionLogValue,
    TransactionPartitions,
)
from broker.coordinator.transaction_records import TransactionState as S

# Kafka bumps to a new producer id rather than let a producer's epoch reach Short.MAX_VALUE
# (isEpochExhausted): the last epoch is kept for the coordinator, so that it can always fence.
MAX_PRODUCER_EPOCH = 32767 - 1
LAST_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka's mark of a two-phase commit transaction: it never times out.
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1

TopicPartition = tuple[str, int]
_PREPARED = {S.PREPARE_COMMIT: S.COMPLETE_COMMIT, S.PREPARE_ABORT: S.COMPLETE_ABORT}
_IN_FLIGHT = {S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}


@dataclass(frozen=True, slots=True)
class TransactionCoordinatorConfig:
    state_log_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms

    @classmethod
    def from_broker(cls, config) -> TransactionCoordinatorConfig:
        return cls(
            config["transaction.state.log.num.partitions"],
            config["transaction.max.timeout.ms"],
            config["transactional.id.expiration.ms"],
        )


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: S
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    # The identity InitProducerId(keepPreparedTxn) gave the process that took the ongoing
    # transaction over; it becomes the id's identity when the transaction ends.
    next_producer_id: int = NO_PRODUCER_ID
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    # In memory only, as in Kafka: the epoch before the last bump, so that a retried
    # InitProducerId (KIP-360) gets the same answer instead of a second bump.
    last_producer_epoch: int = -1
    client_transaction_version: int = 0

    @property
    def two_phase_commit(self) -> bool:
        return self.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    @property
    def taken_over(self) -> bool:
        # Only KIP-939 gives the next identity an epoch; transaction version 2 sets the next
        # producer id alone, when an end exhausts the epoch.
        return self.next_producer_epoch != NO_PRODUCER_EPOCH

    @property
    def transaction_v2(self) -> bool:
        return self.client_transaction_version >= 2

    @property
    def owner(self) -> tuple[int, int]:
        """Who may end the transaction: the process that took it over, if one did."""
        if self.taken_over:
            return self.next_producer_id, self.next_producer_epoch
        return self.producer_id, self.producer_epoch

    def record(self) -> Record:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return Record(
            TransactionLogKey(self.transactional_id),
            TransactionLogValue(
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                transaction_timeout_ms=self.timeout_ms,
                transaction_status=int(self.state),
                transaction_partitions=tuple(
                    TransactionPartitions(t, tuple(ps)) for t, ps in by_topic.items()
                ),
                transaction_last_update_timestamp_ms=self.last_update_ms,
                transaction_start_timestamp_ms=self.start_ms,
                previous_producer_id=self.previous_producer_id,
                next_producer_id=self.next_producer_id,
                client_transaction_version=self.client_transaction_version,
                next_producer_epoch=self.next_producer_epoch,
            ),
        )

    @classmethod
    def from_record(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.transaction_timeout_ms,
            S(value.transaction_status),
            frozenset(
                (tp.topic, p) for tp in value.transaction_partitions or () for p in tp.partition_ids
            ),
            value.transaction_start_timestamp_ms,
            value.transaction_last_update_timestamp_ms,
            value.previous_producer_id,
            value.next_producer_id,
            value.next_producer_epoch,
            client_transaction_version=value.client_transaction_version,
        )


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers the runtime must write before the transaction can complete."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    transaction_version: int = 0  # WriteTxnMarkers' own: how partitions check the epoch


@dataclass(slots=True)
class TxnResult:
    records: list[Record] = field(default_factory=list)
    response: object = None
    markers: list[MarkerJob] = field(default_factory=list)
    # The operation moves a producer to a new producer id and was given none: run it again
    # with one (what it did write without one stays written).
    needs_producer_id: bool = False


def _needs_producer_id() -> TxnResult:
    return TxnResult(needs_producer_id=True)


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    error: ErrorCode
    # v5 (transaction version 2): the identity for the producer's next transaction.
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    # KIP-939: the transaction keepPreparedTxn kept open, for the new process to end.
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    def __init__(self, config: TransactionCoordinatorConfig) -> None:
        self.config = config
        self.transactions: dict[str, TransactionMetadata] = {}

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.state_log_partitions)

    # -- replay ------------------------------------------------------------------------------

    def replay(self, record: Record) -> None:
        txn_id = record.key.transactional_id
        old = self.transactions.pop(txn_id, None)
        if record.value is None:
            return  # expired
        meta = TransactionMetadata.from_record(txn_id, record.value)
        if old is not None and old.producer_id == meta.producer_id:
            if old.producer_epoch == meta.producer_epoch:
                meta.last_producer_epoch = old.last_producer_epoch
            elif meta.state is S.EMPTY or _own_end_bump(old, meta):
                # Bumped by InitProducerId, or by a version 2 end of the producer's own, which
                # Kafka's prepareAbortOrCommit records as the last epoch too.
                meta.last_producer_epoch = old.producer_epoch
            # else bumped to fence (a timeout or a new instance): the old epoch is no retry
        self.transactions[txn_id] = meta

    def pending_markers(self, partition: int | None = None) -> list[MarkerJob]:
        """After replaying `partition` (every partition when None): its transactions whose
        outcome was decided (Prepare* written) but whose markers may not all be written."""
        return [
            _markers(meta)
            for meta in self.transactions.values()
            if meta.state in _PREPARED
            and partition in (None, self.partition_for(meta.transactional_id))
        ]

    def unload(self, partition: int) -> None:
        """Forget the transactional ids of `partition`: another broker leads it now."""
        for txn_id in [t for t in self.transactions if self.partition_for(t) == partition]:
            del self.transactions[txn_id]

    # -- InitProducerId ----------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        fresh_producer_id: int,
        now_ms: int,
        *,
        two_phase_commit: bool = False,
        keep_prepared_txn: bool = False,
        transaction_version: int = 0,
    ) -> TxnResult:
        """`fresh_producer_id` is used when the id needs a new producer id (first use, an
        exhausted epoch, or a fence that exhausts it); without one such a call answers
        `needs_producer_id`. `transaction_version` is the cluster's, which fencing an ongoing
        transaction uses."""
        if two_phase_commit:
            timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS  # transaction.max.timeout.ms is no bound
        elif not 0 < timeout_ms <= self.config.max_timeout_ms:
            return TxnResult(response=InitProducerIdResponse(ErrorCode.invalid_transaction_timeout))
        if keep_prepared_txn and producer_id != NO_PRODUCER_ID:
            # Kafka: keeping is for a new process, resuming (KIP-360) for the same one.
            return TxnResult(response=InitProducerIdResponse(ErrorCode.invalid_request))
        meta = self.transactions.get(transactional_id)
        if meta is None:
            if fresh_producer_id == NO_PRODUCER_ID:
                return _needs_producer_id()
            meta = TransactionMetadata(
                transactional_id, fresh_producer_id, 0, timeout_ms, S.EMPTY, frozenset(), -1, now_ms
            )
            return _transition(meta, InitProducerIdResponse(ErrorCode.none, fresh_producer_id, 0))
        if producer_id != NO_PRODUCER_ID:
            # KIP-360: a producer resuming names the id and epoch it had.
            if producer_id == meta.producer_id and producer_epoch == meta.last_producer_epoch:
                if meta.state not in _IN_FLIGHT:  # a retry whose answer was lost
                    return TxnResult(
                        response=InitProducerIdResponse(
                            ErrorCode.none, meta.producer_id, meta.producer_epoch
                        )
                    )
            elif (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch):
                return TxnResult(response=InitProducerIdResponse(ErrorCode.producer_fenced))
        if meta.state in _IN_FLIGHT:
            return TxnResult(response=InitProducerIdResponse(ErrorCode.concurrent_transactions))
        if meta.state is S.ONGOING:
            if keep_prepared_txn:
                if fresh_producer_id == NO_PRODUCER_ID and meta.owner[1] >= MAX_PRODUCER_EPOCH - 1:
                    return _needs_producer_id()
                return self._take_over(meta, timeout_ms, fresh_producer_id, now_ms)
            # Fence the previous instance: its transaction is aborted under a bumped epoch, and
            # the caller retries (CONCURRENT_TRANSACTIONS) once the abort completed.
            if fresh_producer_id == NO_PRODUCER_ID and _fence_rotates(meta, transaction_version):
                return _needs_producer_id()
            result = self._abort(meta, now_ms, transaction_version, fresh_producer_id)
            result.response = InitProducerIdResponse(ErrorCode.concurrent_transactions)
            return result
        if meta.producer_epoch >= MAX_PRODUCER_EPOCH:
            if fresh_producer_id == NO_PRODUCER_ID:
                return _needs_producer_id()
            new = replace(
                meta,
                producer_id=fresh_producer_id,
                producer_epoch=0,
                previous_producer_id=meta.producer_id,
            )
        else:
            new = replace(meta, producer_epoch=meta.producer_epoch + 1)
        new.last_producer_epoch = meta.producer_epoch
        new.timeout_ms, new.state, new.partitions = timeout_ms, S.EMPTY, frozenset()
        new.start_ms, new.last_update_ms = -1, now_ms
        return _transition(
            new, InitProducerIdResponse(ErrorCode.none, new.producer_id, new.producer_epoch)
        )

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
        transaction_version: int = 0,
    ) -> TxnResult:
        """Response: the error for every partition (Kafka answers one error for all).
        `transaction_version` 2 is a partition leader or group coordinator adding a partition
        for a Produce v12 or TxnOffsetCommit v5 (KIP-890 part 2); the transaction remembers
        it, so that its end is checked and answered as that version's."""
        meta = self.transactions.get(transactional_id)
        if meta is not None and meta.taken_over and (producer_id, producer_epoch) == meta.owner:
            # The process that took a prepared transaction over may only end it (Kafka).
            return TxnResult(response=ErrorCode.invalid_txn_state)
        error = _producer_error(meta, producer_id, producer_epoch)
        if error is ErrorCode.none and meta.state in _IN_FLIGHT:
            error = ErrorCode.concurrent_transactions
        if error is not ErrorCode.none:
            return TxnResult(response=error)
        added = frozenset(partitions)
        if (
            meta.state is S.ONGOING
            and added <= meta.partitions
            and transaction_version == meta.client_transaction_version
        ):
            return TxnResult(response=ErrorCode.none)
        new = replace(meta, partitions=meta.partitions | added, last_update_ms=now_ms)
        new.client_transaction_version = transaction_version
        if meta.state is not S.ONGOING:
            new.state, new.start_ms = S.ONGOING, now_ms
            new.partitions = added
        return _transition(new, ErrorCode.none)

    # -- EndTxn ------------------------------------------------------------------------------

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        *,
        transaction_version: int = 0,
        fresh_producer_id: int = NO_PRODUCER_ID,
    ) -> TxnResult:
        """EndTxn; `transaction_version` 2 for v5. `fresh_producer_id` is the id a version 2
        end moves to when the epoch is exhausted; without one that end answers
        `needs_producer_id`, once the request is found valid."""
        meta = self.transactions.get(transactional_id)
        if transaction_version >= 2:
            return self._end_v2(
                meta, producer_id, producer_epoch, commit, now_ms, fresh_producer_id
            )
        error = _producer_error(meta, producer_id, producer_epoch, owner=True)
        if error is not ErrorCode.none:
            return _ended(error)
        state = meta.state
        if state is S.ONGOING:
            if meta.taken_over:
                # The markers fence the process that prepared the transaction (KIP-939).
                meta = replace(meta, producer_epoch=_bumped(meta.producer_epoch))
            meta = replace(meta, client_transaction_version=transaction_version)
            result = self._prepare(meta, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms)
            result.response = EndTxnResponse(ErrorCode.none, *_after_end(meta))
            return result
        error = _end_again(state, commit)
        if error is not ErrorCode.none:
            return _ended(error)  # Kafka answers an error without an identity
        return _ended(ErrorCode.none, *_after_end(meta))

    def _end_v2(
        self,
        meta: TransactionMetadata | None,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        fresh_producer_id: int,
    ) -> TxnResult:
        """Kafka's TransactionCoordinator.endTransaction for a version 2 client: every end
        bumps the epoch, so an EndTxn one epoch behind the id's after a version 2 end (or
        behind the new producer id's epoch 0 after an exhausted one) is that end's retry."""
        if meta is None:
            return _ended(ErrorCode.invalid_producer_id_mapping)
        state = meta.state
        if meta.transaction_v2 and state not in (S.EMPTY, S.ONGOING):
            retry_of_bump = (
                producer_id == meta.producer_id and producer_epoch + 1 == meta.producer_epoch
            )
            retry_of_new_id = (
                producer_id == meta.previous_producer_id
                and producer_epoch >= MAX_PRODUCER_EPOCH
                and meta.producer_epoch == 0
            )
            if retry_of_bump or retry_of_new_id:
                error = _end_again(state, commit)
                if error is not ErrorCode.none:
                    return _ended(error)
                return _ended(ErrorCode.none, meta.producer_id, meta.producer_epoch)
        error = _producer_error(meta, producer_id, producer_epoch, owner=True)
        if error is not ErrorCode.none:
            return _ended(error)
        if state is S.ONGOING:
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        elif state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if commit:  # at the id's epoch this is a new transaction, and nothing is in it
                return _ended(ErrorCode.invalid_txn_state)
            # Nothing reached the transaction (a Produce that failed before its partition
            # joined): the abort still bumps the epoch, which fences whatever is in flight.
            target = S.PREPARE_ABORT
        else:
            return _ended(_end_again(state, commit))
        new = replace(meta, client_transaction_version=2)
        if meta.taken_over:
            # The markers fence the process that prepared it, under the transaction's id (up
            # to the last epoch: that id is done with once the transaction ends); the process
            # that took it over continues one epoch on (_take_over left room for it).
            new.producer_epoch = _bumped(meta.producer_epoch)
            new.next_producer_epoch = meta.next_producer_epoch + 1
        elif meta.producer_epoch >= MAX_PRODUCER_EPOCH:
            # The markers still take the last epoch; the transaction completes under a new id.
            if fresh_producer_id == NO_PRODUCER_ID:
                return _needs_producer_id()
            new.producer_epoch, new.next_producer_id = meta.producer_epoch + 1, fresh_producer_id
        else:
            new.producer_epoch = meta.producer_epoch + 1
        if state is not S.ONGOING:
            new.partitions, new.start_ms = frozenset(), now_ms
        result = self._prepare(new, target, now_ms)
        next_id, next_epoch = _after_end(new)
        result.response = EndTxnResponse(ErrorCode.none, next_id, next_epoch)
        return result

    def complete(self, transactional_id: str, now_ms: int) -> list[Record]:
        """The markers of a prepared transaction are written: CompleteCommit/CompleteAbort."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.state not in _PREPARED:
            return []
        return self._complete_record(meta, now_ms)

    # -- timers ------------------------------------------------------------------------------

    def abort_timed_out(
        self,
        now_ms: int,
        transaction_version: int = 0,
        fresh_producer_id: int = NO_PRODUCER_ID,
    ) -> TxnResult:
        """Transactions open longer than their timeout are aborted under a bumped epoch, so
        the producer that left them is fenced (Kafka's abortTimedOutTransactions), as the
        cluster's `transaction_version` ends transactions. One whose abort moves to a new
        producer id takes `fresh_producer_id`; others that need one wait for the next call
        (`needs_producer_id`)."""
        result = TxnResult()
        for meta in list(self.transactions.values()):
            if (
                meta.state is S.ONGOING
                and not meta.two_phase_commit  # its outcome is an external coordinator's
                and meta.start_ms + meta.timeout_ms <= now_ms
            ):
                fresh = NO_PRODUCER_ID
                if _fence_rotates(meta, transaction_version):
                    fresh, fresh_producer_id = fresh_producer_id, NO_PRODUCER_ID
                    if fresh == NO_PRODUCER_ID:
                        result.needs_producer_id = True
                        continue
                aborted = self._abort(meta, now_ms, transaction_version, fresh)
                result.records += aborted.records
                result.markers += aborted.markers
        return result

    def expire_transactional_ids(self, now_ms: int) -> list[Record]:
        """Ids idle for transactional.id.expiration.ms with no transaction open are removed
        (a tombstone); a later InitProducerId starts them afresh."""
        return [
            Record(TransactionLogKey(meta.transactional_id), None)
            for meta in self.transactions.values()
            if meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            and meta.last_update_ms + self.config.id_expiration_ms <= now_ms
        ]

    # -- produce verification and admin views ------------------------------------------------

    def verify_partition(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        topic_partition: TopicPartition,
    ) -> ErrorCode:
        """Kafka's handleVerifyPartitionsInTransaction (KIP-890 part 1): a transactional
        Produce of transaction version 1 is accepted only for a partition its ongoing
        transaction added, so that neither a zombie nor a producer that skipped
        AddPartitionsToTxn can leave a transaction hanging. The coordinator's answer; the
        partition leader translates it for its client."""
        meta = self.transactions.get(transactional_id) if transactional_id is not None else None
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if meta.state in _PREPARED:
            return ErrorCode.concurrent_transactions
        if meta.state is not S.ONGOING or topic_partition not in meta.partitions:
            return ErrorCode.transaction_abortable
        return ErrorCode.none

    # -- transitions -------------------------------------------------------------------------

    def _prepare(self, meta: TransactionMetadata, state: S, now_ms: int) -> TxnResult:
        new = replace(meta, state=state, last_update_ms=now_ms)
        result = _transition(new, ErrorCode.none)
        if meta.partitions:
            result.markers.append(_markers(new))
        else:
            result.records += self._complete_record(new, now_ms)
        return result

    def _abort(
        self,
        meta: TransactionMetadata,
        now_ms: int,
        transaction_version: int,
        fresh_producer_id: int = NO_PRODUCER_ID,
    ) -> TxnResult:
        """The coordinator's own abort (a timeout, a new instance): under bumped epochs, so
        that the producer that left it, and any process that took it over, are fenced. The
        fence may take the epoch to the last one, which only the coordinator uses. Under
        transaction version 2 the end bumps once more, as in Kafka (the fence, then the end's
        own bump): one bump alone would make the fenced producer's EndTxn look like a retry of
        this abort. Once the fenced epoch is exhausted that end moves to a new producer id, as
        a producer's own end does (`_fence_rotates`, `fresh_producer_id`): its markers take
        the last epoch and fence the old id for good."""
        new = replace(meta, client_transaction_version=transaction_version)
        new.producer_epoch = _bumped(meta.producer_epoch)
        if meta.taken_over:
            new.next_producer_epoch = _bumped(meta.next_producer_epoch)
        if transaction_version >= 2:
            if _fence_rotates(meta, transaction_version):
                assert fresh_producer_id != NO_PRODUCER_ID, "the caller must allocate one"
                new.next_producer_id = fresh_producer_id
            new.producer_epoch = _bumped(new.producer_epoch)
        return self._prepare(new, S.PREPARE_ABORT, now_ms)

    @staticmethod
    def _take_over(
        meta: TransactionMetadata, timeout_ms: int, fresh_producer_id: int, now_ms: int
    ) -> TxnResult:
        """KIP-939's keepPreparedTxn: the ongoing transaction stays as it is, the new process
        gets the next epoch of the identity that owns it (a new producer id once exhausted)
        and the ongoing identity, to match against what its external coordinator recorded."""
        owner_id, owner_epoch = meta.owner
        new = replace(meta, timeout_ms=timeout_ms, last_update_ms=now_ms)
        # One epoch short of the last, so that a transaction version 2 end can bump it.
        if owner_epoch >= MAX_PRODUCER_EPOCH - 1:
            new.next_producer_id, new.next_producer_epoch = fresh_producer_id, 0
        else:
            new.next_producer_id, new.next_producer_epoch = owner_id, owner_epoch + 1
        return _transition(
            new,
            InitProducerIdResponse(
                ErrorCode.none,
                new.next_producer_id,
                new.next_producer_epoch,
                meta.producer_id,
                meta.producer_epoch,
            ),
        )

    @staticmethod
    def _complete_record(meta: TransactionMetadata, now_ms: int) -> list[Record]:
        done = replace(
            meta, state=_PREPARED[meta.state], partitions=frozenset(), last_update_ms=now_ms
        )
        # The process that took the transaction over owns the id now, or a version 2 end
        # that exhausted the epoch moves it to its new producer id.
        done.producer_id, done.producer_epoch = _after_end(meta)
        if done.producer_id != meta.producer_id:
            done.previous_producer_id = meta.producer_id
        done.next_producer_id, done.next_producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        return [done.record()]


def _transition(meta: TransactionMetadata, response) -> TxnResult:
    return TxnResult([meta.record()], response)


def _markers(meta: TransactionMetadata) -> MarkerJob:
    return MarkerJob(
        meta.transactional_id,
        meta.producer_id,
        meta.producer_epoch,
        meta.state is S.PREPARE_COMMIT,
        meta.partitions,
        meta.client_transaction_version,
    )


def _after_end(meta: TransactionMetadata) -> tuple[int, int]:
    """The identity a prepared transaction leaves the id with once its markers are written."""
    if meta.taken_over:
        return meta.owner
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.next_producer_id, 0
    return meta.producer_id, meta.producer_epoch


def _ended(
    error: ErrorCode, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH
) -> TxnResult:
    return TxnResult(response=EndTxnResponse(error, producer_id, producer_epoch))


def _end_again(state: S, commit: bool) -> ErrorCode:
    """EndTxn for a transaction already ending or ended: the same outcome is a retry
    (CONCURRENT_TRANSACTIONS while its markers are written), another one is refused."""
    if state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
        return ErrorCode.none
    if state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT) or state is S.PREPARE_EPOCH_FENCE:
        return ErrorCode.concurrent_transactions
    return ErrorCode.invalid_txn_state


def _bumped(epoch: int) -> int:
    """The next epoch, for the coordinator's own bumps: up to the last one, which no
    producer is given (its id is then replaced by a new one, or is done with)."""
    return min(epoch + 1, LAST_EPOCH)


def _fence_rotates(meta: TransactionMetadata, transaction_version: int) -> bool:
    """Whether the coordinator's own abort of the transaction moves it to a new producer id:
    under transaction version 2 the end bumps the fenced epoch, and when that is exhausted
    the id rotates, on the fence path too (recent Kafka: "rotate producer ID whenever the
    current epoch is exhausted"). A transaction taken over (KIP-939) leaves its producer id
    for the process that took it over anyway."""
    return (
        transaction_version >= 2
        and not meta.taken_over
        and meta.producer_epoch + 1 >= MAX_PRODUCER_EPOCH
    )


def _own_end_bump(old: TransactionMetadata, new: TransactionMetadata) -> bool:
    """Whether `new` is the Prepare record of a version 2 end that the producer asked for:
    one epoch up, where the coordinator's own aborts go up two (the fence first). From an
    exhausted epoch both go to the last one only, but then the transaction moves to a new
    producer id, for which the old id's epochs are no retry anyway."""
    return (
        new.state in _PREPARED
        and new.transaction_v2
        and old.state in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        and new.producer_epoch == old.producer_epoch + 1
        and not old.taken_over
    )


def _producer_error(
    meta: TransactionMetadata | None, producer_id: int, epoch: int, *, owner: bool = False
) -> ErrorCode:
    """Checked against the id's producer, or with `owner` against whoever may end its
    transaction; a producer id the transactional id had is fenced rather than unknown."""
    if meta is None or producer_id not in (meta.producer_id, meta.owner[0]):
        return ErrorCode.invalid_producer_id_mapping
    expected = meta.owner if owner else (meta.producer_id, meta.producer_epoch)
    if (producer_id, epoch) != expected:
        return ErrorCode.producer_fenced
    return ErrorCode.none
