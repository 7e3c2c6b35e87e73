"""Per-API request counts, bytes and latency (Kafka's RequestsPerSec, RequestBytes and
TotalTimeMs by request), kept as plain numbers and turned into Prometheus families only when
scraped.

Every request updates them, so they cost what a few additions cost: no label look-up, no lock
(prometheus_client's metrics take a lock per update; the event loop is the only writer here).
"""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class ApiStats:
    """One API's figures since the broker started."""

    __slots__ = ("name", "requests", "request_bytes", "response_bytes", "latency", "latency_sum")

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests = 0
        self.request_bytes = 0
        self.response_bytes = 0
        # Per bucket, not cumulative; the last one is +Inf.
        self.latency = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0

    def observe(self, seconds: float) -> None:
        """A request answered `seconds` after it arrived (a bucket holds values <= its bound,
        as Prometheus' `le`)."""
        self.requests += 1
        self.latency[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds


class RequestMetrics:
    """A Prometheus collector over the ApiStats of each API that has had a request."""

    def __init__(self) -> None:
        self._stats: dict[int, ApiStats] = {}

    def api(self, api_key: int, name: str) -> ApiStats:
        """The stats of API `api_key`, called `name` (kept from its first request)."""
        stats = self._stats.get(api_key)
        if stats is None:
            stats = self._stats[api_key] = ApiStats(name)
        return stats

    def collect(self):
        requests = CounterMetricFamily(
            "fjord_requests", "Requests handled, by API.", labels=["api"]
        )
        request_bytes = CounterMetricFamily(
            "fjord_request_bytes", "Bytes received in requests, by API.", labels=["api"]
        )
        response_bytes = CounterMetricFamily(
            "fjord_response_bytes", "Bytes sent in responses, by API.", labels=["api"]
        )
        latency = HistogramMetricFamily(
            "fjord_request_latency_seconds",
            "Time from a request's arrival to its response, by API.",
            labels=["api"],
        )
        bounds = [repr(float(bound)) for bound in LATENCY_BUCKETS] + ["+Inf"]
        for stats in list(self._stats.values()):
            labels = [stats.name]
            requests.add_metric(labels, stats.requests)
            request_bytes.add_metric(labels, stats.request_bytes)
            response_bytes.add_metric(labels, stats.response_bytes)
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, stats.latency, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric(labels, buckets, stats.latency_sum)
        yield from (requests, request_bytes, response_bytes, latency)
