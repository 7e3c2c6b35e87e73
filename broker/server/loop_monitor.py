"""What holds the event loop up: its lag and the garbage collector's pauses.

Every request of every connection runs on one event loop, so anything that holds it (a
collection of the oldest generation over many live objects, synchronous work, a blocking call)
delays every client at once: the tail latency of a busy broker. The lag is measured the way
Kafka's network threads' idle ratio is watched: a timer asks to run every INTERVAL_S, and how
late it runs is the time the loop was held. The collector's pauses are timed through
gc.callbacks. Both are on the Prometheus endpoint; a lag over WARN_LAG_S is logged.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import time

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from broker.server.histogram import Histogram

log = logging.getLogger("broker.loop")

INTERVAL_S = 0.1
WARN_LAG_S = 1.0
RECENT_SAMPLES = 100  # the last ten seconds of ticks
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class LoopMonitor:
    """A Prometheus collector of the loop's lag and the collector's pauses; start() once the
    loop runs, stop() before it ends."""

    def __init__(self) -> None:
        self.lag = Histogram(BUCKETS)
        self.recent: collections.deque[float] = collections.deque(maxlen=RECENT_SAMPLES)
        self.gc_pauses = {generation: Histogram(BUCKETS) for generation in range(3)}
        self._gc_started = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = 0.0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._due = self._loop.time() + INTERVAL_S
        self._timer = self._loop.call_at(self._due, self._tick)
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _tick(self) -> None:
        now = self._loop.time()
        lag = max(0.0, now - self._due)
        self.lag.observe(lag)
        self.recent.append(lag)
        if lag >= WARN_LAG_S:
            log.warning("the event loop was held for %.2f s", lag)
        self._due = now + INTERVAL_S
        self._timer = self._loop.call_at(self._due, self._tick)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_pauses[info["generation"]].observe(time.perf_counter() - self._gc_started)

    def collect(self):
        lag = HistogramMetricFamily(
            "fjord_event_loop_lag_seconds",
            f"How late a timer due every {INTERVAL_S} s ran: the time the event loop was held.",
        )
        lag.add_metric([], self.lag.buckets(), self.lag.total)
        yield lag
        yield GaugeMetricFamily(
            "fjord_event_loop_lag_max_seconds",
            "The longest event loop lag of the last ten seconds.",
            value=max(self.recent, default=0.0),
        )
        pauses = HistogramMetricFamily(
            "fjord_gc_pause_seconds",
            "Garbage collections, by the oldest generation collected, and how long each held "
            "the event loop.",
            labels=["generation"],
        )
        for generation, histogram in self.gc_pauses.items():
            pauses.add_metric([str(generation)], histogram.buckets(), histogram.total)
        yield pauses
        yield GaugeMetricFamily(
            "fjord_gc_frozen_objects",
            "Objects moved out of the collector's reach at start-up (gc.freeze).",
            value=gc.get_freeze_count(),
        )
