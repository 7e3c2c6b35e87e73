"""The broker's Prometheus endpoint (`metrics.listener`) read into the dashboards' snapshot.

A snapshot is one JSON-able dict: gauges as the broker reports them, and rates (bytes and
requests per second, evictions per second, latency) computed against the previous snapshot from
the counters it carries under "counters". Scalar values sit at the top level under the names in
SCALAR_FIELDS, so the history API can chart any of them; per-partition offsets, ongoing
transactions and per-API request figures are nested lists and maps.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterable
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from broker.client import AdminClient

SCRAPE_TIMEOUT_SECONDS = 2.0
# Describing a transaction costs a request: at most MAX_DESCRIBED per sample, and the
# dashboard shows the oldest MAX_TRANSACTIONS of them.
MAX_DESCRIBED = 200
MAX_TRANSACTIONS = 50
# Bounds what one snapshot stores (it is kept every second for the retention period).
MAX_PARTITIONS = 2000

# Quota entities a snapshot shows, the most throttled first (all are counted for the rates).
MAX_QUOTA_ENTITIES = 100
MAX_COUNTED = 1000

# Counters whose rates the dashboard shows: in is what producers send, out what fetchers get.
BYTES_IN_API, BYTES_OUT_API = "Produce", "Fetch"

SCALAR_FIELDS = (
    "producer_ids_live",
    "transactional_ids_active",
    "transactions_ongoing",
    "transactions_oldest_age_seconds",
    "fetch_sessions_incremental",
    "fetch_session_partitions_cached",
    "fetch_session_evictions_total",
    "fetch_session_evictions_per_second",
    "bytes_in_per_second",
    "bytes_out_per_second",
    "requests_per_second",
    "partitions_behind",
    "quota_throttle_time_ms_per_second",
    "connections_throttled_per_second",
)


def scrape(url: str, timeout: float = SCRAPE_TIMEOUT_SECONDS) -> list[Metric]:
    """The metric families the broker serves at `url`; OSError when it does not answer."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (our own URL)
        text = response.read().decode("utf-8")
    return list(text_string_to_metric_families(text))


def _samples(families: Iterable[Metric]) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], across families (counters sample as <name>_total)."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in families:
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _scalar(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    values = samples.get(name)
    return values[0][1] if values else 0.0


def _by_api(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> dict[str, float]:
    return {labels["api"]: value for labels, value in samples.get(name, []) if "api" in labels}


def _rate(current: float, previous: float | None, elapsed: float | None) -> float | None:
    """Per-second increase of a counter; a counter below its previous value was reset (the
    broker restarted), so all of it counts, as Prometheus' rate() treats resets."""
    if previous is None or not elapsed or elapsed <= 0:
        return None
    increase = current - previous if current >= previous else current
    return increase / elapsed


def _partitions(samples: dict[str, list[tuple[dict[str, str], float]]]) -> list[dict[str, Any]]:
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for metric, field in (
        ("fjord_partition_high_watermark", "high_watermark"),
        ("fjord_partition_last_stable_offset", "last_stable_offset"),
        ("fjord_partition_log_start_offset", "log_start_offset"),
    ):
        for labels, value in samples.get(metric, []):
            topic, partition = labels.get("topic"), labels.get("partition", "")
            # Internal topics (__consumer_offsets, __transaction_state) are the coordinators'
            # business and would outnumber the users' partitions.
            if topic is None or topic.startswith("__") or not partition.isdigit():
                continue
            row = rows.setdefault(
                (topic, int(partition)), {"topic": topic, "partition": int(partition)}
            )
            row[field] = int(value)
    ordered = [rows[key] for key in sorted(rows)][:MAX_PARTITIONS]
    for row in ordered:
        row.setdefault("high_watermark", 0)
        row.setdefault("last_stable_offset", row["high_watermark"])
        row.setdefault("log_start_offset", 0)
    return ordered


def _quotas(
    samples: dict[str, list[tuple[dict[str, str], float]]],
    previous: list[list] | None,
    elapsed: float | None,
) -> tuple[list[dict[str, Any]], list[list]]:
    """Per quota type and entity (the broker's metric tags, user and client_id, "" where the
    quota is shared): throttle time per second, throttled responses per second and their mean
    throttle over the interval, and the measured rate against the limit. Also the counters
    the next snapshot's rates need, as [quota_type, user, client_id, throttle_ms, throttled]
    rows: entity names may hold any character, so they are not joined into dict keys."""

    def key(labels: dict[str, str]) -> tuple[str, str, str]:
        return labels.get("quota_type", ""), labels.get("user", ""), labels.get("client_id", "")

    def by_entity(name: str) -> dict[tuple[str, str, str], float]:
        return {key(labels): value for labels, value in samples.get(name, [])}

    throttle_ms = by_entity("fjord_quota_throttle_time_ms_total")
    throttled = by_entity("fjord_quota_throttled_total")
    rates, limits = by_entity("fjord_quota_rate"), by_entity("fjord_quota_limit")
    before = {tuple(row[:3]): row[3:] for row in previous or ()}
    rows = []
    for entity in sorted(rates.keys() | throttle_ms.keys()):
        quota_type, user, client_id = entity
        # An entity first seen now had zero counters at the previous snapshot.
        prev_ms, prev_count = (
            before.get(entity, (0.0, 0.0)) if previous is not None else (None,) * 2
        )
        ms, count = throttle_ms.get(entity, 0.0), throttled.get(entity, 0.0)
        ms_rate, count_rate = _rate(ms, prev_ms, elapsed), _rate(count, prev_count, elapsed)
        limit = limits.get(entity)
        rate = rates.get(entity, 0.0)
        rows.append(
            {
                "quota_type": quota_type,
                "user": user,
                "client_id": client_id,
                "throttle_time_ms_per_second": ms_rate,
                "throttled_per_second": count_rate,
                # The mean throttle of the responses throttled since the previous snapshot.
                "mean_throttle_ms": ms_rate / count_rate if count_rate else None,
                "throttle_time_ms_total": int(ms),
                "throttled_total": int(count),
                "rate": rate,
                "limit": limit,
                "usage": rate / limit if limit else None,
            }
        )
    rows.sort(key=lambda r: (-(r["throttle_time_ms_per_second"] or 0.0), -(r["usage"] or 0.0)))
    # Entities never throttled need no counters (absent reads as zero), and client ids are the
    # clients' to choose: a snapshot keeps at most MAX_COUNTED, the most throttled.
    counted = sorted(
        (e for e in throttle_ms.keys() | throttled.keys() if throttled.get(e)),
        key=lambda e: -throttle_ms.get(e, 0.0),
    )[:MAX_COUNTED]
    counters = [
        [*entity, throttle_ms.get(entity, 0.0), throttled.get(entity, 0.0)]
        for entity in sorted(counted)
    ]
    return rows, counters


def _connections_throttled(
    samples: dict[str, list[tuple[dict[str, str], float]]],
    previous: dict[str, float] | None,
    elapsed: float | None,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Connections closed per ip for its connection_creation_rate: totals and per second;
    and the counters by ip."""
    by_ip = [
        (labels["ip"], value)
        for labels, value in samples.get("fjord_connection_creation_throttled_total", [])
        if "ip" in labels
    ]
    counters = dict(sorted(by_ip, key=lambda item: -item[1])[:MAX_COUNTED])
    rows = [
        {
            "ip": ip,
            "throttled_total": int(count),
            "throttled_per_second": _rate(
                count, None if previous is None else previous.get(ip, 0.0), elapsed
            ),
        }
        for ip, count in sorted(counters.items(), key=lambda item: (-item[1], item[0]))
    ][:MAX_QUOTA_ENTITIES]
    return rows, counters


def _total(rates: list[float | None], previous: Any) -> float | None:
    """The sum of per-entity rates; None when any is unknown or nothing to compare with."""
    return sum(rates) if previous and None not in rates else None


def summarize(
    families: Iterable[Metric],
    previous: dict[str, Any] | None = None,
    elapsed: float | None = None,
) -> dict[str, Any]:
    """The dashboard snapshot of one scrape; rates against `previous` (a snapshot taken
    `elapsed` seconds earlier), None where there is nothing to compare with."""
    samples = _samples(families)
    prev = (previous or {}).get("counters") or {}

    requests = _by_api(samples, "fjord_requests_total")
    request_bytes = _by_api(samples, "fjord_request_bytes_total")
    response_bytes = _by_api(samples, "fjord_response_bytes_total")
    latency_sum = _by_api(samples, "fjord_request_latency_seconds_sum")
    latency_count = _by_api(samples, "fjord_request_latency_seconds_count")
    evictions = _scalar(samples, "fjord_fetch_session_evictions_total")

    def prev_api(kind: str, api: str) -> float | None:
        # An API first seen in this scrape had a zero counter at the previous one.
        return (prev.get(kind) or {}).get(api, 0.0) if prev else None

    per_api = {}
    for api in sorted(requests):
        rate = _rate(requests[api], prev_api("requests", api), elapsed)
        calls = _rate(latency_count.get(api, 0.0), prev_api("latency_count", api), elapsed)
        spent = _rate(latency_sum.get(api, 0.0), prev_api("latency_sum", api), elapsed)
        # Mean latency of the requests answered since the previous sample, not since start-up.
        latency_ms = spent / calls * 1000 if calls and spent is not None else None
        per_api[api] = {
            "requests_total": int(requests[api]),
            "requests_per_second": rate,
            "latency_ms": latency_ms,
            "bytes_in_per_second": _rate(
                request_bytes.get(api, 0.0), prev_api("request_bytes", api), elapsed
            ),
            "bytes_out_per_second": _rate(
                response_bytes.get(api, 0.0), prev_api("response_bytes", api), elapsed
            ),
        }

    rates = [r["requests_per_second"] for r in per_api.values()]
    partitions = _partitions(samples)
    quotas, quota_counters = _quotas(samples, prev.get("quota_throttle"), elapsed)
    connections, connection_counters = _connections_throttled(
        samples, prev.get("connections_throttled"), elapsed
    )
    return {
        "broker": "up",
        "partitions": partitions,
        "partitions_behind": sum(
            1 for p in partitions if p["last_stable_offset"] < p["high_watermark"]
        ),
        "producer_ids_live": int(_scalar(samples, "fjord_producer_ids_live")),
        "transactional_ids_active": int(_scalar(samples, "fjord_transactional_ids_active")),
        "transactions_ongoing": int(_scalar(samples, "fjord_transactions_ongoing")),
        "transactions_oldest_age_seconds": _scalar(
            samples, "fjord_transactions_oldest_ongoing_age_seconds"
        ),
        "fetch_sessions_incremental": int(_scalar(samples, "fjord_fetch_sessions_incremental")),
        "fetch_session_partitions_cached": int(
            _scalar(samples, "fjord_fetch_session_partitions_cached")
        ),
        "fetch_session_evictions_total": int(evictions),
        "fetch_session_evictions_per_second": _rate(
            evictions, prev.get("fetch_session_evictions"), elapsed
        ),
        "bytes_in_per_second": _rate(
            request_bytes.get(BYTES_IN_API, 0.0), prev_api("request_bytes", BYTES_IN_API), elapsed
        ),
        "bytes_out_per_second": _rate(
            response_bytes.get(BYTES_OUT_API, 0.0),
            prev_api("response_bytes", BYTES_OUT_API),
            elapsed,
        ),
        "requests_per_second": sum(rates) if prev and None not in rates else None,
        "requests": per_api,
        "quotas": quotas[:MAX_QUOTA_ENTITIES],
        "quota_throttle_time_ms_per_second": _total(
            [q["throttle_time_ms_per_second"] for q in quotas], prev
        ),
        "connections_throttled": connections,
        "connections_throttled_per_second": _total(
            [c["throttled_per_second"] for c in connections], prev
        ),
        "counters": {
            "requests": requests,
            "request_bytes": request_bytes,
            "response_bytes": response_bytes,
            "latency_sum": latency_sum,
            "latency_count": latency_count,
            "fetch_session_evictions": evictions,
            "quota_throttle": quota_counters,
            "connections_throttled": connection_counters,
        },
    }


def unreachable(error: str) -> dict[str, Any]:
    """The snapshot of a scrape that failed: the dashboard says so instead of going blank."""
    return {"broker": "unreachable", "error": error, "partitions": [], "transactions": []}


async def ongoing_transactions(admin: AdminClient) -> list[dict[str, Any]]:
    """Open transactions, oldest first, with their age; a transaction open longer than its
    own timeout is hanging: its coordinator should have aborted it by now (what
    `kafka-transactions find-hanging` looks for)."""
    listings = await admin.list_transactions(states=["Ongoing"])
    described = await asyncio.gather(
        *(admin.describe_transaction(t.transactional_id) for t in listings[:MAX_DESCRIBED]),
        return_exceptions=True,
    )
    now_ms = time.time() * 1000
    found = []
    for d in described:
        # An id whose transaction ended between the listing and the describe is no longer open.
        if isinstance(d, BaseException) or d.transaction_start_time_ms < 0:
            continue
        age_ms = max(0.0, now_ms - d.transaction_start_time_ms)
        found.append(
            {
                "transactional_id": d.transactional_id,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "state": d.state,
                "age_seconds": round(age_ms / 1000, 3),
                "timeout_ms": d.transaction_timeout_ms,
                "hanging": age_ms > d.transaction_timeout_ms,
                "partitions": [{"topic": t, "partition": p} for t, p in d.partitions],
            }
        )
    found.sort(key=lambda t: -t["age_seconds"])
    return found[:MAX_TRANSACTIONS]
