"""The brokers' metric history: a sample every FJORD_METRICS_INTERVAL seconds, stored in
api.models.MetricSnapshot for FJORD_METRICS_RETENTION seconds and pushed to the dashboards'
websocket group.

Celery beat runs `sample` when Redis carries the channel layer between processes
(FJORD_SAMPLER "beat"); without Redis the in-memory layer reaches only the web process, so that
process samples itself (`start_embedded_sampler`, FJORD_SAMPLER "web"). Both run the same
`take_sample`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from api import kafka, metrics
from api.models import MetricSnapshot
from broker.client import KafkaAdminError
from pipelines import lifecycle

log = logging.getLogger("fjord.metrics")

GROUP = "dashboard"
MESSAGE_TYPE = "metrics.sample"


def public(data: dict[str, Any]) -> dict[str, Any]:
    """A snapshot as the API and the dashboards show it: without the raw counters that only
    the next sample's rates need."""
    return {key: value for key, value in data.items() if key != "counters"}


def latest() -> MetricSnapshot | None:
    return MetricSnapshot.objects.order_by("-taken_at").first()


def take_sample() -> dict[str, Any]:
    """Scrape every broker, summarize against the last stored snapshot, store and return the
    new one (public form). When no broker answers the snapshot is "unreachable"."""
    previous = latest()
    taken_at = timezone.now()
    elapsed = (taken_at - previous.taken_at).total_seconds() if previous is not None else None
    data = metrics.sample_brokers(
        metrics.endpoints(settings.FJORD_METRICS_URL),
        previous.data if previous is not None else None,
        elapsed,
    )
    mark_down_since(
        data.get("endpoints", []), previous.data if previous is not None else None, taken_at
    )
    if data["broker"] != "unreachable":
        data["transactions"] = _transactions(data)
    data["pipelines"] = lifecycle.live_progress()
    data["taken_at"] = taken_at.isoformat()
    MetricSnapshot.objects.create(taken_at=taken_at, data=data)
    return public(data)


def mark_down_since(
    endpoints: list[dict[str, Any]], previous: dict[str, Any] | None, taken_at: datetime
) -> None:
    """Each unreachable endpoint's "down_since": when the first sample of its outage was taken,
    carried from the previous sample while it stays down; one that answers again has none."""
    before = {
        e.get("url"): e.get("down_since")
        for e in (previous or {}).get("endpoints", [])
        if e.get("status") == "unreachable"
    }
    for endpoint in endpoints:
        if endpoint["status"] == "unreachable":
            endpoint["down_since"] = before.get(endpoint["url"]) or taken_at.isoformat()


def down(snapshot: MetricSnapshot | None) -> list[dict[str, Any]]:
    """The endpoints a snapshot found down, each with its url and down_since."""
    endpoints = snapshot.data.get("endpoints", []) if snapshot is not None else []
    return [e for e in endpoints if e.get("down_since")]


def _transactions(data: dict[str, Any]) -> list[dict[str, Any]]:
    # The gauge says whether any is open: most samples need no admin request at all.
    if not data["transactions_ongoing"]:
        return []
    try:
        return kafka.call(metrics.ongoing_transactions)
    except (KafkaAdminError, kafka.BrokerUnavailable, TimeoutError) as e:
        data["transactions_error"] = str(e)
        return []


def message(data: dict[str, Any]) -> dict[str, Any]:
    return {"type": MESSAGE_TYPE, "data": data}


def sample() -> dict[str, Any]:
    """take_sample, then push it to the dashboards (beat mode: through Redis)."""
    data = take_sample()
    layer = get_channel_layer()
    if layer is not None:
        try:
            async_to_sync(layer.group_send)(GROUP, message(data))
        except Exception:  # the history is kept even when the push fails
            log.exception("could not push a metrics sample to the dashboards")
    return data


# Past this age a sample keeps only its scalar values: the history charts need nothing else,
# and per-partition offsets and per-API figures would make up most of a day's rows.
FULL_SAMPLE_SECONDS = 600
DETAIL_KEYS = (
    "partitions",
    "transactions",
    "requests",
    "counters",
    "pipelines",
    "quotas",
    "connections_throttled",
    "endpoints",
)


def prune() -> int:
    """Delete samples older than FJORD_METRICS_RETENTION seconds and thin those older than
    FULL_SAMPLE_SECONDS to their scalar values; how many were deleted."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.FJORD_METRICS_RETENTION)
    deleted, _ = MetricSnapshot.objects.filter(taken_at__lt=cutoff).delete()
    detailed = MetricSnapshot.objects.filter(
        taken_at__lt=now - timedelta(seconds=FULL_SAMPLE_SECONDS), data__has_key="counters"
    )
    batch = []
    for snapshot in detailed.iterator(chunk_size=500):
        snapshot.data = {k: v for k, v in snapshot.data.items() if k not in DETAIL_KEYS}
        batch.append(snapshot)
        if len(batch) == 500:
            MetricSnapshot.objects.bulk_update(batch, ["data"])
            batch = []
    MetricSnapshot.objects.bulk_update(batch, ["data"])
    return deleted


# --- embedded mode: the web process samples itself ---

_executor: ThreadPoolExecutor | None = None
_task: asyncio.Task | None = None


def _take_sample_in_thread() -> dict[str, Any]:
    # A thread of our own, so a slow broker never holds up the sync views' thread.
    close_old_connections()
    try:
        return take_sample()
    finally:
        close_old_connections()


async def _sample_forever(interval: float) -> None:
    global _executor
    _executor = _executor or ThreadPoolExecutor(1, thread_name_prefix="fjord-sampler")
    loop = asyncio.get_running_loop()
    layer = get_channel_layer()
    while True:
        started = time.monotonic()
        try:
            data = await loop.run_in_executor(_executor, _take_sample_in_thread)
            if layer is not None:
                await layer.group_send(GROUP, message(data))
        except Exception:  # one failed sample must not stop the next
            log.exception("metrics sample failed")
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


def start_embedded_sampler() -> bool:
    """Start sampling on the running loop unless FJORD_SAMPLER leaves it to beat or it runs
    already; whether it was started now."""
    global _task
    if settings.FJORD_SAMPLER != "web" or (_task is not None and not _task.done()):
        return False
    _task = asyncio.get_running_loop().create_task(
        _sample_forever(settings.FJORD_METRICS_INTERVAL), name="fjord-metrics-sampler"
    )
    return True
