"""The typed records of `__consumer_offsets` and their binary codec.

Field names follow Apache Kafka 4.x's JSON schemas in
`group-coordinator/src/main/resources/common/message/` in snake_case, with one normalization:
every key's group field is `group_id` (Kafka spells it `group` in the older schemas), so the
runtime can route any record to its group's partition.

Nullable strings default to None; other fields default to Kafka's defaults (the JSON `default`,
else 0, "", b"" or an empty tuple). Collections are tuples so every record is hashable.
"""

from __future__ import annotations

import io
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from kio.serial import readers, writers
from kio.serial.errors import SerialError

from broker.coordinator.runtime import Record

ZERO_UUID = uuid.UUID(int=0)


# --- offsets (record type 1; type 0 is the legacy key layout, read only) ---


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int = 0
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = -1  # only in value version 1; -1 means "not set"
    # The id of the topic committed by id (OffsetCommit v10, Kafka 4.1): tagged field 0 of
    # version 4+. OffsetFetch by id leaves out an offset of another topic of the same name.
    topic_id: uuid.UUID = ZERO_UUID


# --- classic groups (record type 2) ---


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout: int = -1
    session_timeout: int = 0
    subscription: bytes = b""
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str = ""
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


# --- consumer groups, KIP-848 (record types 3-8 and 16) ---


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int = 0
    racks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID = ZERO_UUID
    topic_name: str = ""
    num_partitions: int = 0
    partition_metadata: tuple[PartitionMetadata, ...] = ()  # deprecated since 4.0


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str = ""
    metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int = 0
    supported_protocols: tuple[ClassicProtocol, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged field 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int = 0


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """Kafka's `TopicPartition` (target assignment) and `TopicPartitions` (current assignment)."""

    topic_id: uuid.UUID = ZERO_UUID
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: tuple[TopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0  # int8, Kafka's MemberState value
    assigned_partitions: tuple[TopicPartitions, ...] = ()
    partitions_pending_revocation: tuple[TopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...] = ()
    version: int = 0
    timestamp: int = 0


# --- codec -------------------------------------------------------------------------------------
#
# Kafka's framing (CoordinatorRecordSerde): a key is `int16 record type` followed by the key's
# fields, never flexible; a value is `int16 version` followed by the value's fields in that
# version's encoding, flexible versions with compact lengths and tagged fields (KIP-482). A
# tombstone is a key with a null value. Each schema below is a table of field specs read off
# Kafka's JSON; one generic reader and writer interpret them.


class CorruptRecordError(ValueError):
    """Bytes that are not a valid record of a coordinator topic."""


_MAX_VERSION = 0x7FFF


@dataclass(frozen=True, slots=True)
class _Array:
    element: _Type


@dataclass(frozen=True, slots=True)
class _Struct:
    cls: type
    fields: tuple[_Field, ...]


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    type: _Type  # "int8" "int16" "int32" "int64" "uuid" "string" "bytes", an _Array or a _Struct
    versions: tuple[int, int] = (0, _MAX_VERSION)
    nullable: bool = False  # in every version the field exists (true of all these schemas)
    tag: int | None = None  # tagged in every flexible version


_Type = str | _Array | _Struct


def _struct(cls: type, *fields: _Field) -> _Struct:
    return _Struct(cls, fields)


def _f(
    name: str,
    type_: _Type,
    since: int = 0,
    until: int = _MAX_VERSION,
    *,
    nullable: bool = False,
    tag: int | None = None,
) -> _Field:
    return _Field(name, type_, (since, until), nullable, tag)


_TOPIC_PARTITIONS = _struct(
    TopicPartitions, _f("topic_id", "uuid"), _f("partitions", _Array("int32"))
)

_MEMBER_METADATA = _struct(
    MemberMetadata,
    _f("member_id", "string"),
    _f("group_instance_id", "string", 3, nullable=True),
    _f("client_id", "string"),
    _f("client_host", "string"),
    _f("rebalance_timeout", "int32", 1),
    _f("session_timeout", "int32"),
    _f("subscription", "bytes"),
    _f("assignment", "bytes"),
)

_CLASSIC_MEMBER_METADATA = _struct(
    ClassicMemberMetadata,
    _f("session_timeout_ms", "int32"),
    _f(
        "supported_protocols",
        _Array(_struct(ClassicProtocol, _f("name", "string"), _f("metadata", "bytes"))),
    ),
)

_TOPIC_METADATA = _struct(
    TopicMetadata,
    _f("topic_id", "uuid"),
    _f("topic_name", "string"),
    _f("num_partitions", "int32"),
    _f(
        "partition_metadata",
        _Array(_struct(PartitionMetadata, _f("partition", "int32"), _f("racks", _Array("string")))),
    ),
)

_GROUP_KEY = (_f("group_id", "string"),)
_MEMBER_KEY = (_f("group_id", "string"), _f("member_id", "string"))


@dataclass(frozen=True, slots=True)
class _RecordType:
    type_id: int  # the key's int16 "version"
    key: _Struct
    value: _Struct
    max_version: int  # highest value version read
    flexible_from: int  # first flexible value version
    write_version: Callable[[Any], int]  # the value version Kafka 4.x writes


def _always(version: int) -> Callable[[Any], int]:
    return lambda _value: version


_OFFSET_COMMIT_KEY = _struct(
    OffsetCommitKey, *_GROUP_KEY, _f("topic", "string"), _f("partition", "int32")
)
_OFFSET_COMMIT_VALUE = _struct(
    OffsetCommitValue,
    _f("offset", "int64"),
    _f("leader_epoch", "int32", 3),
    _f("metadata", "string"),
    _f("commit_timestamp", "int64"),
    _f("expire_timestamp", "int64", 1, until=1),
    _f("topic_id", "uuid", 4, tag=0),
)

_RECORD_TYPES = (
    # Version 1 keeps an expire timestamp. Kafka 4.1+ writes version 4 otherwise, whose only
    # addition is the tagged topic id: written here when there is one (a commit by id), and
    # version 3, the same fields, for a commit by name.
    _RecordType(
        1,
        _OFFSET_COMMIT_KEY,
        _OFFSET_COMMIT_VALUE,
        4,
        4,
        lambda value: (
            1 if value.expire_timestamp != -1 else 4 if value.topic_id != ZERO_UUID else 3
        ),
    ),
    _RecordType(
        2,
        _struct(GroupMetadataKey, *_GROUP_KEY),
        _struct(
            GroupMetadataValue,
            _f("protocol_type", "string"),
            _f("generation", "int32"),
            _f("protocol", "string", nullable=True),
            _f("leader", "string", nullable=True),
            _f("current_state_timestamp", "int64", 2),
            _f("members", _Array(_MEMBER_METADATA)),
        ),
        4,
        4,
        _always(3),
    ),
    _RecordType(
        3,
        _struct(ConsumerGroupMetadataKey, *_GROUP_KEY),
        _struct(ConsumerGroupMetadataValue, _f("epoch", "int32")),
        0,
        0,
        _always(0),
    ),
    _RecordType(
        4,
        _struct(ConsumerGroupPartitionMetadataKey, *_GROUP_KEY),
        _struct(ConsumerGroupPartitionMetadataValue, _f("topics", _Array(_TOPIC_METADATA))),
        0,
        0,
        _always(0),
    ),
    _RecordType(
        5,
        _struct(ConsumerGroupMemberMetadataKey, *_MEMBER_KEY),
        _struct(
            ConsumerGroupMemberMetadataValue,
            _f("instance_id", "string", nullable=True),
            _f("rack_id", "string", nullable=True),
            _f("client_id", "string"),
            _f("client_host", "string"),
            _f("subscribed_topic_names", _Array("string")),
            _f("subscribed_topic_regex", "string", nullable=True),
            _f("rebalance_timeout_ms", "int32"),
            _f("server_assignor", "string", nullable=True),
            _f("classic_member_metadata", _CLASSIC_MEMBER_METADATA, nullable=True, tag=0),
        ),
        0,
        0,
        _always(0),
    ),
    _RecordType(
        6,
        _struct(ConsumerGroupTargetAssignmentMetadataKey, *_GROUP_KEY),
        _struct(ConsumerGroupTargetAssignmentMetadataValue, _f("assignment_epoch", "int32")),
        0,
        0,
        _always(0),
    ),
    _RecordType(
        7,
        _struct(ConsumerGroupTargetAssignmentMemberKey, *_MEMBER_KEY),
        _struct(
            ConsumerGroupTargetAssignmentMemberValue,
            _f("topic_partitions", _Array(_TOPIC_PARTITIONS)),
        ),
        0,
        0,
        _always(0),
    ),
    _RecordType(
        8,
        _struct(ConsumerGroupCurrentMemberAssignmentKey, *_MEMBER_KEY),
        _struct(
            ConsumerGroupCurrentMemberAssignmentValue,
            _f("member_epoch", "int32"),
            _f("previous_member_epoch", "int32"),
            _f("state", "int8"),
            _f("assigned_partitions", _Array(_TOPIC_PARTITIONS)),
            _f("partitions_pending_revocation", _Array(_TOPIC_PARTITIONS)),
        ),
        0,
        0,
        _always(0),
    ),
    _RecordType(
        16,
        _struct(
            ConsumerGroupRegularExpressionKey,
            *_GROUP_KEY,
            _f("regular_expression", "string"),
        ),
        _struct(
            ConsumerGroupRegularExpressionValue,
            _f("topics", _Array("string")),
            _f("version", "int64"),
            _f("timestamp", "int64"),
        ),
        0,
        0,
        _always(0),
    ),
)


class RecordCodec:
    """The binary codec of one coordinator topic's records: the key's int16 picks the record
    type, the value's int16 its version (Kafka's CoordinatorRecordSerde)."""

    def __init__(
        self, topic: str, types: tuple[_RecordType, ...], read_only: dict[int, int] | None = None
    ) -> None:
        self.topic = topic
        self._by_type_id = {t.type_id: t for t in types}
        for alias, type_id in (read_only or {}).items():
            self._by_type_id[alias] = self._by_type_id[type_id]
        self._by_key_class = {t.key.cls: t for t in types}

    def encode(
        self, record: Record, *, value_version: int | None = None
    ) -> tuple[bytes, bytes | None]:
        """The key and value bytes of a record as Kafka writes them; None for a tombstone's
        value. The value is written at the version Kafka 4.x writes; `value_version`
        overrides it."""
        record_type = self._by_key_class.get(type(record.key))
        if record_type is None:
            raise TypeError(f"not a {self.topic} key: {type(record.key).__name__}")
        if record.value is not None and type(record.value) is not record_type.value.cls:
            raise TypeError(
                f"{type(record.value).__name__} is not the value of {type(record.key).__name__}"
            )
        try:
            key = io.BytesIO()
            writers.write_int16(key, record_type.type_id)
            _write_struct(key, record_type.key, record.key, 0, False)
            if record.value is None:
                return key.getvalue(), None
            version = (
                record_type.write_version(record.value) if value_version is None else value_version
            )
            if not 0 <= version <= record_type.max_version:
                raise ValueError(f"{record_type.value.cls.__name__} has no version {version}")
            value = io.BytesIO()
            writers.write_int16(value, version)
            _write_struct(
                value,
                record_type.value,
                record.value,
                version,
                version >= record_type.flexible_from,
            )
            return key.getvalue(), value.getvalue()
        except (struct.error, SerialError) as e:
            raise ValueError(f"cannot encode {record}: {e}") from e

    def decode(self, key: bytes, value: bytes | None) -> Record:
        """The record of a key and value read from the topic (value None: a tombstone).
        Raises CorruptRecordError on anything that is not a valid record."""
        try:
            key_buf = memoryview(key)
            type_id, offset = readers.read_int16(key_buf, 0)
            record_type = self._by_type_id.get(type_id)
            if record_type is None:
                raise CorruptRecordError(f"unknown record type {type_id}")
            record_key = _read_message(key_buf, offset, record_type.key, 0, False)
            if value is None:
                return Record(record_key, None)
            value_buf = memoryview(value)
            version, offset = readers.read_int16(value_buf, 0)
            if not 0 <= version <= record_type.max_version:
                raise CorruptRecordError(
                    f"unsupported {record_type.value.cls.__name__} version {version}"
                )
            flexible = version >= record_type.flexible_from
            return Record(
                record_key, _read_message(value_buf, offset, record_type.value, version, flexible)
            )
        except CorruptRecordError:
            raise
        except (SerialError, ValueError, OverflowError) as e:
            raise CorruptRecordError(f"malformed {self.topic} record: {e}") from e


def _read_uuid(buffer: memoryview, offset: int) -> tuple[uuid.UUID, int]:
    value, size = readers.read_uuid(buffer, offset)
    return value or ZERO_UUID, size  # kio reads the zero uuid as None


_Reader = Callable[[memoryview, int], tuple[Any, int]]
_Writer = Callable[[io.BytesIO, Any], None]

_FIXED_WIDTH: dict[str, tuple[_Reader, _Writer]] = {
    "int8": (readers.read_int8, writers.write_int8),
    "int16": (readers.read_int16, writers.write_int16),
    "int32": (readers.read_int32, writers.write_int32),
    "int64": (readers.read_int64, writers.write_int64),
    "uuid": (_read_uuid, writers.write_uuid),
}
# (type, flexible, nullable) -> reader, writer
_VARIABLE_WIDTH: dict[tuple[str, bool, bool], tuple[_Reader, _Writer]] = {
    ("string", False, False): (readers.read_legacy_string, writers.write_legacy_string),
    ("string", False, True): (
        readers.read_nullable_legacy_string,
        writers.write_nullable_legacy_string,
    ),
    ("string", True, False): (readers.read_compact_string, writers.write_compact_string),
    ("string", True, True): (
        readers.read_compact_string_nullable,
        writers.write_nullable_compact_string,
    ),
    ("bytes", False, False): (readers.read_legacy_bytes, writers.write_legacy_bytes),
    ("bytes", True, False): (readers.read_compact_string_as_bytes, writers.write_compact_string),
}


def _primitive(type_: str, flexible: bool, nullable: bool) -> tuple[_Reader, _Writer]:
    return _FIXED_WIDTH.get(type_) or _VARIABLE_WIDTH[type_, flexible, nullable]


def _present(field: _Field, version: int) -> bool:
    return field.versions[0] <= version <= field.versions[1]


@cache
def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls)}


def _write_value(
    out: io.BytesIO, type_: _Type, value: Any, version: int, flexible: bool, nullable: bool
) -> None:
    if isinstance(type_, _Array):
        length_writer = writers.write_compact_array_length if flexible else writers.write_int32
        if nullable and value is None:  # Kafka's null array: length -1, compact length 0
            length_writer(out, None if flexible else -1)
            return
        length_writer(out, len(value))
        for item in value:
            _write_value(out, type_.element, item, version, flexible, False)
    elif isinstance(type_, _Struct):
        # Nullable structs occur only as tagged fields, whose presence marker is a varint.
        if nullable:
            writers.write_unsigned_varint(out, 0 if value is None else 1)
        if value is not None:
            _write_struct(out, type_, value, version, flexible)
    else:
        _primitive(type_, flexible, nullable)[1](out, value)


def _write_struct(out: io.BytesIO, spec: _Struct, obj: Any, version: int, flexible: bool) -> None:
    tagged: list[tuple[int, bytes]] = []
    for field in spec.fields:
        if not _present(field, version):
            continue
        value = getattr(obj, field.name)
        if field.tag is None:
            _write_value(out, field.type, value, version, flexible, field.nullable)
        elif flexible and value != _defaults(spec.cls)[field.name]:
            payload = io.BytesIO()
            _write_value(payload, field.type, value, version, True, field.nullable)
            tagged.append((field.tag, payload.getvalue()))
    if flexible:
        writers.write_unsigned_varint(out, len(tagged))
        for tag, payload in sorted(tagged):
            writers.write_unsigned_varint(out, tag)
            writers.write_unsigned_varint(out, len(payload))
            out.write(payload)


def _read_value(
    buf: memoryview, offset: int, type_: _Type, version: int, flexible: bool, nullable: bool
) -> tuple[Any, int]:
    if isinstance(type_, _Array):
        if flexible:
            length, size = readers.read_compact_array_length(buf, offset)
        else:
            length, size = readers.read_int32(buf, offset)
        offset += size
        if (length is None or length == -1) and nullable:
            return None, offset
        if length is None or length < 0:
            raise CorruptRecordError("null or negative length for a non-nullable array")
        items = []
        for _ in range(length):  # every element takes at least one byte: bounded by the buffer
            item, offset = _read_value(buf, offset, type_.element, version, flexible, False)
            items.append(item)
        return tuple(items), offset
    if isinstance(type_, _Struct):
        if nullable:
            present, size = readers.read_unsigned_varint(buf, offset)
            offset += size
            if present == 0:
                return None, offset
        return _read_struct(buf, offset, type_, version, flexible)
    value, size = _primitive(type_, flexible, nullable)[0](buf, offset)
    return value, offset + size


def _read_struct(
    buf: memoryview, offset: int, spec: _Struct, version: int, flexible: bool
) -> tuple[Any, int]:
    values: dict[str, Any] = {}
    by_tag: dict[int, _Field] = {}
    for field in spec.fields:
        if not _present(field, version):
            continue
        if field.tag is None:
            values[field.name], offset = _read_value(
                buf, offset, field.type, version, flexible, field.nullable
            )
        elif flexible:
            by_tag[field.tag] = field
    if flexible:
        count, size = readers.read_unsigned_varint(buf, offset)
        offset += size
        for _ in range(count):
            tag, size = readers.read_unsigned_varint(buf, offset)
            offset += size
            length, size = readers.read_unsigned_varint(buf, offset)
            offset += size
            end = offset + length
            if end > len(buf):
                raise CorruptRecordError(f"tagged field {tag} overruns the buffer")
            field = by_tag.get(tag)
            if field is not None:  # unknown tags are skipped, as Kafka does
                values[field.name], stop = _read_value(
                    buf[:end], offset, field.type, version, True, field.nullable
                )
                if stop != end:
                    raise CorruptRecordError(f"tagged field {tag} has {end - stop} extra bytes")
            offset = end
    return spec.cls(**values), offset


def _read_message(buf: memoryview, offset: int, spec: _Struct, version: int, flexible: bool) -> Any:
    message, offset = _read_struct(buf, offset, spec, version, flexible)
    if offset != len(buf):
        raise CorruptRecordError(f"{len(buf) - offset} bytes after {spec.cls.__name__}")
    return message


# Record type 0 is the pre-0.10.1 offset commit key: the same fields, read only.
OFFSETS_CODEC = RecordCodec("__consumer_offsets", _RECORD_TYPES, read_only={0: 1})
encode_record = OFFSETS_CODEC.encode
decode_record = OFFSETS_CODEC.decode
