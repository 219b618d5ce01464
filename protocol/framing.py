"""Kafka frames: a 4-byte big-endian signed size, then that many bytes of payload."""

from __future__ import annotations

import struct

from flux.protocol.errors import FrameTooLargeError, InvalidFrameError

__all__ = ["SIZE_PREFIX", "frame", "read_size"]

SIZE_PREFIX = 4
_SIZE = struct.Struct(">i")


def read_size(prefix: bytes | bytearray | memoryview, limit: int) -> int:
    """The payload size announced by a 4-byte prefix, checked against ``limit`` bytes."""
    if len(prefix) != SIZE_PREFIX:
        raise InvalidFrameError(f"size prefix must be {SIZE_PREFIX} bytes, got {len(prefix)}")
    size: int = _SIZE.unpack(prefix)[0]
    if size < 0:
        raise InvalidFrameError(f"negative frame size {size}")
    if size > limit:
        raise FrameTooLargeError(size, limit)
    return size


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """The payload with its size prefix in front."""
    return _SIZE.pack(len(payload)) + bytes(payload)
