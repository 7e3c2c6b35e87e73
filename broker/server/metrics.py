"""The broker's Prometheus registry and its HTTP endpoint (`metrics.listener`).

Per-partition gauges are computed when scraped, so the produce and fetch paths pay nothing for
them. Later subsystems register their own collectors on `BrokerMetrics.registry`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from broker.coordinator.transaction_records import TransactionState
from broker.quota.quota_manager import monotonic_ms
from broker.server.request_metrics import RequestMetrics

log = logging.getLogger("broker.metrics")


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = RequestMetrics()
        r.register(self.requests)
        self.connections = Gauge(
            "fjord_connections", "Open client connections, by listener.", ["listener"], registry=r
        )
        self.connections_refused = Counter(
            "fjord_connections_refused",
            "Connections closed right after accept, by listener and the limit they exceeded.",
            ["listener", "reason"],
            registry=r,
        )
        self.connections_idle_closed = Counter(
            "fjord_connections_idle_closed",
            "Connections closed after connections.max.idle.ms without a request, by listener.",
            ["listener"],
            registry=r,
        )

        self.isr_shrinks = Counter(
            "fjord_isr_shrinks", "ISRs this broker shrank as leader.", registry=r
        )
        self.isr_expands = Counter(
            "fjord_isr_expands", "ISRs this broker expanded as leader.", registry=r
        )
        self.leader_elections = Counter(
            "fjord_leader_elections", "Leaders this broker elected as controller.", registry=r
        )

    def add_partition_gauges(self, partitions: Callable[[], Iterable[tuple[str, int, object]]]):
        self.registry.register(_PartitionCollector(partitions))

    def add_transaction_gauges(self, coordinator) -> None:
        self.registry.register(_TransactionCollector(coordinator))

    def add_fetch_session_gauges(self, cache) -> None:
        self.registry.register(_FetchSessionCollector(cache))

    def add_log_cleaner_gauges(self, cleaner) -> None:
        self.registry.register(_LogCleanerCollector(cleaner))

    def add_quota_gauges(self, quotas) -> None:
        self.registry.register(_QuotaCollector(quotas))

    def add_replication_gauges(self, broker) -> None:
        self.registry.register(_ReplicationCollector(broker))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _QuotaCollector:
    """Client quota usage per quota type and metric tags (Kafka's per-entity byte-rate,
    request-time and throttle-time metrics; throttle time as counters: Prometheus derives the
    rates), and connections closed for their address's connection_creation_rate."""

    LABELS = ["quota_type", "user", "client_id"]

    def __init__(self, quotas) -> None:
        self.quotas = quotas

    def collect(self):
        rate = GaugeMetricFamily(
            "fjord_quota_rate",
            "Measured usage of a quota entity: bytes/s (produce, fetch), percent of a thread "
            "(request), partition mutations/s (controller_mutation).",
            labels=self.LABELS,
        )
        limit = GaugeMetricFamily(
            "fjord_quota_limit", "The quota that applies to the entity.", labels=self.LABELS
        )
        throttle_ms = CounterMetricFamily(
            "fjord_quota_throttle_time_ms",
            "Throttle time given to the entity's responses, in milliseconds.",
            labels=self.LABELS,
        )
        throttled = CounterMetricFamily(
            "fjord_quota_throttled", "Responses throttled for the entity.", labels=self.LABELS
        )
        for sample in self.quotas.samples_now(monotonic_ms()):
            labels = [sample.quota_type, sample.user, sample.client_id]
            rate.add_metric(labels, sample.rate)
            if sample.limit is not None:
                limit.add_metric(labels, sample.limit)
            throttle_ms.add_metric(labels, sample.throttle_ms_total)
            throttled.add_metric(labels, sample.throttled)
        connections = CounterMetricFamily(
            "fjord_connection_creation_throttled",
            "Connections closed for exceeding their address's connection_creation_rate.",
            labels=["ip"],
        )
        for address, count in self.quotas.connection_rate.throttled.items():
            connections.add_metric([address], count)
        yield from (rate, limit, throttle_ms, throttled, connections)


class _FetchSessionCollector:
    """The fetch session cache (seed 001): Kafka's NumIncrementalFetchSessions,
    NumIncrementalFetchPartitionsCached and IncrementalFetchSessionEvictionsPerSec (a counter
    here: Prometheus derives the rate)."""

    def __init__(self, cache) -> None:
        self.cache = cache

    def collect(self):
        yield GaugeMetricFamily(
            "fjord_fetch_sessions_incremental",
            "Incremental fetch sessions in the fetch session cache.",
            value=len(self.cache),
        )
        yield GaugeMetricFamily(
            "fjord_fetch_session_partitions_cached",
            "Partitions cached by incremental fetch sessions, summed over the sessions.",
            value=self.cache.partitions_cached,
        )
        yield CounterMetricFamily(
            "fjord_fetch_session_evictions",
            "Incremental fetch sessions evicted to make room for others (not those their "
            "fetchers closed).",
            value=self.cache.evictions,
        )


class _LogCleanerCollector:
    """The log cleaner (Kafka's kafka.log:type=LogCleaner and LogCleanerManager metrics):
    the recopy share is written over read bytes; a stuck or dead cleaner shows as a
    growing time since its last run."""

    def __init__(self, cleaner) -> None:
        self.cleaner = cleaner

    def collect(self):
        totals = self.cleaner.totals
        for name, doc, value in (
            ("rounds", "Cleaning rounds completed (one log each).", totals.rounds),
            ("read_bytes", "Bytes of segments the cleaner rewrote, read.", totals.bytes_read),
            ("written_bytes", "Bytes the cleaner wrote in their place.", totals.bytes_written),
        ):
            yield CounterMetricFamily(f"fjord_log_cleaner_{name}", doc, value=value)
        for name, doc, value in (
            ("last_round_seconds", "Duration of the last round.", totals.last_round_seconds),
            (
                "buffer_utilization",
                "Share of the dedupe buffer (offset map) the last round filled.",
                totals.last_buffer_utilization,
            ),
            (
                "max_dirty_ratio",
                "Dirty share of the dirtiest compacted log when the cleaner last looked.",
                self.cleaner.dirtiest_log_cleanable_ratio,
            ),
            (
                "uncleanable_partitions",
                "Partitions whose cleaning failed; skipped until the broker restarts.",
                len(self.cleaner.uncleanable),
            ),
        ):
            yield GaugeMetricFamily(f"fjord_log_cleaner_{name}", doc, value=value)
        if totals.last_run_ms is not None:
            yield GaugeMetricFamily(
                "fjord_log_cleaner_seconds_since_last_run",
                "Time since the cleaner last finished looking for work.",
                value=max(0, time.time() * 1000 - totals.last_run_ms) / 1000,
            )


class _TransactionCollector:
    """The transaction coordinator's gauges (seed 000): ids it knows, transactions open, and
    how long the oldest has been open — a hanging transaction shows as a growing age."""

    def __init__(self, coordinator) -> None:
        self.coordinator = coordinator

    def collect(self):
        open_states = (
            TransactionState.ONGOING,
            TransactionState.PREPARE_COMMIT,
            TransactionState.PREPARE_ABORT,
            TransactionState.PREPARE_EPOCH_FENCE,
        )
        transactions = self.coordinator.transactions.values()
        started = [t.start_ms for t in transactions if t.state in open_states]
        now_ms = int(time.time() * 1000)
        yield GaugeMetricFamily(
            "fjord_transactional_ids_active",
            "Transactional ids the transaction coordinator holds state for.",
            value=len(transactions),
        )
        yield GaugeMetricFamily(
            "fjord_transactions_ongoing",
            "Transactions begun and not yet completed.",
            value=len(started),
        )
        yield GaugeMetricFamily(
            "fjord_transactions_oldest_ongoing_age_seconds",
            "Age of the oldest transaction not yet completed (0 when none is open).",
            value=max(0, now_ms - min(started)) / 1000 if started else 0,
        )


class _ReplicationCollector:
    """Kafka's UnderReplicatedPartitions (partitions led here whose ISR lacks a replica),
    OfflinePartitionsCount and ActiveControllerCount (the controller's), and each followed
    partition's lag behind its leader's high watermark (the fetcher's ConsumerLag)."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def collect(self):
        broker = self.broker
        partitions = broker.replica_manager.partitions.values()
        cluster = broker.cluster
        controller = cluster is None or cluster.is_controller
        yield GaugeMetricFamily(
            "fjord_under_replicated_partitions",
            "Partitions led by this broker with fewer in-sync replicas than replicas.",
            value=sum(
                1
                for p in partitions
                if p.is_leader and len(p.registration.isr) < len(p.registration.replicas)
            ),
        )
        image = broker.image
        yield GaugeMetricFamily(
            "fjord_offline_partitions",
            "Partitions without a leader (counted by the controller; 0 elsewhere).",
            value=sum(
                1
                for t in image.topics()
                for reg in image.registrations(t.name).values()
                if reg.offline
            )
            if controller
            else 0,
        )
        yield GaugeMetricFamily(
            "fjord_controller_active",
            "1 on the broker holding the controller lease (a single broker always does).",
            value=1 if controller else 0,
        )
        lag = GaugeMetricFamily(
            "fjord_replica_fetcher_lag",
            "Messages each partition followed here is behind its leader's high watermark.",
            labels=["topic", "partition", "leader"],
        )
        for p in partitions:
            if not p.is_leader and p.follower_lag is not None:
                lag.add_metric([p.topic, str(p.index), str(p.registration.leader)], p.follower_lag)
        yield lag


class _PartitionCollector:
    def __init__(self, partitions) -> None:
        self.partitions = partitions

    def collect(self):
        hw = GaugeMetricFamily(
            "fjord_partition_high_watermark",
            "High watermark of each partition.",
            labels=["topic", "partition"],
        )
        lso = GaugeMetricFamily(
            "fjord_partition_last_stable_offset",
            "Last stable offset of each partition: where read_committed consumers stop.",
            labels=["topic", "partition"],
        )
        start = GaugeMetricFamily(
            "fjord_partition_log_start_offset",
            "Log start offset of each partition.",
            labels=["topic", "partition"],
        )
        producer_ids = 0
        for topic, partition, log_ in self.partitions():
            labels = [topic, str(partition)]
            hw.add_metric(labels, log_.high_watermark)
            lso.add_metric(labels, log_.last_stable_offset)
            start.add_metric(labels, log_.log_start_offset)
            producer_ids += len(log_.producer_state)
        yield hw
        yield lso
        yield start
        # Kafka's ReplicaManager ProducerIdCount: producer ids with state, summed over partitions.
        yield GaugeMetricFamily(
            "fjord_producer_ids_live",
            "Producer ids with idempotence state, summed over the partitions.",
            value=producer_ids,
        )


async def serve_metrics(metrics: BrokerMetrics, url: str) -> asyncio.Server:
    """A minimal HTTP/1.1 endpoint: GET <path> answers the registry, anything else 404."""
    parts = urlsplit(url)
    path = parts.path or "/metrics"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass
            method, target, *_ = request_line.decode("latin-1").split() + ["", ""]
            if method == "GET" and target.split("?")[0] == path:
                body, status = metrics.render(), "200 OK"
                ctype = "text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, ctype = b"not found\n", "404 Not Found", "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            )
            writer.write(body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, parts.hostname, parts.port)
    return server
