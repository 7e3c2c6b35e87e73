"""The exactly-once copier of test_eos_copy.py written with Fjord's own client: a read_committed
`broker.client.Consumer` in a group without auto-commit (a consumer-protocol member, whose
session timeout the test sets on the broker) and a transactional
`broker.client.Producer` that sends the consumer's positions with send_offsets_to_transaction
and commits every TXN_RECORDS records.

Errors are handled as the client's exceptions say: a fenced producer or an invalid transaction
state is fatal (the process exits and the test starts a new copier); an abortable error aborts
the transaction and rewinds the consumer to the committed offsets; a lost connection or a
timeout (the broker is restarting) retries the call.

`python eos_fjord_copier.py <bootstrap> <input> <output> <group> <transactional.id>`
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from broker.client import Consumer, Producer
from broker.client.connection import ConnectionClosed
from broker.client.errors import (
    InvalidTxnStateError,
    KafkaAdminError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
)

# The same pacing, batch size and transaction timeout as the confluent-kafka copier.
COPY_RATE = 5000
TXN_RECORDS = 2000
COPIER_TXN_TIMEOUT_MS = 30_000
FATAL_EXIT = 3
RETRIES = 600


def log(*what) -> None:
    print(f"fjord-copier[{os.getpid()}]", *what, flush=True)


class Fatal(Exception):
    pass


class Abortable(Exception):
    pass


async def call(what: str, op):
    """A client call, retried while the broker is away; typed errors sorted as fatal or
    abortable."""
    for attempt in range(RETRIES):
        try:
            return await op()
        except (ProducerFencedError, InvalidTxnStateError) as e:
            raise Fatal(f"{what}: {e}") from e
        except TransactionAbortableError as e:
            raise Abortable(f"{what}: {e}") from e
        except (KafkaTimeoutError, ConnectionClosed, OSError) as e:
            log(f"{what}: {e!r}, retrying")
        except KafkaAdminError as e:
            if not e.retriable:
                raise Fatal(f"{what}: {e}") from e
            log(f"{what}: retriable {e}, retrying")
        if attempt == RETRIES - 1:
            raise Fatal(f"{what}: still failing after {RETRIES} attempts")
        await asyncio.sleep(0.1)  # this application's retry backoff


async def copy(bootstrap: str, source: str, sink: str, group: str, txn_id: str) -> None:
    state = {"open": False, "pending": 0, "generation": 0}
    # The consumer protocol takes the session timeout and heartbeat interval from the broker
    # (group.consumer.*): a client-side session_timeout_ms would be ignored.
    consumer = Consumer(
        bootstrap,
        group_id=group,
        group_protocol="consumer",
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = Producer(
        bootstrap,
        transactional_id=txn_id,
        transaction_timeout_ms=COPIER_TXN_TIMEOUT_MS,
        linger_ms=10,
    )

    async def abort() -> None:
        if state["open"]:
            await call("abort_transaction", producer.abort_transaction)
        state["open"], state["pending"] = False, 0

    async def rewind() -> None:
        offsets = {}
        for tp in consumer.assignment():
            committed = await call("committed", lambda tp=tp: consumer.committed(tp))
            offsets[tp] = committed.offset if committed is not None else 0
            consumer.seek(tp, offsets[tp])
        log("rewound to", {tp.partition: o for tp, o in offsets.items()})

    async def commit() -> None:
        positions = {}
        for tp in consumer.assignment():
            positions[tp] = await call("position", lambda tp=tp: consumer.position(tp))
        metadata = consumer.group_metadata()
        await call(
            "send_offsets_to_transaction",
            lambda: producer.send_offsets_to_transaction(positions, metadata),
        )
        await call("commit_transaction", producer.commit_transaction)
        state["open"], state["pending"] = False, 0
        log("committed", {tp.partition: o for tp, o in positions.items()})

    class Listener:
        async def on_partitions_revoked(self, partitions) -> None:
            # What this transaction copied from them cannot be committed with their offsets
            # any more: abort it; whoever gets them starts from the committed ones.
            state["generation"] += 1
            log("revoked", sorted(tp.partition for tp in partitions))
            await abort()

        def on_partitions_assigned(self, partitions) -> None:
            log("assigned", sorted(tp.partition for tp in partitions))

    await call("start consumer", consumer.start)
    await call("start producer", producer.start)
    await call("init_transactions", producer.init_transactions)
    consumer.subscribe([source], listener=Listener())
    log("started")
    paced_until = time.monotonic()
    parent = os.getppid()
    while os.getppid() == parent:  # ends with the test process, whatever way it ends
        generation = state["generation"]
        batches = await call("getmany", lambda: consumer.getmany(timeout_ms=200, max_records=500))
        records = [r for rs in batches.values() for r in rs]
        # Time lost (a broker restart) is not made up for by a burst afterwards.
        paced_until = max(paced_until, time.monotonic()) + len(records) / COPY_RATE
        await asyncio.sleep(max(0.0, paced_until - time.monotonic()))
        if state["generation"] != generation:
            await rewind()
            continue
        try:
            for record in records:
                if not state["open"]:
                    producer.begin_transaction()
                    state["open"] = True
                await call(
                    "send",
                    lambda r=record: producer.send(sink, r.value, key=r.key, partition=r.partition),
                )
                state["pending"] += 1
            if state["pending"] >= TXN_RECORDS or (state["pending"] and not records):
                await commit()
        except Abortable as e:
            log(f"aborting: {e}")
            await abort()
            await rewind()


def main(argv: list[str]) -> int:
    try:
        asyncio.run(copy(*argv))
    except Fatal as e:
        log(f"fatal: {e}")
        sys.stdout.flush()
        os._exit(FATAL_EXIT)
    os._exit(0)  # the test is gone: no clean-up that could wait for a broker


if __name__ == "__main__":
    main(sys.argv[1:6])
