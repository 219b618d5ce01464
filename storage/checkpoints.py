"""``CheckpointStore``: small, transactional node-local state in one LMDB environment.

One environment per node (``<data_dir>/checkpoints``) holds the recovery
points, high watermarks, log start offsets and leader-epoch caches of every
partition replica. Keys live in namespaces; a namespace is a key prefix
(``namespace NUL kind NUL key``), so the number of namespaces is unbounded
and one transaction can span several of them. Integer values are stored as
8-byte big-endian signed integers, structured values as compact JSON.

Durability: every write call is one LMDB write transaction committed with
``sync=True`` (one fsync per call), so callers batch with ``put_many``.

I/O errors: a write that the disk refuses (ENOSPC, EIO, EROFS) raises
``LogDirectoryError``, and the store is failed from then on (every later write raises the
same error; reads still answer from what was committed): the environment lives in the
node's log directory, which the broker then takes offline.
"""

from __future__ import annotations

import errno
import json
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import lmdb
from flux.storage.errors import LogClosedError, LogDirectoryError, StorageError

__all__ = ["CheckpointStore"]

_INT = struct.Struct(">q")
_KIND_INT = b"i"
_KIND_JSON = b"j"
_SEPARATOR = b"\x00"
DEFAULT_MAP_SIZE = 64 << 20


class CheckpointStore:
    """Namespaced ``str -> int`` and ``str -> JSON`` maps in an LMDB environment.

    Thread-safety: each call is its own LMDB transaction and LMDB serialises
    writers, so calls from several threads are safe; the intended use is one
    owner per node. Invariant: a ``put_many`` is atomic (all items or none).
    """

    def __init__(self, path: str | Path, *, map_size: int = DEFAULT_MAP_SIZE) -> None:
        self._path = Path(path)
        self._path.mkdir(parents=True, exist_ok=True)
        self._env: Any = lmdb.open(
            str(self._path),
            map_size=map_size,
            subdir=True,
            sync=True,
            metasync=True,
            max_dbs=0,
            readahead=False,
        )
        self._max_key_bytes = self._env.max_key_size()
        #: The I/O error that failed the store (see the module docstring), None while healthy.
        self.failure: LogDirectoryError | None = None

    @property
    def path(self) -> Path:
        return self._path

    # -- integers -----------------------------------------------------------------

    def put(self, namespace: str, key: str, value: int) -> None:
        self.put_many(namespace, {key: value})

    def put_many(self, namespace: str, items: Mapping[str, int]) -> None:
        """Store every item in ONE transaction (one fsync): all or nothing."""
        prefix = self._prefix(namespace, _KIND_INT)
        with self._write() as txn:
            for key, value in items.items():
                if not isinstance(value, int) or isinstance(value, bool):
                    raise TypeError(
                        f"{namespace}/{key}: value must be an int, got {type(value).__name__}"
                    )
                txn.put(self._key(prefix, key), _INT.pack(value))

    def get(self, namespace: str, key: str) -> int | None:
        raw = self._get(self._key(self._prefix(namespace, _KIND_INT), key))
        return None if raw is None else int(_INT.unpack(raw)[0])

    def get_all(self, namespace: str) -> dict[str, int]:
        return {
            key: int(_INT.unpack(raw)[0])
            for key, raw in self._items(self._prefix(namespace, _KIND_INT))
        }

    # -- JSON ---------------------------------------------------------------------

    def put_json(self, namespace: str, key: str, obj: Any) -> None:
        """Store a small JSON-serialisable value (e.g. a leader-epoch cache [[epoch, start], ...])."""
        prefix = self._prefix(namespace, _KIND_JSON)
        payload = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
        with self._write() as txn:
            txn.put(self._key(prefix, key), payload)

    def put_many_json(self, namespace: str, items: Mapping[str, Any]) -> None:
        """Store every JSON value in ONE transaction (one fsync): all or nothing."""
        prefix = self._prefix(namespace, _KIND_JSON)
        with self._write() as txn:
            for key, obj in items.items():
                payload = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
                txn.put(self._key(prefix, key), payload)

    def get_json(self, namespace: str, key: str) -> Any:
        raw = self._get(self._key(self._prefix(namespace, _KIND_JSON), key))
        return None if raw is None else json.loads(raw)

    def get_all_json(self, namespace: str) -> dict[str, Any]:
        return {
            key: json.loads(raw) for key, raw in self._items(self._prefix(namespace, _KIND_JSON))
        }

    # -- deletion -----------------------------------------------------------------

    def delete(self, namespace: str, key: str) -> None:
        """Remove ``key`` (its integer and its JSON value) from ``namespace``."""
        self.delete_many(namespace, [key])

    def delete_many(self, namespace: str, keys: Iterable[str]) -> None:
        self.delete_everywhere((namespace,), keys)

    def delete_everywhere(self, namespaces: Iterable[str], keys: Iterable[str]) -> None:
        """Remove every key from every namespace in ONE transaction (one fsync)."""
        prefixes = [
            self._prefix(namespace, kind)
            for namespace in namespaces
            for kind in (_KIND_INT, _KIND_JSON)
        ]
        keys = list(keys)
        with self._write() as txn:
            for prefix in prefixes:
                for key in keys:
                    txn.delete(self._key(prefix, key))

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------

    def _environment(self) -> Any:
        if self._env is None:
            raise LogClosedError(f"checkpoint store {self._path} is closed")
        return self._env

    def _write(self) -> Any:
        environment = self._environment()
        if self.failure is not None:
            raise LogDirectoryError(self.failure.path, self.failure.cause)
        return _WriteTransaction(environment, self._path, self)

    def _prefix(self, namespace: str, kind: bytes) -> bytes:
        if not namespace or "\x00" in namespace:
            raise ValueError(f"invalid namespace {namespace!r}")
        return namespace.encode() + _SEPARATOR + kind + _SEPARATOR

    def _key(self, prefix: bytes, key: str) -> bytes:
        full = prefix + key.encode()
        if len(full) > self._max_key_bytes:
            raise ValueError(
                f"key {key!r} is longer than LMDB allows ({self._max_key_bytes} bytes with its namespace)"
            )
        return full

    def _get(self, full_key: bytes) -> bytes | None:
        with self._environment().begin(write=False) as txn:
            raw = txn.get(full_key)
            return None if raw is None else bytes(raw)

    def _items(self, prefix: bytes) -> list[tuple[str, bytes]]:
        items: list[tuple[str, bytes]] = []
        with self._environment().begin(write=False) as txn:
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                for full_key, raw in cursor:
                    if not full_key.startswith(prefix):
                        break
                    items.append((full_key[len(prefix) :].decode(), bytes(raw)))
        return items


class _WriteTransaction:
    """``with`` block around one LMDB write transaction: commit on success, abort on error,
    and report a full map as a StorageError."""

    def __init__(self, env: Any, path: Path, store: CheckpointStore) -> None:
        self._env = env
        self._path = path
        self._store = store
        self._txn: Any = None

    def __enter__(self) -> Any:
        try:
            self._txn = self._env.begin(write=True)
        except lmdb.Error as error:
            raise self._failed(error) from error
        return self._txn

    def _failed(self, error: lmdb.Error) -> LogDirectoryError:
        """An LMDB error that is not about our data (a full map, a bad key) is the disk's."""
        failure = LogDirectoryError(self._path, _os_error(error))
        if self._store.failure is None:
            self._store.failure = failure
        return failure

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if exc_type is not None:
            self._txn.abort()
            if isinstance(exc, lmdb.MapFullError):
                raise StorageError(
                    f"checkpoint store {self._path} is full; raise map_size"
                ) from exc
            return
        try:
            self._txn.commit()
        except lmdb.MapFullError as error:
            raise StorageError(f"checkpoint store {self._path} is full; raise map_size") from error
        except lmdb.Error as error:
            raise self._failed(error) from error


def _os_error(error: lmdb.Error) -> BaseException:
    """py-lmdb reports a failed system call as ``lmdb.Error("mdb_txn_commit: No space left
    on device")``: an OSError with the errno when the message names a known one."""
    message = str(error)
    for code in (errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT, errno.EACCES):
        if os.strerror(code) in message:
            return OSError(code, message)
    return error
