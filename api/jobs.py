"""Long admin operations, run by a Celery worker with their progress in api.models.Job.

Each kind works in steps and saves `done`/`total` after every step, so the console's progress
bar moves while a reset walks thousands of partitions or an export reads millions of records.
A failure is recorded on the job with the Kafka error's name, as the API would answer it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from api import kafka
from api.errors import kafka_error_body
from api.kafka import BrokerUnavailable
from api.models import Job
from api.offset_reset import ensure_inactive, target_offsets
from broker.client import AdminClient, KafkaAdminError, PartitionReader

# Partitions per OffsetCommit: big enough to be quick, small enough for a moving progress bar.
RESET_CHUNK = 100


def run(job_id: str) -> None:
    """Run a pending job to its end; the worker's task calls this."""
    job = Job.objects.get(pk=job_id)
    if job.state != Job.State.PENDING:
        return  # delivered twice: the first delivery owns it
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING, started_at=timezone.now())
    try:
        result = KINDS[job.kind](job)
    except KafkaAdminError as e:
        fail(job, "{kafka_error}: {detail}".format(**kafka_error_body(e)))
    except (BrokerUnavailable, TimeoutError, OSError, ValueError) as e:
        fail(job, str(e) or type(e).__name__)
    else:
        Job.objects.filter(pk=job.pk).update(
            state=Job.State.SUCCEEDED, result=result, finished_at=timezone.now()
        )


def fail(job: Job, error: str) -> None:
    Job.objects.filter(pk=job.pk).update(
        state=Job.State.FAILED, error=error, finished_at=timezone.now()
    )


def advance(job: Job, by: int) -> None:
    Job.objects.filter(pk=job.pk).update(done=F("done") + by)


def reset_offsets(job: Job) -> dict[str, Any]:
    """kafka-consumer-groups --reset-offsets for a group with no active members: every
    partition of `topics` (default: those the group committed) to earliest, latest, a
    timestamp in milliseconds or an offset (api.offset_reset)."""
    params = job.params
    group_id, to, value = params["group_id"], params["to"], params.get("value")
    kafka.call(lambda admin: ensure_inactive(admin, group_id))
    if params.get("topics"):
        names = list(params["topics"])
        described = kafka.call(lambda admin: admin.describe_topics(names))
        partitions = [(t.name, p.partition) for t in described for p in t.partitions]
    else:
        partitions = sorted(kafka.call(lambda admin: admin.list_group_offsets(group_id)))
    Job.objects.filter(pk=job.pk).update(total=len(partitions))
    reset: dict[str, int] = {}
    for start in range(0, len(partitions), RESET_CHUNK):
        chunk = partitions[start : start + RESET_CHUNK]
        offsets = kafka.call(lambda admin, c=chunk: _reset_chunk(admin, group_id, c, to, value))
        reset.update({f"{t}-{p}": o for (t, p), o in offsets.items()})
        advance(job, len(chunk))
    return {"group_id": group_id, "offsets": reset}


async def _reset_chunk(
    admin: AdminClient, group_id: str, chunk: list, to: str, value: int | None
) -> dict:
    offsets = await target_offsets(admin, chunk, to, value)
    await admin.alter_group_offsets(group_id, offsets)
    return offsets


def export_topic(job: Job) -> dict[str, Any]:
    """Every record of a topic, from each partition's log start to its high watermark (its
    last stable offset when read_committed), as JSON lines in FJORD_EXPORT_DIR."""
    params = job.params
    topic = params["topic"]
    isolation = params.get("isolation_level", "read_uncommitted")
    (described,) = kafka.call(lambda admin: admin.describe_topics([topic]))
    wanted = set(params.get("partitions") or [p.partition for p in described.partitions])
    ranges = {
        p.partition: (
            p.log_start_offset,
            p.last_stable_offset if isolation == "read_committed" else p.high_watermark,
        )
        for p in described.partitions
        if p.partition in wanted
    }
    Job.objects.filter(pk=job.pk).update(total=sum(end - start for start, end in ranges.values()))
    path = export_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with path.open("w", encoding="utf-8") as out:
        for partition, (start, end) in sorted(ranges.items()):
            for batch in _record_pages(topic, partition, start, end, isolation):
                for record in batch:
                    out.write(json.dumps(_exported(record)) + "\n")
                written += len(batch)
                # Offsets, not records, measure the way: transaction markers and aborted
                # records take offsets too.
                advance(job, batch[-1].offset + 1 - start)
                start = batch[-1].offset + 1
            advance(job, end - start)
    return {"topic": topic, "records": written, "file": path.name, "bytes": path.stat().st_size}


def export_path(job: Job) -> Path:
    return Path(settings.FJORD_EXPORT_DIR) / f"{job.kind}-{job.pk}.jsonl"


def _record_pages(
    topic: str, partition: int, start: int, end: int, isolation: str
) -> Iterator[list[Any]]:
    offset = start
    while offset < end:
        records = kafka.call(
            lambda reader, o=offset: reader.read(
                topic, partition, offset=o, max_records=500, isolation_level=isolation
            ),
            PartitionReader,
        )
        records = [r for r in records if r.offset < end]
        if not records:
            return
        yield records
        offset = records[-1].offset + 1


def _bytes(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _exported(record: Any) -> dict[str, Any]:
    """A record as a JSON object; keys, values and headers in base64, which keeps any bytes."""
    return {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "key": _bytes(record.key),
        "value": _bytes(record.value),
        "headers": [[k, _bytes(v)] for k, v in record.headers],
    }


KINDS: dict[str, Callable[[Job], dict[str, Any]]] = {
    Job.Kind.RESET_OFFSETS: reset_offsets,
    Job.Kind.EXPORT_TOPIC: export_topic,
}
