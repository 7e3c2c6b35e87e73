"""What the admin client returns and takes: plain dataclasses in Kafka's vocabulary."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from broker.security.operations import AclOperation, AclPermissionType, PatternType, ResourceType

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResourceType",
    "ConsumerGroupMember",
    "CreatedTopic",
    "GroupDescription",
    "GroupListing",
    "LogDirDescription",
    "NewTopic",
    "Node",
    "PartitionDescription",
    "PartitionLag",
    "PatternType",
    "ProducerState",
    "ReplicaInfo",
    "ResourceType",
    "ScramCredentialInfo",
    "TopicDescription",
    "TopicListing",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
]


class TopicPartition(NamedTuple):
    """A partition of a topic; equal to and hashed as the plain `(topic, partition)` tuple."""

    topic: str
    partition: int


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type codes."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


class AlterConfigOpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    # Kafka's Node.isFenced (KIP-1073): only DescribeCluster asked for fenced brokers says so.
    fenced: bool = False


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[Node]


@dataclass(frozen=True)
class ReplicaInfo:
    """One partition's replica in a log dir (Kafka's admin ReplicaInfo)."""

    size: int  # bytes on disk
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    """One log dir of a broker: its replicas and its volume's total and usable bytes (-1
    where the broker does not say: before DescribeLogDirs v4)."""

    path: str
    replicas: dict[TopicPartition, ReplicaInfo]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(frozen=True)
class TopicListing:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partition_count: int


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    # Replicas on brokers that are fenced or gone (Metadata v5+).
    offline_replicas: list[int] = field(default_factory=list)

    @property
    def offline(self) -> bool:
        """Without a leader: no writes, no reads, no offsets."""
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        """Its ISR lacks one of its replicas."""
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: list[PartitionDescription]


@dataclass(frozen=True)
class NewTopic:
    """-1 for num_partitions or replication_factor takes the broker's default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CreatedTopic:
    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    replication_factor: int


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int  # Kafka's ConfigSource code: 1 dynamic topic, 4 static broker, 5 default, ...
    read_only: bool
    is_sensitive: bool


@dataclass(frozen=True)
class AlterConfigOp:
    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET


@dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True)
class AclBindingFilter:
    """None matches any value; pattern_type ANY matches names exactly, MATCH every pattern that
    applies to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str  # "classic" or "consumer"


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[TopicPartition]
    member_epoch: int | None = None  # consumer protocol only
    subscribed_topics: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    group_type: str  # "classic" or "consumer"
    state: str
    protocol_type: str
    protocol: str | None  # classic: the chosen assignor; consumer: the server-side assignor
    members: list[ConsumerGroupMember]
    group_epoch: int | None = None


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int  # -1 when the group committed nothing for it
    high_watermark: int
    lag: int


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1 when no transaction is open
    partitions: list[TopicPartition]


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_transaction_start_offset: int  # -1 outside a transaction


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    iterations: int


@dataclass(frozen=True)
class RecordMetadata:
    """Where the broker put a produced record; timestamp_ms is the log's (LogAppendTime or
    the producer's CreateTime)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


class ConsumerRecord:
    """A record as a consumer sees it; timestamp_type is 0 CreateTime, 1 LogAppendTime, -1
    none (magic 0 messages have no timestamp); headers a list of (key, value).

    Written out rather than a dataclass because a consumer builds one per record: slots, no
    frozen __init__ (object.__setattr__ per field costs several times more), and the headers
    kept as given until asked for, so that a record without any (most) holds a shared empty
    tuple instead of a list of its own: an object less per record to build and for the
    garbage collector to follow."""

    __slots__ = (
        "topic",
        "partition",
        "offset",
        "timestamp_ms",
        "timestamp_type",
        "key",
        "value",
        "_headers",
        "leader_epoch",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        leader_epoch: int = -1,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self._headers = headers
        # The batch's partition leader epoch (-1 for magic 0/1 entries): where the record sat,
        # not what it is, so records compare equal without it.
        self.leader_epoch = leader_epoch

    @property
    def headers(self) -> list[tuple[str, bytes | None]]:
        if type(self._headers) is not list:
            self._headers = list(self._headers)
        return self._headers

    @headers.setter
    def headers(self, headers: list[tuple[str, bytes | None]]) -> None:
        self._headers = headers

    def _compared(self) -> tuple:
        return (
            self.topic,
            self.partition,
            self.offset,
            self.timestamp_ms,
            self.timestamp_type,
            self.key,
            self.value,
            self.headers,
        )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable, as an unfrozen dataclass

    def __repr__(self) -> str:
        return (
            f"ConsumerRecord(topic={self.topic!r}, partition={self.partition!r}, "
            f"offset={self.offset!r}, timestamp_ms={self.timestamp_ms!r}, "
            f"timestamp_type={self.timestamp_type!r}, key={self.key!r}, value={self.value!r}, "
            f"headers={self.headers!r}, leader_epoch={self.leader_epoch!r})"
        )


__all__ += ["ConsumerRecord", "RecordMetadata"]


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed position: the offset of the next record to read, and the committer's note."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """What a transactional producer sends with the consumer's offsets (KIP-447), so that the
    group coordinator fences a commit by a member that has left the group: the generation id
    of a classic group, or the member epoch of a consumer-protocol one."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


__all__ += ["ConsumerGroupMetadata", "OffsetAndMetadata"]


@dataclass(frozen=True)
class OffsetAndTimestamp:
    """offsets_for_times' answer: the first offset whose timestamp is at least the one asked,
    and that record's timestamp."""

    offset: int
    timestamp_ms: int


__all__ += ["OffsetAndTimestamp"]


@dataclass(frozen=True)
class ClientQuotaEntity:
    """Whom a quota applies to (Kafka's ClientQuotaEntity): entity type ("user", "client-id",
    "ip") -> name, a None name being that type's default entity. Kafka allows a user, a client
    id, both, or an ip alone. Hashed by its mapping, so a describe answers a dict keyed by it."""

    USER = "user"
    CLIENT_ID = "client-id"
    IP = "ip"

    entries: Mapping[str, str | None]

    def __hash__(self) -> int:
        return hash(frozenset(self.entries.items()))


class ClientQuotaMatchType(IntEnum):
    """The wire codes of DescribeClientQuotas' match_type."""

    EXACT = 0  # the entity of that name
    DEFAULT = 1  # the type's default entity
    SPECIFIED = 2  # any entity having that type, default or named


@dataclass(frozen=True)
class ClientQuotaFilterComponent:
    """One entity type's part of a describe filter (Kafka's ClientQuotaFilterComponent)."""

    entity_type: str
    match_type: ClientQuotaMatchType
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, ClientQuotaMatchType.EXACT, name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, ClientQuotaMatchType.DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, ClientQuotaMatchType.SPECIFIED)


@dataclass(frozen=True)
class ClientQuotaAlteration:
    """Changes to one entity's quotas (Kafka's ClientQuotaAlteration): key -> the value to set,
    or None to remove the key; keys left out keep their values."""

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None]


__all__ += [
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "ClientQuotaFilterComponent",
    "ClientQuotaMatchType",
]
