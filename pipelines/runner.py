"""A pipeline's process: its streaming query on Spark, and its run's record kept up to date.

The query reads the source read_committed, runs the pipeline's SQL over the view `source` and
writes the sink topic exactly once (the fjord sink's exactlyOnce mode, transactions named after
the pipeline). Its checkpoint lives under FJORD_PIPELINES_DIR/<id>/, so a new run resumes where
the last one stopped or died. Every second the run's row gets Spark's progress and a
heartbeat; a run set to `stopping` (by the REST API or the console) stops its query and ends
`stopped`; a query that fails ends `failed` with Spark's error."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.utils import timezone

from broker.redaction import redact
from pipelines import principal
from pipelines.allowed_options import check_pipeline_options
from pipelines.models import Pipeline, PipelineRun
from pipelines.spark.options import exactly_once

POLL_S = 1.0


def pipeline_dir(pipeline: Pipeline) -> Path:
    return Path(settings.FJORD_PIPELINES_DIR) / str(pipeline.pk)


def kafka_options(pipeline: Pipeline) -> dict[str, str]:
    """Where and as whom the pipeline connects, as the fjord format's `kafka.*` options: the
    control plane's broker and security protocol, the pipeline's own principal (never the
    control plane's credentials, nor its TLS client certificate)."""
    options = {"kafka.bootstrap.servers": settings.FJORD_BOOTSTRAP}
    protocol = settings.FJORD_SECURITY_PROTOCOL
    if protocol != "PLAINTEXT":
        options["kafka.security.protocol"] = protocol
    if principal.authenticated():
        options["kafka.sasl.mechanism"] = principal.mechanism()
        options["kafka.sasl.jaas.config"] = principal.jaas_config(pipeline)
    if protocol.endswith("SSL") and settings.FJORD_SSL_CAFILE:
        options["kafka.ssl.ca.location"] = settings.FJORD_SSL_CAFILE
    return options


def source_options(pipeline: Pipeline) -> dict[str, str]:
    """The pipeline's options first, checked again here (a definition changed behind the API's
    back is refused too), then what the definition and the control plane set, which win."""
    check_pipeline_options(pipeline.options)
    options = {
        **{key: str(value) for key, value in pipeline.options.items()},
        "startingOffsets": pipeline.starting_offsets,
        "kafka.isolation.level": "read_committed",
        **kafka_options(pipeline),
    }
    if pipeline.source_pattern:
        options["subscribePattern"] = pipeline.source_pattern
    else:
        options["subscribe"] = ",".join(pipeline.source_topics)
    return options


def sink_options(pipeline: Pipeline) -> dict[str, str]:
    return {
        **kafka_options(pipeline),
        **exactly_once(
            settings.FJORD_BOOTSTRAP,
            pipeline.sink_topic,
            pipeline.transactional_id_prefix,
            str(pipeline_dir(pipeline) / "checkpoint"),
        ),
    }


class ProgressTotals:
    """Spark's progress events folded into a run's totals: each executed batch counted once
    (an idle trigger reports the next batch's id with no rows, and Spark keeps only the last
    hundred events)."""

    def __init__(self) -> None:
        self.last_batch = -1

    def fold(self, run: PipelineRun, progress: list[dict[str, Any]]) -> None:
        for event in progress:
            batch = event.get("batchId", -1)
            if batch <= self.last_batch or "addBatch" not in event.get("durationMs", {}):
                continue
            self.last_batch = batch
            run.batches += 1
            run.rows_in += max(event.get("numInputRows", 0), 0)
            run.rows_out += max(event.get("sink", {}).get("numOutputRows", 0), 0)
        if progress:
            run.last_progress = progress[-1]
            run.lag = lag(progress[-1])
        run.heartbeat_at = timezone.now()


def lag(progress: dict[str, Any]) -> dict[str, int]:
    """Per partition, the source's latest offset minus the end of the last batch."""
    out = {}
    for source in progress.get("sources", []):
        latest, end = offsets(source.get("latestOffset")), offsets(source.get("endOffset"))
        for topic, partitions in latest.items():
            for partition, offset in partitions.items():
                done = end.get(topic, {}).get(partition, 0)
                out[f"{topic}-{partition}"] = max(0, int(offset) - int(done))
    return out


def offsets(value: Any) -> dict[str, dict[str, int]]:
    """A source's offsets in a progress event: the fjord source's {"topic": {"0": n}}, as JSON
    text or already parsed; {} for anything else."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        return {}
    return value


def settle_transactions(pipeline: Pipeline) -> None:
    """A stopped or failed query can leave prepared transactions, which never time out and
    hold back the sink topic's last stable offset: settled by the last decision, once no task
    of the pipeline runs any more (after its run, and before the pipeline is deleted)."""
    from pipelines.spark.options import sink_options as parse_sink_options
    from pipelines.spark.sink import last_decision, settle_open_transactions

    options = parse_sink_options(sink_options(pipeline))

    async def settle() -> None:
        await settle_open_transactions(options, await last_decision(options))

    asyncio.run(settle())


class PipelineProcess:
    def __init__(self, run: PipelineRun) -> None:
        self.run = run
        self.pipeline = run.pipeline
        self.stop_requested = False
        self.totals = ProgressTotals()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True

    def main(self) -> int:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        run = self.run
        run.host, run.pid, run.heartbeat_at = socket.gethostname(), os.getpid(), timezone.now()
        run.save(update_fields=["host", "pid", "heartbeat_at"])
        status, error = PipelineRun.Status.STOPPED, ""
        try:
            self.stream()
        except Exception as e:  # Spark's errors arrive as many types; each ends the run
            # Spark's message may quote the options, the pipeline's JAAS config among them.
            status, error = PipelineRun.Status.FAILED, redact(str(e))[:10_000]
        try:
            settle_transactions(self.pipeline)
        except Exception as e:  # the next run settles them: said, not fatal
            error = f"{error}\nopen transactions left for the next run: {redact(str(e))}".strip()
        # Unless the run was failed meanwhile (check_runs), whose verdict stands.
        PipelineRun.objects.filter(pk=run.pk, status__in=PipelineRun.ACTIVE).update(
            status=status, last_error=error, stopped_at=timezone.now()
        )
        return 0 if status == PipelineRun.Status.STOPPED else 1

    def stream(self) -> None:
        from pipelines.spark.plan import checked_query
        from pipelines.spark.session import spark_session
        from pipelines.spark.streams import output_mode, read_stream, write_stream

        pipeline, run = self.pipeline, self.run
        pipeline_dir(pipeline).mkdir(parents=True, exist_ok=True)
        spark = spark_session(f"fjord-pipeline-{pipeline.name}")
        read_stream(spark, source_options(pipeline)).createOrReplaceTempView("source")
        # Checked again here: the definition may have changed behind the API's back.
        transformed = checked_query(spark, pipeline.transformation)
        writer = write_stream(transformed, sink_options(pipeline))
        writer = writer.outputMode(output_mode(transformed))
        query = writer.trigger(processingTime=f"{pipeline.trigger_interval_ms} milliseconds")
        query = query.queryName(pipeline.name).start()
        PipelineRun.objects.filter(pk=run.pk, status=PipelineRun.Status.STARTING).update(
            status=PipelineRun.Status.RUNNING
        )
        try:
            while query.isActive:
                query.awaitTermination(POLL_S)
                run.refresh_from_db(fields=["status"])
                # Events are dicts holding UUIDs and such: kept as the JSON Spark would write.
                events = [json.loads(json.dumps(e, default=str)) for e in query.recentProgress]
                self.totals.fold(run, events)
                fields = ["heartbeat_at", "last_progress", "batches", "rows_in", "rows_out", "lag"]
                run.save(update_fields=fields)
                # Asked to stop, or failed meanwhile (silent too long): a second run may start.
                live = (PipelineRun.Status.STARTING, PipelineRun.Status.RUNNING)
                if self.stop_requested or run.status not in live:
                    query.stop()
            error = query.exception()
            if error is not None:
                raise RuntimeError(str(error))
        finally:
            spark.stop()
