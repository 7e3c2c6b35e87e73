"""Polling a condition until a deadline: how the tests wait for something to happen (never a
sleep standing in for synchronization, DEVELOPERS.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

# Between two polls: a poll interval, so as not to spin on the condition, not a wait for
# anything in particular.
POLL_INTERVAL_S = 0.05

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str = "condition",
    state: Callable[[], object] | None = None,
) -> T:
    """Poll `predicate` until it returns something truthy, and return that; fail after
    `timeout` seconds, saying what `state` returns then."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f"; last seen: {state()}" if state else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{seen}")
        time.sleep(POLL_INTERVAL_S)
