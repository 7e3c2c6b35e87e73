"""ACL bindings and filters, named as kafka-acls and Kafka's AdminClient name them: resource
types, pattern types, operations and permission types by their enum names (TOPIC, PREFIXED,
READ, ALLOW), never by wire codes."""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import Any

from rest_framework import serializers

from broker.client.models import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from broker.security.acl import CLUSTER_NAME

# Kafka's KafkaPrincipal string: "<type>:<name>", e.g. User:alice (type and name non-empty).
PRINCIPAL = r"^[^:\s]+:[\s\S]+$"
PRINCIPAL_HELP = '"<type>:<name>", e.g. "User:alice" ("User:*" for every user)'
# Free text of query filters: anything but NUL, which no database or Kafka string holds.
QUERY_TEXT = r"^[^\x00]*$"


class EnumNameField(serializers.ChoiceField):
    """A Kafka enum by name, case-insensitively in, upper case out; UNKNOWN is never valid."""

    def __init__(self, enum: type[IntEnum], members: Iterable[IntEnum], **kwargs: Any) -> None:
        self.enum = enum
        super().__init__(choices=[m.name for m in members], **kwargs)

    def to_internal_value(self, data: Any) -> IntEnum:
        if isinstance(data, str):
            data = data.strip().upper()
        return self.enum[super().to_internal_value(data)]

    def to_representation(self, value: Any) -> str:
        return value.name if isinstance(value, IntEnum) else str(value)


def _except(enum: type[IntEnum], *excluded: str) -> list[IntEnum]:
    return [m for m in enum if m.name not in ("UNKNOWN", *excluded)]


RESOURCE_TYPES = _except(ResourceType, "ANY")
PATTERN_TYPES = _except(PatternType, "ANY", "MATCH")
OPERATIONS = _except(AclOperation, "ANY")
PERMISSION_TYPES = _except(AclPermissionType, "ANY")


def principal_field(**kwargs: Any) -> serializers.RegexField:
    return serializers.RegexField(
        PRINCIPAL,
        max_length=32767,
        help_text=PRINCIPAL_HELP,
        error_messages={"invalid": f"A principal is {PRINCIPAL_HELP}."},
        **kwargs,
    )


def query_text(max_length: int = 1000, **kwargs: Any) -> serializers.RegexField:
    """An optional text filter of a query string; empty means no filter."""
    return serializers.RegexField(
        QUERY_TEXT,
        max_length=max_length,
        required=False,
        allow_blank=True,
        error_messages={"invalid": "Null characters are not allowed."},
        **kwargs,
    )


class AclBindingSerializer(serializers.Serializer):
    """One ACL binding: who (principal, host) may or may not (permission_type) do what
    (operation) to which resources (resource_type, resource_name, pattern_type)."""

    resource_type = EnumNameField(ResourceType, RESOURCE_TYPES)
    resource_name = serializers.CharField(
        max_length=32767, help_text='"*" for every resource of the type (LITERAL pattern).'
    )
    pattern_type = EnumNameField(PatternType, PATTERN_TYPES, default=PatternType.LITERAL)
    principal = principal_field()
    host = serializers.CharField(
        max_length=32767, default="*", allow_blank=True, help_text='"*" (or empty) for any host'
    )
    operation = EnumNameField(AclOperation, OPERATIONS)
    permission_type = EnumNameField(AclPermissionType, PERMISSION_TYPES)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["host"] = attrs.get("host") or "*"
        if (
            attrs["resource_type"] == ResourceType.CLUSTER
            and attrs["resource_name"] != CLUSTER_NAME
        ):
            raise serializers.ValidationError(
                {"resource_name": f'The CLUSTER resource is named "{CLUSTER_NAME}".'}
            )
        return attrs

    def binding(self) -> AclBinding:
        return AclBinding(**self.validated_data)


class AclFilterSerializer(serializers.Serializer):
    """Which bindings to list or delete; a field left out matches any value. pattern_type ANY
    matches the name exactly whatever the pattern, MATCH every binding that applies to the named
    resource (literal, wildcard and prefixes), as in kafka-acls."""

    resource_type = EnumNameField(ResourceType, _except(ResourceType), required=False)
    resource_name = serializers.CharField(max_length=32767, required=False)
    pattern_type = EnumNameField(PatternType, _except(PatternType), required=False)
    principal = principal_field(required=False)
    host = serializers.CharField(max_length=32767, required=False)
    operation = EnumNameField(AclOperation, _except(AclOperation), required=False)
    permission_type = EnumNameField(AclPermissionType, _except(AclPermissionType), required=False)

    def acl_filter(self) -> AclBindingFilter:
        return AclBindingFilter(**self.validated_data)


class AclDeleteSerializer(AclFilterSerializer):
    """A filter of the bindings to delete. resource_type is required, as kafka-acls --remove
    requires a resource: deleting every ACL of the cluster takes naming ANY explicitly."""

    resource_type = EnumNameField(
        ResourceType, _except(ResourceType), help_text="ANY matches every resource type"
    )


class AclDeleteResultSerializer(serializers.Serializer):
    deleted = AclBindingSerializer(many=True, help_text="The bindings the filter matched.")


# --- error bodies of every endpoint (api.errors), for the schema ---
