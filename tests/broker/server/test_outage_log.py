"""OutageLog: a store outage is one warning, a summary per interval, and a line when it ends."""

from __future__ import annotations

import logging

from broker.server.outage_log import OutageLog

LOGGER = logging.getLogger("test.outage_log")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def messages(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER.name]


def test_an_outage_warns_once_then_once_an_interval_then_says_it_ended(caplog):
    caplog.set_level(logging.INFO, LOGGER.name)
    clock = Clock()
    outages = OutageLog(LOGGER, interval_s=10.0, clock=clock)
    error = ConnectionError("refused")
    for _ in range(40):  # every 1/8 s for 5 s
        outages.failed("controller", error)
        clock.now += 0.125
    assert messages(caplog) == [(logging.WARNING, "controller: refused")]
    for _ in range(48):  # 6 s more: the interval ends at the 81st failure
        outages.failed("controller", error)
        clock.now += 0.125
    assert messages(caplog)[1:] == [
        (logging.WARNING, "controller: refused (80 more failures in 10 s)")
    ]
    outages.succeeded("controller")
    assert messages(caplog)[2:] == [
        (logging.INFO, "controller: the metadata store answers again, after 11.0 s")
    ]


def test_each_kind_of_call_has_its_own_outage_and_success_alone_says_nothing(caplog):
    caplog.set_level(logging.INFO, LOGGER.name)
    clock = Clock()
    outages = OutageLog(LOGGER, clock=clock)
    outages.succeeded("renewing the broker lease")
    outages.failed("t-0: writing an ISR change", ConnectionError("reset"))
    outages.failed("t-1: writing an ISR change", ConnectionError("reset"))
    outages.succeeded("t-0: writing an ISR change")
    assert messages(caplog) == [
        (logging.WARNING, "t-0: writing an ISR change: reset"),
        (logging.WARNING, "t-1: writing an ISR change: reset"),
        (logging.INFO, "t-0: writing an ISR change: the metadata store answers again, after 0.0 s"),
    ]
    # A new outage of the same call warns at once again.
    outages.failed("t-0: writing an ISR change", ConnectionError("reset"))
    assert messages(caplog)[-1] == (logging.WARNING, "t-0: writing an ISR change: reset")
