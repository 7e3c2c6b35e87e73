"""The audit log, read-only."""

from __future__ import annotations

from rest_framework import serializers

from api.models import AuditEntry
from api.serializers.acls import query_text


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "created_at",
            "username",
            "remote_addr",
            "method",
            "path",
            "action",
            "resource",
            "status_code",
            "kafka_error",
            "detail",
        ]
        read_only_fields = fields


class AuditQuerySerializer(serializers.Serializer):
    user = query_text(150, help_text="Exact user name")
    action = query_text(200, help_text='Part of the action, e.g. "acl" or "api:group-detail"')
    resource = query_text(500, help_text="Part of the resource")
