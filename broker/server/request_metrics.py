"""Per-API request counts, bytes and latency (Kafka's RequestsPerSec, RequestBytes and
TotalTimeMs by request), kept as plain numbers and turned into Prometheus families only when
scraped.

Every request updates them, so they cost what a few additions cost (see histogram.py).
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from broker.server.histogram import Histogram

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

    __slots__ = ("name", "requests", "request_bytes", "response_bytes", "latency")

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests = 0
        self.request_bytes = 0
        self.response_bytes = 0
        self.latency = Histogram(LATENCY_BUCKETS)

    def observe(self, seconds: float) -> None:
        """A request answered `seconds` after it arrived."""
        self.requests += 1
        self.latency.observe(seconds)


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
        for stats in list(self._stats.values()):
            labels = [stats.name]
            requests.add_metric(labels, stats.requests)
            request_bytes.add_metric(labels, stats.request_bytes)
            response_bytes.add_metric(labels, stats.response_bytes)
            latency.add_metric(labels, stats.latency.buckets(), stats.latency.total)
        yield from (requests, request_bytes, response_bytes, latency)
