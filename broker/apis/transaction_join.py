"""How a transactional Produce's partition joins its transaction (KIP-890), the partition
leader's side of Kafka's ReplicaManager and AddPartitionsToTxnManager. The coordinator is
asked in-process when this broker coordinates the transactional id; in a cluster whose
coordinator for it is another broker, the Produce asks it with AddPartitionsToTxn v4+ before
appending (server/transaction_verification.py), and a coordinator that cannot be asked is
NOT_ENOUGH_REPLICAS, which the producer retries.

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

from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from broker.records.batch import BatchHeader, read_entry_header
from broker.server.coordinator_log import CoordinatorError
from broker.server.transaction_verification import UNVERIFIED, TransactionCheck, ask_coordinator

TopicPartition = tuple[str, int]

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
    checked: Mapping[TopicPartition, ErrorCode] | None,
    header: BatchHeader,
    topic_partition: TopicPartition,
) -> tuple[ErrorCode, str | None] | None:
    """None when the batch may be appended, else its error code and message. `checked`: the
    answers of the coordinator on another broker (`check_produce`), None to ask this one's."""
    coordinator = broker.transaction_coordinator
    runtime = broker.transaction_runtime
    if api_version >= TRANSACTION_V2_PRODUCE and runtime.transaction_version < 2:
        error = ErrorCode.unsupported_version
    elif api_version < TRANSACTION_V2_PRODUCE and not _verifies(broker):
        return None
    elif checked is not None:
        error = checked.get(topic_partition, ErrorCode.unknown_server_error)
    elif api_version >= TRANSACTION_V2_PRODUCE:
        try:
            error = runtime.run_sync(
                transactional_id,
                lambda now_ms: coordinator.add_partitions(
                    transactional_id,
                    header.producer_id,
                    header.producer_epoch,
                    [topic_partition],
                    now_ms,
                    2,
                ),
            )
        except CoordinatorError as e:
            error = e.code
    else:
        error = coordinator.verify_partition(
            transactional_id, header.producer_id, header.producer_epoch, topic_partition
        )
    if api_version < TRANSACTION_V2_PRODUCE:
        error = abortable_for(error, api_version, TRANSACTION_ABORTABLE_PRODUCE)
    if error is ErrorCode.producer_fenced:
        error = ErrorCode.invalid_producer_epoch
    elif error in UNVERIFIED or (
        error is ErrorCode.concurrent_transactions and api_version < TRANSACTION_V2_PRODUCE
    ):
        error = ErrorCode.not_enough_replicas
    if error is ErrorCode.none:
        return None
    return error, _MESSAGES.get(error)


def _verifies(broker) -> bool:
    return broker.config["transaction.partition.verification.enable"]


async def check_produce(
    broker, request, names: list[str | None], api_version: int
) -> dict[TopicPartition, ErrorCode]:
    """For a transactional Produce whose transactional id another broker coordinates: that
    coordinator's answers for the partitions of its transactional batches (the first batch
    of each names the producer, as in `join_transaction`); `names` are the request's topics'."""
    batches = {}
    for topic_data, name in zip(request.topic_data, names, strict=True):
        for pd in topic_data.partition_data:
            header = _transactional_header(pd.records)
            if header is not None and name is not None:
                batches[(name, pd.index)] = header
    if not batches:
        return {}
    first = next(iter(batches.values()))
    check = TransactionCheck(
        request.transactional_id,
        first.producer_id,
        first.producer_epoch,
        tuple(batches),
        add=api_version >= TRANSACTION_V2_PRODUCE,
    )
    return await ask_coordinator(broker, check)


def coordinated_elsewhere(broker, request, api_version: int) -> bool:
    """Whether a Produce's transactional batches need the coordinator of another broker."""
    return (
        request.transactional_id is not None
        and broker.cluster is not None
        and (api_version >= TRANSACTION_V2_PRODUCE or _verifies(broker))
        and broker.transaction_runtime.partitions.error(request.transactional_id)
        is not ErrorCode.none
    )


def _transactional_header(records) -> BatchHeader | None:
    # A malformed batch is refused when appended.
    header = read_entry_header(records) if records is not None else None
    return header if header is not None and header.is_transactional else None
