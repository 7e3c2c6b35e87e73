"""What the control plane keeps itself. Cluster state (topics, ACLs, groups, users) lives in the
broker and is never copied here; these are the control plane's own records: who changed what,
the broker's metric history, and background jobs."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class AuditEntry(models.Model):
    """One mutating call, through the REST API or the console, whatever its outcome."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Kept apart from `user` so that the record outlives the account.
    username = models.CharField(max_length=150, blank=True)
    remote_addr = models.GenericIPAddressField(null=True, blank=True)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    # The URL pattern's name, e.g. "api:topic-detail": what was done, independent of ids.
    action = models.CharField(max_length=200, blank=True)
    resource = models.CharField(max_length=500, blank=True)
    status_code = models.PositiveSmallIntegerField()
    kafka_error = models.CharField(max_length=100, blank=True)
    # What the view chose to record of the request; never secrets.
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.username} {self.method} {self.path}"


class MetricSnapshot(models.Model):
    """One sample of the broker's metrics: the dashboards' values at `taken_at`, with rates
    computed from the previous sample (api.metrics.summarize)."""

    taken_at = models.DateTimeField(db_index=True)
    data = models.JSONField()

    class Meta:
        ordering = ["-taken_at"]
        get_latest_by = "taken_at"

    def __str__(self) -> str:
        return f"metrics at {self.taken_at:%Y-%m-%d %H:%M:%S}"


class Job(models.Model):
    """A long admin operation run by a Celery worker, with its progress."""

    class Kind(models.TextChoices):
        RESET_OFFSETS = "reset_offsets", "Reset consumer group offsets"
        EXPORT_TOPIC = "export_topic", "Export a topic's records"
        IMPORT_TOPIC = "import_topic", "Import records into a topic"

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    params = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # Units of work done out of total (partitions, records), for a progress bar.
    done = models.PositiveBigIntegerField(default=0)
    total = models.PositiveBigIntegerField(default=0)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} ({self.state})"

    @property
    def progress(self) -> float:
        """Fraction done, 0.0 to 1.0."""
        if self.state == self.State.SUCCEEDED:
            return 1.0
        return self.done / self.total if self.total else 0.0

    @property
    def finished(self) -> bool:
        return self.state in (self.State.SUCCEEDED, self.State.FAILED)
