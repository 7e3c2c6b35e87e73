"""Kafka's ACL vocabulary (AclOperation, ResourceType, PatternType, AclPermissionType, with
their wire codes) and which operations apply to each resource type: the terms of ACLs and of
authorized-operations bitfields."""

from __future__ import annotations

from enum import IntEnum


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939: InitProducerId with enable2Pc, on the transactional id


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, name matched exactly
    MATCH = 2  # filters only: every pattern that would apply to the named resource
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def from_code(enum: type[IntEnum], code: int) -> IntEnum:
    """As Kafka's fromCode: a code this broker does not know is UNKNOWN, not an error."""
    try:
        return enum(code)
    except ValueError:
        return enum(0)


_O = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {
            _O.READ,
            _O.WRITE,
            _O.CREATE,
            _O.DESCRIBE,
            _O.DELETE,
            _O.ALTER,
            _O.DESCRIBE_CONFIGS,
            _O.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
    ),
    ResourceType.CLUSTER: frozenset(
        {
            _O.CREATE,
            _O.CLUSTER_ACTION,
            _O.DESCRIBE_CONFIGS,
            _O.ALTER_CONFIGS,
            _O.IDEMPOTENT_WRITE,
            _O.ALTER,
            _O.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE, _O.TWO_PHASE_COMMIT}),
}


def operations_bitfield(operations) -> int:
    """The int32 bitfield of Metadata/DescribeCluster/DescribeGroups authorized operations."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits
