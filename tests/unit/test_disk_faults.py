"""Disk faults without a disk fault: an OSError (ENOSPC, EIO, EROFS) injected into the system
calls of ``flux.storage`` only, and what follows from it:

- the log that meets it raises ``LogDirectoryError`` (path, errno), drops a partial write, is
  failed from then on (every read and write raises the same error), tells ``on_failure``
  once, closes without a flush or a clean-shutdown marker, and a reopen once the disk is
  healthy recovers everything that was written before;
- the LMDB checkpoint store turns a failed commit into ``LogDirectoryError`` too;
- the one table maps it to KAFKA_STORAGE_ERROR;
- a real ``ReplicaManager`` takes its whole log directory offline on the first such error:
  every on-disk replica answers KAFKA_STORAGE_ERROR, waiting ``acks=all`` produces fail,
  nothing more is written (no checkpoint, no marker), memory topics keep working, and the next
  manager opened on the directory recovers the logs.

The same paths with real full, failing and read-only file systems and real nodes are in
``tests/integration/test_disk_faults.py``.
"""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lmdb
import pytest
from flux.cluster.config import NodeConfig
from flux.cluster.replication.errors import error_code_for, is_disk_error
from flux.cluster.replication.replica_manager import ReplicaManager
from flux.controller.image import MetadataImage
from flux.controller.records import CreateTopic, PartitionSpec
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.storage import (
    CheckpointStore,
    CorruptBatchError,
    LogClosedError,
    LogConfig,
    LogDirectoryError,
    OffsetOutOfRangeError,
    PartitionLog,
    StorageError,
    _segment,
)

from tests.unit.storage_batches import build_batch as storage_batch
from tests.unit.test_config import node_config

BROKER = 1


class FaultyOs:
    """``os`` as ``flux.storage._segment`` sees it, with chosen calls failing: set
    ``fail[name] = errno`` to make ``name`` raise, delete it to heal."""

    def __init__(self) -> None:
        self.fail: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            code = self.fail.get(name)
            if code is not None:
                raise OSError(code, os.strerror(code))
            return real(*args, **kwargs)

        return call


@pytest.fixture
def faulty_os(monkeypatch: pytest.MonkeyPatch) -> FaultyOs:
    faulty = FaultyOs()
    monkeypatch.setattr(_segment, "os", faulty)
    return faulty


def _log_files(directory: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in directory.iterdir() if path.is_file()}


# -- the error ---------------------------------------------------------------------------------


def test_the_error_names_the_directory_and_the_errno() -> None:
    error = LogDirectoryError(Path("/data/t-0"), OSError(errno.ENOSPC, "No space left on device"))
    assert error.path == Path("/data/t-0")
    assert (error.errno, error.errno_name) == (errno.ENOSPC, "ENOSPC")
    assert str(error) == "I/O error in log directory /data/t-0: ENOSPC: No space left on device"
    # Part of the storage tree, and an OSError, so ``except OSError`` around file work holds.
    assert isinstance(error, StorageError) and isinstance(error, OSError)
    without_errno = LogDirectoryError(Path("/data"), RuntimeError("gone"))
    assert (without_errno.errno, without_errno.errno_name) == (None, None)


def test_one_table_maps_storage_errors_to_kafka_codes() -> None:
    disk = LogDirectoryError(Path("/d"), OSError(errno.EIO, "Input/output error"))
    assert error_code_for(disk) == ErrorCode.KAFKA_STORAGE_ERROR
    assert error_code_for(OSError(errno.EROFS, "Read-only file system")) == (
        ErrorCode.KAFKA_STORAGE_ERROR
    )
    assert error_code_for(CorruptBatchError("bad")) == ErrorCode.CORRUPT_MESSAGE
    assert error_code_for(OffsetOutOfRangeError(9, 0, 5)) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert error_code_for(LogClosedError("closed")) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert error_code_for(StorageError("other")) == ErrorCode.UNKNOWN_SERVER_ERROR
    assert error_code_for(ValueError("not ours")) == ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert is_disk_error(disk) and is_disk_error(OSError()) and not is_disk_error(ValueError())


# -- one log -----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EROFS])
def test_a_failed_write_fails_the_log_and_keeps_what_was_written(
    tmp_path: Path, faulty_os: FaultyOs, code: int
) -> None:
    log = PartitionLog.open(tmp_path, LogConfig())
    failures: list[LogDirectoryError] = []
    log.on_failure = failures.append
    for _ in range(3):
        log.append(storage_batch(2))
    log.flush()
    before = log.read(0, 1 << 20)
    size_before = _log_files(tmp_path)["00000000000000000000.log"]

    faulty_os.fail["write"] = code
    with pytest.raises(LogDirectoryError) as raised:
        log.append(storage_batch(2))
    assert raised.value.errno == code and raised.value.path == tmp_path
    assert log.failure is raised.value and failures == [raised.value]
    assert log.log_end_offset == 6  # nothing of the failed append counts
    assert _log_files(tmp_path)["00000000000000000000.log"] == size_before

    del faulty_os.fail["write"]  # healthy again: the log stays failed all the same
    for refused in (
        lambda: log.append(storage_batch(1)),
        lambda: log.read(0, 100),
        log.flush,
        lambda: log.truncate_to(2),
        lambda: log.enforce_retention(),
    ):
        with pytest.raises(LogDirectoryError):
            refused()
    assert len(failures) == 1  # told once
    assert not log.flush_pending()
    log.close()  # released without a flush and without raising ...
    assert not (tmp_path / "clean-shutdown").exists()  # ... so the next open recovers

    reopened = PartitionLog.open(tmp_path, LogConfig())
    assert reopened.log_end_offset == 6
    assert reopened.read(0, 1 << 20) == before
    reopened.close()


def test_a_failed_log_closes_its_files_at_once(tmp_path: Path, faulty_os: FaultyOs) -> None:
    """Failed, whether by its own error or its directory's, a log gives its descriptors back
    without waiting for ``close`` (a directory failed by EMFILE would otherwise keep the
    process out of descriptors), and keeps refusing with its failure."""
    own = PartitionLog.open(tmp_path / "own", LogConfig(segment_bytes=1024))
    other = PartitionLog.open(tmp_path / "other", LogConfig(segment_bytes=1024))
    for log in (own, other):
        while log.segment_count < 3:  # a few segments each
            log.append(storage_batch(4))

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    faulty_os.fail["write"] = errno.EMFILE
    with pytest.raises(LogDirectoryError) as raised:
        own.append(storage_batch(1))
    assert raised.value.errno_name == "EMFILE"
    assert descriptors() <= before - own.segment_count
    del faulty_os.fail["write"]
    other.fail(raised.value)
    assert descriptors() <= before - own.segment_count - other.segment_count
    for log in (own, other):
        with pytest.raises(LogDirectoryError):
            log.read(0, 100)
        with pytest.raises(LogDirectoryError):
            list(log.batch_infos())
        log.close()  # closing again is harmless
    reopened = PartitionLog.open(tmp_path / "own", LogConfig())
    assert reopened.log_end_offset == own.log_end_offset
    reopened.close()


def test_a_failed_fsync_fails_the_append_that_asked_for_it(
    tmp_path: Path, faulty_os: FaultyOs
) -> None:
    log = PartitionLog.open(tmp_path, LogConfig(flush_messages=1))
    log.append(storage_batch(1))
    assert log.recovery_point == 1
    faulty_os.fail["fsync"] = errno.EIO
    with pytest.raises(LogDirectoryError) as raised:
        log.append(storage_batch(1))
    assert raised.value.errno_name == "EIO"
    assert log.recovery_point == 1  # never moved past what reached the disk
    log.close()
    del faulty_os.fail["fsync"]
    reopened = PartitionLog.open(tmp_path, LogConfig(), recovery_point=1)
    assert reopened.log_end_offset in (1, 2)  # the un-fsynced batch may or may not survive
    reopened.close()


def test_a_segment_that_cannot_be_created_fails_the_log(
    tmp_path: Path, faulty_os: FaultyOs
) -> None:
    batch = storage_batch(1)
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=len(batch)))
    log.append(batch)
    faulty_os.fail["open"] = errno.EROFS  # the roll before the next append opens a file
    with pytest.raises(LogDirectoryError) as raised:
        log.append(batch)
    assert raised.value.errno_name == "EROFS"
    assert log.failure is not None
    log.close()


def test_opening_a_log_on_a_failing_disk_raises_the_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    PartitionLog.open(tmp_path, LogConfig()).close()

    def failing_scan(directory: Path) -> list[int]:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr("flux.storage.log._scan_directory", failing_scan)
    with pytest.raises(LogDirectoryError) as raised:
        PartitionLog.open(tmp_path, LogConfig())
    assert raised.value.path == tmp_path and raised.value.errno == errno.EIO


# -- the checkpoint store ------------------------------------------------------------------------


class _FailingCommit:
    def __init__(self, txn: Any) -> None:
        self._txn = txn

    def put(self, *args: Any) -> Any:
        return self._txn.put(*args)

    def abort(self) -> None:
        self._txn.abort()

    def commit(self) -> None:
        self._txn.abort()
        raise lmdb.Error("mdb_txn_commit: No space left on device")


def test_a_checkpoint_commit_the_disk_refuses_fails_the_store(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "state.lmdb")
    store.put("recovery-point", "t-0", 5)
    real = store._env
    store._env = SimpleNamespace(
        begin=lambda write=False: (
            _FailingCommit(real.begin(write=True)) if write else real.begin(write=False)
        ),
        close=real.close,
        max_key_size=real.max_key_size,
    )
    with pytest.raises(LogDirectoryError) as raised:
        store.put("recovery-point", "t-0", 9)
    assert raised.value.errno_name == "ENOSPC"
    assert store.failure is not None
    store._env = real
    with pytest.raises(LogDirectoryError):  # failed for good, even with a healthy env
        store.put("recovery-point", "t-1", 1)
    assert store.get("recovery-point", "t-0") == 5  # reads answer what was committed
    store.close()


# -- the broker: the whole log directory goes offline ---------------------------------------------


def _config(data_dir: Path) -> NodeConfig:
    return node_config(BROKER, data_dir)


def _image() -> MetadataImage:
    spec = PartitionSpec(replicas=(1, 2), isr=(1, 2), leader=BROKER)
    records = [
        CreateTopic(name="disk", topic_id="disk-id", partitions=(spec, spec), config=()),
        CreateTopic(
            name="mem", topic_id="mem-id", partitions=(spec,), config=(("storage", "memory"),)
        ),
    ]
    return MetadataImage.EMPTY.replay_all(records, 1)


def test_the_first_io_error_takes_the_whole_log_directory_offline(
    tmp_path: Path, faulty_os: FaultyOs
) -> None:
    async def scenario() -> None:
        manager = ReplicaManager(_config(tmp_path))
        told: list[LogDirectoryError] = []
        manager.add_offline_listener(told.append)
        image = _image()
        await manager.prepare_image(image)
        manager.apply_image(image)
        disk0, disk1 = manager.partition("disk", 0), manager.partition("disk", 1)
        memory = manager.partition("mem", 0)
        assert disk0 is not None and disk1 is not None and memory is not None
        manager.append(disk0, build_batch([(None, b"acknowledged", ())]))
        disk0.log.flush()
        manager.flush_by_time()
        waiting = disk1.add_delayed_produce(1)  # an acks=all produce still waiting

        faulty_os.fail["write"] = errno.ENOSPC
        with pytest.raises(LogDirectoryError):
            manager.append(disk0, build_batch([(None, b"refused", ())]))
        assert manager.log_dir_offline and manager.offline_error is not None
        assert [error.errno_name for error in told] == ["ENOSPC"]
        # Every on-disk replica is offline, not only the one that met the error ...
        for partition in (disk0, disk1):
            assert partition.offline and not partition.is_leader
            assert manager.partition_for_leader("disk", partition.index) == (
                ErrorCode.KAFKA_STORAGE_ERROR
            )
        assert await waiting == ErrorCode.KAFKA_STORAGE_ERROR
        # ... while a memory topic keeps serving.
        assert manager.partition_for_leader("mem", 0) is memory
        manager.append(memory, build_batch([(None, b"in memory", ())]))

        # Nothing more is written there: a new image neither opens nor checkpoints.
        del faulty_os.fail["write"]
        writes = faulty_os.calls.get("write", 0)
        manager.flush_by_time()
        manager.enforce_retention()
        assert faulty_os.calls.get("write", 0) == writes
        await manager.close()
        assert told and len(told) == 1
        assert not (tmp_path / "disk-0" / "clean-shutdown").exists()

        # Restarted on a healthy disk: the acknowledged record is there, the refused is not.
        restarted = ReplicaManager(_config(tmp_path))
        restarted.apply_image(image)
        again = restarted.partition("disk", 0)
        assert again is not None and not again.offline and not restarted.log_dir_offline
        assert again.log.log_end_offset == 1
        await restarted.close()

    asyncio.run(scenario())


def test_a_failed_checkpoint_write_on_the_worker_thread_takes_the_directory_offline(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        manager = ReplicaManager(_config(tmp_path))
        image = _image()
        manager.apply_image(image)
        manager.start_background_tasks()
        partition = manager.partition("disk", 0)
        assert partition is not None
        failure = LogDirectoryError(tmp_path, OSError(errno.EROFS, "Read-only file system"))

        def refuse(*_args: Any) -> None:
            raise failure

        manager._checkpoints.put_many = refuse  # type: ignore[method-assign]
        manager._checkpoints.put_many_json = refuse  # type: ignore[method-assign]
        manager.append(partition, build_batch([(None, b"x", ())]))
        partition.log.flush()
        taken = manager._take_checkpoints(None)
        job = manager._file_worker.submit(manager._write_now, taken)
        await asyncio.wrap_future(job)  # does not raise: reported to the event loop
        await asyncio.sleep(0)  # the loop runs the report
        assert manager.offline_error is failure
        assert partition.offline
        await manager.close()

    asyncio.run(scenario())


def test_the_error_survives_pickling() -> None:
    import pickle

    error = LogDirectoryError(Path("/d"), OSError(errno.EROFS, "Read-only file system"))
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.path, copy.errno) == (
        LogDirectoryError,
        str(error),
        error.path,
        errno.EROFS,
    )


def test_an_offline_leader_answers_its_followers_with_a_storage_error(tmp_path: Path) -> None:
    """A follower's session parked on the leader is answered at once with
    KAFKA_STORAGE_ERROR when the leader's replica goes offline, and so is every later fetch."""
    from tests.unit.test_fetch_session import _Pair

    pair = _Pair(tmp_path, 1)

    async def scenario() -> tuple[list[Any], list[Any]]:
        await pair.session.serve(pair.request([0]))
        parked = asyncio.ensure_future(pair.session.serve(pair.request([], wait_ms=5_000)))
        await asyncio.sleep(0.05)
        assert not parked.done()
        pair.leaders[0].go_offline()
        first = await asyncio.wait_for(parked, 1.0)
        again = await pair.session.serve(pair.request([0]))
        return first, again

    first, again = asyncio.run(scenario())
    assert [(a.partition, a.error_code) for a in first] == [(0, ErrorCode.KAFKA_STORAGE_ERROR)]
    assert [a.error_code for a in again] == [ErrorCode.KAFKA_STORAGE_ERROR]
    assert not pair.leaders[0].is_leader and pair.leaders[0].offline


def test_a_follower_whose_disk_fails_stops_fetching(tmp_path: Path, faulty_os: FaultyOs) -> None:
    """A follower's append that meets an I/O error takes the directory offline; its fetchers
    then follow no on-disk replica (memory topics go on)."""
    from flux.cluster.replication.fetcher import ReplicaFetcherManager
    from flux.cluster.replication.wire import PartitionData

    leader = 2
    spec = PartitionSpec(replicas=(leader, BROKER), isr=(leader, BROKER), leader=leader)
    image = MetadataImage.EMPTY.replay_all(
        [
            CreateTopic(name="disk", topic_id="disk-id", partitions=(spec,), config=()),
            CreateTopic(
                name="mem", topic_id="mem-id", partitions=(spec,), config=(("storage", "memory"),)
            ),
        ],
        1,
    )

    async def scenario() -> None:
        manager = ReplicaManager(_config(tmp_path))
        fetchers = ReplicaFetcherManager(manager, broker_id=BROKER, incarnation_id="inc")
        manager.apply_image(image)
        link = fetchers._links[leader]
        assert set(link.wanted) == {("disk", 0), ("mem", 0)}
        faulty_os.fail["write"] = errno.EIO
        answer = PartitionData(
            "disk", 0, ErrorCode.NONE, high_watermark=1, log_start_offset=0, leader_epoch=0,
            records=build_batch([(None, b"x", ())]),
        )  # fmt: skip
        assert fetchers.apply(leader, answer) is False
        assert manager.log_dir_offline
        assert set(link.wanted) == {("mem", 0)}  # regrouped at once, without the offline one
        assert fetchers.apply(leader, answer) is True  # ignored: nothing touches the log
        await fetchers.stop()
        await manager.close()

    asyncio.run(scenario())
