"""Pipelines as the control plane keeps them: a definition (source, Spark SQL over the view
`source`, sink topic, trigger) and its runs, each a `python -m pipelines.run` process that
records its progress here."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

TOPIC_NAME = RegexValidator(r"^[A-Za-z0-9._-]{1,249}$", "letters, digits, '.', '_' and '-'")


def new_password() -> str:
    """A pipeline principal's SCRAM password: random, URL-safe (nothing to escape in JAAS)."""
    return secrets.token_urlsafe(32)


class Pipeline(models.Model):
    """A consume-transform-produce pipeline, exactly once: read_committed from the source
    topics, `transformation` over the view `source`, written to `sink_topic` in transactions
    (the fjord sink's exactlyOnce mode)."""

    name = models.SlugField(max_length=100, unique=True)
    # Either topics or a pattern (Java regex, as Spark's subscribePattern).
    source_topics = models.JSONField(default=list, blank=True)
    source_pattern = models.CharField(max_length=500, blank=True)
    # earliest, latest, or Spark's per-partition JSON; used on the first run only (later runs
    # resume from the checkpoint).
    starting_offsets = models.CharField(max_length=2000, default="latest")
    transformation = models.TextField(default="SELECT key, value FROM source")
    sink_topic = models.CharField(max_length=249, validators=[TOPIC_NAME])
    trigger_interval_ms = models.PositiveIntegerField(
        default=1000, validators=[MinValueValidator(100)]
    )
    # More options of the fjord source (maxOffsetsPerTrigger, minPartitions, ...).
    options = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # The password of the pipeline's own Kafka principal (pipelines/principal.py): kept here,
    # where the control plane that sets it and the pipeline's process (on any worker's host)
    # both read it; never serialized nor shown.
    kafka_password = models.CharField(max_length=64, default=new_password, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def transactional_id_prefix(self) -> str:
        """Names the sink's transactions: the same on every run, so that a run settles what
        the one before left."""
        return f"fjord-pipeline-{self.pk}"

    @property
    def latest_run(self) -> PipelineRun | None:
        return self.runs.order_by("-started_at", "-pk").first()


class PipelineRun(models.Model):
    """One run of a pipeline's process, from start to stop or failure, with Spark's progress."""

    class Status(models.TextChoices):
        STARTING = "starting"
        RUNNING = "running"
        STOPPING = "stopping"  # asked to stop: the process stops its query and exits
        STOPPED = "stopped"
        FAILED = "failed"

    ACTIVE = (Status.STARTING, Status.RUNNING, Status.STOPPING)

    pipeline = models.ForeignKey(Pipeline, related_name="runs", on_delete=models.CASCADE)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STARTING)
    started_at = models.DateTimeField(auto_now_add=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    # Where the process runs and when it last reported: a run whose process is gone is failed.
    host = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    batches = models.PositiveBigIntegerField(default=0)
    rows_in = models.PositiveBigIntegerField(default=0)
    rows_out = models.PositiveBigIntegerField(default=0)
    # {"topic-partition": lag}: the source's latest offsets minus those processed.
    lag = models.JSONField(default=dict, blank=True)
    # Spark's last StreamingQueryProgress (rates, batch duration), as JSON.
    last_progress = models.JSONField(default=dict, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.pipeline} run {self.pk} ({self.status})"
