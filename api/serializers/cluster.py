"""The cluster and its brokers; broker configs use the topic config serializers."""

from __future__ import annotations

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
    """A broker (api.brokers.BrokerState)."""

    id = serializers.IntegerField(source="node.node_id")
    host = serializers.CharField(source="node.host")
    port = serializers.IntegerField(source="node.port")
    rack = serializers.CharField(source="node.rack", allow_null=True)
    fenced = serializers.BooleanField(
        source="node.fenced",
        help_text="Its lease in the metadata store lapsed: it leads nothing and is in no ISR "
        "until it registers again.",
    )
    controller = serializers.BooleanField(help_text="Whether it is the active controller.")
    partitions_led = serializers.IntegerField(
        help_text="Partitions it leads (of the topics the control plane may describe)."
    )
    partition_count = serializers.IntegerField(
        help_text="Partitions with a replica on it (of the topics the control plane may describe)."
    )
    size_bytes = serializers.IntegerField(
        allow_null=True, help_text="Bytes its partition replicas take, all log dirs."
    )
    log_dirs = LogDirSerializer(
        many=True,
        allow_null=True,
        help_text="Its log dirs (DescribeLogDirs); null when it was not asked (fenced) or "
        "could not say.",
    )


class ClusterSerializer(serializers.Serializer):
    cluster_id = serializers.CharField(allow_null=True)
    controller_id = serializers.IntegerField()
    brokers = BrokerSerializer(many=True)
