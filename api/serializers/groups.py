"""Consumer groups: listings, descriptions with members and lag, committed offsets, offset
resets and group configs (KIP-848), as kafka-consumer-groups and kafka-configs show them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from api.serializers.acls import query_text

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

GROUP_TYPES = ("classic", "consumer")
RESET_TARGETS = ("earliest", "latest", "offset", "timestamp")


class GroupListingSerializer(serializers.Serializer):
    group_id = serializers.CharField()
    type = serializers.CharField(source="group_type", help_text="classic or consumer (KIP-848)")
    state = serializers.CharField(help_text="Stable, Empty, PreparingRebalance, Assigning, ...")
    protocol_type = serializers.CharField(help_text='"consumer" for consumer groups')


class AssignedPartitionSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        if isinstance(instance, tuple):
            return {"topic": instance[0], "partition": instance[1]}
        return super().to_representation(instance)


class MemberSerializer(serializers.Serializer):
    member_id = serializers.CharField()
    group_instance_id = serializers.CharField(allow_null=True)
    client_id = serializers.CharField()
    host = serializers.CharField(source="client_host")
    member_epoch = serializers.IntegerField(
        allow_null=True, help_text="Consumer protocol members only."
    )
    assignment = AssignedPartitionSerializer(many=True)
    subscribed_topics = serializers.ListField(child=serializers.CharField())
    subscribed_topic_regex = serializers.CharField(allow_null=True)


class PartitionLagSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    committed_offset = serializers.IntegerField()
    high_watermark = serializers.IntegerField()
    lag = serializers.IntegerField()


class GroupDescriptionSerializer(serializers.Serializer):
    group_id = serializers.CharField()
    type = serializers.CharField(source="group_type")
    state = serializers.CharField()
    protocol_type = serializers.CharField()
    protocol = serializers.CharField(
        allow_null=True,
        help_text="classic: the chosen assignor; consumer: the server-side assignor",
    )
    group_epoch = serializers.IntegerField(allow_null=True)
    members = MemberSerializer(many=True)
    lag = PartitionLagSerializer(many=True, help_text="Per committed partition.")
    total_lag = serializers.IntegerField()


class CommittedOffsetSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    committed_offset = serializers.IntegerField()


class ResetOffsetsSerializer(serializers.Serializer):
    """kafka-consumer-groups --reset-offsets. The group must have no active members."""

    to = serializers.ChoiceField(
        RESET_TARGETS,
        help_text="earliest, latest, offset (value: the offset, clamped to the log's range) "
        "or timestamp (value: milliseconds since the epoch; first offset at or after it)",
    )
    value = serializers.IntegerField(min_value=0, max_value=INT64_MAX, required=False)
    topic = serializers.CharField(
        max_length=249,
        required=False,
        help_text="Reset only this topic (every partition of it unless `partitions` is given); "
        "without it, every partition the group committed an offset for.",
    )
    partitions = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=INT32_MAX),
        required=False,
        allow_empty=False,
        max_length=100000,
    )
    dry_run = serializers.BooleanField(
        default=False, help_text="Answer the new offsets without committing them."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["to"] in ("offset", "timestamp") and "value" not in attrs:
            raise serializers.ValidationError({"value": f"Required to reset to {attrs['to']}."})
        if "partitions" in attrs and "topic" not in attrs:
            raise serializers.ValidationError({"topic": "Required with partitions."})
        if "partitions" in attrs:
            attrs["partitions"] = sorted(set(attrs["partitions"]))
        return attrs


class ResetOffsetsResultSerializer(serializers.Serializer):
    group_id = serializers.CharField()
    dry_run = serializers.BooleanField()
    offsets = CommittedOffsetSerializer(many=True)


class GroupSearchSerializer(serializers.Serializer):
    search = query_text(help_text="Part of the group id")
    type = serializers.ChoiceField(GROUP_TYPES, required=False, help_text="classic or consumer")
    state = query_text(100, help_text="Stable, Empty, PreparingRebalance, ...")
