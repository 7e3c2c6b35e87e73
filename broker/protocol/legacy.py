"""Hand-written codecs for the request versions kio does not cover: Produce v0-2, Fetch v0-3
and ListOffsets v0, which old clients (kafka-python's api_version modes below 0.11) send.

They use request header v1 and response header v0, no tagged fields. Each message class has a
subclass per version carrying `__api_key__` and `__version__` like kio's entities, so the
broker's dispatch, Fjord's client and the tests treat both alike; error codes are kio's
ErrorCode. Record sets stay views of the request frame on the way in and are written as their
own buffers on the way out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2
# The versions served by this module, by API key; the newer ones go through kio.
VERSIONS = {PRODUCE: range(0, 3), FETCH: range(0, 4), LIST_OFFSETS: range(0, 1)}

NO_MAX_BYTES = 2**31 - 1  # Fetch v0-2 have no response-wide limit


class LegacyDecodeError(ValueError):
    """The bytes are not a valid message of the version they claim."""


def is_legacy(api_key: int, api_version: int) -> bool:
    versions = VERSIONS.get(api_key)
    return versions is not None and api_version in versions


class Entity:
    """Base of the messages below; `at(version)` gives the class of one version."""

    __slots__ = ()
    __api_key__: ClassVar[int]
    __version__: ClassVar[int]

    @classmethod
    def at(cls, version: int) -> type:
        return _versioned(cls, version)


@cache
def _versioned(cls: type, version: int) -> type:
    return type(f"{cls.__name__}V{version}", (cls,), {"__slots__": (), "__version__": version})


# -- Produce v0-2 ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducePartition:
    index: int
    records: bytes | memoryview | None


@dataclass(frozen=True, slots=True)
class ProduceTopic:
    name: str
    partition_data: tuple[ProducePartition, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequest(Entity):
    __api_key__: ClassVar[int] = PRODUCE
    acks: int
    timeout_ms: int
    topic_data: tuple[ProduceTopic, ...]


@dataclass(frozen=True, slots=True)
class ProducePartitionResponse:
    index: int
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int = -1  # v2+


@dataclass(frozen=True, slots=True)
class ProduceTopicResponse:
    name: str
    partition_responses: tuple[ProducePartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class ProduceResponse(Entity):
    __api_key__: ClassVar[int] = PRODUCE
    responses: tuple[ProduceTopicResponse, ...]
    throttle_time_ms: int = 0  # v1+


# -- Fetch v0-3 ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchTopic:
    topic: str
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True, slots=True)
class FetchRequest(Entity):
    __api_key__: ClassVar[int] = FETCH
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    topics: tuple[FetchTopic, ...]
    max_bytes: int = NO_MAX_BYTES  # v3+


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    records: bytes | memoryview


@dataclass(frozen=True, slots=True)
class FetchTopicResponse:
    topic: str
    partitions: tuple[FetchPartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class FetchResponse(Entity):
    __api_key__: ClassVar[int] = FETCH
    responses: tuple[FetchTopicResponse, ...]
    throttle_time_ms: int = 0  # v1+


# -- ListOffsets v0 --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    partition_index: int
    timestamp: int
    max_num_offsets: int


@dataclass(frozen=True, slots=True)
class ListOffsetsTopic:
    name: str
    partitions: tuple[ListOffsetsPartition, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest(Entity):
    __api_key__: ClassVar[int] = LIST_OFFSETS
    replica_id: int
    topics: tuple[ListOffsetsTopic, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResponse:
    partition_index: int
    error_code: ErrorCode
    old_style_offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsTopicResponse:
    name: str
    partitions: tuple[ListOffsetsPartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse(Entity):
    __api_key__: ClassVar[int] = LIST_OFFSETS
    topics: tuple[ListOffsetsTopicResponse, ...]


REQUESTS: dict[int, type] = {
    PRODUCE: ProduceRequest,
    FETCH: FetchRequest,
    LIST_OFFSETS: ListOffsetsRequest,
}
RESPONSES: dict[int, type] = {
    PRODUCE: ProduceResponse,
    FETCH: FetchResponse,
    LIST_OFFSETS: ListOffsetsResponse,
}


# -- reading ---------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("view", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.view = memoryview(data)
        self.pos = pos

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.view):
            raise LegacyDecodeError(f"message ends at byte {len(self.view)}, inside a field")
        (value,) = s.unpack_from(self.view, self.pos)
        self.pos += s.size
        return value

    def int16(self) -> int:
        return self._take(_INT16)

    def int32(self) -> int:
        return self._take(_INT32)

    def int64(self) -> int:
        return self._take(_INT64)

    def _span(self, length: int) -> memoryview:
        if length < 0 or self.pos + length > len(self.view):
            raise LegacyDecodeError(f"invalid length {length} at byte {self.pos}")
        start = self.pos
        self.pos += length
        return self.view[start : self.pos]

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length == -1:
            return None
        try:
            return str(self._span(length), "utf-8")
        except UnicodeDecodeError as e:
            raise LegacyDecodeError(f"string is not UTF-8: {e}") from e

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise LegacyDecodeError("null where a string is required")
        return value

    def records(self) -> memoryview | None:
        length = self.int32()
        return None if length == -1 else self._span(length)

    def array(self, item: Callable[[_Reader], Any]) -> tuple:
        count = self.int32()
        if count == -1:
            return ()
        if count < 0 or count > len(self.view) - self.pos:  # every item takes a byte at least
            raise LegacyDecodeError(f"invalid array length {count}")
        return tuple(item(self) for _ in range(count))


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def _produce_request(r: _Reader, v: int) -> ProduceRequest:
    def partition(r: _Reader) -> ProducePartition:
        return ProducePartition(r.int32(), r.records())

    def topic(r: _Reader) -> ProduceTopic:
        return ProduceTopic(r.string(), r.array(partition))

    return ProduceRequest.at(v)(r.int16(), r.int32(), r.array(topic))


def _fetch_request(r: _Reader, v: int) -> FetchRequest:
    def partition(r: _Reader) -> FetchPartition:
        return FetchPartition(r.int32(), r.int64(), r.int32())

    def topic(r: _Reader) -> FetchTopic:
        return FetchTopic(r.string(), r.array(partition))

    replica_id, max_wait_ms, min_bytes = r.int32(), r.int32(), r.int32()
    max_bytes = r.int32() if v >= 3 else NO_MAX_BYTES
    return FetchRequest.at(v)(replica_id, max_wait_ms, min_bytes, r.array(topic), max_bytes)


def _list_offsets_request(r: _Reader, v: int) -> ListOffsetsRequest:
    def partition(r: _Reader) -> ListOffsetsPartition:
        return ListOffsetsPartition(r.int32(), r.int64(), r.int32())

    def topic(r: _Reader) -> ListOffsetsTopic:
        return ListOffsetsTopic(r.string(), r.array(partition))

    return ListOffsetsRequest.at(v)(r.int32(), r.array(topic))


def _error(r: _Reader) -> ErrorCode:
    code = r.int16()
    try:
        return ErrorCode(code)
    except ValueError as e:
        raise LegacyDecodeError(f"unknown error code {code}") from e


def _produce_response(r: _Reader, v: int) -> ProduceResponse:
    def partition(r: _Reader) -> ProducePartitionResponse:
        index, error, base_offset = r.int32(), _error(r), r.int64()
        return ProducePartitionResponse(index, error, base_offset, r.int64() if v >= 2 else -1)

    def topic(r: _Reader) -> ProduceTopicResponse:
        return ProduceTopicResponse(r.string(), r.array(partition))

    responses = r.array(topic)
    return ProduceResponse.at(v)(responses, r.int32() if v >= 1 else 0)


def _fetch_response(r: _Reader, v: int) -> FetchResponse:
    def partition(r: _Reader) -> FetchPartitionResponse:
        index, error, high_watermark = r.int32(), _error(r), r.int64()
        records = r.records()
        return FetchPartitionResponse(index, error, high_watermark, records or b"")

    def topic(r: _Reader) -> FetchTopicResponse:
        return FetchTopicResponse(r.string(), r.array(partition))

    throttle = r.int32() if v >= 1 else 0
    return FetchResponse.at(v)(r.array(topic), throttle)


def _list_offsets_response(r: _Reader, v: int) -> ListOffsetsResponse:
    def partition(r: _Reader) -> ListOffsetsPartitionResponse:
        index, error = r.int32(), _error(r)
        return ListOffsetsPartitionResponse(index, error, r.array(_Reader.int64))

    def topic(r: _Reader) -> ListOffsetsTopicResponse:
        return ListOffsetsTopicResponse(r.string(), r.array(partition))

    return ListOffsetsResponse.at(v)(r.array(topic))


_REQUEST_READERS = {
    PRODUCE: _produce_request,
    FETCH: _fetch_request,
    LIST_OFFSETS: _list_offsets_request,
}
_RESPONSE_READERS = {
    PRODUCE: _produce_response,
    FETCH: _fetch_response,
    LIST_OFFSETS: _list_offsets_response,
}


def decode_request(
    frame: bytes | memoryview, api_key: int, api_version: int
) -> tuple[int, str | None, Any]:
    """(correlation id, client id, request) from a whole request frame. Bytes after the body
    are ignored, as on the kio path."""
    r = _Reader(frame, 4)  # api key and version were peeked by the caller
    correlation_id = r.int32()
    client_id = r.nullable_string()
    return correlation_id, client_id, _REQUEST_READERS[api_key](r, api_version)


def decode_response(payload: bytes | memoryview, api_key: int, api_version: int) -> tuple[int, Any]:
    r = _Reader(payload)
    correlation_id = r.int32()
    return correlation_id, _RESPONSE_READERS[api_key](r, api_version)


# -- writing ---------------------------------------------------------------------------------


class _Writer:
    """Small fields are coalesced; record sets stay buffers of their own (no copy)."""

    __slots__ = ("parts", "small")

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self.small = bytearray()

    def int16(self, value: int) -> None:
        self.small += _INT16.pack(value)

    def int32(self, value: int) -> None:
        self.small += _INT32.pack(value)

    def int64(self, value: int) -> None:
        self.small += _INT64.pack(value)

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self.int16(-1)
            return
        data = value.encode()
        self.int16(len(data))
        self.small += data

    def records(self, data: bytes | memoryview | None) -> None:
        if data is None:
            self.int32(-1)
            return
        self.int32(len(data))
        if len(data) < 4096:
            self.small += data
        else:
            self.parts.append(bytes(self.small))
            self.small.clear()
            self.parts.append(data)

    def array(self, items: tuple, write: Callable[[_Writer, Any], None]) -> None:
        self.int32(len(items))
        for item in items:
            write(self, item)

    def finish(self) -> list[bytes | memoryview]:
        if self.small:
            self.parts.append(bytes(self.small))
        return self.parts


def _write_produce_request(w: _Writer, m: ProduceRequest) -> None:
    def partition(w: _Writer, p: ProducePartition) -> None:
        w.int32(p.index)
        w.records(p.records)

    def topic(w: _Writer, t: ProduceTopic) -> None:
        w.nullable_string(t.name)
        w.array(t.partition_data, partition)

    w.int16(m.acks)
    w.int32(m.timeout_ms)
    w.array(m.topic_data, topic)


def _write_fetch_request(w: _Writer, m: FetchRequest) -> None:
    def partition(w: _Writer, p: FetchPartition) -> None:
        w.int32(p.partition)
        w.int64(p.fetch_offset)
        w.int32(p.partition_max_bytes)

    def topic(w: _Writer, t: FetchTopic) -> None:
        w.nullable_string(t.topic)
        w.array(t.partitions, partition)

    w.int32(m.replica_id)
    w.int32(m.max_wait_ms)
    w.int32(m.min_bytes)
    if m.__version__ >= 3:
        w.int32(m.max_bytes)
    w.array(m.topics, topic)


def _write_list_offsets_request(w: _Writer, m: ListOffsetsRequest) -> None:
    def partition(w: _Writer, p: ListOffsetsPartition) -> None:
        w.int32(p.partition_index)
        w.int64(p.timestamp)
        w.int32(p.max_num_offsets)

    def topic(w: _Writer, t: ListOffsetsTopic) -> None:
        w.nullable_string(t.name)
        w.array(t.partitions, partition)

    w.int32(m.replica_id)
    w.array(m.topics, topic)


def _write_produce_response(w: _Writer, m: ProduceResponse) -> None:
    def partition(w: _Writer, p: ProducePartitionResponse) -> None:
        w.int32(p.index)
        w.int16(p.error_code)
        w.int64(p.base_offset)
        if m.__version__ >= 2:
            w.int64(p.log_append_time_ms)

    def topic(w: _Writer, t: ProduceTopicResponse) -> None:
        w.nullable_string(t.name)
        w.array(t.partition_responses, partition)

    w.array(m.responses, topic)
    if m.__version__ >= 1:
        w.int32(m.throttle_time_ms)


def _write_fetch_response(w: _Writer, m: FetchResponse) -> None:
    def partition(w: _Writer, p: FetchPartitionResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        w.int64(p.high_watermark)
        w.records(p.records)

    def topic(w: _Writer, t: FetchTopicResponse) -> None:
        w.nullable_string(t.topic)
        w.array(t.partitions, partition)

    if m.__version__ >= 1:
        w.int32(m.throttle_time_ms)
    w.array(m.responses, topic)


def _write_list_offsets_response(w: _Writer, m: ListOffsetsResponse) -> None:
    def partition(w: _Writer, p: ListOffsetsPartitionResponse) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        w.array(p.old_style_offsets, _Writer.int64)

    def topic(w: _Writer, t: ListOffsetsTopicResponse) -> None:
        w.nullable_string(t.name)
        w.array(t.partitions, partition)

    w.array(m.topics, topic)


_WRITERS: dict[type, Callable[[_Writer, Any], None]] = {
    ProduceRequest: _write_produce_request,
    FetchRequest: _write_fetch_request,
    ListOffsetsRequest: _write_list_offsets_request,
    ProduceResponse: _write_produce_response,
    FetchResponse: _write_fetch_response,
    ListOffsetsResponse: _write_list_offsets_response,
}


def _writer_for(entity: Entity) -> Callable[[_Writer, Any], None]:
    for cls in type(entity).__mro__:
        if cls in _WRITERS:
            return _WRITERS[cls]
    raise TypeError(f"{type(entity).__name__} is not a legacy protocol message")


def encode_response(correlation_id: int, response: Entity) -> list[bytes | memoryview]:
    """Header v0 and body as buffers to write in order, without the size prefix."""
    w = _Writer()
    w.int32(correlation_id)
    _writer_for(response)(w, response)
    return w.finish()


def encode_request(request: Entity, correlation_id: int, client_id: str | None) -> bytes:
    """Header v1 and body — for Fjord's own client and for tests."""
    w = _Writer()
    w.int16(request.__api_key__)
    w.int16(request.__version__)
    w.int32(correlation_id)
    w.nullable_string(client_id)
    _writer_for(request)(w, request)
    return b"".join(w.finish())
