"""A partition about to be led waits for its follower truncation to end (Truncations in
broker.server.replica_fetcher), whatever else runs or is cancelled meanwhile."""

from __future__ import annotations

import asyncio
import threading

from broker.server.replica_fetcher import Truncations


async def test_becoming_leader_waits_for_the_topics_truncations(broker):
    truncations = Truncations(broker)
    released = threading.Event()
    cut: list[str] = []

    def truncate(name: str) -> None:
        released.wait(30)
        cut.append(name)

    # The fetcher that started it stops waiting (cancelled): the truncation goes on, and
    # becoming leader still waits for it.
    fetcher = truncations.run(("t", 0), truncate, "t-0")
    fetcher.cancel()
    await truncations.finished("other")  # another topic's partitions need not wait
    becoming_leader = asyncio.ensure_future(truncations.finished("t"))
    done, _ = await asyncio.wait([becoming_leader], timeout=0.05)
    assert not done and cut == []
    released.set()
    await asyncio.wait_for(becoming_leader, 30)
    assert cut == ["t-0"]
    await truncations.finished("t")  # nothing left running
