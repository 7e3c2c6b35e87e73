from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from django.urls import reverse
from rest_framework import serializers

from api.jobs import import_path
from api.models import Job
from api.topic_import import ImportFileError, check_import_target, scan_import
from broker.client import AdminClient

TOPIC_NAME = r"^[a-zA-Z0-9._-]{1,249}$"
INT64 = {"min_value": -(2**63), "max_value": 2**63 - 1}


class JobSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    progress = serializers.FloatField(read_only=True)
    download = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "kind",
            "params",
            "state",
            "done",
            "total",
            "progress",
            "result",
            "error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "download",
        ]
        read_only_fields = fields

    def get_download(self, job: Job) -> str | None:
        """Where a finished export is fetched from."""
        if job.kind != Job.Kind.EXPORT_TOPIC or job.state != Job.State.SUCCEEDED:
            return None
        path = reverse("api:job-download", args=[job.pk])
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path


class JobParamsSerializer(serializers.Serializer):
    """The input of one kind of job."""

    def job_params(self) -> dict[str, Any]:
        """The job's parameters, as kept in its row."""
        return dict(self.validated_data)


class ResetOffsetsJobSerializer(JobParamsSerializer):
    """kafka-consumer-groups --reset-offsets, for a group without active members."""

    group_id = serializers.CharField(max_length=255)
    to = serializers.ChoiceField(choices=["earliest", "latest", "timestamp", "offset"])
    value = serializers.IntegerField(
        required=False, help_text="the timestamp in ms, or the offset", **INT64
    )
    topics = serializers.ListField(
        child=serializers.RegexField(TOPIC_NAME),
        required=False,
        max_length=1000,
        help_text="every partition of these topics; default: the partitions the group committed",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["to"] in ("timestamp", "offset"):
            if attrs.get("value") is None:
                raise serializers.ValidationError({"value": f"Needed to reset to a {attrs['to']}."})
            if attrs["value"] < 0:
                raise serializers.ValidationError({"value": "Must not be negative."})
        return attrs


class ExportTopicJobSerializer(JobParamsSerializer):
    """Every record of a topic (or of some of its partitions) to a JSON-lines file."""

    topic = serializers.RegexField(TOPIC_NAME)
    partitions = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=2**31 - 1),
        required=False,
        max_length=10000,
    )
    isolation_level = serializers.ChoiceField(
        choices=["read_uncommitted", "read_committed"], default="read_uncommitted"
    )


class ImportTopicJobSerializer(JobParamsSerializer):
    """A file written by export-topic (JSON lines), produced to a topic."""

    file = serializers.FileField(
        help_text="JSON lines as export-topic writes them; read through before the job starts, "
        "so that a bad line refuses the whole file"
    )
    topic = serializers.RegexField(TOPIC_NAME, help_text="an existing topic")
    partitioning = serializers.ChoiceField(
        choices=["exported", "partitioner"],
        default="exported",
        help_text="each record to the partition it was exported from, or where the producer's "
        "partitioner places it (by key, sticky for records without one)",
    )
    timestamps = serializers.ChoiceField(
        choices=["exported", "now"],
        default="exported",
        help_text="the exported timestamps, or the time of the import (a topic with "
        "LogAppendTime stamps its own either way)",
    )

    def validate_file(self, upload: Any) -> Any:
        upload.seek(0)
        try:
            self.summary = scan_import(upload.file)
        except ImportFileError as e:
            raise serializers.ValidationError(str(e)) from None
        if not self.summary.records:
            raise serializers.ValidationError("The file holds no records.")
        return upload

    def target_check(self) -> Callable[[AdminClient], Awaitable[None]]:
        """The admin call that the topic exists with every partition the records keep."""
        topic = self.validated_data["topic"]
        kept = self.validated_data["partitioning"] == "exported"
        highest = self.summary.highest_partition if kept else -1
        return lambda admin: check_import_target(admin, topic, highest)

    def job_params(self) -> dict[str, Any]:
        """Stores the upload in FJORD_IMPORT_DIR for the job to read."""
        data = self.validated_data
        upload = data["file"]
        name = f"import-{uuid.uuid4().hex}.jsonl"
        path = import_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        upload.seek(0)
        with path.open("wb") as stored:
            for chunk in upload.chunks():
                stored.write(chunk)
        return {
            "topic": data["topic"],
            "partitioning": data["partitioning"],
            "timestamps": data["timestamps"],
            "upload": upload.name,
            "file": name,
            "records": self.summary.records,
        }
