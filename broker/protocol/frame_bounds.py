"""Declared lengths checked against the frame before kio parses it.

kio's native reader sizes its buffers from the lengths a request declares (element counts of
arrays, sizes of strings) before reading what they announce. A frame of a hundred bytes that
declares four billion elements makes that allocation fail, and a failed allocation in Rust
aborts the whole process — the broker, for every connection. This walk reads only the
lengths, following the schema, and refuses any the rest of the frame cannot hold, so what kio
allocates stays proportional to the frame (itself bounded by socket.request.max.bytes).

The walk also refuses null where the schema has no null: kio reads it as None and a handler
would fail on it, where Kafka's parser refuses the request ("non-nullable field ... was
serialized as null"). Fixed-size parts are skipped, not read, so the walk costs little next
to kio's parse.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
)

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
    "error_code": 2,
}
_VARIABLE = ("string", "bytes", "records")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A plan's steps are (kind, argument, nullable): FIXED and FIXED_ARRAY take a size in bytes,
# VARIABLE its Kafka type, ENTITY and ENTITY_ARRAY the plan of the entity.
FIXED, VARIABLE, FIXED_ARRAY, VARIABLE_ARRAY, ENTITY_ARRAY, ENTITY = range(6)


class LengthOutOfBounds(ValueError):
    """A declared length the rest of the frame cannot hold, or a null the schema forbids."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    flexible: bool
    steps: tuple[tuple[int, object, bool], ...]
    tagged: dict[int, tuple[int, object, bool]]
    min_size: int  # the fewest bytes one instance takes on the wire
    fixed_size: int | None  # the size of its untagged fields when all are fixed-size


@cache
def plan(entity: type) -> _Plan:
    flexible = bool(entity.__flexible__)
    steps: list[tuple[int, object, bool]] = []
    tagged: dict[int, tuple[int, object, bool]] = {}
    min_size = 1 if flexible else 0  # the tagged-fields count
    for field in dataclasses.fields(entity):
        step = _step(field)
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = step
            continue
        min_size += _min_size(step, flexible)
        if step[0] == FIXED and steps and steps[-1][0] == FIXED:
            steps[-1] = (FIXED, steps[-1][1] + step[1], False)  # type: ignore[operator]
        else:
            steps.append(step)
    fixed = all(kind == FIXED for kind, _, _ in steps)
    fixed_size = sum(arg for _, arg, _ in steps) if fixed else None  # type: ignore[misc]
    return _Plan(flexible, tuple(steps), tagged, max(min_size, 1), fixed_size)


def _nullable(field: dataclasses.Field) -> bool:
    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)


def _step(field: dataclasses.Field) -> tuple[int, object, bool]:
    kind = classify_field(field)
    nullable = _nullable(field)
    if isinstance(kind, EntityField):
        return (ENTITY, plan(kind.type_), nullable)
    if isinstance(kind, EntityTupleField):
        return (ENTITY_ARRAY, plan(kind.type_), nullable)
    kafka_type = field.metadata["kafka_type"]
    if kafka_type not in _FIXED and kafka_type not in _VARIABLE:
        raise TypeError(f"no length rule for Kafka type {kafka_type!r} of {field.name}")
    if isinstance(kind, PrimitiveTupleField):
        if kafka_type in _FIXED:
            return (FIXED_ARRAY, _FIXED[kafka_type], nullable)
        return (VARIABLE_ARRAY, None, nullable)
    assert isinstance(kind, PrimitiveField)
    if kafka_type in _FIXED:
        return (FIXED, _FIXED[kafka_type], False)
    return (VARIABLE, kafka_type, nullable)


def _min_size(step: tuple[int, object, bool], flexible: bool) -> int:
    kind, arg, nullable = step
    if kind == FIXED:
        return arg  # type: ignore[return-value]
    if kind == ENTITY:
        return 1 if nullable else arg.min_size  # type: ignore[union-attr]
    if kind == VARIABLE and not flexible:
        return 2 if arg == "string" else 4
    return 1 if flexible else 4


def check(entity: type, frame: bytes | memoryview, offset: int) -> int:
    """Walk one `entity` from `offset`; return where it ends. Raises LengthOutOfBounds."""
    return _Walk(frame).entity(plan(entity), offset)


def check_request_header(frame: bytes | memoryview, flexible: bool) -> int:
    """Walk a request header (v1, or v2 with tagged fields); return where the body starts.
    Its client id is a classic nullable string even in v2, as in Kafka."""
    walk = _Walk(frame)
    walk.need(0, 10)  # api key, version, correlation id, client id length
    size = max(_I16.unpack_from(frame, 8)[0], 0)
    pos = walk.need(10, size) + size
    if flexible:
        pos = walk.tagged_fields(pos, {})
    return pos


class _Walk:
    __slots__ = ("buf", "end")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self.end = len(buf)

    def need(self, pos: int, n: int) -> int:
        if n < 0 or pos + n > self.end:
            raise LengthOutOfBounds(f"{n} bytes declared at {pos}, {self.end - pos} left")
        return pos

    def uvarint(self, pos: int) -> tuple[int, int]:
        buf, end = self.buf, self.end
        value = shift = 0
        while True:
            if pos >= end or shift > 63:
                raise LengthOutOfBounds(f"unterminated varint at {pos}")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
            shift += 7

    def length(self, pos: int, flexible: bool, narrow: bool = False) -> tuple[int, int]:
        """A (count or size, position after it); -1 for null."""
        if flexible:
            value, pos = self.uvarint(pos)
            return value - 1, pos
        if narrow:
            self.need(pos, 2)
            return _I16.unpack_from(self.buf, pos)[0], pos + 2
        self.need(pos, 4)
        return _I32.unpack_from(self.buf, pos)[0], pos + 4

    def count(self, pos: int, flexible: bool, element_min: int, nullable: bool) -> tuple[int, int]:
        n, pos = self.length(pos, flexible)
        if n < 0 and not nullable:
            raise LengthOutOfBounds(f"null array at {pos} where the schema has none")
        if n > 0 and n * element_min > self.end - pos:
            raise LengthOutOfBounds(f"{n} elements declared at {pos}, {self.end - pos} bytes left")
        return n, pos

    def variable(self, pos: int, flexible: bool, kafka_type: object, nullable: bool) -> int:
        size, pos = self.length(pos, flexible, narrow=kafka_type == "string")
        if size < 0:
            if not nullable:
                raise LengthOutOfBounds(f"null {kafka_type} at {pos} where the schema has none")
            return pos
        return self.need(pos, size) + size

    def step(self, step: tuple[int, object, bool], pos: int, flexible: bool) -> int:
        kind, arg, nullable = step
        if kind == FIXED:
            return self.need(pos, arg) + arg  # type: ignore[operator]
        if kind == VARIABLE:
            return self.variable(pos, flexible, arg, nullable)
        if kind == ENTITY:
            if nullable:
                # KIP-893: a nullable struct is an int8 marker, negative for null (Kafka's
                # readers take any negative one), then the struct.
                marker = self.need(pos, 1)
                if self.buf[marker] >= 0x80:
                    return marker + 1
                pos = marker + 1
            return self.entity(arg, pos)  # type: ignore[arg-type]
        if kind == FIXED_ARRAY:
            n, pos = self.count(pos, flexible, arg, nullable)  # type: ignore[arg-type]
            return pos + max(n, 0) * arg  # type: ignore[operator]
        if kind == VARIABLE_ARRAY:
            n, pos = self.count(pos, flexible, 1 if flexible else 2, nullable)
            for _ in range(n):
                pos = self.variable(pos, flexible, "string", False)
            return pos
        n, pos = self.count(pos, flexible, arg.min_size, nullable)  # type: ignore[union-attr]
        size = arg.fixed_size  # type: ignore[union-attr]
        if size is None:
            for _ in range(n):
                pos = self.entity(arg, pos)  # type: ignore[arg-type]
            return pos
        if not arg.flexible:  # type: ignore[union-attr]
            return self.need(pos, n * size) + n * size
        # Fixed fields and a tagged-fields count, usually zero (partitions of a fetch).
        buf, end, tagged = self.buf, self.end, arg.tagged  # type: ignore[union-attr]
        for _ in range(n):
            pos += size
            if pos >= end:
                raise LengthOutOfBounds(f"an element ends past the frame at {pos}")
            if buf[pos] == 0:
                pos += 1
            else:
                pos = self.tagged_fields(pos, tagged)
        return pos

    def entity(self, p: _Plan, pos: int) -> int:
        flexible = p.flexible
        for step in p.steps:
            pos = self.step(step, pos, flexible)
        if flexible:
            pos = self.tagged_fields(pos, p.tagged)
        return pos

    def tagged_fields(self, pos: int, known: dict[int, tuple[int, object, bool]]) -> int:
        n, pos = self.uvarint(pos)
        if n * 2 > self.end - pos:
            raise LengthOutOfBounds(f"{n} tagged fields declared at {pos}")
        for _ in range(n):
            tag, pos = self.uvarint(pos)
            size, pos = self.uvarint(pos)
            field_end = self.need(pos, size) + size
            if tag in known:
                self.step(known[tag], pos, True)
            pos = field_end
        return pos
