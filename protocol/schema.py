"""Declarative message descriptions and the one generic encoder/decoder that runs them.

A :class:`Message` is a tree of :class:`Field` objects written the way Apache Kafka's JSON
message definitions are: every field names the versions it exists in, the versions in which it
may be null, and, for tagged fields, its tag and the versions in which it is tagged. The message
names the versions that are *flexible* (compact lengths, a tagged-field section at the end of
every struct).

For each ``(message, version)`` the engine compiles, once and lazily, a *plan*: a list of
closures that each encode or decode one field (runs of fixed-width integers are merged into a
single ``struct`` call). Encoding and decoding then only walk the plan; nothing is filtered by
version at run time.

Bodies are plain ``dict`` objects keyed by the snake_case form of Kafka's field names
(``PartitionIndex`` -> ``partition_index``); struct arrays are lists of dicts.

* Decoding returns every field the message has in *any* version: the fields of the decoded
  version with their wire values, the others with their defaults, so handlers can read
  ``body["topics"]`` at any version. Known tagged fields are decoded into their keys; unknown
  tags are skipped.
* Encoding ignores keys of fields the version does not have and uses the field default for
  missing keys. A tagged field is written only when its value differs from its default.
* Defaults: Kafka's ``default`` when the description gives one; otherwise 0 / ``False`` /
  ``0.0`` for numbers; ``""`` / ``b""`` for strings and bytes, but ``None`` for those nullable
  in every version that has them; ``None`` for ``records``; ``[]`` for arrays (nullable ones
  too, as in Kafka); the zero UUID for uuids; a dict of the member defaults for structs.
* ``records`` fields (record batches) decode to ``bytes`` without being parsed. On encode they
  accept any bytes-like object, or a list/tuple of bytes-like objects that are written back to
  back (so a fetch handler can hand over segment slices without joining them first).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from flux.protocol import primitives as p
from flux.protocol.errors import InvalidFrameError
from flux.protocol.limits import MAX_TAGGED_FIELDS

__all__ = [
    "EncodeError",
    "Field",
    "Message",
    "VersionRange",
    "field",
    "snake_case",
]

Body = dict[str, Any]
Parts = list[Any]
Buffer = memoryview
# Encodes one value (not a dict key) by appending bytes-like parts.
ValueEncoder = Callable[[Parts, Any], None]
# Decodes one value at a position.
ValueDecoder = Callable[[Buffer, int], tuple[Any, int]]

_MAX_VERSION = 0x7FFF
_PRIMITIVES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "string",
        "bytes",
        "records",
        "uuid",
    }
)
# Fixed-width types that can share one struct.pack/unpack call with their neighbours.
_FIXED_FORMATS = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
}
_FIXED_SIZES = {"bool": 1, "uuid": 16} | {k: struct.calcsize(v) for k, v in _FIXED_FORMATS.items()}
_ENCODE_FAILURES = (struct.error, TypeError, ValueError, AttributeError, OverflowError, KeyError)


class EncodeError(ValueError):
    """A body that cannot be encoded; the message names the path of the offending field."""

    def __init__(self, path: Sequence[str], reason: str) -> None:
        super().__init__(f"{'.'.join(path)}: {reason}")
        self.path = tuple(path)
        self.reason = reason


def snake_case(name: str) -> str:
    """Kafka's PascalCase (or camelCase) field name as a snake_case dict key."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of versions, parsed from Kafka's ``"3+"``, ``"0-5"``, ``"7"``, ``"none"``."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | None) -> VersionRange:
        if text is None or text == "none":
            return _NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), _MAX_VERSION)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


_NO_VERSIONS = VersionRange(1, 0)
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message or struct. Build it with :func:`field`."""

    name: str
    type: str
    versions: VersionRange
    nullable_versions: VersionRange
    tagged_versions: VersionRange
    tag: int | None
    default: Any
    fields: tuple[Field, ...]
    key: str = dataclass_field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", snake_case(self.name))

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """A struct, or an array of structs (its members are in ``fields``)."""
        return self.element_type not in _PRIMITIVES

    def present_in(self, version: int) -> bool:
        return version in self.versions

    def nullable_in(self, version: int) -> bool:
        return version in self.nullable_versions

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged_versions

    def default_value(self) -> Any:
        """A fresh default value (lists and dicts are new objects on every call)."""
        if self.is_array:
            return None if self.default == "null" else []
        if self.is_struct:
            if self.default == "null":
                return None
            return {member.key: member.default_value() for member in self.fields}
        return _scalar_default(self)


def _scalar_default(spec: Field) -> Any:
    kind, default = spec.type, spec.default
    if kind in _FIXED_FORMATS:
        if default is _MISSING:
            return 0.0 if kind == "float64" else 0
        return float(default) if kind == "float64" else int(default, 0)
    if kind == "bool":
        return default == "true"
    if kind == "uuid":
        return p.ZERO_UUID
    if kind == "string":
        if default is _MISSING:
            return None if _always_nullable(spec) else ""
        return None if default == "null" else default
    if kind == "bytes":
        if default == "null" or (default is _MISSING and _always_nullable(spec)):
            return None
        return b""
    if kind == "records":
        return None
    raise AssertionError(f"unknown type {kind}")


def _always_nullable(spec: Field) -> bool:
    """Nullable in every version that has the field (then a missing value means null).

    A field that only became nullable later (a topic name that may be null once topic ids
    exist) defaults to empty instead, so that omitting it still encodes at old versions.
    """
    nullable = spec.nullable_versions
    return not nullable.empty and nullable.low <= spec.versions.low


def field(
    name: str,
    type: str,
    versions: str,
    *fields: Field,
    nullable: str | None = None,
    default: str | None = None,
    tag: int | None = None,
    tagged: str | None = None,
) -> Field:
    """Describe a field the way Kafka's JSON does.

    ``type`` is a primitive (``int32``, ``string``, ``records``, ...), ``[]<primitive>``, a
    struct name, or ``[]<struct name>``; struct members follow as positional arguments.
    ``nullable`` and ``tagged`` are version ranges like ``versions``; ``default`` is Kafka's
    default as written in the JSON (``"-1"``, ``"null"``, ``"true"``, ``"0x7fffffff"``).
    """
    spec = Field(
        name=name,
        type=type,
        versions=VersionRange.parse(versions),
        nullable_versions=VersionRange.parse(nullable),
        tagged_versions=VersionRange.parse(tagged),
        tag=tag,
        default=_MISSING if default is None else default,
        fields=tuple(fields),
    )
    if spec.is_struct and not spec.fields:
        raise ValueError(f"struct field {name} has no members")
    if not spec.is_struct and spec.fields:
        raise ValueError(f"primitive field {name} cannot have members")
    if (tag is None) != (tagged is None):
        raise ValueError(f"field {name}: tag and tagged versions go together")
    return spec


# ============================================================================ compiled plans


@dataclass(slots=True)
class _StructPlan:
    """How to encode and decode one struct at one version."""

    encode: Callable[[Parts, Body], None]
    decode: Callable[[Buffer, int], tuple[Body, int]]
    min_size: int


class Message:
    """One request or response of one API, across all its versions."""

    def __init__(
        self,
        name: str,
        api_key: int,
        valid_versions: str,
        flexible_versions: str,
        *fields: Field,
    ) -> None:
        self.name = name
        self.api_key = api_key
        self.valid_versions = VersionRange.parse(valid_versions)
        self.flexible_versions = VersionRange.parse(flexible_versions)
        self.fields = tuple(fields)
        self._plans: dict[int, _StructPlan] = {}
        _check_unique_keys(name, self.fields)

    def __repr__(self) -> str:
        return f"<Message {self.name} key={self.api_key}>"

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions

    def plan(self, version: int) -> _StructPlan:
        plan = self._plans.get(version)
        if plan is None:
            if version not in self.valid_versions:
                raise ValueError(f"{self.name} has no version {version}")
            plan = _compile_struct((self.name,), self.fields, version, self.is_flexible(version))
            self._plans[version] = plan
        return plan

    def encode_into(self, parts: Parts, version: int, body: Body) -> None:
        """Append the encoded body to ``parts`` (a list of bytes-like objects)."""
        self.plan(version).encode(parts, body)

    def encode(self, version: int, body: Body) -> bytes:
        parts: Parts = []
        self.encode_into(parts, version, body)
        return b"".join(parts)

    def decode(self, buf: Buffer, pos: int, version: int) -> tuple[Body, int]:
        """Decode the body at ``pos``; returns the body and the position after it.

        Truncated input raises ``InvalidFrameError`` or, for reads past the end that the
        primitives leave to Python, ``struct.error``/``IndexError`` (see :mod:`primitives`).
        """
        return self.plan(version).decode(buf, pos)

    def default_body(self) -> Body:
        return {spec.key: spec.default_value() for spec in self.fields}


def _check_unique_keys(owner: str, fields: Iterable[Field]) -> None:
    seen: set[str] = set()
    tags: set[int] = set()
    for spec in fields:
        if spec.key in seen:
            raise ValueError(f"{owner}: duplicate field {spec.key}")
        seen.add(spec.key)
        if spec.tag is not None:
            if spec.tag in tags:
                raise ValueError(f"{owner}: duplicate tag {spec.tag}")
            tags.add(spec.tag)
        if spec.is_struct:
            _check_unique_keys(f"{owner}.{spec.name}", spec.fields)


def _compile_struct(
    path: tuple[str, ...], fields: Sequence[Field], version: int, flexible: bool
) -> _StructPlan:
    present = [f for f in fields if f.present_in(version)]
    inline = [f for f in present if not (flexible and f.tagged_in(version))]
    tagged = sorted((f for f in present if flexible and f.tagged_in(version)), key=_tag_of)
    absent = [f for f in fields if not f.present_in(version)] + tagged

    encode_steps: list[tuple[tuple[str, ...], Callable[[Parts, Body], None]]] = []
    decode_steps: list[Callable[[Buffer, int, Body], int]] = []
    min_size = 1 if flexible else 0
    for group in _group_fixed(inline):
        if len(group) > 1 or group[0].type in _FIXED_FORMATS:
            encode_step, decode_step, size = _fixed_group(group)
            labels = tuple(f.key for f in group)
        else:
            spec = group[0]
            encode_step, decode_step, size = _single_field(path, spec, version, flexible)
            labels = (spec.key,)
        encode_steps.append((labels, encode_step))
        decode_steps.append(decode_step)
        min_size += size

    # Defaults for fields not on the wire at this version, and for tagged fields until
    # their tags are read. Immutable ones are copied from one dict; the rest are rebuilt.
    constant_defaults: Body = {}
    fresh_defaults: list[Field] = []
    for spec in absent:
        value = spec.default_value()
        if isinstance(value, (list, dict)):
            fresh_defaults.append(spec)
        else:
            constant_defaults[spec.key] = value

    tag_decoders = {f.tag: (f.key, _value_decoder(path, f, version, flexible)) for f in tagged}
    tag_encoders = [
        (f.tag, f.key, f.default_value(), _value_encoder(path, f, version, flexible))
        for f in tagged
    ]

    def decode(buf: Buffer, pos: int) -> tuple[Body, int]:
        body = constant_defaults.copy()
        for spec in fresh_defaults:
            body[spec.key] = spec.default_value()
        for step in decode_steps:
            pos = step(buf, pos, body)
        if flexible:
            pos = _decode_tagged(buf, pos, body, tag_decoders)
        return body, pos

    def encode(parts: Parts, body: Body) -> None:
        labels: tuple[str, ...] = ()
        try:
            # The loop variable names the failing step in the handlers below.
            for labels, step in encode_steps:  # noqa: B007
                step(parts, body)
            if flexible:
                labels = ("<tagged fields>",)
                _encode_tagged(parts, body, tag_encoders)
        except EncodeError as exc:
            raise EncodeError((labels[0], *exc.path), exc.reason) from None
        except _ENCODE_FAILURES as exc:
            raise _describe_failure(labels, body, version, exc) from None

    return _StructPlan(encode=encode, decode=decode, min_size=min_size)


def _tag_of(spec: Field) -> int:
    assert spec.tag is not None
    return spec.tag


def _describe_failure(
    labels: tuple[str, ...], body: Any, version: int, exc: Exception
) -> EncodeError:
    if not isinstance(body, dict):
        return EncodeError((), f"expected a dict, got {type(body).__name__}")
    for label in labels:
        if label in body and body[label] is None:
            return EncodeError((label,), f"None is not allowed (not nullable at version {version})")
    return EncodeError(labels[:1] if len(labels) == 1 else ("/".join(labels),), str(exc))


def _group_fixed(fields: Sequence[Field]) -> list[list[Field]]:
    """Split fields into runs: consecutive fixed-width integers together, the rest alone."""
    groups: list[list[Field]] = []
    for spec in fields:
        if spec.type in _FIXED_FORMATS and groups and groups[-1][-1].type in _FIXED_FORMATS:
            groups[-1].append(spec)
        else:
            groups.append([spec])
    return groups


def _fixed_group(
    group: Sequence[Field],
) -> tuple[Callable[[Parts, Body], None], Callable[[Buffer, int, Body], int], int]:
    packer = struct.Struct(">" + "".join(_FIXED_FORMATS[f.type] for f in group))
    keys = tuple(f.key for f in group)
    keyed_defaults = tuple((f.key, f.default_value()) for f in group)
    size = packer.size
    pack = packer.pack
    unpack_from = packer.unpack_from

    if len(group) == 1:
        ((key, default),) = keyed_defaults

        def encode_one(parts: Parts, body: Body) -> None:
            parts.append(pack(body.get(key, default)))

        def decode_one(buf: Buffer, pos: int, body: Body) -> int:
            body[key] = unpack_from(buf, pos)[0]
            return pos + size

        return encode_one, decode_one, size

    def encode(parts: Parts, body: Body) -> None:
        get = body.get
        parts.append(pack(*[get(k, d) for k, d in keyed_defaults]))

    def decode(buf: Buffer, pos: int, body: Body) -> int:
        body.update(zip(keys, unpack_from(buf, pos), strict=True))
        return pos + size

    return encode, decode, size


def _single_field(
    path: tuple[str, ...], spec: Field, version: int, flexible: bool
) -> tuple[Callable[[Parts, Body], None], Callable[[Buffer, int, Body], int], int]:
    key = spec.key
    default = spec.default_value()
    encode_value = _value_encoder(path, spec, version, flexible)
    decode_value = _value_decoder(path, spec, version, flexible)

    def encode(parts: Parts, body: Body) -> None:
        encode_value(parts, body.get(key, default))

    def decode(buf: Buffer, pos: int, body: Body) -> int:
        body[key], pos = decode_value(buf, pos)
        return pos

    return encode, decode, _min_size(path, spec, version, flexible)


def _min_size(path: tuple[str, ...], spec: Field, version: int, flexible: bool) -> int:
    if spec.is_array or spec.type in ("string", "bytes", "records"):
        if flexible:
            return 1
        return 2 if spec.type == "string" else 4
    if spec.is_struct:
        if spec.nullable_in(version):
            return 1
        return _struct_plan(path, spec, version, flexible).min_size
    return _FIXED_SIZES[spec.type]


_STRUCT_PLANS: dict[tuple[int, int, bool], _StructPlan] = {}


def _struct_plan(path: tuple[str, ...], spec: Field, version: int, flexible: bool) -> _StructPlan:
    cache_key = (id(spec), version, flexible)
    plan = _STRUCT_PLANS.get(cache_key)
    if plan is None:
        plan = _compile_struct((*path, spec.name), spec.fields, version, flexible)
        _STRUCT_PLANS[cache_key] = plan
    return plan


# ------------------------------------------------------------------------- tagged sections


def _decode_tagged(
    buf: Buffer, pos: int, body: Body, decoders: dict[int | None, tuple[str, ValueDecoder]]
) -> int:
    count, pos = p.read_uvarint(buf, pos)
    if count == 0:
        return pos
    if count > MAX_TAGGED_FIELDS:
        raise InvalidFrameError(f"{count} tagged fields exceed {MAX_TAGGED_FIELDS}")
    for _ in range(count):
        tag, pos = p.read_uvarint(buf, pos)
        size, pos = p.read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise InvalidFrameError(f"tagged field {tag} runs past the end of the frame")
        known = decoders.get(tag)
        if known is not None:
            key, decode_value = known
            # Decode inside the tagged field's own bytes so a bad payload cannot read on.
            value, used = decode_value(buf[:end], pos)
            body[key] = value
        pos = end
    return pos


def _encode_tagged(
    parts: Parts, body: Body, encoders: list[tuple[int | None, str, Any, ValueEncoder]]
) -> None:
    if not encoders:
        parts.append(p.EMPTY_TAGGED_FIELDS)
        return
    written: list[tuple[int | None, bytes]] = []
    for tag, key, default, encode_value in encoders:
        value = body.get(key, default)
        if value != default:
            payload: Parts = []
            try:
                encode_value(payload, value)
            except EncodeError as exc:
                raise EncodeError((key, *exc.path), exc.reason) from None
            except _ENCODE_FAILURES as exc:
                raise EncodeError((key,), str(exc)) from None
            written.append((tag, b"".join(payload)))
    parts.append(p.write_uvarint(len(written)))
    for tag, data in written:
        assert tag is not None
        parts.append(p.write_uvarint(tag))
        parts.append(p.write_uvarint(len(data)))
        parts.append(data)


# ---------------------------------------------------------------------------- value codecs


def _value_encoder(
    path: tuple[str, ...], spec: Field, version: int, flexible: bool
) -> ValueEncoder:
    nullable = spec.nullable_in(version)
    if spec.is_array:
        return _array_encoder(path, spec, version, flexible, nullable)
    if spec.is_struct:
        plan = _struct_plan(path, spec, version, flexible)
        return _struct_encoder(plan.encode, nullable)
    return _scalar_encoder(spec.type, flexible, nullable)


def _not_null(value: Any) -> None:
    if value is None:
        raise EncodeError((), "None is not allowed (not nullable at this version)")


def _scalar_encoder(kind: str, flexible: bool, nullable: bool) -> ValueEncoder:
    if kind in _FIXED_FORMATS:
        pack = struct.Struct(">" + _FIXED_FORMATS[kind]).pack

        def encode_fixed(parts: Parts, value: Any) -> None:
            parts.append(pack(value))

        return encode_fixed
    if kind == "bool":

        def encode_bool(parts: Parts, value: Any) -> None:
            _not_null(value)
            parts.append(b"\x01" if value else b"\x00")

        return encode_bool
    if kind == "uuid":

        def encode_uuid(parts: Parts, value: Any) -> None:
            _not_null(value)
            parts.append(p.write_uuid(value))

        return encode_uuid
    if kind == "records":
        return _records_encoder(flexible)
    writers: dict[tuple[str, bool], tuple[Callable[[Any], bytes], Callable[[Any], bytes]]] = {
        ("string", False): (p.write_string, p.write_nullable_string),
        ("string", True): (p.write_compact_string, p.write_compact_nullable_string),
        ("bytes", False): (p.write_bytes, p.write_nullable_bytes),
        ("bytes", True): (p.write_compact_bytes, p.write_compact_nullable_bytes),
    }
    strict_writer, nullable_writer = writers[(kind, flexible)]
    if nullable:

        def encode_nullable(parts: Parts, value: Any) -> None:
            parts.append(nullable_writer(value))

        return encode_nullable

    def encode_strict(parts: Parts, value: Any) -> None:
        _not_null(value)
        parts.append(strict_writer(value))

    return encode_strict


def _records_encoder(flexible: bool) -> ValueEncoder:
    # Record batches are appended as they are (no copy until the final join).
    def encode_records(parts: Parts, value: Any) -> None:
        if value is None:
            parts.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            return
        chunks = value if isinstance(value, (list, tuple)) else (value,)
        views = [_byte_view(chunk) for chunk in chunks]
        size = sum(view.nbytes for view in views)
        parts.append(p.write_uvarint(size + 1) if flexible else p.INT32.pack(size))
        parts.extend(views)

    return encode_records


def _byte_view(chunk: Any) -> memoryview:
    view = memoryview(chunk)
    if view.itemsize != 1 or view.ndim != 1:
        view = view.cast("B")
    return view


def _struct_encoder(encode_struct: Callable[[Parts, Body], None], nullable: bool) -> ValueEncoder:
    if nullable:

        def encode_nullable_struct(parts: Parts, value: Any) -> None:
            if value is None:
                parts.append(b"\xff")
            else:
                parts.append(b"\x01")
                encode_struct(parts, value)

        return encode_nullable_struct

    def encode_struct_value(parts: Parts, value: Any) -> None:
        _not_null(value)
        encode_struct(parts, value)

    return encode_struct_value


def _array_encoder(
    path: tuple[str, ...], spec: Field, version: int, flexible: bool, nullable: bool
) -> ValueEncoder:
    write_length = p.write_compact_array_length if flexible else p.write_array_length
    element = spec.element_type
    if element in _FIXED_FORMATS:
        code = _FIXED_FORMATS[element]

        def encode_elements(parts: Parts, value: Any) -> None:
            parts.append(struct.pack(f">{len(value)}{code}", *value))

    else:
        if spec.is_struct:
            encode_element = _struct_encoder(
                _struct_plan(path, spec, version, flexible).encode, False
            )
        else:
            encode_element = _scalar_encoder(element, flexible, nullable=False)

        def encode_elements(parts: Parts, value: Any) -> None:
            for item in value:
                encode_element(parts, item)

    def encode_array(parts: Parts, value: Any) -> None:
        if value is None:
            if not nullable:
                raise EncodeError((), f"None is not allowed (not nullable at version {version})")
            parts.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            return
        parts.append(write_length(len(value)))
        encode_elements(parts, value)

    return encode_array


def _value_decoder(
    path: tuple[str, ...], spec: Field, version: int, flexible: bool
) -> ValueDecoder:
    nullable = spec.nullable_in(version)
    if spec.is_array:
        return _array_decoder(path, spec, version, flexible, nullable)
    if spec.is_struct:
        plan = _struct_plan(path, spec, version, flexible)
        if nullable:
            return _nullable_struct_decoder(plan.decode)
        return plan.decode
    return _scalar_decoder(spec.type, flexible, nullable)


def _scalar_decoder(kind: str, flexible: bool, nullable: bool) -> ValueDecoder:
    if kind in _FIXED_FORMATS:
        unpacker = struct.Struct(">" + _FIXED_FORMATS[kind])
        unpack_from = unpacker.unpack_from
        size = unpacker.size

        def decode_fixed(buf: Buffer, pos: int) -> tuple[Any, int]:
            return unpack_from(buf, pos)[0], pos + size

        return decode_fixed
    if kind == "bool":
        return p.read_bool
    if kind == "uuid":
        return p.read_uuid
    if kind == "records":
        return p.read_compact_nullable_bytes if flexible else p.read_nullable_bytes
    readers: dict[tuple[str, bool, bool], ValueDecoder] = {
        ("string", False, False): p.read_string,
        ("string", False, True): p.read_nullable_string,
        ("string", True, False): p.read_compact_string,
        ("string", True, True): p.read_compact_nullable_string,
        ("bytes", False, False): p.read_bytes,
        ("bytes", False, True): p.read_nullable_bytes,
        ("bytes", True, False): p.read_compact_bytes,
        ("bytes", True, True): p.read_compact_nullable_bytes,
    }
    return readers[(kind, flexible, nullable)]


def _nullable_struct_decoder(decode_struct: ValueDecoder) -> ValueDecoder:
    def decode_nullable_struct(buf: Buffer, pos: int) -> tuple[Any, int]:
        (marker,) = p.INT8.unpack_from(buf, pos)
        if marker < 0:
            return None, pos + 1
        return decode_struct(buf, pos + 1)

    return decode_nullable_struct


def _array_decoder(
    path: tuple[str, ...], spec: Field, version: int, flexible: bool, nullable: bool
) -> ValueDecoder:
    read_length = p.read_compact_array_length if flexible else p.read_array_length
    element = spec.element_type
    name = spec.name

    def read_count(buf: Buffer, pos: int, element_size: int) -> tuple[int, int]:
        count, pos = read_length(buf, pos)
        if count < 0:
            if not nullable:
                raise InvalidFrameError(f"null array {name} is not nullable at version {version}")
            return count, pos
        # Every element takes at least element_size bytes: refuse counts the frame cannot
        # hold before allocating anything for them.
        # (Elements of zero width cannot exhaust memory faster than MAX_ARRAY_LENGTH allows.)
        if count * element_size > len(buf) - pos:
            raise InvalidFrameError(f"array {name} of {count} elements runs past the frame")
        return count, pos

    if element in _FIXED_FORMATS:
        code = _FIXED_FORMATS[element]
        size = _FIXED_SIZES[element]

        def decode_fixed_array(buf: Buffer, pos: int) -> tuple[Any, int]:
            count, pos = read_count(buf, pos, size)
            if count < 0:
                return None, pos
            values = list(struct.unpack_from(f">{count}{code}", buf, pos))
            return values, pos + count * size

        return decode_fixed_array

    if spec.is_struct:
        plan = _struct_plan(path, spec, version, flexible)
        decode_element: ValueDecoder = plan.decode
        element_size = plan.min_size
    else:
        decode_element = _scalar_decoder(element, flexible, nullable=False)
        element_size = _FIXED_SIZES.get(element, 1)

    def decode_array(buf: Buffer, pos: int) -> tuple[Any, int]:
        count, pos = read_count(buf, pos, element_size)
        if count < 0:
            return None, pos
        items: list[Any] = []
        append = items.append
        for _ in range(count):
            item, pos = decode_element(buf, pos)
            append(item)
        return items, pos

    return decode_array
