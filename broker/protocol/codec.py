"""Request decoding and response encoding on top of kio's generated schemas.

kio's schemas cover the current protocol versions; the registry says which of them Fjord
serves. Readers and writers are looked up once per (api key, version) and cached. The older
versions old clients still send (Produce v0-2, Fetch v0-3, ListOffsets v0) go to the
hand-written codecs of broker.protocol.legacy.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.protocol import frame_bounds, legacy
from broker.protocol.compiled_writers import compiled_writer

_KEY_VERSION = struct.Struct(">hh")
_INT32 = struct.Struct(">i")

API_VERSIONS_KEY = 18


class DecodeError(Exception):
    """The frame is not a valid request of the version it claims."""


@dataclass(frozen=True, slots=True)
class RequestFrame:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request entity


def peek_key_version(frame: bytes) -> tuple[int, int]:
    if len(frame) < 8:
        raise DecodeError("frame shorter than a request header")
    return _KEY_VERSION.unpack_from(frame, 0)


def peek_correlation_id(frame: bytes) -> int:
    return _INT32.unpack_from(frame, 4)[0]


@cache
def request_schema(api_key: int, api_version: int) -> type:
    return load_request_schema(api_key, api_version)


@cache
def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


@cache
def _reader(entity: type) -> Any:
    return entity_reader(entity)


@cache
def _writer(entity: type) -> Any:
    return entity_writer(entity)


def decode_request(frame: bytes, api_key: int, api_version: int) -> RequestFrame:
    if legacy.is_legacy(api_key, api_version):
        return _decode_legacy_request(frame, api_key, api_version)
    schema = request_schema(api_key, api_version)
    header_schema = schema.__header_schema__
    try:
        # Lengths first: kio allocates what they declare, and aborts when it cannot.
        body_start = frame_bounds.check_request_header(frame, header_schema.__flexible__)
        frame_bounds.check(schema, frame, body_start)
        # kio's readers return (entity, bytes consumed). Bytes after the body are ignored, as
        # Kafka's parser does: librdkafka's Metadata v12 carries three of them.
        header, header_size = _reader(header_schema)(frame, 0)
        body, _ = _reader(schema)(frame, header_size)
    except Exception as e:  # kio raises several types for malformed input
        raise DecodeError(f"malformed {schema.__name__} v{api_version}: {e}") from e
    return RequestFrame(
        api_key=api_key,
        api_version=api_version,
        correlation_id=header.correlation_id,
        client_id=header.client_id,
        body=body,
    )


def _decode_legacy_request(frame: bytes, api_key: int, api_version: int) -> RequestFrame:
    try:
        correlation_id, client_id, body = legacy.decode_request(frame, api_key, api_version)
    except legacy.LegacyDecodeError as e:
        raise DecodeError(f"malformed api key {api_key} v{api_version} request: {e}") from e
    return RequestFrame(api_key, api_version, correlation_id, client_id, body)


class _Chunks:
    """A kio output that keeps large values — record sets read from the log, or file slices of
    it (storage.FileSlice, at least 64 KB) — as chunks of their own, so a fetch response reaches
    the socket (writev, sendfile) without being copied into one buffer. Small writes are
    coalesced."""

    LARGE = 16 * 1024

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self._small = bytearray()

    def write(self, data: bytes | memoryview) -> int:
        if len(data) >= self.LARGE:
            if self._small:
                self.parts.append(bytes(self._small))
                self._small.clear()
            self.parts.append(data)
        else:
            self._small += data
        return len(data)

    def finish(self) -> list[bytes | memoryview]:
        if self._small:
            self.parts.append(bytes(self._small))
        return self.parts


def encode_response(correlation_id: int, response: Any) -> list[bytes | memoryview]:
    """Header and body of a response as buffers to write in order, without the size prefix.
    kio's schemas carry their header version (ApiVersions always uses v0, so a client that sent
    an unsupported version can read it)."""
    if isinstance(response, legacy.Entity):
        return legacy.encode_response(correlation_id, response)
    out = _Chunks()
    header_schema = type(response).__header_schema__
    compiled_writer(header_schema)(out, header_schema(correlation_id=correlation_id))
    compiled_writer(type(response))(out, response)
    return out.finish()


def encode_request(request: Any, correlation_id: int, client_id: str | None = "fjord") -> bytes:
    """Header and body of a request — for Fjord's own client and for tests."""
    if isinstance(request, legacy.Entity):
        return legacy.encode_request(request, correlation_id, client_id)
    buf = io.BytesIO()
    header_schema = request.__header_schema__
    header_kwargs = dict(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    header = header_schema(**header_kwargs)
    _writer(header_schema)(buf, header)
    _writer(type(request))(buf, request)
    return buf.getvalue()


def decode_response(payload: bytes, api_key: int, api_version: int) -> tuple[int, Any]:
    """(correlation id, response entity) — for Fjord's own client and for tests."""
    if legacy.is_legacy(api_key, api_version):
        return legacy.decode_response(payload, api_key, api_version)
    schema = response_schema(api_key, api_version)
    header, offset = _reader(schema.__header_schema__)(payload, 0)
    body, _ = _reader(schema)(payload, offset)
    return header.correlation_id, body
