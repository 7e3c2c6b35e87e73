"""Long admin operations, run by a Celery worker with their progress in api.models.Job.

Each kind works in steps and saves `done`/`total` after every step, so the console's progress
bar moves while a reset walks thousands of partitions or an export reads millions of records.
A failure is recorded on the job with the Kafka error's name, as the API would answer it.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from api import kafka
from api.errors import kafka_error_body
from api.kafka import BrokerUnavailable, security_from_settings
from api.models import Job
from api.offset_reset import ensure_inactive, target_offsets
from api.topic_import import Deliveries, imported_records, produce_step
from broker.client import AdminClient, KafkaAdminError, PartitionReader, Producer

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
    except Exception as e:
        # A bug, not an outcome: the job is not left RUNNING forever, and the worker logs it.
        fail(job, f"internal error: {type(e).__name__}: {e}")
        raise
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


# --- import ---

# Records queued and not yet acknowledged: enough to fill batches for every partition while
# earlier ones are on the wire, few enough that a failure leaves a short tail to account for.
IMPORT_IN_FLIGHT = 5000
# Records queued between two saves of the job's progress.
IMPORT_STEP = 1000
# One producer per import, made for bulk: full batches rather than a record per request.
IMPORT_PRODUCER_OPTIONS = {"client_id": "fjord-import", "linger_ms": 20, "batch_size": 262_144}


def import_path(name: str) -> Path:
    return Path(settings.FJORD_IMPORT_DIR) / name


def import_topic(job: Job) -> dict[str, Any]:
    """The records of an uploaded export (validated by scan_import when it was uploaded)
    produced to a topic, in their exported partitions or the partitioner's, with their
    timestamps or the time of producing. One idempotent producer batches them; the job counts
    a record done once the broker acknowledged it, and when the job fails its result says how
    many were written. The upload is removed when the job ends, whatever its end.

    The producer runs on an event loop of the job's own, between steps of IMPORT_STEP records,
    so that progress is saved from plain synchronous code."""
    params = job.params
    path = import_path(params["file"])
    Job.objects.filter(pk=job.pk).update(total=params["records"])
    deliveries = Deliveries(IMPORT_IN_FLIGHT)
    try:
        with path.open("rb") as lines, asyncio.Runner() as runner:
            producer = Producer(
                settings.FJORD_BOOTSTRAP, security_from_settings(), **IMPORT_PRODUCER_OPTIONS
            )
            runner.run(producer.start())
            try:
                records = imported_records(lines)
                while step := list(islice(records, IMPORT_STEP)):
                    before = deliveries.written
                    runner.run(
                        produce_step(
                            producer,
                            deliveries,
                            params["topic"],
                            step,
                            keep_partitions=params["partitioning"] == "exported",
                            keep_timestamps=params["timestamps"] == "exported",
                        )
                    )
                    advance(job, deliveries.written - before)
                before = deliveries.written
                runner.run(producer.flush())  # the last batches go now, not after linger_ms
                runner.run(deliveries.settle())
                advance(job, deliveries.written - before)
            finally:
                runner.run(producer.close())
    except Exception:
        deliveries.count_settled()
        outcome = {"topic": params["topic"], "records": deliveries.written}
        if deliveries.failed_line is not None:
            outcome["failed_line"] = deliveries.failed_line
        Job.objects.filter(pk=job.pk).update(done=deliveries.written, result=outcome)
        raise
    finally:
        path.unlink(missing_ok=True)
    return {"topic": params["topic"], "records": deliveries.written}


# --- end import ---


KINDS: dict[str, Callable[[Job], dict[str, Any]]] = {
    Job.Kind.RESET_OFFSETS: reset_offsets,
    Job.Kind.EXPORT_TOPIC: export_topic,
    Job.Kind.IMPORT_TOPIC: import_topic,
}
