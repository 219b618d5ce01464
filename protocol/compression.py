"""Compression codecs of Kafka record batches (the low three bits of a batch's attributes).

Pure functions over bytes, backed by ``cramjam``:

- ``GZIP`` (1): a gzip stream (RFC 1952); concatenated members are accepted.
- ``SNAPPY`` (2): two framings exist in the wild. Kafka's Java client and kafka-python write the
  *xerial* framing of snappy-java (``\\x82SNAPPY\\x00``, int32 version, int32 compatible version,
  then chunks of ``[int32 length][raw snappy block]``); librdkafka writes one *raw* snappy block.
  ``decompress`` detects and accepts both. ``compress`` writes the xerial framing with 32 KiB
  chunks, as the Java client does: every client reads it (librdkafka detects the xerial magic,
  snappy-java requires it, kafka-python and aiokafka detect it).
- ``LZ4`` (3): the LZ4 *frame* format. Kafka's Java decoder decompresses every block on its own,
  so ``compress`` writes independent blocks (the frame's B.Indep flag set) and no content
  checksum, like the Java client.
- ``ZSTD`` (4): a zstd frame (Kafka 2.1+), compressed at level 3, Kafka's default.

Decompression is bounded: ``decompress`` never produces more than ``max_output_bytes`` (default
``MAX_DECOMPRESSED_BATCH_BYTES``) and raises ``CorruptRecordError`` instead, so a small hostile
batch cannot make us allocate gigabytes. Snappy blocks carry their uncompressed length, which is
checked before decompressing. For gzip, lz4 and zstd the output is written into a buffer of
bounded size (cramjam's ``decompress_into``), grown geometrically from a guess up to the bound.

Every failure, including malformed input, is reported as ``CorruptRecordError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum
from typing import Final

import cramjam
from flux.protocol.errors import CorruptRecordError

__all__ = [
    "MAX_DECOMPRESSED_BATCH_BYTES",
    "Compression",
    "compress",
    "decompress",
]

#: Upper bound on the decompressed size of one batch's records. Kafka's default
#: ``message.max.bytes`` is about 1 MiB of *compressed* bytes; 64 MiB leaves room for highly
#: compressible data while keeping one hostile batch from exhausting memory.
MAX_DECOMPRESSED_BATCH_BYTES: Final = 64 * 1024 * 1024


class Compression(IntEnum):
    """The compression codec of a record batch (attributes bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


Buffer = bytes | bytearray | memoryview

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
# Magic, then version 1 and minimum compatible version 1 (big-endian int32s), as snappy-java
# writes them. Readers ignore the two version fields (some writers get their byte order wrong).
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE: Final = len(_XERIAL_HEADER)
_XERIAL_CHUNK_BYTES: Final = 32 * 1024  # snappy-java's default block size
_INT32: Final = struct.Struct(">i")

_ZSTD_LEVEL: Final = 3  # Kafka's default compression.zstd.level

# Smallest first guess for the output buffer of gzip, lz4 and zstd, and how fast it grows.
_FIRST_OUTPUT_GUESS_BYTES: Final = 64 * 1024
_GUESS_RATIO: Final = 8
_GROWTH: Final = 4

# cramjam reports "the output buffer was too small" with these messages (io::WriteZero from
# gzip/lz4/zstd, and snappy's own). Any other error means the input is malformed.
# tests/unit/test_records.py checks that the installed cramjam still says so.
_OUTPUT_TOO_SMALL_MESSAGES: Final = ("failed to write whole buffer", "smaller than required")


def compress(codec: Compression | int, data: Buffer) -> bytes:
    """Compress ``data`` with ``codec`` in the framing Kafka clients expect."""
    codec = _codec(codec)
    if codec is Compression.NONE:
        return bytes(data)
    try:
        if codec is Compression.GZIP:
            return bytes(cramjam.gzip.compress(data))
        if codec is Compression.SNAPPY:
            return _snappy_xerial_compress(data)
        if codec is Compression.LZ4:
            compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
            compressor.compress(bytes(data))
            return bytes(compressor.finish())
        return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL))
    except cramjam.CompressionError as exc:  # pragma: no cover - cramjam does not fail on bytes
        raise CorruptRecordError(f"{codec.name} compression failed: {exc}") from exc


def decompress(
    codec: Compression | int,
    data: Buffer,
    *,
    max_output_bytes: int = MAX_DECOMPRESSED_BATCH_BYTES,
) -> bytes:
    """Decompress ``data``; raise ``CorruptRecordError`` if it is malformed or too large."""
    codec = _codec(codec)
    if codec is Compression.NONE:
        return _check_size(codec, bytes(data), max_output_bytes)
    if codec is Compression.SNAPPY:
        return _snappy_decompress(data, max_output_bytes)
    if codec is Compression.GZIP:
        return _decompress_bounded(codec, cramjam.gzip.decompress_into, data, max_output_bytes)
    if codec is Compression.LZ4:
        return _decompress_bounded(codec, cramjam.lz4.decompress_into, data, max_output_bytes)
    return _decompress_bounded(codec, cramjam.zstd.decompress_into, data, max_output_bytes)


def _codec(codec: Compression | int) -> Compression:
    try:
        return Compression(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec {codec}") from None


def _check_size(codec: Compression, out: bytes, max_output_bytes: int) -> bytes:
    if len(out) > max_output_bytes:
        raise _too_large(codec, max_output_bytes)
    return out


def _too_large(codec: Compression, max_output_bytes: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{codec.name} decompressed size exceeds the limit of {max_output_bytes} bytes"
    )


def _decompress_bounded(
    codec: Compression,
    decompress_into: Callable[[Buffer, bytearray], int],
    data: Buffer,
    max_output_bytes: int,
) -> bytes:
    """Decompress into a buffer that grows from a guess to ``max_output_bytes`` at most.

    A buffer that is too small makes cramjam fail after filling it, so the work done for one
    batch is bounded by a small multiple of ``max_output_bytes``.
    """
    size = min(max_output_bytes, max(_FIRST_OUTPUT_GUESS_BYTES, len(data) * _GUESS_RATIO))
    while True:
        # One spare byte: output that fills the buffer exactly might have been cut short.
        out = bytearray(size + 1)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if not _output_too_small(exc):
                raise CorruptRecordError(f"{codec.name} decompression failed: {exc}") from exc
            if size >= max_output_bytes:
                raise _too_large(codec, max_output_bytes) from exc
            size = min(max_output_bytes, size * _GROWTH)
            continue
        if written > size:
            if size >= max_output_bytes:
                raise _too_large(codec, max_output_bytes)
            size = min(max_output_bytes, size * _GROWTH)
            continue
        del out[written:]
        return bytes(out)


def _output_too_small(exc: Exception) -> bool:
    text = str(exc)
    return any(message in text for message in _OUTPUT_TOO_SMALL_MESSAGES)


def _snappy_xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_CHUNK_BYTES):
        block = cramjam.snappy.compress_raw(view[start : start + _XERIAL_CHUNK_BYTES])
        parts.append(_INT32.pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


def _snappy_decompress(data: Buffer, max_output_bytes: int) -> bytes:
    view = memoryview(data)
    try:
        if len(view) >= _XERIAL_HEADER_SIZE and view[:8].tobytes() == _XERIAL_MAGIC:
            return _snappy_xerial_decompress(view, max_output_bytes)
        return _snappy_raw_decompress(view, max_output_bytes, max_output_bytes)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"SNAPPY decompression failed: {exc}") from exc


def _snappy_raw_decompress(block: memoryview, budget: int, max_output_bytes: int) -> bytes:
    # The raw format starts with the uncompressed length, so the bound is checked up front.
    if cramjam.snappy.decompress_raw_len(block) > budget:
        raise _too_large(Compression.SNAPPY, max_output_bytes)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_xerial_decompress(view: memoryview, max_output_bytes: int) -> bytes:
    chunks: list[bytes] = []
    remaining = max_output_bytes
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("SNAPPY xerial chunk length is truncated")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"SNAPPY xerial chunk of {length} bytes does not fit the {end - pos} left"
            )
        chunk = _snappy_raw_decompress(view[pos : pos + length], remaining, max_output_bytes)
        remaining -= len(chunk)
        chunks.append(chunk)
        pos += length
    return b"".join(chunks)
