"""Errors of the Kafka wire protocol layer, and Kafka's error-code table.

Exception tree (everything raised by ``flux.protocol`` derives from ``ProtocolError``)::

    ProtocolError
    ├── InvalidFrameError        a frame or message body that cannot be decoded
    │   └── FrameTooLargeError   a size prefix above the configured bound
    ├── UnsupportedVersionError  an API key or version this codec does not implement
    └── CorruptRecordError       a record batch that fails length, magic or CRC checks,
                                 or whose records cannot be decoded or decompressed

``ErrorCode`` is Kafka's numeric error-code table (the ``error_code`` fields of responses).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "CorruptRecordError",
    "ErrorCode",
    "FrameTooLargeError",
    "InvalidFrameError",
    "ProtocolError",
    "UnsupportedVersionError",
]


class ProtocolError(Exception):
    """Base of every error raised by ``flux.protocol``."""


class InvalidFrameError(ProtocolError):
    """A frame, header or message body that cannot be decoded."""


class FrameTooLargeError(InvalidFrameError):
    """A size prefix larger than the bound the reader was given."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class UnsupportedVersionError(ProtocolError):
    """An API key or version the codec does not implement.

    ``correlation_id`` is set when the request header could be read, so a server can still
    answer the client (Kafka answers an unsupported ApiVersions request with error 35).
    """

    def __init__(self, api_key: int, api_version: int, correlation_id: int | None = None) -> None:
        super().__init__(f"unsupported API key {api_key} version {api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class CorruptRecordError(ProtocolError):
    """A record batch that fails its length, magic or CRC checks, or cannot be decoded."""


class ErrorCode(IntEnum):
    """Kafka's error codes (placeholder subset; the full table follows)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    UNSUPPORTED_VERSION = 35
