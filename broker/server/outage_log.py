"""Warnings for the calls a broker keeps retrying while the metadata store is out of reach.

A broker cut from PostgreSQL retries its lease, its controller claim, its change feed and each
ISR change several times a second; a warning per attempt buries everything else it logs (in
the fault tests, the minutes of log kept for a failure held nothing but these). So each kind of
call warns at its first failure, then at most once an interval with how many failed since, and
says when it succeeds again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

INTERVAL_S = 10.0


@dataclass
class _Outage:
    since: float
    logged_at: float
    unlogged: int = 0


class OutageLog:
    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log, self._interval, self._clock = logger, interval_s, clock
        self._outages: dict[str, _Outage] = {}

    def failed(self, what: str, error: Exception) -> None:
        now = self._clock()
        outage = self._outages.get(what)
        if outage is None:
            self._outages[what] = _Outage(now, now)
            self._log.warning("%s: %s", what, error)
            return
        outage.unlogged += 1
        if now - outage.logged_at >= self._interval:
            self._log.warning(
                "%s: %s (%d more failures in %.0f s)",
                what,
                error,
                outage.unlogged,
                now - outage.logged_at,
            )
            outage.logged_at, outage.unlogged = now, 0

    def ongoing(self, what: str) -> bool:
        """Whether the last call of that kind failed."""
        return what in self._outages

    def succeeded(self, what: str) -> None:
        outage = self._outages.pop(what, None)
        if outage is not None:
            self._log.info(
                "%s: the metadata store answers again, after %.1f s",
                what,
                self._clock() - outage.since,
            )
