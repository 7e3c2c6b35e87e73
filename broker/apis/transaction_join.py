"""How a transactional Produce's partition joins its transaction (KIP-890), the partition
leader's side of Kafka's ReplicaManager and AddPartitionsToTxnManager. The coordinator is
asked in-process.

Transaction version 2 (Produce v12+): the leader adds the partition to the transaction itself,
as the producer no longer sends AddPartitionsToTxn. Version 1 (Produce v3-11): the producer
added it, and the leader verifies that it did (part 1, `transaction.partition.verification
.enable`), so that neither a zombie nor a producer that skipped AddPartitionsToTxn can leave a
transaction hanging. The coordinator's answers are translated for the client as Kafka does:
a fenced epoch is INVALID_PRODUCER_EPOCH, a transaction caught while it ends is, for version 1
clients, the retriable NOT_ENOUGH_REPLICAS (version 2 clients retry CONCURRENT_TRANSACTIONS
themselves), and a partition not in the transaction is TRANSACTION_ABORTABLE for the clients
that know it (v11+), INVALID_TXN_STATE for older ones.

A transactional Produce v12+ is refused (UNSUPPORTED_VERSION) by a cluster that has not
finalized transaction.version 2, as Confluent's brokers do (franz-go#1017); a
non-transactional one is served as v11 is. EndTxn v5 and TxnOffsetCommit v5 are served at any
level, as Kafka does (transactions.py)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.records.batch import BatchHeader

TRANSACTION_V2_PRODUCE = 12
TRANSACTION_ABORTABLE_PRODUCE = 11

_MESSAGES = {
    ErrorCode.invalid_txn_state: "Partition was not added to the transaction",
    ErrorCode.transaction_abortable: "Partition was not added to the transaction",
    ErrorCode.not_enough_replicas: (
        "Unable to verify the partition has been added to the transaction. Underlying "
        "error: CONCURRENT_TRANSACTIONS"
    ),
    ErrorCode.unsupported_version: (
        "Produce v12+ is transaction version 2, which the cluster has not finalized"
    ),
}


def abortable_for(error: ErrorCode, api_version: int, first_abortable_version: int) -> ErrorCode:
    """TRANSACTION_ABORTABLE for the request versions that know it (KIP-890); older ones
    get INVALID_TXN_STATE."""
    if error is ErrorCode.transaction_abortable and api_version < first_abortable_version:
        return ErrorCode.invalid_txn_state
    return error


def join_transaction(
    broker,
    transactional_id: str | None,
    api_version: int,
    header: BatchHeader,
    topic_partition: tuple[str, int],
) -> tuple[ErrorCode, str | None] | None:
    """None when the batch may be appended, else its error code and message."""
    coordinator = broker.transaction_coordinator
    runtime = broker.transaction_runtime
    if api_version >= TRANSACTION_V2_PRODUCE:
        if runtime.transaction_version < 2:
            error = ErrorCode.unsupported_version
        else:
            error = runtime.run_sync(
                lambda now_ms: coordinator.add_partitions(
                    transactional_id,
                    header.producer_id,
                    header.producer_epoch,
                    [topic_partition],
                    now_ms,
                    2,
                )
            )
    elif broker.config["transaction.partition.verification.enable"]:
        error = coordinator.verify_partition(
            transactional_id, header.producer_id, header.producer_epoch, topic_partition
        )
        error = abortable_for(error, api_version, TRANSACTION_ABORTABLE_PRODUCE)
    else:
        return None
    if error is ErrorCode.producer_fenced:
        error = ErrorCode.invalid_producer_epoch
    elif error is ErrorCode.concurrent_transactions and api_version < TRANSACTION_V2_PRODUCE:
        error = ErrorCode.not_enough_replicas
    if error is ErrorCode.none:
        return None
    return error, _MESSAGES.get(error)
