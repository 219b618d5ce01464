"""Storage errors as Kafka error codes: the one table (``flux.storage.errors`` draws the tree).

Handlers that touch a log map what it raised with ``error_code_for``; an I/O error of any
kind (``LogDirectoryError``, or a bare ``OSError`` from a file the log does not own, such as
the aborted-transaction index) is KAFKA_STORAGE_ERROR (56), which Kafka clients treat as
retriable after a metadata refresh: they find the partition's new leader and send it there.
"""

from __future__ import annotations

from flux.protocol.errors import ErrorCode
from flux.storage.errors import (
    CorruptBatchError,
    LogClosedError,
    LogDirectoryError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StorageError,
)

__all__ = ["error_code_for", "is_disk_error"]

#: Most specific first: the first class ``error`` is an instance of decides.
_STORAGE_ERROR_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (LogDirectoryError, ErrorCode.KAFKA_STORAGE_ERROR),
    (OSError, ErrorCode.KAFKA_STORAGE_ERROR),
    (CorruptBatchError, ErrorCode.CORRUPT_MESSAGE),
    (RecordBatchTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
    (OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    # Closed under a request's feet: the replica was removed or the broker is stopping.
    (LogClosedError, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (StorageError, ErrorCode.UNKNOWN_SERVER_ERROR),
)


def error_code_for(error: BaseException) -> ErrorCode:
    """The Kafka error code a client gets for ``error`` raised by a log."""
    for kind, code in _STORAGE_ERROR_CODES:
        if isinstance(error, kind):
            return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def is_disk_error(error: BaseException) -> bool:
    """Whether ``error`` says the disk failed (the log directory goes offline)."""
    return isinstance(error, LogDirectoryError | OSError)
