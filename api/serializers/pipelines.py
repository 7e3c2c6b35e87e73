from __future__ import annotations

from typing import Any

from rest_framework import serializers

from broker.redaction import MASK, has_credentials
from pipelines.allowed_options import check_pipeline_options
from pipelines.models import Pipeline, PipelineRun
from pipelines.principal import literal_prefix
from pipelines.spark.options import OptionError, source_options
from pipelines.sql import TransformationError, check_transformation


class PipelineRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = PipelineRun
        fields = [
            "id",
            "status",
            "started_at",
            "stopped_at",
            "host",
            "pid",
            "heartbeat_at",
            "batches",
            "rows_in",
            "rows_out",
            "lag",
            "last_progress",
            "last_error",
        ]
        read_only_fields = fields


class PipelineSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    status = serializers.SerializerMethodField()
    latest_run = serializers.SerializerMethodField()

    class Meta:
        model = Pipeline
        fields = [
            "id",
            "name",
            "source_topics",
            "source_pattern",
            "starting_offsets",
            "transformation",
            "sink_topic",
            "trigger_interval_ms",
            "options",
            "status",
            "latest_run",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["created_by", "created_at", "updated_at"]

    def get_status(self, pipeline: Pipeline) -> str:
        """The latest run's status; `new` before the first run."""
        run = pipeline.latest_run
        return run.status if run is not None else "new"

    def get_latest_run(self, pipeline: Pipeline) -> dict[str, Any] | None:
        run = pipeline.latest_run
        return PipelineRunSerializer(run).data if run is not None else None

    def validate_source_topics(self, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
            raise serializers.ValidationError("a list of topic names")
        return value

    def validate_source_pattern(self, value: str) -> str:
        if value and not literal_prefix(value):
            raise serializers.ValidationError(
                "must begin with literal characters (such as 'orders-' in 'orders-.*'): the "
                "pipeline's principal may read the topics starting with them, as Kafka's ACLs "
                "are literal or prefixed, not regular expressions"
            )
        return value

    def validate_options(self, value: Any) -> dict[str, str]:
        if not isinstance(value, dict) or not all(
            isinstance(v, str | int | bool) for v in value.values()
        ):
            raise serializers.ValidationError("an object of option names and values")
        try:
            check_pipeline_options(value)
        except OptionError as e:
            raise serializers.ValidationError(str(e)) from None
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}

    def to_representation(self, pipeline: Pipeline) -> dict[str, Any]:
        """No option can hold a secret since options are allowlisted; one saved before that
        (or behind the API's back) that looks like one is masked, for every reader."""
        data = super().to_representation(pipeline)
        data["options"] = {
            key: MASK if has_credentials(f"{key}={value}") else value
            for key, value in data["options"].items()
        }
        return data

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        merged = {
            field: data.get(field, getattr(self.instance, field, None))
            for field in ("source_topics", "source_pattern", "starting_offsets", "options")
        }
        if bool(merged["source_topics"]) == bool(merged["source_pattern"]):
            raise serializers.ValidationError(
                {"source_topics": "give source topics or a source pattern, not both"}
            )
        # The source's options as the pipeline's process will give them, checked the same way.
        given = {
            "kafka.bootstrap.servers": "checked-later:9092",
            "startingOffsets": merged["starting_offsets"] or "latest",
            **(merged["options"] or {}),
        }
        if merged["source_pattern"]:
            given["subscribePattern"] = merged["source_pattern"]
        else:
            given["subscribe"] = ",".join(merged["source_topics"])
        try:
            checked = source_options(given, streaming=True)
        except OptionError as e:
            field = "starting_offsets" if e.option == "startingOffsets" else "options"
            raise serializers.ValidationError({field: str(e)}) from None
        if "transformation" in data or self.instance is None or "options" in data:
            sql = data.get("transformation", getattr(self.instance, "transformation", ""))
            try:
                check_transformation(sql, checked.include_headers)
            except TransformationError as e:
                raise serializers.ValidationError({"transformation": str(e)}) from None
        return data
