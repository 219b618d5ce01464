"""The broker's partitions: their logs, topic lifecycle, data-arrival wake-ups and housekeeping.

``ReplicaManager`` owns every ``Partition`` of this broker. It is driven from one asyncio event
loop (single owner, no locks): request handlers call ``append``/``read`` directly; a fetch that
must wait for data awaits ``wait_for_data`` which completes when any of the partitions it names
receives an append. Background tasks apply retention, the time-based flush policy, and
checkpoint recovery points to the node-local LMDB store.

Without a controller (this stage), a broker hosts every partition of every topic as the only
replica, so the high watermark is the log end offset.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from flux.storage import AppendResult, CheckpointStore, MemoryLog, PartitionLog

from .config import NodeConfig
from .local_metadata import LocalMetadata, TopicRecord
from .topics import TopicConfig

__all__ = ["Partition", "ReplicaManager", "TopicState"]

log = logging.getLogger("flux.cluster.replicas")

_RECOVERY_POINTS = "recovery-point"
_DELETE_SUFFIX = "-delete"

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class Partition:
    """One partition replica. Invariant: high_watermark <= log.log_end_offset."""

    topic: str
    index: int
    log: PartitionLog | MemoryLog
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    def wake_waiters(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()


@dataclass(frozen=True)
class TopicState:
    record: TopicRecord
    config: TopicConfig


class ReplicaManager:
    """Every partition replica on this broker, and the topics they belong to."""

    def __init__(self, config: NodeConfig) -> None:
        self._config = config
        self._data_dir = config.data_dir
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._metadata = LocalMetadata(self._data_dir)
        self._checkpoints = CheckpointStore(self._data_dir / "node-state.lmdb")
        self._topics: dict[str, TopicState] = {}
        self._partitions: dict[TopicPartition, Partition] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._remove_deleted_directories()
        recovery_points = self._checkpoints.get_all(_RECOVERY_POINTS)
        self._saved_recovery_points: dict[str, int] = dict(recovery_points)
        for record in self._metadata.topics.values():
            self._open_topic(record, recovery_points)

    # -- topics -------------------------------------------------------------------------------

    def topic_config(self, overrides: dict[str, str | None]) -> TopicConfig:
        return TopicConfig.from_defaults(
            self._config["topic"],
            overrides,
            message_max_bytes=self._config.broker.message_max_bytes,
        )

    @property
    def topics(self) -> dict[str, TopicState]:
        return dict(self._topics)

    def topic(self, name: str) -> TopicState | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        for state in self._topics.values():
            if state.record.topic_id == topic_id:
                return state
        return None

    def create_topic(self, name: str, partitions: int, config: TopicConfig) -> TopicState:
        """Create ``name``; the caller has validated the name, count and config."""
        assert name not in self._topics, name
        overrides = {key: config.values[key] for key in sorted(config.overrides)}
        record = TopicRecord(
            name=name, topic_id=uuid.uuid4(), partitions=partitions, config=overrides
        )
        self._metadata.put(record)
        return self._open_topic(record, {})

    def delete_topic(self, name: str) -> None:
        """Forget ``name`` and remove its data. Metadata goes first, so a crash mid-way leaves
        only directories that startup removes."""
        state = self._topics.pop(name)
        self._metadata.remove(name)
        for index in range(state.record.partitions):
            partition = self._partitions.pop((name, index))
            partition.wake_waiters()
            directory = getattr(partition.log, "directory", None)
            partition.log.close()
            if directory is not None:
                doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
                os.replace(directory, doomed)
                shutil.rmtree(doomed, ignore_errors=True)
            self._checkpoints.delete(_RECOVERY_POINTS, f"{name}-{index}")
            self._saved_recovery_points.pop(f"{name}-{index}", None)

    def _open_topic(self, record: TopicRecord, recovery_points: dict[str, int]) -> TopicState:
        config = self.topic_config(dict(record.config))
        state = TopicState(record=record, config=config)
        log_config = config.log_config()
        for index in range(record.partitions):
            if config.get("storage") == "memory":
                partition_log: PartitionLog | MemoryLog = MemoryLog.open(log_config)
            else:
                partition_log = PartitionLog.open(
                    self._data_dir / f"{record.name}-{index}",
                    log_config,
                    recovery_point=recovery_points.get(f"{record.name}-{index}", 0),
                )
            self._partitions[(record.name, index)] = Partition(record.name, index, partition_log)
        self._topics[record.name] = state
        return state

    def _remove_deleted_directories(self) -> None:
        for entry in self._data_dir.iterdir():
            if entry.is_dir() and entry.name.endswith(_DELETE_SUFFIX):
                shutil.rmtree(entry, ignore_errors=True)

    # -- partitions ---------------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def append(self, partition: Partition, records: bytes | memoryview) -> AppendResult:
        result = partition.log.append(records)
        partition.wake_waiters()
        return result

    async def wait_for_data(self, partitions: Iterable[Partition], timeout_s: float) -> None:
        """Return when any of ``partitions`` receives an append, or after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        registered = list(partitions)
        for partition in registered:
            partition.waiters.add(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            pass
        finally:
            for partition in registered:
                partition.waiters.discard(waiter)

    # -- housekeeping -------------------------------------------------------------------------

    def start_background_tasks(self) -> None:
        broker = self._config.broker
        self._tasks.append(
            asyncio.create_task(
                self._every(broker.retention_check_interval_ms, self.enforce_retention)
            )
        )
        self._tasks.append(
            asyncio.create_task(self._every(broker.flush_check_interval_ms, self.flush_by_time))
        )

    async def _every(self, interval_ms: int, action: object) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                action()  # type: ignore[operator]
            except Exception:
                log.exception("background task %s failed", getattr(action, "__name__", action))

    def enforce_retention(self) -> int:
        deleted = 0
        now_ms = _now_ms()
        for partition in list(self._partitions.values()):
            try:
                deleted += partition.log.enforce_retention(now_ms)
            except OSError:
                log.exception("retention of %s-%d failed", partition.topic, partition.index)
        if deleted:
            log.info("retention deleted %d segments", deleted)
        return deleted

    def flush_by_time(self) -> None:
        """Apply each log's ``flush.ms`` policy, then checkpoint recovery points that moved
        (by these flushes, by ``flush.messages``, or by segment rolls)."""
        for partition in list(self._partitions.values()):
            try:
                partition.log.maybe_flush()
            except OSError:
                log.exception("flush of %s-%d failed", partition.topic, partition.index)
        self.checkpoint_recovery_points()

    def checkpoint_recovery_points(self) -> None:
        """Write the recovery points that changed since the last checkpoint (one transaction)."""
        points = {
            f"{p.topic}-{p.index}": p.log.recovery_point
            for p in self._partitions.values()
            if isinstance(p.log, PartitionLog)
        }
        changed = {
            key: point
            for key, point in points.items()
            if self._saved_recovery_points.get(key) != point
        }
        if changed:
            self._checkpoints.put_many(_RECOVERY_POINTS, changed)
            self._saved_recovery_points.update(changed)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        for partition in self._partitions.values():
            partition.wake_waiters()
            try:
                partition.log.flush()
            except OSError:
                log.exception("final flush of %s-%d failed", partition.topic, partition.index)
        self.checkpoint_recovery_points()
        for partition in self._partitions.values():
            partition.log.close()
        self._checkpoints.close()
