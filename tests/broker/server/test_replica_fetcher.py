"""The followers' fetchers (broker.server.replica_fetcher): which of a leader's
num.replica.fetchers fetches a partition, and a partition about to be led waiting for its
follower truncation to end (Truncations), whatever else runs or is cancelled meanwhile."""

from __future__ import annotations

import asyncio
import threading

from broker.server.replica_fetcher import Truncations, fetcher_id


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


def test_a_leaders_fetchers_share_its_partitions_and_keep_them():
    assert {fetcher_id(("t", p), 1) for p in range(50)} == {0}
    spread = [fetcher_id(("t", p), 3) for p in range(30)]
    # Neighbouring partitions of a topic go to different fetchers, each an equal share.
    assert all(a != b for a, b in zip(spread, spread[1:], strict=False))
    assert sorted(spread.count(f) for f in range(3)) == [10, 10, 10]
    assert spread == [fetcher_id(("t", p), 3) for p in range(30)]  # the same every time
