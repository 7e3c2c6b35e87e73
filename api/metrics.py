"""The brokers' Prometheus endpoints (`metrics.listener`) read into the dashboards' snapshot.

A snapshot is one JSON-able dict: gauges as the brokers report them, and rates (bytes and
requests per second, evictions per second, latency) computed against the previous snapshot from
the counters it carries under "counters". Scalar values sit at the top level under the names in
SCALAR_FIELDS, so the history API can chart any of them; per-partition offsets, ongoing
transactions and per-API request figures are nested lists and maps.

Each broker of a cluster is summarized on its own, against its own counters (kept by endpoint),
and the summaries are then added up: a broker that restarts or stops answering leaves the
others' rates as they are, where one sum of every broker's counters would jump. What holds a
broker's event loop (BROKER_FIELDS) is its own and stays in its row of "endpoints".
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
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
    "under_replicated_partitions",
    "offline_partitions",
    "active_controllers",
    "isr_shrinks_per_second",
    "isr_expands_per_second",
    "leader_elections_per_second",
    "replica_fetcher_lag_max",
)
# Scalars of several brokers that are not added up: the oldest transaction and the largest lag
# are those of the broker where they are.
MAXIMUM_FIELDS = frozenset({"transactions_oldest_age_seconds", "replica_fetcher_lag_max"})
# Each broker's own figures, never added up, in its row of "endpoints": what held its event
# loop (broker.server.loop_monitor) and its garbage collector's pauses. None where its endpoint
# lacks them (a broker older than them, or one that did not answer).
BROKER_FIELDS = (
    "event_loop_lag_max_ms",
    "event_loop_lag_mean_ms",
    "gc_collections_total",
    "gc_gen2_collections_total",
    "gc_gen2_pause_mean_ms",
    "gc_gen2_pause_time_ms_total",
    "gc_frozen_objects",
)

# A partition's, an API's, a quota entity's or an ip's figures in a snapshot.
Row = dict[str, Any]


def endpoints(setting: str) -> list[str]:
    """The metrics URLs of FJORD_METRICS_URL: one per broker, comma-separated."""
    return [url.strip() for url in setting.split(",") if url.strip()]


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


def _served(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    """The value of a sample without labels; None when the endpoint does not serve it."""
    values = samples.get(name)
    return values[0][1] if values else None


def _scalar(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    value = _served(samples, name)
    return 0.0 if value is None else value


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
    rows.sort(key=_most_throttled_first)
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


def _most_throttled_first(row: dict[str, Any]) -> tuple[float, float]:
    return -(row["throttle_time_ms_per_second"] or 0.0), -(row["usage"] or 0.0)


def _behind(partitions: list[dict[str, Any]]) -> int:
    """Partitions whose last stable offset is below their high watermark."""
    return sum(1 for p in partitions if p["last_stable_offset"] < p["high_watermark"])


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


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _mean_ms(seconds: float | None, count: float | None) -> float | None:
    """The mean in ms of `count` observations of `seconds` in all; None when there are none."""
    return seconds / count * 1000 if seconds is not None and count else None


def _count(value: float | None) -> int | None:
    return None if value is None else int(value)


def _event_loop(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Any]:
    """A broker's BROKER_FIELDS: the longest lag of its event loop in the last ten seconds and
    the mean since it started, in ms; its collections (all generations), and the pauses of
    those of the oldest generation (2), which walk every live object not frozen. Means of
    nothing are None."""

    def by_generation(name: str) -> dict[str, float]:
        return {labels.get("generation", ""): value for labels, value in samples.get(name, [])}

    collections = by_generation("fjord_gc_pause_seconds_count")
    gen2, gen2_paused = collections.get("2"), by_generation("fjord_gc_pause_seconds_sum").get("2")
    return {
        "event_loop_lag_max_ms": _ms(_served(samples, "fjord_event_loop_lag_max_seconds")),
        "event_loop_lag_mean_ms": _mean_ms(
            _served(samples, "fjord_event_loop_lag_seconds_sum"),
            _served(samples, "fjord_event_loop_lag_seconds_count"),
        ),
        "gc_collections_total": int(sum(collections.values())) if collections else None,
        "gc_gen2_collections_total": _count(gen2),
        "gc_gen2_pause_mean_ms": _mean_ms(gen2_paused, gen2),
        "gc_gen2_pause_time_ms_total": _ms(gen2_paused),
        "gc_frozen_objects": _count(_served(samples, "fjord_gc_frozen_objects")),
    }


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

    isr_shrinks = _scalar(samples, "fjord_isr_shrinks_total")
    isr_expands = _scalar(samples, "fjord_isr_expands_total")
    leader_elections = _scalar(samples, "fjord_leader_elections_total")
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
        latency_ms = _mean_ms(spent, calls)
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
        "partitions_behind": _behind(partitions),
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
        # Kafka's UnderReplicatedPartitions (each leader counts its own), OfflinePartitionsCount
        # and ActiveControllerCount (the controller's): added up over brokers, each partition
        # and the controller count once.
        "under_replicated_partitions": int(_scalar(samples, "fjord_under_replicated_partitions")),
        "offline_partitions": int(_scalar(samples, "fjord_offline_partitions")),
        "active_controllers": int(_scalar(samples, "fjord_controller_active")),
        "isr_shrinks_per_second": _rate(isr_shrinks, prev.get("isr_shrinks"), elapsed),
        "isr_expands_per_second": _rate(isr_expands, prev.get("isr_expands"), elapsed),
        "leader_elections_per_second": _rate(
            leader_elections, prev.get("leader_elections"), elapsed
        ),
        "replica_fetcher_lag_max": max(
            (value for _, value in samples.get("fjord_replica_fetcher_lag", [])), default=0
        ),
        **_event_loop(samples),
        "counters": {
            "requests": requests,
            "request_bytes": request_bytes,
            "response_bytes": response_bytes,
            "latency_sum": latency_sum,
            "latency_count": latency_count,
            "fetch_session_evictions": evictions,
            "quota_throttle": quota_counters,
            "connections_throttled": connection_counters,
            "isr_shrinks": isr_shrinks,
            "isr_expands": isr_expands,
            "leader_elections": leader_elections,
        },
    }


def unreachable(error: str) -> dict[str, Any]:
    """The snapshot of a scrape that failed: the dashboard says so instead of going blank."""
    return {"broker": "unreachable", "error": error, "partitions": [], "transactions": []}


def sample_brokers(
    urls: list[str], previous: dict[str, Any] | None, elapsed: float | None
) -> dict[str, Any]:
    """The snapshot of every broker's endpoint, scraped side by side (a broker that hangs
    costs SCRAPE_TIMEOUT_SECONDS, not that much per broker); `previous` is the last stored
    snapshot, taken `elapsed` seconds before. "broker" is "up" when every endpoint answered,
    "partial" when some did, "unreachable" when none did."""
    with ThreadPoolExecutor(max(1, len(urls)), thread_name_prefix="fjord-scrape") as pool:
        scraped = list(pool.map(_try_scrape, urls))
    before = (previous or {}).get("counters") or {}
    summaries: dict[str, dict[str, Any]] = {}
    errors, status = [], []
    for url, families in zip(urls, scraped, strict=True):
        if isinstance(families, Exception):
            errors.append(f"{url}: {families}")
            status.append({"url": url, "status": "unreachable", **dict.fromkeys(BROKER_FIELDS)})
            continue
        # Counters are kept by endpoint; an endpoint missing from the previous snapshot (it did
        # not answer then, or the snapshot predates this layout) has no rates yet.
        own = before.get(url)
        own_previous = {"counters": own} if isinstance(own, dict) else None
        summaries[url] = summarize(families, own_previous, elapsed)
        own_figures = {field: summaries[url][field] for field in BROKER_FIELDS}
        status.append({"url": url, "status": "up", **own_figures})
    if not summaries:
        return {**unreachable("; ".join(errors) or "no metrics endpoint"), "endpoints": status}
    data = _added_up(list(summaries.values()))
    data["counters"] = {url: summary["counters"] for url, summary in summaries.items()}
    data["endpoints"] = status
    if errors:
        data["broker"], data["error"] = "partial", "; ".join(errors)
    return data


def _try_scrape(url: str) -> list[Metric] | Exception:
    try:
        return scrape(url)
    except (OSError, ValueError) as e:
        return e


def _known_sum(values: Iterable[float | None]) -> float | None:
    """The sum of the values known; None when none is (no broker had a previous sample)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _merged(
    rows: Iterable[Row], key: Callable[[Row], Any], merge: Callable[[list[Row]], Row]
) -> list[Row]:
    """Rows of several brokers with the same key made one by `merge(list of rows)`."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return [merge(group) for group in groups.values()]


def _merged_partition(rows: list[dict[str, Any]]) -> dict[str, Any]:
    # Every replica reports its partition; the leader's offsets are the highest (a follower's
    # high watermark trails the leader's).
    merged = dict(rows[0])
    for field in ("high_watermark", "last_stable_offset", "log_start_offset"):
        merged[field] = max(row[field] for row in rows)
    return merged


def _merged_api(rows: list[dict[str, Any]]) -> dict[str, Any]:
    # The mean latency of all of them: each broker's weighted by the requests it answered.
    timed = [
        (r["latency_ms"], r["requests_per_second"]) for r in rows if r["latency_ms"] is not None
    ]
    weight = sum(rate or 0.0 for _, rate in timed)
    return {
        "requests_total": sum(r["requests_total"] for r in rows),
        "requests_per_second": _known_sum(r["requests_per_second"] for r in rows),
        "latency_ms": sum(ms * (rate or 0.0) for ms, rate in timed) / weight if weight else None,
        "bytes_in_per_second": _known_sum(r["bytes_in_per_second"] for r in rows),
        "bytes_out_per_second": _known_sum(r["bytes_out_per_second"] for r in rows),
    }


def _merged_quota(rows: list[dict[str, Any]]) -> dict[str, Any]:
    # Kafka's quotas hold on each broker: the limit is every broker's, and the usage that
    # throttles is the highest of them.
    ms_rate = _known_sum(r["throttle_time_ms_per_second"] for r in rows)
    count_rate = _known_sum(r["throttled_per_second"] for r in rows)
    usages = [r["usage"] for r in rows if r["usage"] is not None]
    limits = [r["limit"] for r in rows if r["limit"] is not None]
    return {
        **{key: rows[0][key] for key in ("quota_type", "user", "client_id")},
        "throttle_time_ms_per_second": ms_rate,
        "throttled_per_second": count_rate,
        "mean_throttle_ms": ms_rate / count_rate if ms_rate is not None and count_rate else None,
        "throttle_time_ms_total": sum(r["throttle_time_ms_total"] for r in rows),
        "throttled_total": sum(r["throttled_total"] for r in rows),
        "rate": sum(r["rate"] for r in rows),
        "limit": max(limits) if limits else None,
        "usage": max(usages) if usages else None,
    }


def _merged_ip(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "ip": rows[0]["ip"],
        "throttled_total": sum(r["throttled_total"] for r in rows),
        "throttled_per_second": _known_sum(r["throttled_per_second"] for r in rows),
    }


def _added_up(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One snapshot of the brokers' summaries (counters aside): counts and rates added up,
    partitions, APIs, quota entities and ips each made one row."""
    data: dict[str, Any] = {"broker": "up"}
    for field in SCALAR_FIELDS:
        if field == "partitions_behind":
            continue  # counted over the merged partitions, below
        values = [s[field] for s in summaries]
        if field in MAXIMUM_FIELDS:
            data[field] = max(values)
        else:
            data[field] = _known_sum(values)
    partitions = _merged(
        (p for s in summaries for p in s["partitions"]),
        lambda p: (p["topic"], p["partition"]),
        _merged_partition,
    )
    data["partitions"] = sorted(partitions, key=lambda p: (p["topic"], p["partition"]))[
        :MAX_PARTITIONS
    ]
    data["partitions_behind"] = _behind(data["partitions"])
    requests: dict[str, list[dict[str, Any]]] = {}
    for s in summaries:
        for api, figures in s["requests"].items():
            requests.setdefault(api, []).append(figures)
    data["requests"] = {api: _merged_api(requests[api]) for api in sorted(requests)}
    quotas = _merged(
        (q for s in summaries for q in s["quotas"]),
        lambda q: (q["quota_type"], q["user"], q["client_id"]),
        _merged_quota,
    )
    quotas.sort(key=_most_throttled_first)
    data["quotas"] = quotas[:MAX_QUOTA_ENTITIES]
    connections = _merged(
        (c for s in summaries for c in s["connections_throttled"]), lambda c: c["ip"], _merged_ip
    )
    connections.sort(key=lambda c: (-c["throttled_total"], c["ip"]))
    data["connections_throttled"] = connections[:MAX_QUOTA_ENTITIES]
    return data


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
