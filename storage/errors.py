"""Errors raised by ``flux.storage``.

The hierarchy::

    StorageError                    any failure of a log or a node-local store
    ├── CorruptBatchError           input bytes are not valid record batch v2 (nothing was written)
    ├── RecordBatchTooLargeError    an append exceeds a limit in ``flux.storage.limits``
    ├── OffsetOutOfRangeError       an offset outside [log_start_offset, log_end_offset]
    ├── OffsetMismatchError         follower append whose offsets do not continue the log
    ├── LogClosedError              the log (or store) was closed or deleted
    └── LogDirectoryError           an I/O error (ENOSPC, EIO, EROFS, ...) in a log directory:
                                    the log (or store) that met it takes no more reads or writes
                                    (also an OSError, so ``except OSError`` around file work
                                    still catches it)

The broker maps them to Kafka error codes in one table
(``flux.cluster.replication.errors.error_code_for``): CorruptBatchError →
CORRUPT_MESSAGE, RecordBatchTooLargeError → MESSAGE_TOO_LARGE,
OffsetOutOfRangeError → OFFSET_OUT_OF_RANGE, LogDirectoryError (and a bare
OSError) → KAFKA_STORAGE_ERROR, everything else → UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import errno as errno_codes
import os
from pathlib import Path

__all__ = [
    "StorageError",
    "CorruptBatchError",
    "RecordBatchTooLargeError",
    "OffsetOutOfRangeError",
    "OffsetMismatchError",
    "LogClosedError",
    "LogDirectoryError",
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


class LogDirectoryError(StorageError, OSError):
    """An I/O error in a log directory (Kafka's ``KafkaStorageException``): a full disk
    (ENOSPC), a failing device (EIO, on a write or an fsync), a read-only file system (EROFS).

    The log (or node-local store) that met it is *failed*: from then on every read and write
    of it raises this same error, because after a failed write or fsync nobody can say which
    bytes reached the disk (the next open recovers the log by CRC). ``path`` is the directory
    (or file) concerned, ``errno`` the OS error number when the cause carries one.
    """

    def __init__(self, path: str | os.PathLike[str], cause: BaseException) -> None:
        code = getattr(cause, "errno", None)
        detail = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        name = errno_codes.errorcode.get(code) if isinstance(code, int) else None
        super().__init__(
            f"I/O error in log directory {path}: {name + ': ' if name else ''}{detail}"
        )
        self.path = Path(path)
        self.cause = cause
        self.errno = code if isinstance(code, int) else None

    def __reduce__(self) -> tuple[type[LogDirectoryError], tuple[Path, BaseException]]:
        # OSError pickles by its args (the message); this one is rebuilt from path and cause.
        return type(self), (self.path, self.cause)

    @property
    def errno_name(self) -> str | None:
        """``ENOSPC``, ``EIO``, ``EROFS``... (None when the cause carries no errno)."""
        return errno_codes.errorcode.get(self.errno) if self.errno is not None else None
