"""Two-phase commit (KIP-939) at the protocol level, against an in-process broker: InitProducerId
v6's `enable2Pc` and `keepPreparedTxn`, a new process ending a prepared transaction with EndTxn,
no timeout for a 2PC transaction while an ordinary one in the same broker is aborted, the broker
property `transaction.two.phase.commit.enable` and the TWO_PHASE_COMMIT ACL operation."""

from __future__ import annotations

import pytest
from in_process_broker import running_broker
from kafka_requests import req
from kio.schema.errors import ErrorCode
from raw_client import wait_until
from test_acls_api import acl, delete_acls, describe_acls, secured_broker
from test_transactions_api import (
    TOPIC,
    add_partitions,
    begin,
    end_txn,
    init_producer_id,
    produce,
    txn_batch,
)

from broker.security.acl import CLUSTER_NAME
from broker.security.operations import AclOperation, AclPermissionType, PatternType, ResourceType

ENABLED = {"transaction.two.phase.commit.enable": "true"}
TXN_53 = ErrorCode.transactional_id_authorization_failed


def init_2pc(txn, keep=False, timeout_ms=60_000):
    return init_producer_id(txn, timeout_ms, v=6, enable2_pc=True, keep_prepared_txn=keep)


async def prepare(client, txn, records=2):
    """What the first process leaves behind: a 2PC transaction with data on TOPIC-0."""
    init = await client.send(init_2pc(txn))
    assert init.error_code == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch
    added = await client.send(add_partitions(txn, pid, epoch, [(TOPIC, 0)]))
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert (await produce(client, txn_batch(pid, epoch, 0, records), txn=txn)).error_code == 0
    return pid, epoch


async def transaction_state(client, txn) -> str:
    described = await client.send(
        req(65, 0, "DescribeTransactionsRequest", transactional_ids=(txn,))
    )
    return described.transaction_states[0].transaction_state


@pytest.fixture
async def enabled(tmp_path):
    async with running_broker(tmp_path / "logs", **ENABLED) as running:
        await running[0].create_topic(TOPIC, 1, {})
        yield running


@pytest.mark.parametrize("commit", [True, False])
async def test_a_new_process_keeps_the_prepared_transaction_and_ends_it(enabled, commit):
    broker, client = enabled
    pid, epoch = await prepare(client, "t")
    log = broker.replica_manager.log(TOPIC, 0)
    assert log.last_stable_offset == 0
    kept = await client.send(init_2pc("t", keep=True))
    assert kept.error_code == ErrorCode.none
    assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (pid, epoch)
    assert (kept.producer_id, kept.producer_epoch) == (pid, epoch + 1)
    assert await transaction_state(client, "t") == "Ongoing"
    assert log.last_stable_offset == 0  # kept, not aborted
    stale = await client.send(end_txn("t", pid, epoch, commit))
    assert stale.error_code == ErrorCode.producer_fenced
    ended = await client.send(end_txn("t", kept.producer_id, kept.producer_epoch, commit))
    assert ended.error_code == ErrorCode.none
    assert log.last_stable_offset == log.high_watermark == 3  # two records and the marker
    assert await transaction_state(client, "t") == ("CompleteCommit" if commit else "CompleteAbort")
    # The marker fenced the process that prepared it; the new one goes on with its own epoch.
    assert (await produce(client, txn_batch(pid, epoch, 2), txn="t")).error_code == (
        ErrorCode.invalid_producer_epoch
    )
    new = (kept.producer_id, kept.producer_epoch)
    await client.send(add_partitions("t", *new, [(TOPIC, 0)]))
    assert (await produce(client, txn_batch(*new, 0), txn="t")).error_code == ErrorCode.none


async def test_keep_prepared_txn_without_a_transaction_answers_no_ongoing_one(enabled):
    _, client = enabled
    first = await client.send(init_2pc("t", keep=True))
    assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
    assert (first.ongoing_txn_producer_id, first.ongoing_txn_producer_epoch) == (-1, -1)
    without_id = await client.send(init_producer_id(None, v=6, enable2_pc=True))
    assert without_id.error_code == ErrorCode.invalid_request


async def test_a_2pc_transaction_outlives_its_timeout_while_an_ordinary_one_is_aborted(tmp_path):
    overrides = {**ENABLED, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "20"}
    async with running_broker(tmp_path / "logs", **overrides) as (broker, client):
        await broker.create_topic(TOPIC, 1, {})
        init = await client.send(init_2pc("2pc", timeout_ms=100))
        pid = init.producer_id
        await client.send(add_partitions("2pc", pid, init.producer_epoch, [(TOPIC, 0)]))
        # Started after the 2PC one with the same timeout: once it is aborted, the 2PC
        # transaction is past that timeout too.
        await begin(client, "plain", timeout_ms=100)
        transactions = broker.transaction_coordinator.transactions
        await wait_until(
            lambda: transactions["plain"].state.display_name == "CompleteAbort",
            what="the ordinary transaction to be aborted",
        )
        assert await transaction_state(client, "2pc") == "Ongoing"
        assert transactions["2pc"].producer_epoch == init.producer_epoch


async def test_enable_2pc_needs_the_broker_property(broker_client):
    refused = await broker_client.send(init_2pc("t"))
    assert (refused.error_code, refused.producer_id) == (TXN_53, -1)


async def test_enable_2pc_needs_the_two_phase_commit_acl(tmp_path):
    async with secured_broker(tmp_path / "logs", **ENABLED) as (broker, client):
        await broker.create_acls(
            [
                acl(ResourceType.TRANSACTIONAL_ID, "t", AclOperation.WRITE),
                acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALTER),
                acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.DESCRIBE),
            ]
        )
        assert (await client.send(init_2pc("t"))).error_code == TXN_53
        # Ordinary transactions need no more than before.
        assert (await client.send(init_producer_id("t", v=6))).error_code == ErrorCode.none
        created = await client.send(create_two_phase_commit_acl("t"))
        assert created.results[0].error_code == ErrorCode.none
        described = await client.send(describe_acls(operation=AclOperation.TWO_PHASE_COMMIT))
        (resource,) = described.resources
        assert (resource.resource_type, resource.resource_name) == (
            ResourceType.TRANSACTIONAL_ID,
            "t",
        )
        assert [a.operation for a in resource.acls] == [AclOperation.TWO_PHASE_COMMIT]
        assert (await client.send(init_2pc("t"))).error_code == ErrorCode.none
        # TWO_PHASE_COMMIT implies nothing: without WRITE the id is still refused.
        await client.send(create_two_phase_commit_acl("other"))
        assert (await client.send(init_2pc("other"))).error_code == TXN_53
        deleted = await client.send(delete_acls({"operation": AclOperation.TWO_PHASE_COMMIT}))
        assert len(deleted.filter_results[0].matching_acls) == 2
        assert (await client.send(init_2pc("t"))).error_code == TXN_53


def create_two_phase_commit_acl(txn):
    creation = req(
        30,
        3,
        "AclCreation",
        resource_type=ResourceType.TRANSACTIONAL_ID,
        resource_name=txn,
        resource_pattern_type=PatternType.LITERAL,
        principal="User:ANONYMOUS",
        host="*",
        operation=AclOperation.TWO_PHASE_COMMIT,
        permission_type=AclPermissionType.ALLOW,
    )
    return req(30, 3, "CreateAclsRequest", creations=(creation,))
