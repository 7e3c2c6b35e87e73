"""The cluster and its brokers; broker configs use the topic config serializers."""

from __future__ import annotations

from rest_framework import serializers

from api.serializers.topics import ConfigAlterSerializer, ConfigEntrySerializer

__all__ = [
    "BrokerSerializer",
    "ClusterSerializer",
    "ConfigAlterSerializer",
    "ConfigEntrySerializer",
]


class BrokerSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="node_id")
    host = serializers.CharField()
    port = serializers.IntegerField()
    rack = serializers.CharField(allow_null=True)


class ClusterSerializer(serializers.Serializer):
    cluster_id = serializers.CharField(allow_null=True)
    controller_id = serializers.IntegerField()
    brokers = BrokerSerializer(many=True)
