"""Two-phase commit (KIP-939) across a broker crash, against a broker process: one process
prepares transactions (InitProducerId v6 with enable2Pc, raw Produce requests), the broker is
killed with SIGKILL and restarted on the same log dir, the prepared transactions are still open
and outlive their timeout while an ordinary transaction is aborted, and a new process takes
them over with keepPreparedTxn, commits one and aborts the other with EndTxn. A confluent-kafka
read_committed consumer then reads exactly the committed records."""

from __future__ import annotations

import asyncio
import time

import pytest
from compat_support import topic_name
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_requests import ms, produce_request, req
from test_compaction_compat import read_all

from broker.client.connection import BrokerConnection
from broker.records.batch import build_batch

pytestmark = pytest.mark.timeout(120)

TIMEOUT_MS = 200  # what every producer here asks for; 2PC transactions are exempt


def init_producer_id(txn: str, two_phase: bool, keep: bool = False):
    return req(
        22,
        6,
        "InitProducerIdRequest",
        transactional_id=txn,
        transaction_timeout=ms(TIMEOUT_MS),
        enable2_pc=two_phase,
        keep_prepared_txn=keep,
    )


async def begin(conn, txn: str, topic: str, values: list[bytes], two_phase: bool):
    """InitProducerId, AddPartitionsToTxn and one transactional Produce of `values`."""
    init = await conn.send(init_producer_id(txn, two_phase))
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch
    add_topic = req(24, 3, "AddPartitionsToTxnTopic", name=topic, partitions=(0,))
    added = await conn.send(
        req(
            24,
            3,
            "AddPartitionsToTxnRequest",
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(add_topic,),
        )
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    now = int(time.time() * 1000)
    batch = build_batch(
        [(None, v, [], now) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
    )
    produced = await conn.send(produce_request(topic, batch, transactional_id=txn))
    assert produced.responses[0].partition_responses[0].error_code == 0
    return pid, epoch


async def states(conn, *txns: str) -> dict[str, str]:
    described = await conn.send(req(65, 0, "DescribeTransactionsRequest", transactional_ids=txns))
    return {s.transactional_id: s.transaction_state for s in described.transaction_states}


async def connect(broker) -> BrokerConnection:
    return await BrokerConnection.open("127.0.0.1", broker.port)


async def test_prepared_transactions_survive_kill_9_and_a_new_process_ends_them(
    make_broker_process,
):
    broker = make_broker_process(
        "transaction.two.phase.commit.enable=true",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=20",
    ).start()
    topic = topic_name("two-phase")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)

    first = await connect(broker)
    prepared = {
        "commit-me": await begin(first, "commit-me", topic, [b"c0", b"c1", b"c2"], True),
        "abort-me": await begin(first, "abort-me", topic, [b"a0", b"a1"], True),
    }
    await first.close()
    broker.kill()
    broker.start()

    conn = await connect(broker)
    try:
        assert await states(conn, *prepared) == {"commit-me": "Ongoing", "abort-me": "Ongoing"}
        # Started after the crash with the same timeout: once it is aborted, the prepared
        # transactions are past their timeout too, and still open.
        await begin(conn, "plain", topic, [b"p0"], False)
        deadline = time.monotonic() + 30
        while (await states(conn, "plain"))["plain"] != "CompleteAbort":
            assert time.monotonic() < deadline, "the ordinary transaction was never aborted"
            await asyncio.sleep(0.01)  # pacing the poll, not synchronization
        assert await states(conn, *prepared) == {"commit-me": "Ongoing", "abort-me": "Ongoing"}

        for txn, commit in (("commit-me", True), ("abort-me", False)):
            kept = await conn.send(init_producer_id(txn, True, keep=True))
            assert kept.error_code == 0
            ongoing = (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch)
            assert ongoing == prepared[txn]
            ended = await conn.send(
                req(
                    26,
                    4,
                    "EndTxnRequest",
                    transactional_id=txn,
                    producer_id=kept.producer_id,
                    producer_epoch=kept.producer_epoch,
                    committed=commit,
                )
            )
            assert ended.error_code == 0
        assert await states(conn, *prepared) == {
            "commit-me": "CompleteCommit",
            "abort-me": "CompleteAbort",
        }
    finally:
        await conn.close()

    committed = read_all(broker.bootstrap, topic, "read_committed")
    assert [value for _, _, value in committed] == [b"c0", b"c1", b"c2"]
    assert broker.stop() == 0, "".join(broker.output[-50:])
