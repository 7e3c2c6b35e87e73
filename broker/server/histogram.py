"""A Prometheus histogram as plain numbers, for figures updated on every request or every tick
of the event loop: no lock and no label look-up per observation (prometheus_client's take
both; the event loop is the only writer here). Collectors turn it into a family when scraped."""

from __future__ import annotations

from bisect import bisect_left


class Histogram:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        """A bucket holds the values up to its bound, as Prometheus' `le`."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, as HistogramMetricFamily.add_metric takes them."""
        labels = [repr(float(bound)) for bound in self.bounds] + ["+Inf"]
        cumulative, out = 0, []
        for label, count in zip(labels, self.counts, strict=True):
            cumulative += count
            out.append((label, cumulative))
        return out
