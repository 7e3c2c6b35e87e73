"""The records of `__transaction_state` and their codec, in Kafka 4.x's layout
(`transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json`):
one record per transactional id, its latest state; a tombstone when the id expires."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from broker.coordinator.records import RecordCodec, _always, _Array, _f, _RecordType, _struct

TRANSACTION_STATE_TOPIC = "__transaction_state"


class TransactionState(IntEnum):
    """Kafka's TransactionState, with the ids the log stores."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions and ListTransactions report ("Ongoing", ...)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TransactionPartitions:
    topic: str
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: tuple[TransactionPartitions, ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    next_producer_epoch: int = -1


TRANSACTION_CODEC = RecordCodec(
    TRANSACTION_STATE_TOPIC,
    (
        _RecordType(
            0,
            _struct(TransactionLogKey, _f("transactional_id", "string")),
            _struct(
                TransactionLogValue,
                _f("producer_id", "int64"),
                _f("previous_producer_id", "int64", 1, tag=0),
                _f("next_producer_id", "int64", 1, tag=1),
                _f("producer_epoch", "int16"),
                _f("transaction_timeout_ms", "int32"),
                _f("transaction_status", "int8"),
                _f(
                    "transaction_partitions",
                    _Array(
                        _struct(
                            TransactionPartitions,
                            _f("topic", "string"),
                            _f("partition_ids", _Array("int32")),
                        )
                    ),
                    nullable=True,
                ),
                _f("transaction_last_update_timestamp_ms", "int64"),
                _f("transaction_start_timestamp_ms", "int64"),
                _f("client_transaction_version", "int16", 1, tag=2),
                # KIP-939: with next_producer_id, the identity of the process that took a
                # prepared transaction over (InitProducerId with keepPreparedTxn).
                _f("next_producer_epoch", "int16", 1, tag=3),
            ),
            1,
            1,
            # Version 1 carries the previous producer id a KIP-360 retry is checked against.
            _always(1),
        ),
    ),
)
encode_transaction_record = TRANSACTION_CODEC.encode
decode_transaction_record = TRANSACTION_CODEC.decode
