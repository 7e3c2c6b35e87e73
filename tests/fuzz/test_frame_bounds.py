"""Lengths a request declares are checked against the frame before kio reads it: kio's native
reader allocates what they announce, and a failed allocation aborts the process. Without the
check each of these frames would kill the test process rather than fail a test."""

from __future__ import annotations

import struct

import pytest

from broker.protocol import codec


def header_v2(api_key: int, version: int) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, 1) + b"x" + b"\0"


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


@pytest.mark.parametrize(
    "api_key, version, body",
    [
        # Metadata v12: four billion topics in a six-byte body
        (3, 12, uvarint(2**32 - 1)),
        # Fetch v15: one topic declaring four billion partitions
        (1, 15, bytes(4 * 3 + 1 + 8) + uvarint(2) + bytes(16) + uvarint(2**32 - 1)),
        # CreateTopics v7: a topic name longer than the frame
        (19, 7, uvarint(2) + uvarint(2**31)),
        # ListOffsets v5 (not flexible): two billion topics
        (2, 5, struct.pack(">ib", -1, 0) + struct.pack(">i", 2**31 - 1)),
    ],
)
def test_lengths_beyond_the_frame_are_a_decode_error(api_key, version, body):
    header = header_v2(api_key, version)
    if not codec.request_schema(api_key, version).__header_schema__.__flexible__:
        header = header[:-1]
    with pytest.raises(codec.DecodeError, match="declared"):
        codec.decode_request(header + body, api_key, version)


def test_null_where_the_schema_has_none_is_a_decode_error():
    # DeleteTopics v6 `topics` is not nullable (kio would hand a handler None).
    frame = header_v2(20, 6) + uvarint(0) + struct.pack(">i", 1000) + b"\0"
    with pytest.raises(codec.DecodeError, match="null array"):
        codec.decode_request(frame, 20, 6)
    # Metadata v12 `topics` is: null asks for every topic.
    frame = header_v2(3, 12) + uvarint(0) + b"\1\0\0"
    assert codec.decode_request(frame, 3, 12).body.topics is None


def test_a_nullable_struct_is_its_marker_then_the_struct():
    """KIP-893: DescribeTopicPartitions v0's cursor is an int8 marker (-1 for null) followed by
    the struct; the walk reads past it either way and refuses a struct cut short."""
    topics = uvarint(2) + uvarint(len(b"t") + 1) + b"t" + b"\0"  # one topic, "t"
    limit = struct.pack(">i", 10)
    null_cursor = header_v2(75, 0) + topics + limit + b"\xff" + b"\0"
    assert codec.decode_request(null_cursor, 75, 0).body.cursor is None
    cursor = uvarint(2) + b"t" + struct.pack(">i", 3) + b"\0"
    frame = header_v2(75, 0) + topics + limit + b"\x01" + cursor + b"\0"
    assert codec.decode_request(frame, 75, 0).body.cursor.partition_index == 3
    with pytest.raises(codec.DecodeError, match="declared"):
        codec.decode_request(frame[: -len(cursor) + 2], 75, 0)
