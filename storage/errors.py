"""Errors raised by ``flux.storage``.

The hierarchy::

    StorageError                    any failure of a log or a node-local store
    ├── CorruptBatchError           input bytes are not valid record batch v2 (nothing was written)
    ├── RecordBatchTooLargeError    an append exceeds a limit in ``flux.storage.limits``
    ├── OffsetOutOfRangeError       an offset outside [log_start_offset, log_end_offset]
    ├── OffsetMismatchError         follower append whose offsets do not continue the log
    └── LogClosedError              the log (or store) was closed or deleted

The broker maps them to Kafka error codes in one table: CorruptBatchError →
CORRUPT_MESSAGE, RecordBatchTooLargeError → MESSAGE_TOO_LARGE,
OffsetOutOfRangeError → OFFSET_OUT_OF_RANGE, everything else →
KAFKA_STORAGE_ERROR / UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

__all__ = [
    "StorageError",
    "CorruptBatchError",
    "RecordBatchTooLargeError",
    "OffsetOutOfRangeError",
    "OffsetMismatchError",
    "LogClosedError",
]


class StorageError(Exception):
    """Base class of every error raised by ``flux.storage``."""


class CorruptBatchError(StorageError):
    """The bytes handed to ``append`` are not valid record batches; the log is unchanged."""


class RecordBatchTooLargeError(StorageError):
    """One append (or one batch) is larger than the storage limits allow."""


class OffsetOutOfRangeError(StorageError):
    """``offset`` lies outside ``[log_start_offset, log_end_offset]``."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class OffsetMismatchError(StorageError):
    """A follower append (``assign_offsets=False``) does not continue the log exactly."""

    def __init__(self, message: str, *, expected_offset: int, actual_offset: int) -> None:
        super().__init__(message)
        self.expected_offset = expected_offset
        self.actual_offset = actual_offset


class LogClosedError(StorageError):
    """The log or store was used after ``close()`` or ``delete()``."""
