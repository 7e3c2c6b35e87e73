from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from api.models import Job

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


class ResetOffsetsJobSerializer(serializers.Serializer):
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


class ExportTopicJobSerializer(serializers.Serializer):
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
