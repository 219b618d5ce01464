"""Structure-aware mutation of generated Kafka requests and record batches (pure, seeded).

``kafka_case(seed, index, context)`` is the whole recipe of one Kafka case: the valid request of
``kafka_requests.generate_request`` and, most of the time, one to three mutations chosen by
what the request's tokens are:

* body mutations keep the frame's size prefix right, so the broker reads exactly the mutated
  body: lengths of strings, bytes and records (int16/int32 and compact uvarints) set to -1, 0,
  off by one, huge or negative; array counts likewise; varints made overlong, unterminated or
  above 32 bits; nullable markers flipped (null where not allowed, present without data);
  tagged-field sections given unknown, duplicate, oversized or garbage fields; fixed-width
  fields set to boundary values; strings made invalid UTF-8, huge or strange; the request
  header's API key, version and client id; truncation, bit flips, trailing garbage, dropped or
  duplicated tokens; record batches (see ``mutate_batch``);
* frame mutations send bytes whose size prefix lies (negative, above the broker's limit, shorter
  or longer than what follows, zero) or plain garbage; the runner half-closes the connection
  after them and expects the broker to close it (``KafkaCase.raw``).

``mutate_batch`` mutates record batch v2 bytes: batchLength, magic, CRC, attributes
(compression codec bits, transactional/control flags), lastOffsetDelta, record counts,
producer fields, timestamps, compressed payloads (corrupted, or a decompression bomb),
record-level varints and truncation; most mutations then reseal the CRC so that the checks
behind it run too.

Everything is a pure function of its seed; ``kafka_case`` of the same arguments is the same
bytes in every process.
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

from crc32c import crc32c
from flux.protocol import primitives as p
from flux.protocol.api import decode_request
from flux.protocol.compression import Compression, compress
from flux.protocol.errors import ProtocolError

from .context import FuzzContext
from .kafka_requests import DESTRUCTIVE_APIS, KafkaRequest, Token, case_rng, generate_request

__all__ = [
    "BODY_MUTATIONS",
    "FRAME_MUTATIONS",
    "KafkaCase",
    "kafka_case",
    "mutate_batch",
    "mutate_request",
]

#: The largest frame a case may send (a huge string or a decompression bomb stays below it).
MAX_CASE_BYTES = 1 << 20

_LENGTH_KINDS = frozenset(
    {"str_len16", "str_ulen", "bytes_len32", "bytes_ulen", "array_len32", "array_ulen", "tag_size"}
)
_UVARINT_KINDS = frozenset(
    {"str_ulen", "bytes_ulen", "array_ulen", "tag_count", "tag_header", "tag_size"}
)
_NULL_KINDS = frozenset({"str_null", "array_null", "bytes_null", "null_marker"})
_FIXED_KINDS = {
    "int8": ">b",
    "int16": ">h",
    "int32": ">i",
    "int64": ">q",
    "uint16": ">H",
    "uint32": ">I",
    "hdr_correlation_id": ">i",
}
_BOUNDS = {
    ">b": (-128, 127),
    ">h": (-(1 << 15), (1 << 15) - 1),
    ">i": (-(1 << 31), (1 << 31) - 1),
    ">q": (-(1 << 63), (1 << 63) - 1),
    ">H": (0, (1 << 16) - 1),
    ">I": (0, (1 << 32) - 1),
}
_BAD_VARINTS = (
    b"\x80",  # unterminated at the end of its token
    b"\xff\xff\xff\xff\x0f",  # 2**32 - 1
    b"\xff\xff\xff\xff\x7f",  # above 32 bits
    b"\x80\x80\x80\x80\x80\x01",  # six bytes (overlong)
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # ten bytes
    b"\x80\x00",  # zero, written in two bytes
    b"\x81\x80\x80\x80\x08",  # 2**31 + 1
)
_STRANGE_STRINGS = (
    b"",
    b"\xff\xfe\xfd",  # invalid UTF-8
    b"\xc3",  # a truncated two-byte sequence
    b"\xed\xa0\x80",  # an encoded surrogate
    b"..",
    b"../../etc/passwd",
    b"a/b",
    b"\x00",
    "t\u00e9st".encode(),
    b"__consumer_offsets",
    b" ",
    b"%s%n%x",
)


@dataclass(frozen=True)
class KafkaCase:
    """One Kafka case: the bytes to send (size prefix included) and how to judge them.

    ``raw``: the size prefix does not describe what follows (or the bytes are garbage); the
    runner half-closes after sending and expects the broker to close the connection."""

    seed: int
    index: int
    api_key: int
    api_version: int
    mutations: tuple[str, ...]
    data: bytes
    raw: bool

    @property
    def label(self) -> str:
        return (
            f"kafka seed={self.seed} index={self.index} api={self.api_key} "
            f"v{self.api_version} {'+'.join(self.mutations) or 'valid'}"
        )


def kafka_case(seed: int, index: int, context: FuzzContext) -> KafkaCase:
    """Case ``index`` of run ``seed``: a generated request, mutated most of the time."""
    request = generate_request(seed, index, context)
    rng = case_rng(seed, index, "mutate")
    roll = rng.random()
    if roll < 0.08:
        return KafkaCase(
            seed, index, request.api_key, request.api_version, (), request.frame(), False
        )
    if roll < 0.16:
        name = rng.choice(sorted(FRAME_MUTATIONS))
        data = FRAME_MUTATIONS[name](rng, request.payload())
        return KafkaCase(seed, index, request.api_key, request.api_version, (name,), data, True)
    count = 1 if roll < 0.8 else rng.randint(2, 3)
    tokens, names = mutate_request(rng, request, count)
    payload = b"".join(token[1] for token in tokens)[:MAX_CASE_BYTES]
    if _destroys_protected(payload, context):
        # A mutation (of the API key, say) turned it into a destructive request naming a
        # topic that must not change: send the valid request instead.
        return KafkaCase(
            seed, index, request.api_key, request.api_version, ("unsafe",), request.frame(), False
        )
    data = struct.pack(">i", len(payload)) + payload
    return KafkaCase(seed, index, request.api_key, request.api_version, tuple(names), data, False)


def _destroys_protected(payload: bytes, context: FuzzContext) -> bool:
    """The payload decodes as a destructive request and names a protected topic (by name or
    id) anywhere in its bytes."""
    try:
        header, _ = decode_request(payload)
    except ProtocolError:
        return False
    if header.api_key not in DESTRUCTIVE_APIS:
        return False
    return (
        any(
            topic.name.encode() in payload or topic.topic_id.bytes in payload
            for topic in (context.canary, *context.others)
        )
        or context.http_canary.encode() in payload
        or b"__" in payload
    )


def mutate_request(
    rng: random.Random, request: KafkaRequest, count: int
) -> tuple[list[Token], list[str]]:
    """``count`` body mutations applied one after the other; the tokens and their names."""
    tokens = list(request.tokens)
    names: list[str] = []
    for _ in range(count):
        applicable = [
            name
            for name, (kinds, _) in BODY_MUTATIONS.items()
            if kinds is None or any(token[0] in kinds for token in tokens)
        ]
        name = rng.choices(applicable, [_BODY_WEIGHTS.get(n, 1.0) for n in applicable])[0]
        kinds, operator = BODY_MUTATIONS[name]
        candidates = [i for i, token in enumerate(tokens) if kinds is None or token[0] in kinds]
        position = rng.choice(candidates) if candidates else 0
        tokens = operator(rng, tokens, position)
        names.append(f"{name}@{position}")
    return tokens, names


# ------------------------------------------------------------------------- body mutations

TokenMutation = Callable[[random.Random, list[Token], int], list[Token]]


def _replace(
    tokens: list[Token], position: int, data: bytes, kind: str | None = None
) -> list[Token]:
    old = tokens[position]
    return [*tokens[:position], (kind or old[0], data, old[2]), *tokens[position + 1 :]]


def _length_value(rng: random.Random, current: int) -> int:
    return rng.choice(
        (
            -1,
            -2,
            0,
            current + 1,
            max(current - 1, 0),
            current * 2 + 7,
            0x7FFF,
            0x7FFFFFFF,
            -0x80000000,
            1 << 20,
            1 << 24,
            rng.randint(0, 1 << 16),
        )
    )


def _mutate_length(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    kind, data, _ = tokens[position]
    if kind in _UVARINT_KINDS:
        if rng.random() < 0.4:
            return _replace(tokens, position, rng.choice(_BAD_VARINTS))
        try:
            current, _ = p.read_uvarint(data, 0)
        except (IndexError, ValueError, ProtocolError):  # an earlier mutation left a bad varint
            current = 0
        value = _length_value(rng, current) & 0xFFFFFFFF
        return _replace(tokens, position, p.write_uvarint(value))
    if kind == "str_len16":
        (current,) = struct.unpack(">h", data) if len(data) == 2 else (0,)
        value = _clamp(_length_value(rng, current), ">h")
        return _replace(tokens, position, struct.pack(">h", value))
    (current,) = struct.unpack(">i", data) if len(data) == 4 else (0,)
    value = _clamp(_length_value(rng, current), ">i")
    return _replace(tokens, position, struct.pack(">i", value))


def _clamp(value: int, code: str) -> int:
    low, high = _BOUNDS[code]
    return min(max(value, low), high)


def _mutate_varint(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    return _replace(tokens, position, rng.choice(_BAD_VARINTS))


def _mutate_nullable(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    kind, data, key = tokens[position]
    if kind == "null_marker":
        return _replace(tokens, position, b"\x01" if data == b"\xff" else b"\xff")
    if kind in ("str_null", "array_null", "bytes_null"):
        # "Present" with a length and no data behind it.
        present = (
            b"\x02" if len(data) == 1 else (b"\x00\x05" if len(data) == 2 else b"\x00\x00\x00\x05")
        )
        return _replace(tokens, position, present)
    # A length where null may not be allowed: write the null marker and drop the data.
    null = (
        b"\x00"
        if kind in _UVARINT_KINDS
        else (b"\xff\xff" if kind == "str_len16" else b"\xff\xff\xff\xff")
    )
    out = _replace(tokens, position, null)
    if position + 1 < len(out) and out[position + 1][0] in ("str_data", "bytes_data", "records"):
        del out[position + 1]
    return out


def _mutate_tagged(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    fields = []
    for _ in range(rng.randint(1, 4)):
        tag = rng.choice((0, 1, 2, 3, 17, 9999, 0x7FFFFFFF))
        payload = rng.randbytes(rng.randint(0, 12))
        size = len(payload)
        choice = rng.random()
        if choice < 0.2:
            size += rng.randint(1, 1000)  # runs past the frame
        elif choice < 0.3:
            size = 0xFFFFFFFF
        fields.append(p.write_uvarint(tag) + p.write_uvarint(size) + payload)
    if rng.random() < 0.3:
        fields.append(fields[0])  # a duplicate tag
    count = len(fields) if rng.random() < 0.7 else rng.choice((len(fields) + 5, 2000, 0xFFFFFFFF))
    return _replace(tokens, position, p.write_uvarint(count) + b"".join(fields))


def _mutate_fixed(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    kind, data, _ = tokens[position]
    code = _FIXED_KINDS[kind]
    low, high = _BOUNDS[code]
    (current,) = struct.unpack(code, data) if len(data) == struct.calcsize(code) else (0,)
    value = rng.choice(
        (0, -1, 1, low, high, high - 1, low + 1, current + 1, current - 1, rng.randint(low, high))
    )
    return _replace(tokens, position, struct.pack(code, _clamp(value, code)))


def _mutate_string(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    raw = rng.choice(_STRANGE_STRINGS)
    if rng.random() < 0.15:
        raw = b"x" * rng.choice((249, 250, 255, 32767, 40000))
    out = _replace(tokens, position, raw)
    if position > 0:
        kind, _, key = out[position - 1]
        if kind == "str_len16":
            out[position - 1] = (kind, struct.pack(">h", min(len(raw), 0x7FFF)), key)
        elif kind == "str_ulen":
            out[position - 1] = (kind, p.write_uvarint(len(raw) + 1), key)
    return out


def _mutate_header(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    kind = tokens[position][0]
    if kind == "hdr_api_key":
        value = rng.choice((-1, 4, 7, 27, 52, 58, 63, 76, 999, 0x7FFF, rng.randint(0, 80)))
    elif kind == "hdr_api_version":
        value = rng.choice((-1, 0x7FFF, 20, 13, 19, 12, 0, rng.randint(0, 20)))
    else:
        value = rng.choice((-1, 0, 0x7FFF, -0x8000))
    return _replace(tokens, position, struct.pack(">h", value))


def _mutate_records(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    batch = mutate_batch(rng, tokens[position][1])
    out = _replace(tokens, position, batch)
    # The records' length usually follows the mutated batch (so the batch checks run).
    if rng.random() < 0.85 and position > 0:
        kind, _, key = out[position - 1]
        if kind == "bytes_len32":
            out[position - 1] = (kind, struct.pack(">i", len(batch)), key)
        elif kind == "bytes_ulen":
            out[position - 1] = (kind, p.write_uvarint(len(batch) + 1), key)
    return out


def _truncate(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    payload = b"".join(token[1] for token in tokens)
    cut = rng.randint(0, max(len(payload) - 1, 0))
    return [("raw", payload[:cut], "")]


def _bitflip(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    payload = bytearray(b"".join(token[1] for token in tokens))
    if payload:
        for _ in range(rng.randint(1, 8)):
            bit = rng.randrange(len(payload) * 8)
            payload[bit // 8] ^= 1 << (bit % 8)
    return [("raw", bytes(payload), "")]


def _trailing(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    return [*tokens, ("raw", rng.randbytes(rng.randint(1, 64)), "")]


def _splice(rng: random.Random, tokens: list[Token], position: int) -> list[Token]:
    out = list(tokens)
    if not out:
        return out
    if rng.random() < 0.5:
        del out[position]
    else:
        out.insert(position, out[position])
    return out


BODY_MUTATIONS: dict[str, tuple[frozenset[str] | None, TokenMutation]] = {
    "length": (_LENGTH_KINDS, _mutate_length),
    "array_count": (frozenset({"array_len32", "array_ulen"}), _mutate_length),
    "varint": (_UVARINT_KINDS, _mutate_varint),
    "nullable": (
        _NULL_KINDS | frozenset({"str_len16", "str_ulen", "bytes_len32", "bytes_ulen"}),
        _mutate_nullable,
    ),
    "tagged": (frozenset({"tag_count"}), _mutate_tagged),
    "fixed": (frozenset(_FIXED_KINDS), _mutate_fixed),
    "string": (frozenset({"str_data"}), _mutate_string),
    "header": (frozenset({"hdr_api_key", "hdr_api_version", "str_len16"}), _mutate_header),
    "records": (frozenset({"records"}), _mutate_records),
    "truncate": (None, _truncate),
    "bitflip": (None, _bitflip),
    "trailing": (None, _trailing),
    "splice": (None, _splice),
}

# How often each applicable mutation is drawn, relative to 1: record batches are where the
# broker does most work with client bytes; header mutations mostly end in a closed connection.
_BODY_WEIGHTS = {"records": 6.0, "header": 0.4, "truncate": 0.7, "splice": 0.7, "tagged": 1.5}


# ------------------------------------------------------------------------ frame mutations


def _size_negative(rng: random.Random, payload: bytes) -> bytes:
    return struct.pack(">i", rng.choice((-1, -2, -(1 << 31), -len(payload) or -1))) + payload


def _size_huge(rng: random.Random, payload: bytes) -> bytes:
    return struct.pack(">i", rng.choice((0x7FFFFFFF, 104857601, 1 << 30))) + payload


def _size_short(rng: random.Random, payload: bytes) -> bytes:
    return struct.pack(">i", rng.randint(0, max(len(payload) - 1, 0))) + payload


def _size_long(rng: random.Random, payload: bytes) -> bytes:
    return struct.pack(">i", len(payload) + rng.choice((1, 2, 100, 1 << 20, 50 << 20))) + payload


def _garbage(rng: random.Random, payload: bytes) -> bytes:
    data = rng.randbytes(rng.randint(0, 256))
    if rng.random() < 0.5:
        data = struct.pack(">i", len(data)) + data
    return data


def _empty_frame(rng: random.Random, payload: bytes) -> bytes:
    return struct.pack(">i", 0) * rng.randint(1, 3)


def _split_prefix(rng: random.Random, payload: bytes) -> bytes:
    # Only part of a size prefix, then nothing.
    return struct.pack(">i", len(payload))[: rng.randint(1, 3)]


FRAME_MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "size_negative": _size_negative,
    "size_huge": _size_huge,
    "size_short": _size_short,
    "size_long": _size_long,
    "garbage": _garbage,
    "empty_frame": _empty_frame,
    "split_prefix": _split_prefix,
}


# ------------------------------------------------------------------------ batch mutations

_HEADER_SIZE = 61
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21


def _reseal(batch: bytearray) -> None:
    if len(batch) >= _HEADER_SIZE:
        struct.pack_into(">I", batch, _CRC_OFFSET, crc32c(memoryview(batch)[_ATTRIBUTES_OFFSET:]))


def _set(batch: bytearray, offset: int, code: str, value: int) -> None:
    if len(batch) >= offset + struct.calcsize(code):
        struct.pack_into(code, batch, offset, _clamp(value, code))


@functools.lru_cache(maxsize=8)
def _bomb(codec: int) -> bytes:
    """A small compressed block that inflates past the broker's decompression bound."""
    return compress(Compression(codec), bytes(80 << 20))


def mutate_batch(rng: random.Random, batch: bytes) -> bytes:
    """One mutation of record batch v2 bytes, CRC resealed most of the time."""
    out = bytearray(batch)
    reseal = rng.random() < 0.7
    choice = rng.randrange(14)
    if choice == 0:  # batchLength
        (length,) = struct.unpack_from(">i", out, 8) if len(out) >= 12 else (0,)
        _set(
            out,
            8,
            ">i",
            rng.choice((0, 1, 48, length - 1, length + 1, 0x7FFFFFFF, -1, length + 1000)),
        )
    elif choice == 1:  # magic
        if len(out) > 16:
            out[16] = rng.choice((0, 1, 3, 255))
    elif choice == 2:  # CRC
        if len(out) >= _CRC_OFFSET + 4:
            out[_CRC_OFFSET + rng.randrange(4)] ^= 1 << rng.randrange(8)
        reseal = False
    elif choice == 3:  # attributes: compression bits and flags
        (attributes,) = struct.unpack_from(">h", out, 21) if len(out) > 23 else (0,)
        attributes = rng.choice(
            (
                (attributes & ~7) | rng.choice((5, 6, 7)),
                attributes | 0x10,  # transactional
                attributes | 0x20,  # control
                attributes | 0x08,  # LogAppendTime
                (attributes & ~7) | rng.randint(1, 4),  # a codec the payload is not in
                rng.randint(-(1 << 15), (1 << 15) - 1),
            )
        )
        _set(out, 21, ">h", attributes)
    elif choice == 4:  # lastOffsetDelta
        _set(out, 23, ">i", rng.choice((-1, 0, 1 << 30, 0x7FFFFFFF, 5)))
    elif choice == 5:  # recordsCount
        (count,) = struct.unpack_from(">i", out, 57) if len(out) >= 61 else (1,)
        _set(out, 57, ">i", rng.choice((0, -1, count + 1, max(count - 1, 0), 0x7FFFFFFF, 1 << 20)))
    elif choice == 6:  # producer fields
        _set(out, 43, ">q", rng.choice((0, 1, 1 << 40, -2)))
        _set(out, 51, ">h", rng.choice((0, 1, 0x7FFF)))
        _set(out, 53, ">i", rng.choice((0, 5, 0x7FFFFFFF)))
    elif choice == 7:  # timestamps
        _set(out, 27, ">q", rng.choice((-1, 0, -(1 << 63), (1 << 63) - 1)))
        _set(out, 35, ">q", rng.choice((-1, 0, (1 << 63) - 1)))
    elif choice == 8:  # corrupt the (maybe compressed) payload
        for _ in range(rng.randint(1, 6)):
            if len(out) > _HEADER_SIZE:
                out[rng.randrange(_HEADER_SIZE, len(out))] = rng.randrange(256)
    elif choice == 9:  # garbage under a compression codec
        _set(out, 21, ">h", rng.randint(1, 4))
        out[_HEADER_SIZE:] = rng.randbytes(rng.randint(0, 64))
        _set(out, 8, ">i", len(out) - 12)
    elif choice == 10:  # decompression bomb
        codec = rng.choice((1, 3, 4))
        out[_HEADER_SIZE:] = _bomb(codec)
        _set(out, 21, ">h", codec)
        _set(out, 8, ">i", len(out) - 12)
    elif choice == 11:  # record-level varints (uncompressed records)
        if len(out) > _HEADER_SIZE:
            position = rng.randrange(_HEADER_SIZE, len(out))
            varint = rng.choice((b"\x01", b"\x7f", b"\xff\xff\xff\xff\x0f", b"\x80" * 10))
            out[position : position + len(varint)] = varint
            _set(out, 8, ">i", len(out) - 12)
    elif choice == 12:  # truncation
        cut = rng.randint(0, len(out))
        del out[cut:]
        if rng.random() < 0.5:
            _set(out, 8, ">i", len(out) - 12)
    else:  # two batches back to back, or an empty records section
        out = out + out if rng.random() < 0.7 else bytearray()
    if reseal:
        _reseal(out)
    return bytes(out)
