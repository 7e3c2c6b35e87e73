"""Response writers compiled once per kio entity class, byte for byte what kio writes.

kio's writer walks a class's fields through a closure per field, makes a phantom-typed value
per varint and a BytesIO per flexible entity for its tagged fields, which made encoding a
third of a small Produce's cost. Here each class gets a plain function whose source is
generated from its fields: runs of fixed-width fields become one struct.pack, varints come from
a table, tagged fields cost one byte when none is set. Field kinds this module does not
special-case (legacy strings and bytes, nullable structs) keep kio's own field writer, so the
output stays kio's; tests/fuzz/test_compiled_writers.py compares the two over every
response schema.
"""

from __future__ import annotations

import io
import struct
from dataclasses import MISSING, Field, fields
from functools import cache
from typing import Any

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._serialize import get_field_writer
from kio.serial.writers import write_tagged_field

from broker.records.varint import unsigned_varint_bytes

# kafka_type -> (struct code, the value to pack, as an expression over the field's value {v})
_FIXED: dict[str, tuple[str, str]] = {
    "int8": ("b", "{v}"),
    "int16": ("h", "{v}"),
    "int32": ("i", "{v}"),
    "int64": ("q", "{v}"),
    "uint8": ("B", "{v}"),
    "uint16": ("H", "{v}"),
    "uint32": ("I", "{v}"),
    "uint64": ("Q", "{v}"),
    "float64": ("d", "{v}"),
    "bool": ("?", "{v}"),
    "error_code": ("h", "{v}.value"),
    "timedelta_i32": ("i", "round({v}.total_seconds() * 1000)"),
    "timedelta_i64": ("q", "round({v}.total_seconds() * 1000)"),
    "datetime_i64": ("q", "round({v}.timestamp() * 1000)"),
    "uuid": ("16s", "(_ZERO_UUID if {v} is None else {v}.bytes)"),
}
_NULLABLE_DATETIME = ("q", "(-1 if {v} is None else round({v}.timestamp() * 1000))")
_ZERO_UUID = bytes(16)
_SMALL_UVARINTS = [bytes((n,)) for n in range(128)]


def uvarint(n: int) -> bytes:
    """An unsigned varint (as kio's, which refuses what does not fit 32 bits)."""
    if 0 <= n < 128:
        return _SMALL_UVARINTS[n]
    if n < 0 or n >= 1 << 32:
        raise ValueError(f"{n} does not fit an unsigned varint")
    return unsigned_varint_bytes(n)


def _compact_bytes(out, value) -> None:
    if value is None:
        raise TypeError("Unexpectedly received None value")
    _nullable_compact_bytes(out, value)


def _nullable_compact_bytes(out, value) -> None:
    """Compact strings, bytes and record sets: a record set read from the log stays a buffer
    of its own (see codec._Chunks)."""
    if value is None:
        out.write(b"\x00")
        return
    if isinstance(value, str):
        value = value.encode()
    out.write(uvarint(len(value) + 1))
    out.write(value)


def _compact_array(out, items, write_item) -> None:
    if items is None:
        out.write(b"\x00")
        return
    out.write(uvarint(len(items) + 1))
    for item in items:
        write_item(out, item)


_INT32 = struct.Struct(">i")


def _legacy_array(out, items, write_item) -> None:
    if items is None:
        out.write(_INT32.pack(-1))
        return
    out.write(_INT32.pack(len(items)))
    for item in items:
        write_item(out, item)


def _write_tags(out, present: list[tuple[int, Any, Any]]) -> None:
    """The tagged fields that differ from their defaults, in tag order (KIP-482)."""
    with io.BytesIO() as tags:
        for tag, writer, value in present:
            write_tagged_field(buffer=tags, tag=tag, writer=writer, value=value)
        out.write(uvarint(len(present)))
        out.write(tags.getvalue())


@cache
def compiled_writer(entity_type: type):
    """A function (out, entity) that writes `entity` as kio's entity_writer would."""
    source, namespace = _Generator(entity_type).generate()
    exec(compile(source, f"<compiled writer of {entity_type.__qualname__}>", "exec"), namespace)
    return namespace["write"]


class _Generator:
    def __init__(self, entity_type: type) -> None:
        self.entity_type = entity_type
        self.flexible = entity_type.__flexible__
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {
            "_ZERO_UUID": _ZERO_UUID,
            "_compact_array": _compact_array,
            "_legacy_array": _legacy_array,
            "_write_tags": _write_tags,
            "MISSING": MISSING,
        }
        self.fixed: list[tuple[str, str, str]] = []  # (struct code, expression, field name)

    def generate(self) -> tuple[str, dict[str, Any]]:
        tagged = []
        for field in fields(self.entity_type):
            tag = get_field_tag(field)
            if tag is not None:
                tagged.append((tag, field))
            else:
                self._field(field)
        self._flush_fixed()
        if self.flexible:
            self._tagged(sorted(tagged, key=lambda pair: pair[0]))
        elif tagged:
            raise ValueError("Found tagged fields on a non-flexible model")
        body = self.lines or ["pass"]
        source = "def write(out, e):\n" + "".join(f"    {line}\n" for line in body)
        return source, self.namespace

    def _name(self, prefix: str, value: Any) -> str:
        name = f"_{prefix}{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def _field(self, field: Field) -> None:
        kind = classify_field(field)
        if isinstance(kind, PrimitiveField) and self._is_request_header_client_id(field):
            self._call_kio(field)
            return
        if isinstance(kind, PrimitiveField):
            kafka_type = get_schema_field_type(field)
            fixed = _FIXED.get(kafka_type)
            if is_optional(field):
                fixed = _NULLABLE_DATETIME if kafka_type == "datetime_i64" else None
                if kafka_type == "uuid":
                    fixed = _FIXED["uuid"]
            if fixed is not None:
                code, expression = fixed
                self.fixed.append((code, expression.format(v=f"e.{field.name}"), field.name))
                return
            self._flush_fixed()
            if self.flexible and kafka_type in ("string", "bytes", "records"):
                helper = _nullable_compact_bytes if is_optional(field) else _compact_bytes
                self.lines.append(f"{self._name('w', helper)}(out, e.{field.name})")
                return
            self._call_kio(field)
            return
        self._flush_fixed()
        if isinstance(kind, EntityField):
            if is_optional(field):
                self._call_kio(field)  # a nullable struct (KIP-893): rare, kio's marker rules
                return
            writer = self._name("w", compiled_writer(kind.type_))
            self.lines.append(f"{writer}(out, e.{field.name})")
            return
        if isinstance(kind, PrimitiveTupleField):
            self._call_kio(field)
            return
        item = self._name("w", compiled_writer(kind.type_))
        array = "_compact_array" if self.flexible else "_legacy_array"
        self.lines.append(f"{array}(out, e.{field.name}, {item})")

    def _is_request_header_client_id(self, field: Field) -> bool:
        return self.entity_type.__name__ == "RequestHeader" and field.name == "client_id"

    def _call_kio(self, field: Field) -> None:
        self._flush_fixed()
        writer = get_field_writer(
            field,
            flexible=self.flexible,
            is_request_header=self.entity_type.__name__ == "RequestHeader",
            is_tag=False,
        )
        self.lines.append(f"{self._name('w', writer)}(out, e.{field.name})")

    def _flush_fixed(self) -> None:
        if not self.fixed:
            return
        packer = struct.Struct(">" + "".join(code for code, _, _ in self.fixed))
        values = ", ".join(expression for _, expression, _ in self.fixed)
        self.lines.append(f"out.write({self._name('s', packer)}.pack({values}))")
        self.fixed = []

    def _tagged(self, tagged: list[tuple[int, Field]]) -> None:
        if not tagged:
            self.lines.append("out.write(b'\\x00')")
            return
        self.lines.append("present = []")
        for tag, field in tagged:
            writer = get_field_writer(field, flexible=True, is_request_header=False, is_tag=True)
            w = self._name("w", writer)
            default = self._name("d", field.default)
            implicit = self._name("i", get_tagged_field_default(field))
            self.lines += [
                f"v = e.{field.name}",
                f"if not (v == {default} or ({default} == MISSING and v == {implicit})):",
                f"    present.append(({tag}, {w}, v))",
            ]
        self.lines += [
            "if present:",
            "    _write_tags(out, present)",
            "else:",
            "    out.write(b'\\x00')",
        ]
