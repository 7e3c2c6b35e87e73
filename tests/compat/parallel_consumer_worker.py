"""A consumer process in seed 002's parallel-rebalance mode, for test_parallel_rebalance_crash.py:
a member of the group that logs every record it processes, then commits. A dynamic member: a
restarted process gets the partitions once the killed one's session has expired (a static one
would be refused with UNRELEASED_INSTANCE_ID until then under the consumer protocol).

Each batch handed out is appended to the processed log ("<partition> <offset>" lines, one
os.write per batch, so what the log holds survives a SIGKILL of this process) before anything
is committed: at-least-once, as an application would do. A commit (of what was handed out,
both logs) follows every COMMIT_EVERY records.

`python parallel_consumer_worker.py <bootstrap> <topic> <group> <protocol> <processed-log>`
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from broker.client import Consumer
from broker.client.errors import CommitFailedError

COMMIT_EVERY = 200
# The application's processing cost: at most this many records a second, so that a backlog
# takes a while to work through and the test can kill the process while gaps are open.
PROCESS_RATE = 600


async def consume(bootstrap: str, topic: str, group: str, protocol: str, path: str) -> None:
    # The consumer protocol takes these from the broker (group.consumer.*).
    options = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 200}
    async with Consumer(
        bootstrap,
        group_id=group,
        group_protocol=protocol,
        enable_parallel_rebalance=True,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **(options if protocol == "classic" else {}),
    ) as consumer:
        consumer.subscribe([topic])
        out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        uncommitted = 0
        paced_until = time.monotonic()
        parent = os.getppid()
        while os.getppid() == parent:  # ends with the test, whatever way it ends
            batches = await consumer.getmany(timeout_ms=100, max_records=100)
            lines = [f"{r.partition} {r.offset}\n" for rs in batches.values() for r in rs]
            paced_until = max(paced_until, time.monotonic()) + len(lines) / PROCESS_RATE
            await asyncio.sleep(max(0.0, paced_until - time.monotonic()))
            if lines:
                os.write(out, "".join(lines).encode())
            uncommitted += len(lines)
            if uncommitted >= COMMIT_EVERY or (uncommitted and not lines):
                try:
                    await consumer.commit()
                except CommitFailedError as e:  # a rebalance moved partitions: theirs now
                    print(f"worker: commit refused: {e}", flush=True)
                uncommitted = 0


if __name__ == "__main__":
    asyncio.run(consume(*sys.argv[1:6]))
