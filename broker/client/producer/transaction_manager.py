"""The producer's identity and transaction state as a plain object, after Kafka's
TransactionManager: producer id and epoch, sequence numbers per partition (KIP-98), the
partitions and offsets of the open transaction, and which errors may be retried, make the
transaction abortable, or are fatal. The producer does the I/O and reports back here.

Ordering across retries: a batch keeps its sequence when it is retried, and a retried batch is
sent again only once every batch before it in its partition has been answered, so the broker
never sees sequences out of order for a reason other than a lost write. A sequence whose fate
is unknown (a batch that expired or failed after it may have been written) is resolved as
KIP-360 says: the idempotent producer bumps its epoch and starts sequences again at 0; a
transactional one must abort, and bumps its epoch with InitProducerId(current id and epoch)."""

from __future__ import annotations

import bisect
import enum
import json
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.client.errors import (
    IllegalStateError,
    InvalidTxnStateError,
    KafkaAdminError,
    ProducerFencedError,
    TransactionAbortableError,
)
from broker.client.models import TopicPartition
from broker.client.producer.accumulator import NO_SEQUENCE, ProducerBatch

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32_767
SEQUENCE_MODULUS = 1 << 31  # sequences wrap after Int32.MAX_VALUE, as the broker expects

# Answers to a transactional request that leave the producer unusable.
FATAL_CODES = frozenset(
    {
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.transactional_id_authorization_failed,
        ErrorCode.invalid_txn_state,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.unsupported_version,
        ErrorCode.unsupported_for_message_format,
        ErrorCode.invalid_transaction_timeout,
        ErrorCode.transaction_coordinator_fenced,
    }
)
# Answers after which the same transactional request is sent again (after finding the
# coordinator again for the first two).
RETRIABLE_TXN_CODES = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.request_timed_out,
        ErrorCode.network_exception,
    }
)


def kafka_error(code: int, message: str | None = None, resource: str | None = None):
    """The typed exception for a Kafka error code the producer was answered."""
    cls = KafkaAdminError
    if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
        cls = ProducerFencedError
    elif code == ErrorCode.invalid_txn_state:
        cls = InvalidTxnStateError
    return cls.from_code(code, message, resource)


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    PREPARED_TRANSACTION = "PREPARED_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState
# state -> the states it may be entered from (Kafka's State.isTransitionValid)
_ENTERED_FROM = {
    # Entered again only to retry an init_transactions() that failed or timed out.
    S.INITIALIZING: {S.UNINITIALIZED, S.INITIALIZING},
    S.READY: {S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION},
    S.IN_TRANSACTION: {S.READY},
    S.PREPARED_TRANSACTION: {S.IN_TRANSACTION, S.INITIALIZING},
    # Entered again when a commit or abort that timed out is called again.
    S.COMMITTING_TRANSACTION: {
        S.IN_TRANSACTION,
        S.PREPARED_TRANSACTION,
        S.COMMITTING_TRANSACTION,
    },
    S.ABORTING_TRANSACTION: {
        S.IN_TRANSACTION,
        S.PREPARED_TRANSACTION,
        S.ABORTABLE_ERROR,
        S.ABORTING_TRANSACTION,
    },
    S.ABORTABLE_ERROR: {
        S.IN_TRANSACTION,
        S.COMMITTING_TRANSACTION,
        S.ABORTABLE_ERROR,
        S.PREPARED_TRANSACTION,
    },
}


@dataclass(frozen=True)
class PreparedTxnState:
    """A prepared transaction (KIP-939), as one process hands it to another that completes
    it: `str(state)` and `PreparedTxnState.from_json(text)` round-trip."""

    transactional_id: str
    producer_id: int
    producer_epoch: int

    def to_json(self) -> str:
        return json.dumps(
            {
                "transactional_id": self.transactional_id,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> PreparedTxnState:
        try:
            fields = json.loads(text)
            return cls(
                str(fields["transactional_id"]),
                int(fields["producer_id"]),
                int(fields["producer_epoch"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not a prepared transaction state: {text!r}") from e

    def __str__(self) -> str:
        return self.to_json()


class TransactionManager:
    def __init__(
        self,
        transactional_id: str | None = None,
        *,
        idempotent: bool = True,
        two_phase_commit: bool = False,
    ) -> None:
        self.transactional_id = transactional_id
        self.idempotent = idempotent or transactional_id is not None
        self.two_phase_commit = two_phase_commit
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.state = TxnState.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.epoch_bump_required = False
        # Sequences (KIP-98): the next to assign, the last answered, and the batches sent
        # with a sequence and not yet answered for good, in sequence order.
        self._next_sequence: dict[TopicPartition, int] = {}
        self._last_acked: dict[TopicPartition, int] = {}
        self._unfinished: dict[TopicPartition, list[ProducerBatch]] = {}
        # The open transaction's partitions: added at the coordinator, and still to add.
        self.partitions_in_txn: set[TopicPartition] = set()
        self.pending_partitions: set[TopicPartition] = set()
        # Whether the coordinator knows of the transaction (partitions or offsets added):
        # EndTxn is sent only then, an empty transaction ends locally.
        self.transaction_started = False
        # What the coordinator answered InitProducerId with keep_prepared_txn (KIP-939).
        self.ongoing_txn: PreparedTxnState | None = None

    @property
    def is_transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    # -- state machine -----------------------------------------------------------------------

    def _transition(self, target: TxnState, action: str) -> None:
        self.raise_if_fatal()
        if self.state not in _ENTERED_FROM[target]:
            raise IllegalStateError(
                f"cannot {action} in state {self.state.value} (transactional id "
                f"{self.transactional_id!r})"
            )
        self.state = target

    def raise_if_fatal(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            assert self.last_error is not None
            raise self.last_error

    def _require_transactional(self, action: str) -> None:
        if not self.is_transactional:
            raise IllegalStateError(f"cannot {action}: the producer has no transactional_id")

    def begin_init(self, keep_prepared_txn: bool = False) -> None:
        self._require_transactional("init_transactions")
        if keep_prepared_txn and not self.two_phase_commit:
            raise IllegalStateError(
                "keep_prepared_txn needs transaction_two_phase_commit_enable=True"
            )
        self._transition(TxnState.INITIALIZING, "init_transactions")

    def complete_init(
        self,
        producer_id: int,
        producer_epoch: int,
        ongoing_producer_id: int = NO_PRODUCER_ID,
        ongoing_producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> None:
        """InitProducerId answered: a fresh transaction state, or with keep_prepared_txn a
        prepared transaction left by an earlier instance, kept for complete_transaction."""
        self.set_producer_id(producer_id, producer_epoch)
        self.ongoing_txn = None
        if ongoing_producer_id != NO_PRODUCER_ID:
            assert self.transactional_id is not None
            self.ongoing_txn = PreparedTxnState(
                self.transactional_id, ongoing_producer_id, ongoing_producer_epoch
            )
            self._transition(TxnState.PREPARED_TRANSACTION, "keep a prepared transaction")
            self.transaction_started = True
        else:
            self._transition(TxnState.READY, "complete init_transactions")

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new id or epoch from InitProducerId: every partition's sequence starts at 0."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.epoch_bump_required = False
        self._reset_sequences()

    def begin_transaction(self) -> None:
        self._require_transactional("begin_transaction")
        if self.state is TxnState.UNINITIALIZED:
            raise IllegalStateError("call init_transactions() before begin_transaction()")
        self._transition(TxnState.IN_TRANSACTION, "begin_transaction")

    def check_send(self) -> None:
        """A record may be sent only inside a transaction for a transactional producer."""
        self.raise_if_fatal()
        if not self.is_transactional:
            return
        if self.state is TxnState.ABORTABLE_ERROR:
            assert self.last_error is not None
            raise self.last_error
        if self.state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError(
                f"cannot send in state {self.state.value}: call begin_transaction() first"
            )

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        if self.is_transactional and tp not in self.partitions_in_txn:
            self.pending_partitions.add(tp)

    def partitions_added(self, tps: set[TopicPartition]) -> None:
        self.transaction_started = True
        self.partitions_in_txn |= tps
        self.pending_partitions -= tps

    def prepare(self) -> PreparedTxnState:
        if not self.two_phase_commit:
            raise IllegalStateError(
                "prepare_transaction needs transaction_two_phase_commit_enable=True"
            )
        if self.state is TxnState.ABORTABLE_ERROR:
            assert self.last_error is not None
            raise self.last_error
        self._transition(TxnState.PREPARED_TRANSACTION, "prepare_transaction")
        state = self.current_txn_state()
        self.ongoing_txn = state
        return state

    def current_txn_state(self) -> PreparedTxnState:
        assert self.transactional_id is not None
        return PreparedTxnState(self.transactional_id, self.producer_id, self.producer_epoch)

    def begin_commit(self) -> None:
        self._require_transactional("commit_transaction")
        if self.state is TxnState.ABORTABLE_ERROR:
            assert self.last_error is not None
            raise self.last_error
        self._transition(TxnState.COMMITTING_TRANSACTION, "commit_transaction")

    def begin_abort(self) -> None:
        self._require_transactional("abort_transaction")
        self._transition(TxnState.ABORTING_TRANSACTION, "abort_transaction")

    def end_transaction(self) -> None:
        """EndTxn answered: ready for the next transaction."""
        self._transition(TxnState.READY, "end the transaction")
        self.partitions_in_txn.clear()
        self.pending_partitions.clear()
        self.transaction_started = False
        self.ongoing_txn = None
        self.last_error = None

    def fail_abortable(self, error: BaseException) -> TransactionAbortableError:
        """The open transaction cannot commit any more; the error to raise from now on."""
        if not isinstance(error, TransactionAbortableError):
            code = getattr(error, "code", ErrorCode.unknown_server_error)
            abortable = TransactionAbortableError.from_code(
                code, f"abort the transaction: {error}", getattr(error, "resource", None)
            )
            abortable.__cause__ = error
            error = abortable
        if self.is_transactional and self.state is not TxnState.FATAL_ERROR:
            self.last_error = error
            if self.state is not TxnState.ABORTING_TRANSACTION:
                self.state = TxnState.ABORTABLE_ERROR
        return error

    def fail_fatal(self, error: BaseException) -> BaseException:
        if self.state is not TxnState.FATAL_ERROR:
            self.state = TxnState.FATAL_ERROR
            self.last_error = error
        return self.last_error

    def transaction_error(self, code: int, message: str | None, resource: str | None):
        """Record the answer to a transactional request that is neither success nor to be
        retried, and return what to raise."""
        error = kafka_error(code, message, resource)
        if code in FATAL_CODES:
            return self.fail_fatal(error)
        if code == ErrorCode.invalid_producer_id_mapping:
            self.epoch_bump_required = True
        return self.fail_abortable(error)

    # -- sequences ---------------------------------------------------------------------------

    def _reset_sequences(self) -> None:
        for batches in self._unfinished.values():
            for batch in batches:
                batch.base_sequence = NO_SEQUENCE
        self._next_sequence.clear()
        self._last_acked.clear()
        self._unfinished.clear()

    def bump_epoch_locally(self) -> bool:
        """KIP-360 for an idempotent producer, which owns its id: the next epoch, sequences
        from 0. False when the epoch is exhausted and a new producer id is needed."""
        self.epoch_bump_required = False
        if self.producer_epoch >= MAX_EPOCH:
            self.set_producer_id(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return False
        self.set_producer_id(self.producer_id, self.producer_epoch + 1)
        return True

    def may_send(self, batch: ProducerBatch) -> bool:
        """Whether a queued batch may go now: its partition is in the transaction, no epoch
        bump waits, and a retried batch goes only when every earlier one is answered."""
        if not self.idempotent:
            return True
        if self.epoch_bump_required or not self.has_producer_id:
            return False
        if self.is_transactional and batch.tp not in self.partitions_in_txn:
            return False
        if batch.has_sequence:
            unfinished = self._unfinished.get(batch.tp)
            return not unfinished or unfinished[0] is batch
        return True

    def assign_sequence(self, batch: ProducerBatch) -> None:
        if not self.idempotent or batch.has_sequence:
            return
        sequence = self._next_sequence.get(batch.tp, 0)
        batch.set_producer_state(self.producer_id, self.producer_epoch, sequence)
        self._next_sequence[batch.tp] = (sequence + batch.count) % SEQUENCE_MODULUS
        unfinished = self._unfinished.setdefault(batch.tp, [])
        keys = [b.base_sequence for b in unfinished]
        unfinished.insert(bisect.bisect(keys, sequence), batch)

    def batch_done(self, batch: ProducerBatch, succeeded: bool) -> None:
        """A batch answered for good (written, or failed without a retry)."""
        unfinished = self._unfinished.get(batch.tp)
        if unfinished and batch in unfinished:
            unfinished.remove(batch)
        if succeeded and batch.has_sequence and batch.producer_epoch == self.producer_epoch:
            self._last_acked[batch.tp] = max(
                self._last_acked.get(batch.tp, -1), batch.last_sequence
            )

    def replace_batch(self, batch: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """A batch split in parts that carry its sequences between them."""
        unfinished = self._unfinished.get(batch.tp)
        if unfinished and batch in unfinished:
            at = unfinished.index(batch)
            unfinished[at : at + 1] = [p for p in parts if p.has_sequence]

    def _is_next_sequence(self, batch: ProducerBatch) -> bool:
        return batch.base_sequence == self._last_acked.get(batch.tp, -1) + 1

    def can_retry(self, batch: ProducerBatch, code: int) -> bool:
        """Kafka's canRetry: OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for a batch
        behind another that failed is retried as it is; for the batch right after the last
        one written it means a lost sequence: the idempotent producer bumps its epoch and
        retries, a transactional one fails the batch (the transaction must abort)."""
        if code in (ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id):
            if not self.epoch_bump_required and not self._is_next_sequence(batch):
                return True
            if not self.is_transactional:
                self.epoch_bump_required = True
                return True
            return False
        try:
            return ErrorCode(code).retriable
        except ValueError:
            return False

    def batch_failed(self, batch: ProducerBatch, error: BaseException) -> BaseException:
        """A batch given up on (an error not retried, or delivery.timeout.ms passed). Its
        sequence may or may not be in the log: an idempotent producer bumps its epoch before
        sending more, a transaction can no longer commit. Returns what the records raise."""
        self.batch_done(batch, succeeded=False)
        code = getattr(error, "code", None)
        if isinstance(error, ProducerFencedError) or code in (
            ErrorCode.transactional_id_authorization_failed,
            ErrorCode.cluster_authorization_failed,
        ):
            return self.fail_fatal(error) if self.idempotent else error
        if self.is_transactional:
            self.epoch_bump_required = self.epoch_bump_required or batch.has_sequence
            self.fail_abortable(error)
        elif self.idempotent and batch.has_sequence:
            self.epoch_bump_required = True
        return error
