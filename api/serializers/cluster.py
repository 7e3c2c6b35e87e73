"""The cluster and its brokers; broker configs use the topic config serializers."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.serializers.topics import ConfigAlterSerializer, ConfigEntrySerializer

__all__ = [
    "BrokerSerializer",
    "LogDirSerializer",
    "ClusterSerializer",
    "ConfigAlterSerializer",
    "ConfigEntrySerializer",
]


class LogDirSerializer(serializers.Serializer):
    path = serializers.CharField()
    size_bytes = serializers.IntegerField(help_text="Bytes its partitions take.")
    partition_count = serializers.IntegerField()
    total_bytes = serializers.IntegerField(allow_null=True, help_text="Its volume's size.")
    used_bytes = serializers.IntegerField(
        allow_null=True, help_text="What its volume holds (anything's, not only Kafka's)."
    )
    usable_bytes = serializers.IntegerField(
        allow_null=True, help_text="What its volume has left for the broker."
    )


class BrokerSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="node_id")
    host = serializers.CharField()
    port = serializers.IntegerField()
    rack = serializers.CharField(allow_null=True)
    log_dirs = serializers.SerializerMethodField(
        help_text="Its log dirs (DescribeLogDirs); null when the control plane may not ask."
    )

    @extend_schema_field(LogDirSerializer(many=True, allow_null=True))
    def get_log_dirs(self, node) -> list | None:
        disk = self.context.get("disk")
        if disk is None:
            return None
        return LogDirSerializer(disk.broker_log_dirs(node.node_id), many=True).data


class ClusterSerializer(serializers.Serializer):
    cluster_id = serializers.CharField(allow_null=True)
    controller_id = serializers.IntegerField()
    brokers = BrokerSerializer(many=True)
