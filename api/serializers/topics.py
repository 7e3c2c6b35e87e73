"""Topics, their partitions, configs and records, as the REST API shows and takes them.

Input serializers check shapes and ranges (Kafka's int16/int32/int64 fields, names a topic can
have) so that bad input is a 400 with field errors; what a value means (a config the broker
does not know, too many partitions) is the broker's call and comes back as its Kafka error.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from broker.client.models import AlterConfigOp, AlterConfigOpType, ConsumerRecord

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Kafka's Topic.validate: legal characters and at most 249 of them; "." and ".." are refused.
TOPIC_NAME_MAX = 249
topic_name_validator = RegexValidator(
    r"^(?!\.{1,2}$)[a-zA-Z0-9._-]+$",
    "Topic names use only ASCII letters, digits, '.', '_' and '-', and cannot be '.' or '..'.",
)

# DescribeConfigs config_source codes, by the names Kafka's ConfigEntry.ConfigSource gives them.
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
# Sources whose value a DELETE removes (back to the next level's value).
DYNAMIC_SOURCES = {1, 2, 3, 8}

TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
ENCODINGS = ("utf-8", "base64")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


# A pattern, not an enum: drf-spectacular names an enum after each field using it and warns
# when two names share one choice set.
@extend_schema_field({"type": "string", "pattern": "^(utf-8|base64)$", "default": "utf-8"})
class EncodingField(serializers.ChoiceField):
    """utf-8 or base64."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(ENCODINGS, **kwargs)


def encodable(text: str) -> bool:
    """Whether a Kafka string can carry it: JSON may hold lone surrogates, UTF-8 cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def config_key_field() -> serializers.CharField:
    return serializers.CharField(max_length=255)


class ConfigMapField(serializers.DictField):
    """{name: value} with string values, as CreateTopics and IncrementalAlterConfigs take them."""

    child = serializers.CharField(allow_blank=True, max_length=32767)

    def to_internal_value(self, data: Any) -> dict[str, str]:
        configs = super().to_internal_value(data)
        for name in configs:
            if not name.strip() or len(name) > 255:
                raise serializers.ValidationError(f"Invalid config name {name!r}.")
        return configs


def parse_config_lines(text: str) -> dict[str, str]:
    """`key=value` per line (blank lines and `#` comments skipped), as the console's textareas
    take configs and headers; ValidationError naming the line that is not one."""
    configs: dict[str, str] = {}
    errors = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            errors.append(f"Line {number}: expected key=value, got {line!r}.")
            continue
        configs[key.strip()] = value.strip()
    if errors:
        raise serializers.ValidationError(errors)
    return configs


# --- topics ---


class TopicSizeMixin(serializers.Serializer):
    """The topic's size on disk, from the `disk` (api.disk_usage.DiskUsage, or None) in the
    serializer's context."""

    size_bytes = serializers.SerializerMethodField(
        help_text="Bytes on disk, all partitions (each its largest replica); null when unknown."
    )

    def get_size_bytes(self, topic) -> int | None:
        disk = self.context.get("disk")
        return disk.topic_size(topic.name) if disk is not None else None


class TopicListingSerializer(TopicSizeMixin):
    name = serializers.CharField()
    topic_id = serializers.UUIDField(allow_null=True)
    internal = serializers.BooleanField(source="is_internal")
    partition_count = serializers.IntegerField()


class PartitionSerializer(serializers.Serializer):
    partition = serializers.IntegerField()
    leader = serializers.IntegerField(help_text="-1 while the partition is offline.")
    leader_epoch = serializers.IntegerField()
    replicas = serializers.ListField(child=serializers.IntegerField())
    isr = serializers.ListField(
        child=serializers.IntegerField(), help_text="The replicas in sync with the leader."
    )
    offline_replicas = serializers.ListField(
        child=serializers.IntegerField(), help_text="Replicas on brokers fenced or gone."
    )
    under_replicated = serializers.BooleanField(
        help_text="Whether the ISR lacks one of the replicas."
    )
    log_start_offset = serializers.IntegerField(help_text="-1 while the partition is offline.")
    high_watermark = serializers.IntegerField(help_text="-1 while the partition is offline.")
    last_stable_offset = serializers.IntegerField(
        help_text="Below the high watermark while a transaction writing to the partition is "
        "open; -1 while the partition is offline."
    )
    size_bytes = serializers.SerializerMethodField(
        help_text="Bytes on disk (its largest replica); null when unknown."
    )

    def get_size_bytes(self, partition) -> int | None:
        return self.context.get("partition_sizes", {}).get(partition.partition)


class TopicDescriptionSerializer(TopicSizeMixin):
    name = serializers.CharField()
    topic_id = serializers.UUIDField(allow_null=True)
    internal = serializers.BooleanField(source="is_internal")
    partitions = PartitionSerializer(many=True)

    def to_representation(self, topic):
        # Its partitions' sizes, for PartitionSerializer (which does not know the topic).
        disk = self.context.get("disk")
        if disk is not None:
            self.context["partition_sizes"] = disk.partition_sizes(topic.name)
        return super().to_representation(topic)


class TopicCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=TOPIC_NAME_MAX, validators=[topic_name_validator])
    partitions = serializers.IntegerField(
        default=-1, min_value=-1, max_value=INT32_MAX, help_text="-1: the broker's default."
    )
    replication_factor = serializers.IntegerField(
        default=-1, min_value=-1, max_value=INT16_MAX, help_text="-1: the broker's default."
    )
    configs = ConfigMapField(default=dict)

    def validate_partitions(self, value: int) -> int:
        if value == 0:
            raise serializers.ValidationError("A topic needs at least one partition (or -1).")
        return value

    def validate_replication_factor(self, value: int) -> int:
        if value == 0:
            raise serializers.ValidationError("The replication factor is at least 1 (or -1).")
        return value


class PartitionsCreateSerializer(serializers.Serializer):
    count = serializers.IntegerField(
        min_value=1, max_value=INT32_MAX, help_text="The new total number of partitions."
    )


# --- configs ---


class ConfigEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.CharField(allow_null=True, help_text="null for sensitive configs.")
    source = serializers.SerializerMethodField()
    read_only = serializers.BooleanField()
    sensitive = serializers.BooleanField(source="is_sensitive")

    def get_source(self, entry: Any) -> str:
        return CONFIG_SOURCES.get(entry.source, "UNKNOWN")


class ConfigAlterSerializer(serializers.Serializer):
    """IncrementalAlterConfigs as JSON: SET these, DELETE those (back to their defaults)."""

    set = ConfigMapField(default=dict)
    delete = serializers.ListField(child=config_key_field(), default=list, max_length=1000)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs["set"] and not attrs["delete"]:
            raise serializers.ValidationError("Give configs to set or to delete.")
        for name in [*attrs["set"], *attrs["delete"]]:
            if not encodable(name):
                raise serializers.ValidationError(f"{name[:50]!r} is not a config name.")
        both = sorted(set(attrs["set"]) & set(attrs["delete"]))
        if both:
            raise serializers.ValidationError(
                {"delete": [f"Set and deleted at once: {', '.join(both)}."]}
            )
        return attrs

    def operations(self) -> list[AlterConfigOp]:
        data = self.validated_data
        return [AlterConfigOp(k, v, AlterConfigOpType.SET) for k, v in data["set"].items()] + [
            AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in dict.fromkeys(data["delete"])
        ]


# --- records ---


def parse_timestamp(value: str) -> int:
    """Milliseconds since the epoch, given as such or as ISO 8601 (UTC unless it says)."""
    value = value.strip()
    if re.fullmatch(r"-?\d+", value):
        ms = int(value)
    else:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise serializers.ValidationError(
                "Give milliseconds since the epoch or an ISO 8601 date and time."
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        ms = int(moment.timestamp() * 1000)
    if not 0 <= ms <= INT64_MAX:
        raise serializers.ValidationError("The timestamp is out of range.")
    return ms


class RecordQuerySerializer(serializers.Serializer):
    """Where to start reading: an offset, a timestamp, or (neither) the log start."""

    partition = serializers.IntegerField(default=0, min_value=0, max_value=INT32_MAX)
    offset = serializers.IntegerField(required=False, min_value=0, max_value=INT64_MAX)
    timestamp = serializers.CharField(
        required=False,
        max_length=64,
        help_text="Milliseconds since the epoch or ISO 8601: the first record at or after it.",
    )
    limit = serializers.IntegerField(default=50, min_value=1, max_value=500)
    isolation = serializers.ChoiceField(ISOLATION_LEVELS, default="read_uncommitted")

    def validate_timestamp(self, value: str) -> int:
        return parse_timestamp(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "offset" in attrs and "timestamp" in attrs:
            raise serializers.ValidationError("Give an offset or a timestamp, not both.")
        return attrs

    def start(self) -> dict[str, int]:
        """PartitionReader.read's keyword: offset, or timestamp_ms (-2 is the log start)."""
        data = self.validated_data
        if "offset" in data:
            return {"offset": data["offset"]}
        return {"timestamp_ms": data.get("timestamp", -2)}


def shown(data: bytes | None) -> tuple[str | None, str | None]:
    """Bytes as text when they are UTF-8, else base64; and which of the two it is."""
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


class HeaderSerializer(serializers.Serializer):
    key = serializers.CharField()
    value = serializers.CharField(allow_null=True)
    value_encoding = serializers.CharField(allow_null=True, help_text="utf-8 or base64.")


class RecordSerializer(serializers.Serializer):
    """A ConsumerRecord; key, value and header values as UTF-8 text or base64."""

    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    timestamp = serializers.IntegerField(source="timestamp_ms", help_text="Milliseconds.")
    timestamp_type = serializers.SerializerMethodField()
    key = serializers.SerializerMethodField()
    key_encoding = serializers.SerializerMethodField()
    value = serializers.SerializerMethodField()
    value_encoding = serializers.SerializerMethodField()
    headers = serializers.SerializerMethodField()

    def get_timestamp_type(self, record: ConsumerRecord) -> str | None:
        return TIMESTAMP_TYPES.get(record.timestamp_type)

    def get_key(self, record: ConsumerRecord) -> str | None:
        return shown(record.key)[0]

    def get_key_encoding(self, record: ConsumerRecord) -> str | None:
        return shown(record.key)[1]

    def get_value(self, record: ConsumerRecord) -> str | None:
        return shown(record.value)[0]

    def get_value_encoding(self, record: ConsumerRecord) -> str | None:
        return shown(record.value)[1]

    def get_headers(self, record: ConsumerRecord) -> list[dict[str, Any]]:
        headers = []
        for key, value in record.headers:
            text, encoding = shown(value)
            headers.append({"key": key, "value": text, "value_encoding": encoding})
        return HeaderSerializer(headers, many=True).data


class RecordProduceSerializer(serializers.Serializer):
    """A test record; key and value are UTF-8 text, or base64 when their encoding says so."""

    partition = serializers.IntegerField(
        required=False, min_value=0, max_value=INT32_MAX, help_text="Default: by the key."
    )
    key = serializers.CharField(required=False, allow_null=True, allow_blank=True)
    key_encoding = EncodingField(default="utf-8")
    value = serializers.CharField(allow_null=True, allow_blank=True, help_text="null: tombstone.")
    value_encoding = EncodingField(default="utf-8")
    headers = serializers.DictField(child=serializers.CharField(allow_blank=True), default=dict)

    def validate_headers(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 1000:
            raise serializers.ValidationError("At most 1000 headers.")
        return value

    @staticmethod
    def _bytes(text: str | None, encoding: str) -> bytes | None:
        if text is None:
            return None
        if encoding == "base64":
            try:
                return base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise serializers.ValidationError("Not valid base64.") from None
        return text.encode("utf-8")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors = {}
        for field in ("key", "value"):
            try:
                attrs[field] = self._bytes(attrs.get(field), attrs[f"{field}_encoding"])
            except serializers.ValidationError as e:
                errors[field] = e.detail
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def send_kwargs(self) -> dict[str, Any]:
        """Producer.send's keywords."""
        data = self.validated_data
        return {
            "value": data["value"],
            "key": data.get("key"),
            "partition": data.get("partition"),
            "headers": [(k, v.encode("utf-8")) for k, v in data["headers"].items()],
        }


class RecordMetadataSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    timestamp = serializers.IntegerField(source="timestamp_ms")
