"""The records of `__consumer_offsets`: round trips, Kafka's byte layout, corrupt input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from broker.coordinator.records import (
    ZERO_UUID,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    CorruptRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionMetadata,
    TopicMetadata,
    TopicPartitions,
    decode_record,
    encode_record,
)
from broker.coordinator.runtime import Record

# --- strategies ---


def ints(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def tuples(elements: st.SearchStrategy) -> st.SearchStrategy[tuple]:
    return st.lists(elements, max_size=3).map(tuple)


i8, i32, i64 = ints(8), ints(32), ints(64)
text = st.text(max_size=12)
nullable_text = st.none() | text
blobs = st.binary(max_size=12)
uuids = st.just(ZERO_UUID) | st.uuids()
topic_partitions = st.builds(TopicPartitions, topic_id=uuids, partitions=tuples(i32))

offset_commit_values = st.builds(
    OffsetCommitValue,
    offset=i64,
    leader_epoch=i32,
    metadata=text,
    commit_timestamp=i64,
    expire_timestamp=st.just(-1),
) | st.builds(  # an expire timestamp is written at version 1, which has no leader epoch
    OffsetCommitValue,
    offset=i64,
    metadata=text,
    commit_timestamp=i64,
    expire_timestamp=i64.filter(lambda t: t != -1),
)
member_metadata = st.builds(
    MemberMetadata,
    member_id=text,
    group_instance_id=nullable_text,
    client_id=text,
    client_host=text,
    rebalance_timeout=i32,
    session_timeout=i32,
    subscription=blobs,
    assignment=blobs,
)
group_metadata_values = st.builds(
    GroupMetadataValue,
    protocol_type=text,
    generation=i32,
    protocol=nullable_text,
    leader=nullable_text,
    current_state_timestamp=i64,
    members=tuples(member_metadata),
)
partition_metadata_values = st.builds(
    ConsumerGroupPartitionMetadataValue,
    topics=tuples(
        st.builds(
            TopicMetadata,
            topic_id=uuids,
            topic_name=text,
            num_partitions=i32,
            partition_metadata=tuples(
                st.builds(PartitionMetadata, partition=i32, racks=tuples(text))
            ),
        )
    ),
)
member_metadata_values = st.builds(
    ConsumerGroupMemberMetadataValue,
    instance_id=nullable_text,
    rack_id=nullable_text,
    client_id=text,
    client_host=text,
    subscribed_topic_names=tuples(text),
    subscribed_topic_regex=nullable_text,
    rebalance_timeout_ms=i32,
    server_assignor=nullable_text,
    classic_member_metadata=st.none()
    | st.builds(
        ClassicMemberMetadata,
        session_timeout_ms=i32,
        supported_protocols=tuples(st.builds(ClassicProtocol, name=text, metadata=blobs)),
    ),
)
current_assignment_values = st.builds(
    ConsumerGroupCurrentMemberAssignmentValue,
    member_epoch=i32,
    previous_member_epoch=i32,
    state=i8,
    assigned_partitions=tuples(topic_partitions),
    partitions_pending_revocation=tuples(topic_partitions),
)

# key strategy, value strategy, highest value version Kafka 4.x reads
RECORD_TYPES = {
    OffsetCommitKey: (
        st.builds(OffsetCommitKey, group_id=text, topic=text, partition=i32),
        offset_commit_values,
        4,
    ),
    GroupMetadataKey: (st.builds(GroupMetadataKey, group_id=text), group_metadata_values, 4),
    ConsumerGroupMetadataKey: (
        st.builds(ConsumerGroupMetadataKey, group_id=text),
        st.builds(ConsumerGroupMetadataValue, epoch=i32),
        0,
    ),
    ConsumerGroupPartitionMetadataKey: (
        st.builds(ConsumerGroupPartitionMetadataKey, group_id=text),
        partition_metadata_values,
        0,
    ),
    ConsumerGroupMemberMetadataKey: (
        st.builds(ConsumerGroupMemberMetadataKey, group_id=text, member_id=text),
        member_metadata_values,
        0,
    ),
    ConsumerGroupTargetAssignmentMetadataKey: (
        st.builds(ConsumerGroupTargetAssignmentMetadataKey, group_id=text),
        st.builds(ConsumerGroupTargetAssignmentMetadataValue, assignment_epoch=i32),
        0,
    ),
    ConsumerGroupTargetAssignmentMemberKey: (
        st.builds(ConsumerGroupTargetAssignmentMemberKey, group_id=text, member_id=text),
        st.builds(
            ConsumerGroupTargetAssignmentMemberValue, topic_partitions=tuples(topic_partitions)
        ),
        0,
    ),
    ConsumerGroupCurrentMemberAssignmentKey: (
        st.builds(ConsumerGroupCurrentMemberAssignmentKey, group_id=text, member_id=text),
        current_assignment_values,
        0,
    ),
    ConsumerGroupRegularExpressionKey: (
        st.builds(ConsumerGroupRegularExpressionKey, group_id=text, regular_expression=text),
        st.builds(
            ConsumerGroupRegularExpressionValue, topics=tuples(text), version=i64, timestamp=i64
        ),
        0,
    ),
}

records = st.one_of(
    [st.builds(Record, key=keys, value=values) for keys, values, _ in RECORD_TYPES.values()]
)
tombstones = st.one_of(
    [st.builds(Record, key=keys, value=st.none()) for keys, _, _ in RECORD_TYPES.values()]
)


# --- round trips ---


@given(records)
def test_every_record_round_trips(record: Record) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record
    assert isinstance(record.key.group_id, str)  # the runtime routes every key by its group


@given(tombstones)
def test_a_tombstone_is_a_key_with_a_null_value(record: Record) -> None:
    key, value = encode_record(record)
    assert value is None
    assert decode_record(key, None) == record


@given(records, st.data())
def test_every_readable_value_version_round_trips(record: Record, data: st.DataObject) -> None:
    version = data.draw(st.integers(0, RECORD_TYPES[type(record.key)][2]), label="version")
    key, value = encode_record(record, value_version=version)
    decoded = decode_record(key, value)
    # Fields a version lacks come back as their defaults; the rest survive unchanged.
    assert decoded.key == record.key
    assert encode_record(decoded, value_version=version) == (key, value)


def test_every_key_type_is_covered() -> None:
    assert len(RECORD_TYPES) == 9


# --- Kafka's byte layout, assembled by hand from the JSON schemas ---


def string(value: str) -> str:
    """A non-flexible string: int16 length, UTF-8 bytes (hex)."""
    return f"{len(value):04x}" + value.encode().hex()


def compact_string(value: str) -> str:
    """A flexible string: unsigned varint length + 1 (one byte when short), UTF-8 bytes (hex)."""
    return f"{len(value) + 1:02x}" + value.encode().hex()


# OffsetCommitKey: int16 record type 1, group, topic, int32 partition
OFFSET_COMMIT_KEY = bytes.fromhex("0001" + string("group") + string("topic") + "00000007")
OFFSET = "0000000000000064"  # 100
COMMIT_TIMESTAMP = "0000018bcfe56800"  # 1_700_000_000_000
METADATA = string("meta")


@pytest.mark.parametrize(
    ("value_bytes", "expected"),
    [
        # version 3, what Kafka 4.x writes: offset, leader epoch, metadata, commit timestamp
        (
            "0003" + OFFSET + "00000005" + METADATA + COMMIT_TIMESTAMP,
            OffsetCommitValue(100, 5, "meta", 1_700_000_000_000),
        ),
        # version 1: offset, metadata, commit timestamp, expire timestamp
        (
            "0001" + OFFSET + METADATA + COMMIT_TIMESTAMP + "0000018bcfe56801",
            OffsetCommitValue(100, -1, "meta", 1_700_000_000_000, 1_700_000_000_001),
        ),
        # version 0 and 2: offset, metadata, commit timestamp
        (
            "0000" + OFFSET + METADATA + COMMIT_TIMESTAMP,
            OffsetCommitValue(100, -1, "meta", 1_700_000_000_000),
        ),
        (
            "0002" + OFFSET + METADATA + COMMIT_TIMESTAMP,
            OffsetCommitValue(100, -1, "meta", 1_700_000_000_000),
        ),
        # version 4, flexible: a compact string (length + 1) and an empty tagged-field section
        (
            "0004" + OFFSET + "00000005" + compact_string("meta") + COMMIT_TIMESTAMP + "00",
            OffsetCommitValue(100, 5, "meta", 1_700_000_000_000),
        ),
    ],
)
def test_offset_commit_matches_kafkas_layout(value_bytes: str, expected: OffsetCommitValue) -> None:
    record = decode_record(OFFSET_COMMIT_KEY, bytes.fromhex(value_bytes))
    assert record == Record(OffsetCommitKey("group", "topic", 7), expected)
    assert encode_record(record, value_version=int(value_bytes[:4], 16)) == (
        OFFSET_COMMIT_KEY,
        bytes.fromhex(value_bytes),
    )


def test_offset_commit_is_written_at_the_version_kafka_writes() -> None:
    key = OffsetCommitKey("group", "topic", 7)
    _, value = encode_record(Record(key, OffsetCommitValue(100, 5, "meta", 1_700_000_000_000)))
    assert value[:2] == b"\x00\x03"
    _, value = encode_record(Record(key, OffsetCommitValue(100, -1, "meta", 0, 1)))
    assert value[:2] == b"\x00\x01"


def test_an_offset_committed_by_topic_id_keeps_it_in_tagged_field_0() -> None:
    """Kafka 4.1+ (KAFKA-19141): version 4 with the topic id as tagged field 0; written for a
    commit by id (OffsetCommit v10), the only one with an id to keep."""
    topic_id = uuid.UUID("3f6e8a7c-1d2b-4c5e-9f80-a1b2c3d4e5f6")
    value_bytes = bytes.fromhex(
        "0004"
        + OFFSET
        + "00000005"
        + compact_string("meta")
        + COMMIT_TIMESTAMP
        + "01"  # one tagged field:
        + "00"  # tag 0
        + "10"  # 16 bytes
        + topic_id.hex
    )
    record = Record(
        OffsetCommitKey("group", "topic", 7),
        OffsetCommitValue(100, 5, "meta", 1_700_000_000_000, topic_id=topic_id),
    )
    assert encode_record(record) == (OFFSET_COMMIT_KEY, value_bytes)
    assert decode_record(OFFSET_COMMIT_KEY, value_bytes) == record


def test_the_legacy_offset_commit_key_type_0_is_read() -> None:
    key = b"\x00\x00" + OFFSET_COMMIT_KEY[2:]
    value = bytes.fromhex("0000" + OFFSET + METADATA + COMMIT_TIMESTAMP)
    assert decode_record(key, value) == Record(
        OffsetCommitKey("group", "topic", 7), OffsetCommitValue(100, -1, "meta", 1_700_000_000_000)
    )


def test_group_metadata_matches_kafkas_layout() -> None:
    key = bytes.fromhex("0002" + string("g"))
    value = bytes.fromhex(
        "".join(
            [
                "0003",  # version
                string("consumer"),  # protocol type
                "00000001",  # generation
                string("range"),  # protocol
                string("m1"),  # leader
                COMMIT_TIMESTAMP,  # current state timestamp
                "00000001",  # one member:
                string("m1"),  # member id
                "ffff",  # null group instance id
                string("c"),  # client id
                string("/h"),  # client host
                "000493e0",  # rebalance timeout 300000
                "0000afc8",  # session timeout 45000
                "000000020102",  # subscription
                "00000000",  # assignment
            ]
        )
    )
    member = MemberMetadata("m1", None, "c", "/h", 300_000, 45_000, b"\x01\x02", b"")
    record = Record(
        GroupMetadataKey("g"),
        GroupMetadataValue("consumer", 1, "range", "m1", 1_700_000_000_000, (member,)),
    )
    assert encode_record(record) == (key, value)
    assert decode_record(key, value) == record


def test_current_member_assignment_matches_kafkas_layout() -> None:
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    key = bytes.fromhex("0008" + string("g") + string("m"))
    value = bytes.fromhex(
        "".join(
            [
                "0000",  # version
                "0000000a",  # member epoch
                "00000009",  # previous member epoch
                "01",  # state
                "02",  # one assigned topic:
                topic_id.hex,
                "03",  # two partitions:
                "00000000",
                "00000001",
                "00",  # no tagged fields in the topic
                "01",  # no partitions pending revocation
                "00",  # no tagged fields
            ]
        )
    )
    record = Record(
        ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
        ConsumerGroupCurrentMemberAssignmentValue(10, 9, 1, (TopicPartitions(topic_id, (0, 1)),)),
    )
    assert encode_record(record) == (key, value)
    assert decode_record(key, value) == record


def test_classic_member_metadata_is_tagged_field_0() -> None:
    key = ConsumerGroupMemberMetadataKey("g", "m")
    plain = ConsumerGroupMemberMetadataValue(client_id="c")
    _, value = encode_record(Record(key, plain))
    assert value.endswith(b"\xff\xff\xff\xff\x00\x00")  # rebalance timeout, null assignor, no tags
    classic = ClassicMemberMetadata(3, (ClassicProtocol("range", b"x"),))
    _, tagged = encode_record(
        Record(
            key, ConsumerGroupMemberMetadataValue(client_id="c", classic_member_metadata=classic)
        )
    )
    payload = bytes.fromhex(
        "".join(
            [
                "01",  # present
                "00000003",  # session timeout
                "02",  # one protocol:
                compact_string("range"),
                "02" + b"x".hex(),  # metadata
                "00",  # no tagged fields in the protocol
                "00",  # no tagged fields in the classic member metadata
            ]
        )
    )
    assert tagged == value[:-1] + bytes([1, 0, len(payload)]) + payload


def test_unknown_tagged_fields_are_skipped() -> None:
    key, _ = encode_record(Record(ConsumerGroupMetadataKey("g"), None))
    value = bytes.fromhex("000000000007010502abcd")
    assert decode_record(key, value) == Record(
        ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7)
    )


# --- corrupt input ---


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"", None),
        (b"\x00", None),
        (b"\x00\x63" + b"\x00\x01g", None),  # unknown record type
        (b"\x00\x09" + b"\x00\x01g", None),  # a share group record
        (OFFSET_COMMIT_KEY + b"\x00", None),  # trailing bytes
        (OFFSET_COMMIT_KEY[:-1], None),  # truncated
        (b"\x00\x02\xff\xff", None),  # null group id
        (b"\x00\x02\xff\xfe", None),  # negative length
        (b"\x00\x02\x00\x02\xc3\x28", None),  # invalid UTF-8
        (OFFSET_COMMIT_KEY, b""),
        (OFFSET_COMMIT_KEY, b"\x00\x05" + bytes(30)),  # unsupported version
        (OFFSET_COMMIT_KEY, b"\xff\xff" + bytes(30)),
        (b"\x00\x03\x00\x01g", b"\x00\x00\x00\x00\x00\x07\x01\x05\x09\xab"),  # tag overruns
        (b"\x00\x07\x00\x01g\x00\x01m", b"\x00\x00\x00"),  # null array
        (b"\x00\x05\x00\x01g\x00\x01m", b"\x00\x00" + b"\xff" * 8),  # varint too long
    ],
)
def test_corrupt_records_raise_corrupt_record_error(key: bytes, value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        decode_record(key, value)


@given(records)
def test_every_truncation_is_corrupt(record: Record) -> None:
    key, value = encode_record(record)
    for end in range(len(key)):
        with pytest.raises(CorruptRecordError):
            decode_record(key[:end], value)
    for end in range(len(value)):
        with pytest.raises(CorruptRecordError):
            decode_record(key, value[:end])


def decodes_or_is_corrupt(key: bytes, value: bytes | None) -> None:
    try:
        assert isinstance(decode_record(key, value), Record)
    except CorruptRecordError:
        pass


@given(st.binary(max_size=64), st.none() | st.binary(max_size=64))
@example(b"\x00\x04\x00\x00", b"\x00\x00\x02" + bytes(16) + b"\x00\xff\xff\xff\xff\x0f")
def test_arbitrary_bytes_decode_or_raise_corrupt_record_error(
    key: bytes, value: bytes | None
) -> None:
    decodes_or_is_corrupt(key, value)


@given(records, st.data())
def test_mangled_records_decode_or_raise_corrupt_record_error(
    record: Record, data: st.DataObject
) -> None:
    key, value = encode_record(record)
    position = data.draw(st.integers(0, len(value) - 1), label="position")
    garbage = data.draw(st.binary(min_size=1, max_size=8), label="garbage")
    decodes_or_is_corrupt(key, value[:position] + garbage + value[position + 1 :])
    decodes_or_is_corrupt(key, value[:position] + garbage)


def test_a_value_of_another_record_type_is_refused() -> None:
    with pytest.raises(TypeError):
        encode_record(Record(GroupMetadataKey("g"), ConsumerGroupMetadataValue(1)))
    with pytest.raises(TypeError):
        encode_record(Record("not a key", None))
