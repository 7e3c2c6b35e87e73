"""Kafka's ACL model: an AclBinding is a ResourcePattern plus an AccessControlEntry; an
AclBindingFilter selects bindings for DescribeAcls and DeleteAcls. Validation follows Kafka's
CreateAcls (the controller's AclControlManager and the broker's AclApis)."""

from __future__ import annotations

from dataclasses import dataclass

from broker.security.operations import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

# The one name of the CLUSTER resource.
CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"


class InvalidAclError(ValueError):
    """A binding or filter CreateAcls/DescribeAcls/DeleteAcls refuse with INVALID_REQUEST."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        """Raise InvalidAclError with Kafka's message for a binding CreateAcls refuses: the
        broker's checks of the name first, then the controller's of the types and principal."""
        pattern, entry = self.pattern, self.entry
        if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
            raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if not pattern.name:
            raise InvalidAclError("Invalid empty resource name specified.")
        if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAclError(f"Invalid resourceType {pattern.resource_type.name}")
        if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"Invalid patternType {pattern.pattern_type.name}")
        if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidAclError(f"Invalid operation {entry.operation.name}")
        if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"Invalid permissionType {entry.permission_type.name}")
        if ":" not in entry.principal:
            raise InvalidAclError(
                f"Could not parse principal from `{entry.principal}` (no colon is present "
                "separating the principal type from the principal name)"
            )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """None for name, principal or host matches any; ANY for the enums matches any, and the
    pattern type MATCH selects every binding that applies to the named resource."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def validate(self) -> None:
        if PatternType.UNKNOWN is self.pattern_type or ResourceType.UNKNOWN is self.resource_type:
            raise InvalidAclError("Unknown patternFilter.")
        if AclOperation.UNKNOWN is self.operation or (
            AclPermissionType.UNKNOWN is self.permission_type
        ):
            raise InvalidAclError("Unknown entryFilter.")

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding.pattern) and self._matches_entry(binding.entry)

    def _matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns an authorizer would apply to a resource of this name.
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    def _matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            self.principal in (None, entry.principal)
            and self.host in (None, entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission_type in (AclPermissionType.ANY, entry.permission_type)
        )
