"""A transaction checked with its coordinator (KIP-890; Kafka's AddPartitionsToTxnManager): a
partition leader appending a transactional Produce, or a group coordinator a TxnOffsetCommit,
asks the transactional id's coordinator whether the partitions are in the producer's ongoing
transaction (`verify_only`) or, for transaction version 2, to add them to it: in-process when
this broker coordinates the id, else with AddPartitionsToTxn v4+ to the broker that does."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.client.session import Session, entity
from broker.server.coordinator_log import CoordinatorError
from broker.server.inter_broker import by_topic, partition_answers

ADD_PARTITIONS_TO_TXN = 24
# The inter-broker versions: batched by transactional id, with verify_only. v5 knows
# TRANSACTION_ABORTABLE.
INTER_BROKER_VERSIONS = range(4, 6)
# The answers of a coordinator that could not be asked, or is not (or not yet) the id's.
UNVERIFIED = frozenset(
    {
        ErrorCode.network_exception,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    }
)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TransactionCheck:
    """Whether `partitions` are in the producer's ongoing transaction, or with `add`
    (transaction version 2) adding them to it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    add: bool


async def check_with_coordinator(
    broker, check: TransactionCheck
) -> dict[TopicPartition, ErrorCode]:
    """The answer of the transactional id's coordinator for each partition, wherever it is; one
    of UNVERIFIED when it could not be had."""
    if broker.transaction_runtime.partitions.error(check.transactional_id) is ErrorCode.none:
        return await check_here(broker, check)
    return await ask_coordinator(broker, check)


async def check_here(broker, check: TransactionCheck) -> dict[TopicPartition, ErrorCode]:
    """This broker's coordinator's answer for each partition (NOT_COORDINATOR when it is not
    the id's)."""
    runtime, coordinator = broker.transaction_runtime, broker.transaction_coordinator
    txn_id, producer = check.transactional_id, (check.producer_id, check.producer_epoch)
    try:
        if not check.add:
            runtime.partitions.check(txn_id)
            return {
                tp: coordinator.verify_partition(txn_id, *producer, tp) for tp in check.partitions
            }
        error = await runtime.run(
            txn_id,
            lambda now_ms: coordinator.add_partitions(
                txn_id, *producer, list(check.partitions), now_ms, 2
            ),
        )
    except CoordinatorError as e:
        error = e.code
    return dict.fromkeys(check.partitions, error)


async def ask_coordinator(broker, check: TransactionCheck) -> dict[TopicPartition, ErrorCode]:
    """The answer of the coordinator on another broker, with AddPartitionsToTxn v4+."""
    runtime = broker.transaction_runtime
    leader = runtime.partitions.leader(check.transactional_id)
    if leader < 0:
        return dict.fromkeys(check.partitions, ErrorCode.coordinator_not_available)
    response = await runtime.sessions.send(
        leader, lambda session: _send(session, check), "AddPartitionsToTxn"
    )
    if response is None:
        return dict.fromkeys(check.partitions, ErrorCode.network_exception)
    if response.error_code != ErrorCode.none:
        return dict.fromkeys(check.partitions, ErrorCode(response.error_code))
    return partition_answers(
        check.partitions,
        (
            (topic.name, p.partition_index, p.partition_error_code)
            for result in response.results_by_transaction
            for topic in result.topic_results
            for p in topic.results_by_partition
        ),
    )


async def _send(session: Session, check: TransactionCheck):
    # UNSUPPORTED_VERSION (KafkaAdminError) when the broker does not verify transactions.
    version = session.version(ADD_PARTITIONS_TO_TXN, INTER_BROKER_VERSIONS)

    def request(class_name: str, **fields):
        return entity(ADD_PARTITIONS_TO_TXN, version, class_name, **fields)

    transaction = request(
        "AddPartitionsToTxnTransaction",
        transactional_id=check.transactional_id,
        producer_id=check.producer_id,
        producer_epoch=check.producer_epoch,
        verify_only=not check.add,
        topics=tuple(
            request("AddPartitionsToTxnTopic", name=topic, partitions=tuple(indexes))
            for topic, indexes in by_topic(check.partitions).items()
        ),
    )
    return await session.send(request("AddPartitionsToTxnRequest", transactions=(transaction,)))
