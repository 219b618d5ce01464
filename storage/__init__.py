"""``flux.storage``: partition logs on disk and in memory, and node-local LMDB stores.

Imports nothing else of Flux (DESIGN.md §2). The public API:

- ``PartitionLog`` / ``MemoryLog`` (one interface, ``Log`` is their union),
  configured by ``LogConfig``; ``append`` returns ``AppendResult``; batch
  headers are described by ``BatchInfo``. ``create_segment_file`` does the file-system part
  of a new log (its first segment file) so a caller can run it on another thread and hand the
  fd to ``PartitionLog.open(..., new=True, segment_fd=fd)``.
- ``CheckpointStore``: small transactional node-local state in LMDB.
- ``flux.storage.compaction``: log compaction (planning, the clean, the crash-safe swap;
  records are decoded by a codec the caller passes).
- errors: ``StorageError`` and its subclasses (see ``flux.storage.errors``); an I/O error
  (ENOSPC, EIO, EROFS) fails the log or store that met it with ``LogDirectoryError``.
"""

from flux.storage._segment import create_segment_file
from flux.storage.batch import AppendResult, BatchInfo
from flux.storage.checkpoints import CheckpointStore
from flux.storage.config import LogConfig
from flux.storage.errors import (
    CorruptBatchError,
    LogClosedError,
    LogDirectoryError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StorageError,
)
from flux.storage.log import Log, MemoryLog, PartitionLog
from flux.storage.producer_state import (
    ProducerSnapshotError,
    ProducerStateError,
    ProducerStateManager,
)

__all__ = [
    "AppendResult",
    "BatchInfo",
    "CheckpointStore",
    "CorruptBatchError",
    "Log",
    "LogClosedError",
    "LogDirectoryError",
    "LogConfig",
    "MemoryLog",
    "OffsetMismatchError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecordBatchTooLargeError",
    "StorageError",
    "ProducerSnapshotError",
    "ProducerStateError",
    "ProducerStateManager",
    "create_segment_file",
]
