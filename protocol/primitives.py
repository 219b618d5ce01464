"""Readers and writers of the Kafka protocol's primitive types.

Readers take a ``memoryview`` of the whole frame and a position and return ``(value, next
position)``. They check every length against the bytes that remain before they allocate, and
raise :class:`~flux.protocol.errors.InvalidFrameError` for a truncated or malformed buffer.
(A read past the end of ``buf`` by ``struct.unpack_from`` or indexing raises ``struct.error``
or ``IndexError``; :mod:`flux.protocol.api` turns those into ``InvalidFrameError`` at its
boundary, so readers do not test for them byte by byte.)

Writers return ``bytes`` (or append to a list of parts) and raise ``ValueError`` for values
that do not fit the wire type.

Lengths follow Kafka: classic strings carry an int16 length (-1 = null), classic bytes and
arrays an int32 length (-1 = null); the compact forms of flexible versions carry an unsigned
varint holding ``length + 1`` (0 = null). Tagged-field sections are an unsigned varint count
followed by ``(tag, size, payload)`` triples.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

from flux.protocol.errors import InvalidFrameError
from flux.protocol.limits import MAX_ARRAY_LENGTH, MAX_STRING_LENGTH, MAX_TAGGED_FIELDS

__all__ = [
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT16",
    "UINT32",
    "FLOAT64",
    "ZERO_UUID",
    "read_bool",
    "read_bytes",
    "read_compact_bytes",
    "read_compact_nullable_bytes",
    "read_nullable_bytes",
    "read_compact_string",
    "read_compact_nullable_string",
    "read_string",
    "read_nullable_string",
    "read_array_length",
    "read_compact_array_length",
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "read_uuid",
    "skip_tagged_fields",
    "read_tagged_fields",
    "write_bool",
    "write_uvarint",
    "write_varint",
    "write_varlong",
    "write_string",
    "write_nullable_string",
    "write_compact_string",
    "write_compact_nullable_string",
    "write_bytes",
    "write_nullable_bytes",
    "write_compact_bytes",
    "write_compact_nullable_bytes",
    "write_array_length",
    "write_compact_array_length",
    "write_uuid",
    "write_tagged_fields",
    "EMPTY_TAGGED_FIELDS",
]

Buffer = memoryview

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)

_SMALL_UVARINTS = tuple(bytes((i,)) for i in range(128))
_UVARINT32_MAX = 0xFFFFFFFF
_UVARINT64_MAX = 0xFFFFFFFFFFFFFFFF

#: The tagged-field section of a struct that has no tagged fields to send.
EMPTY_TAGGED_FIELDS = b"\x00"


# --------------------------------------------------------------------------------- varints


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 32 bits (5 bytes)."""
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 28:
            raise InvalidFrameError("unsigned varint longer than 5 bytes")
    if result > _UVARINT32_MAX:
        raise InvalidFrameError("unsigned varint exceeds 32 bits")
    return result, pos


def _read_uvarlong(buf: Buffer, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            raise InvalidFrameError("varlong longer than 10 bytes")
    if result > _UVARINT64_MAX:
        raise InvalidFrameError("varlong exceeds 64 bits")
    return result, pos


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag-encoded signed varint (32 bits)."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag-encoded signed varlong (64 bits)."""
    raw, pos = _read_uvarlong(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def write_uvarint(value: int) -> bytes:
    """Encode an unsigned varint of at most 32 bits."""
    if 0 <= value < 0x80:
        return _SMALL_UVARINTS[value]
    if value < 0 or value > _UVARINT32_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _write_unsigned(value)


def _write_unsigned(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_varint(value: int) -> bytes:
    """Encode a zigzag signed varint (32 bits)."""
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"varint out of range: {value}")
    return _write_unsigned(((value << 1) ^ (value >> 31)) & _UVARINT32_MAX)


def write_varlong(value: int) -> bytes:
    """Encode a zigzag signed varlong (64 bits)."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong out of range: {value}")
    return _write_unsigned(((value << 1) ^ (value >> 63)) & _UVARINT64_MAX)


# ------------------------------------------------------------------------------ fixed width


def read_bool(buf: Buffer, pos: int) -> tuple[bool, int]:
    return buf[pos] != 0, pos + 1


def write_bool(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def read_uuid(buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise InvalidFrameError("uuid runs past the end of the frame")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def write_uuid(value: uuid.UUID | bytes) -> bytes:
    if isinstance(value, uuid.UUID):
        return value.bytes
    raw = bytes(value)
    if len(raw) != 16:
        raise ValueError(f"uuid must be 16 bytes, got {len(raw)}")
    return raw


# ----------------------------------------------------------------------------------- lengths


def _check_span(buf: Buffer, pos: int, length: int, what: str) -> int:
    end = pos + length
    if end > len(buf):
        raise InvalidFrameError(f"{what} of {length} bytes runs past the end of the frame")
    return end


def read_array_length(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a classic int32 array length; -1 (null) is returned as -1."""
    (length,) = INT32.unpack_from(buf, pos)
    if length < -1:
        raise InvalidFrameError(f"negative array length {length}")
    if length > MAX_ARRAY_LENGTH:
        raise InvalidFrameError(f"array length {length} exceeds {MAX_ARRAY_LENGTH}")
    return length, pos + 4


def read_compact_array_length(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a compact array length; null is returned as -1."""
    raw, pos = read_uvarint(buf, pos)
    length = raw - 1
    if length > MAX_ARRAY_LENGTH:
        raise InvalidFrameError(f"array length {length} exceeds {MAX_ARRAY_LENGTH}")
    return length, pos


def write_array_length(length: int) -> bytes:
    return INT32.pack(length)


def write_compact_array_length(length: int) -> bytes:
    return write_uvarint(length + 1)


# ----------------------------------------------------------------------------------- strings


def _decode_utf8(buf: Buffer, pos: int, end: int) -> str:
    try:
        return str(buf[pos:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidFrameError(f"string is not valid UTF-8: {exc.reason}") from None


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    (length,) = INT16.unpack_from(buf, pos)
    pos += 2
    if length < 0:
        if length == -1:
            return None, pos
        raise InvalidFrameError(f"negative string length {length}")
    end = _check_span(buf, pos, length, "string")
    return _decode_utf8(buf, pos, end), end


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    value, pos = read_nullable_string(buf, pos)
    if value is None:
        raise InvalidFrameError("null in a non-nullable string")
    return value, pos


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    raw, pos = read_uvarint(buf, pos)
    if raw == 0:
        return None, pos
    length = raw - 1
    if length > MAX_STRING_LENGTH:
        raise InvalidFrameError(f"string length {length} exceeds {MAX_STRING_LENGTH}")
    end = _check_span(buf, pos, length, "string")
    return _decode_utf8(buf, pos, end), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    value, pos = read_compact_nullable_string(buf, pos)
    if value is None:
        raise InvalidFrameError("null in a non-nullable compact string")
    return value, pos


def _utf8(value: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"expected str, got {type(value).__name__}")
    raw = value.encode("utf-8")
    if len(raw) > MAX_STRING_LENGTH:
        raise ValueError(f"string of {len(raw)} bytes exceeds {MAX_STRING_LENGTH}")
    return raw


def write_string(value: str) -> bytes:
    raw = _utf8(value)
    return INT16.pack(len(raw)) + raw


def write_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    return write_string(value)


def write_compact_string(value: str) -> bytes:
    raw = _utf8(value)
    return write_uvarint(len(raw) + 1) + raw


def write_compact_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    return write_compact_string(value)


# ------------------------------------------------------------------------------------- bytes


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    (length,) = INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        if length == -1:
            return None, pos
        raise InvalidFrameError(f"negative bytes length {length}")
    end = _check_span(buf, pos, length, "bytes")
    return bytes(buf[pos:end]), end


def read_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    value, pos = read_nullable_bytes(buf, pos)
    if value is None:
        raise InvalidFrameError("null in a non-nullable bytes field")
    return value, pos


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    raw, pos = read_uvarint(buf, pos)
    if raw == 0:
        return None, pos
    end = _check_span(buf, pos, raw - 1, "bytes")
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    value, pos = read_compact_nullable_bytes(buf, pos)
    if value is None:
        raise InvalidFrameError("null in a non-nullable compact bytes field")
    return value, pos


def write_bytes(value: bytes) -> bytes:
    return INT32.pack(len(value)) + bytes(value)


def write_nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    return write_bytes(value)


def write_compact_bytes(value: bytes) -> bytes:
    return write_uvarint(len(value) + 1) + bytes(value)


def write_compact_nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return b"\x00"
    return write_compact_bytes(value)


# ----------------------------------------------------------------------------- tagged fields

TaggedReader = Callable[[Buffer, int], tuple[object, int]]


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[dict[int, memoryview], int]:
    """Read a tagged-field section into ``{tag: raw payload}`` without interpreting it."""
    count, pos = read_uvarint(buf, pos)
    if count > MAX_TAGGED_FIELDS:
        raise InvalidFrameError(f"{count} tagged fields exceed {MAX_TAGGED_FIELDS}")
    fields: dict[int, memoryview] = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = _check_span(buf, pos, size, "tagged field")
        fields[tag] = buf[pos:end]
        pos = end
    return fields, pos


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """Skip a tagged-field section (used for headers, whose tags Flux does not interpret)."""
    if buf[pos] == 0:
        return pos + 1
    return read_tagged_fields(buf, pos)[1]


def write_tagged_fields(fields: dict[int, bytes]) -> bytes:
    """Encode ``{tag: payload}`` as a tagged-field section, tags in ascending order."""
    if not fields:
        return EMPTY_TAGGED_FIELDS
    parts = [write_uvarint(len(fields))]
    for tag in sorted(fields):
        payload = fields[tag]
        parts.append(write_uvarint(tag))
        parts.append(write_uvarint(len(payload)))
        parts.append(payload)
    return b"".join(parts)
