"""Strings and byte strings of every length class through the codecs of `__consumer_offsets`
and `__transaction_state`, against Kafka's framing written out independently here: a
non-flexible string is an int16 count of UTF-8 bytes and non-flexible bytes an int32 count; in
flexible versions both are an *unsigned* varint of the byte count + 1 (KIP-482), never a
zig-zag varint, never a count of characters. The lengths straddle the varint boundaries
(count + 1 = 127/128 and 16383/16384) and the non-ASCII text makes bytes and characters differ.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace

import pytest

from broker.coordinator.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionMetadata,
    TopicMetadata,
    decode_record,
    encode_record,
)
from broker.coordinator.runtime import Record
from broker.coordinator.transaction_records import (
    TransactionLogKey,
    TransactionLogValue,
    TransactionPartitions,
    decode_transaction_record,
    encode_transaction_record,
)

LENGTHS = (0, 1, 126, 127, 128, 200, 16383, 16384)
NON_ASCII = "zé€𝄞"  # 1, 2, 3 and 4 UTF-8 bytes
INT16_MAX = 0x7FFF

TEXTS = [pytest.param("z" * n, id=f"ascii-{n}") for n in LENGTHS] + [
    pytest.param((NON_ASCII * n)[:n], id=f"utf8-{n}") for n in LENGTHS
]


def blob(text: str) -> bytes:
    """Bytes as long as `text` has characters, every byte value in turn."""
    return bytes(i % 256 for i in range(len(text)))


# --- Kafka's framing, written out by hand ---


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def legacy_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def legacy_bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def compact(data: bytes) -> bytes:
    return uvarint(len(data) + 1) + data


def fits_a_legacy_string(text: str) -> bool:
    return len(text.encode()) <= INT16_MAX


# --- OffsetCommitValue's metadata, byte for byte at every version ---

KEY = OffsetCommitKey("g", "t", 3)
KEY_BYTES = b"\x00\x01" + legacy_string("g") + legacy_string("t") + struct.pack(">i", 3)
OFFSET, EPOCH, COMMITTED_AT, EXPIRES_AT = 42, 7, 1_700_000_000_000, 1_700_000_000_001


def offset_commit_value(version: int, metadata: str) -> OffsetCommitValue:
    if version == 1:  # the only version with an expire timestamp, and without a leader epoch
        return OffsetCommitValue(OFFSET, -1, metadata, COMMITTED_AT, EXPIRES_AT)
    return OffsetCommitValue(OFFSET, EPOCH if version >= 3 else -1, metadata, COMMITTED_AT)


def offset_commit_bytes(version: int, metadata: str) -> bytes:
    """Kafka's bytes for `offset_commit_value` (OffsetCommitValue.json, versions 0-4)."""
    head = struct.pack(">hq", version, OFFSET)
    timestamp = struct.pack(">q", COMMITTED_AT)
    if version == 4:
        return head + struct.pack(">i", EPOCH) + compact(metadata.encode()) + timestamp + b"\x00"
    if version == 3:
        return head + struct.pack(">i", EPOCH) + legacy_string(metadata) + timestamp
    if version == 1:
        return head + legacy_string(metadata) + timestamp + struct.pack(">q", EXPIRES_AT)
    return head + legacy_string(metadata) + timestamp


@pytest.mark.parametrize("metadata", TEXTS)
@pytest.mark.parametrize("version", range(5))
def test_offset_commit_metadata_has_kafkas_framing(version: int, metadata: str) -> None:
    record = Record(KEY, offset_commit_value(version, metadata))
    if version < 4 and not fits_a_legacy_string(metadata):
        with pytest.raises(ValueError, match="too long"):
            encode_record(record, value_version=version)
        return
    value_bytes = offset_commit_bytes(version, metadata)
    assert encode_record(record, value_version=version) == (KEY_BYTES, value_bytes)
    assert decode_record(KEY_BYTES, value_bytes) == record


@pytest.mark.parametrize("metadata", TEXTS)
def test_offset_commit_metadata_round_trips_at_the_version_written(metadata: str) -> None:
    record = Record(KEY, OffsetCommitValue(OFFSET, EPOCH, metadata, COMMITTED_AT))
    if not fits_a_legacy_string(metadata):
        # Version 3, what Kafka writes, has an int16 length: the commit is refused before
        # (OffsetManager's OFFSET_METADATA_TOO_LARGE), the codec refuses it too.
        with pytest.raises(ValueError):
            encode_record(record)
        return
    key, value = encode_record(record)
    assert value[:2] == b"\x00\x03"
    assert decode_record(key, value) == record


# --- every record type carrying long strings and bytes, at every version it is read in ---

TOPIC_ID = uuid.UUID(int=0x1234)


def group_metadata(s: str, b: bytes, instance_id: str | None = None) -> GroupMetadataValue:
    member = MemberMetadata(s, instance_id, s, s, -1, 30_000, b, b)
    return GroupMetadataValue(s, 5, s, s, -1, (member,))


# name -> (record of string s and bytes b, value versions read, first flexible version).
# Fields some versions lack are left at their defaults, so the record survives every version.
SAMPLES = {
    "offset commit": (
        lambda s, b: Record(KEY, OffsetCommitValue(OFFSET, -1, s, COMMITTED_AT)),
        range(5),
        4,
    ),
    "group metadata": (
        lambda s, b: Record(GroupMetadataKey("g"), group_metadata(s, b)),
        range(5),
        4,
    ),
    "group metadata with a static member": (  # group_instance_id: versions 3+
        lambda s, b: Record(GroupMetadataKey("g"), group_metadata(s, b, instance_id=s)),
        range(3, 5),
        4,
    ),
    "consumer group partition metadata": (
        lambda s, b: Record(
            ConsumerGroupPartitionMetadataKey("g"),
            ConsumerGroupPartitionMetadataValue(
                (TopicMetadata(TOPIC_ID, s, 1, (PartitionMetadata(0, (s, s)),)),)
            ),
        ),
        range(1),
        0,
    ),
    "consumer group member metadata": (
        lambda s, b: Record(
            ConsumerGroupMemberMetadataKey("g", "m"),
            ConsumerGroupMemberMetadataValue(
                instance_id=s,
                rack_id=s,
                client_id=s,
                client_host=s,
                subscribed_topic_names=(s, s),
                subscribed_topic_regex=s,
                rebalance_timeout_ms=45_000,
                server_assignor=s,
                # a tagged field: its size prefix counts the long strings and bytes inside
                classic_member_metadata=ClassicMemberMetadata(10_000, (ClassicProtocol(s, b),)),
            ),
        ),
        range(1),
        0,
    ),
    "consumer group regular expression": (
        lambda s, b: Record(
            ConsumerGroupRegularExpressionKey("g", "r.*"),
            ConsumerGroupRegularExpressionValue((s, s), 3, COMMITTED_AT),
        ),
        range(1),
        0,
    ),
}


@pytest.mark.parametrize("s", TEXTS)
@pytest.mark.parametrize("sample", SAMPLES)
def test_long_strings_and_bytes_round_trip_in_every_record_type(sample: str, s: str) -> None:
    build, versions, flexible_from = SAMPLES[sample]
    b = blob(s)
    record = build(s, b)
    for version in versions:
        flexible = version >= flexible_from
        if not flexible and not fits_a_legacy_string(s):
            with pytest.raises(ValueError):
                encode_record(record, value_version=version)
            continue
        key, value = encode_record(record, value_version=version)
        assert decode_record(key, value) == record, f"version {version}"
        assert (compact(s.encode()) if flexible else legacy_string(s)) in value
        if sample.startswith("group metadata"):
            assert (compact(b) if flexible else legacy_bytes(b)) in value


KEYS = [
    lambda s: OffsetCommitKey(s, s, 0),
    GroupMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    lambda s: ConsumerGroupMemberMetadataKey(s, s),
    ConsumerGroupTargetAssignmentMetadataKey,
    lambda s: ConsumerGroupTargetAssignmentMemberKey(s, s),
    lambda s: ConsumerGroupCurrentMemberAssignmentKey(s, s),
    lambda s: ConsumerGroupRegularExpressionKey(s, s),
]


@pytest.mark.parametrize("s", TEXTS)
def test_long_strings_round_trip_in_every_key(s: str) -> None:
    """Keys are never flexible: int16 lengths of UTF-8 bytes."""
    for make_key in KEYS:
        record = Record(make_key(s), None)
        if not fits_a_legacy_string(s):
            with pytest.raises(ValueError):
                encode_record(record)
            continue
        key, value = encode_record(record)
        assert legacy_string(s) in key and value is None
        assert decode_record(key, None) == record


def test_the_current_member_assignment_value_survives_with_a_long_key() -> None:
    """A value without strings next to a key at the int16 limit."""
    member_id = "m" * INT16_MAX
    record = Record(
        ConsumerGroupCurrentMemberAssignmentKey("g", member_id),
        ConsumerGroupCurrentMemberAssignmentValue(3, 2, 0),
    )
    assert decode_record(*encode_record(record)) == record


# --- __transaction_state ---


def transaction_value(s: str) -> TransactionLogValue:
    return TransactionLogValue(
        producer_id=11,
        producer_epoch=2,
        transaction_timeout_ms=60_000,
        transaction_status=1,
        transaction_partitions=(TransactionPartitions(s, (0, 1)), TransactionPartitions(s, ())),
        transaction_last_update_timestamp_ms=COMMITTED_AT,
        transaction_start_timestamp_ms=COMMITTED_AT,
    )


@pytest.mark.parametrize("s", TEXTS)
def test_long_strings_round_trip_in_transaction_records(s: str) -> None:
    record = Record(TransactionLogKey(s), transaction_value(s))
    for version, flexible in ((0, False), (1, True)):
        if not fits_a_legacy_string(s):  # the key is never flexible
            with pytest.raises(ValueError):
                encode_transaction_record(record, value_version=version)
            continue
        key, value = encode_transaction_record(record, value_version=version)
        assert key == b"\x00\x00" + legacy_string(s)
        assert (compact(s.encode()) if flexible else legacy_string(s)) in value
        assert decode_transaction_record(key, value) == record


EMPTY_STATE_HEAD = struct.pack(">qhib", 11, 2, 60_000, 0)  # producer id, epoch, timeout, Empty
TIMESTAMPS = struct.pack(">qq", COMMITTED_AT, -1)


@pytest.mark.parametrize(
    ("version", "value_bytes"),
    [
        (0, b"\x00\x00" + EMPTY_STATE_HEAD + struct.pack(">i", -1) + TIMESTAMPS),
        (1, b"\x00\x01" + EMPTY_STATE_HEAD + b"\x00" + TIMESTAMPS + b"\x00"),
    ],
)
def test_a_null_partition_list_is_kafkas_empty_transaction(
    version: int, value_bytes: bytes
) -> None:
    """Kafka writes the partitions of a transaction in state Empty as null (nullableVersions
    0+): int32 -1, or compact length 0 in the flexible version."""
    key = b"\x00\x00" + legacy_string("tx")
    empty = replace(
        transaction_value("tx"),
        transaction_status=0,
        transaction_partitions=None,
        transaction_start_timestamp_ms=-1,
    )
    expected = Record(TransactionLogKey("tx"), empty)
    assert decode_transaction_record(key, value_bytes) == expected
    assert encode_transaction_record(expected, value_version=version) == (key, value_bytes)
