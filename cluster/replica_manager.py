"""The broker's partition replicas, driven by the controller's metadata image.

``ReplicaManager`` owns every ``Partition`` this broker hosts. It is driven from one asyncio
event loop (single owner, no locks). Each new ``MetadataImage`` is applied as
``(old image, delta, new image)``: the delta's role changes for this broker open logs for new
replicas, switch partitions between leader and follower with their leader epochs, close and
delete replicas that moved away or whose topic was deleted, and push topic config changes to
the logs. Request handlers then ask ``partition_for_leader`` and get either the partition or
the Kafka error that explains why this broker cannot serve it.

A fetch that must wait for data awaits ``wait_for_data``, which completes when any of the
partitions it names receives an append or changes role. Background tasks apply retention, the
time-based flush policy, and checkpoint recovery points to the node-local LMDB store.

Each partition directory holds ``partition.metadata`` with the topic id, so a topic deleted and
re-created under the same name while this broker was down is never mistaken for the old one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from flux.controller.image import MetadataDelta, MetadataImage, PartitionState, TopicImage
from flux.protocol.errors import ErrorCode
from flux.storage import AppendResult, CheckpointStore, MemoryLog, PartitionLog

from .config import NodeConfig
from .topics import TopicConfig

__all__ = ["Partition", "ReplicaManager"]

log = logging.getLogger("flux.cluster.replicas")

_RECOVERY_POINTS = "recovery-point"
_DELETE_SUFFIX = "-delete"
_PARTITION_METADATA = "partition.metadata"

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class Partition:
    """One partition replica on this broker.

    Invariants: ``high_watermark <= log.log_end_offset``; ``leader_epoch`` never decreases.
    """

    topic: str
    topic_id: str
    index: int
    log: PartitionLog | MemoryLog
    config: TopicConfig
    state: PartitionState
    is_leader: bool = False
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        # Until follower replication lands, a leader's acknowledged data is its log end.
        return self.log.log_end_offset

    def wake_waiters(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode | None:
        """Kafka's fencing of a client's view: -1 means "no opinion"."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return None
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.FENCED_LEADER_EPOCH


class ReplicaManager:
    """Every partition replica on this broker, following the metadata image."""

    def __init__(self, config: NodeConfig) -> None:
        self._config = config
        self._broker_id = config.node.id
        self._data_dir = config.data_dir
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._checkpoints = CheckpointStore(self._data_dir / "node-state.lmdb")
        self._recovery_points = self._checkpoints.get_all(_RECOVERY_POINTS)
        self._saved_recovery_points: dict[str, int] = dict(self._recovery_points)
        self.image = MetadataImage.EMPTY
        self._partitions: dict[TopicPartition, Partition] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._image_listeners: list[Callable[[MetadataImage], None]] = []
        self._remove_deleted_directories()

    # -- metadata -----------------------------------------------------------------------------

    def add_image_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        self._image_listeners.append(listener)

    def topic_config(self, overrides: dict[str, str | None]) -> TopicConfig:
        return TopicConfig.from_defaults(
            self._config["topic"],
            overrides,
            message_max_bytes=self._config.broker.message_max_bytes,
        )

    def apply_image(self, new_image: MetadataImage) -> None:
        """Act on ``(old image, delta, new image)`` for this broker's replicas."""
        old_image = self.image
        if new_image.version <= old_image.version:
            return
        delta = MetadataDelta.between(old_image, new_image)
        roles = delta.partition_roles(self._broker_id)
        first_image = old_image.version == 0
        self.image = new_image
        for name, topic_id, index in roles.removed:
            self._remove_partition(name, topic_id, index)
        for topic, index, state in roles.leader:
            self._set_role(topic, index, state, is_leader=True)
        for topic, index, state in roles.follower:
            self._set_role(topic, index, state, is_leader=False)
        self._refresh_states_and_configs(new_image)
        if first_image:
            self._remove_stray_directories()
        for listener in self._image_listeners:
            listener(new_image)

    def _set_role(
        self, topic: TopicImage, index: int, state: PartitionState, *, is_leader: bool
    ) -> None:
        partition = self._partitions.get((topic.name, index))
        if partition is not None and partition.topic_id != topic.topic_id:
            self._remove_partition(partition.topic, partition.topic_id, index)
            partition = None
        if partition is None:
            partition = self._open_partition(topic, index, state)
        assert state.leader_epoch >= partition.state.leader_epoch, "leader epochs never go back"
        was_leader = partition.is_leader
        partition.state = state
        partition.is_leader = is_leader
        if was_leader != is_leader:
            log.info(
                "%s-%d: now %s in leader epoch %d",
                topic.name,
                index,
                "leader" if is_leader else "follower",
                state.leader_epoch,
            )
        partition.wake_waiters()

    def _refresh_states_and_configs(self, image: MetadataImage) -> None:
        """Keep each hosted partition's ISR/epochs and topic config in step with the image."""
        for partition in self._partitions.values():
            topic = image.topics.get(partition.topic)
            if topic is None or topic.topic_id != partition.topic_id:
                continue
            if partition.index < len(topic.partitions):
                partition.state = topic.partitions[partition.index]
            overrides = topic.config_dict()
            if overrides != _explicit(partition.config):
                partition.config = self.topic_config(dict(overrides))
                partition.log.update_config(partition.config.log_config())

    def _open_partition(self, topic: TopicImage, index: int, state: PartitionState) -> Partition:
        config = self.topic_config(dict(topic.config_dict()))
        key = f"{topic.name}-{index}"
        if config.get("storage") == "memory":
            partition_log: PartitionLog | MemoryLog = MemoryLog.open(config.log_config())
        else:
            directory = self._data_dir / key
            self._claim_directory(directory, topic.topic_id)
            partition_log = PartitionLog.open(
                directory, config.log_config(), recovery_point=self._recovery_points.get(key, 0)
            )
        partition = Partition(topic.name, topic.topic_id, index, partition_log, config, state)
        self._partitions[(topic.name, index)] = partition
        return partition

    def _claim_directory(self, directory: Path, topic_id: str) -> None:
        """Make ``directory`` belong to ``topic_id``: a leftover of an older topic of the same
        name is removed first."""
        marker = directory / _PARTITION_METADATA
        if directory.exists():
            try:
                owner = marker.read_text().strip()
            except FileNotFoundError:
                owner = ""
            if owner == topic_id:
                return
            log.warning(
                "removing %s: it belongs to topic id %r, not %s", directory, owner, topic_id
            )
            self._delete_directory(directory)
            self._recovery_points.pop(directory.name, None)
        directory.mkdir(parents=True)
        marker.write_text(topic_id + "\n")

    def _remove_partition(self, name: str, topic_id: str, index: int) -> None:
        partition = self._partitions.get((name, index))
        if partition is None or partition.topic_id != topic_id:
            return
        del self._partitions[(name, index)]
        partition.is_leader = False
        partition.wake_waiters()
        directory = getattr(partition.log, "directory", None)
        partition.log.close()
        if directory is not None:
            self._delete_directory(directory)
        self._checkpoints.delete(_RECOVERY_POINTS, f"{name}-{index}")
        self._saved_recovery_points.pop(f"{name}-{index}", None)
        self._recovery_points.pop(f"{name}-{index}", None)
        log.info("removed replica %s-%d", name, index)

    def _delete_directory(self, directory: Path) -> None:
        doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
        os.replace(directory, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def _remove_deleted_directories(self) -> None:
        for entry in self._data_dir.iterdir():
            if entry.is_dir() and entry.name.endswith(_DELETE_SUFFIX):
                shutil.rmtree(entry, ignore_errors=True)

    def _remove_stray_directories(self) -> None:
        """After the first image: partition directories this broker no longer hosts (their topic
        was deleted, or the replica moved, while it was down) are removed, as KRaft does."""
        hosted = {f"{p.topic}-{p.index}" for p in self._partitions.values()}
        for entry in self._data_dir.iterdir():
            if (
                entry.is_dir()
                and (entry / _PARTITION_METADATA).exists()
                and entry.name not in hosted
            ):
                log.warning("removing stray replica directory %s", entry)
                self._delete_directory(entry)

    # -- partitions ---------------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def partition_for_leader(
        self, topic: str, index: int, current_leader_epoch: int = -1
    ) -> Partition | ErrorCode:
        """The partition if this broker leads it in a compatible epoch, else the error to send."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            image_topic = self.image.topics.get(topic)
            if image_topic is not None and index < len(image_topic.partitions):
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not partition.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        error = partition.check_leader_epoch(current_leader_epoch)
        return error if error is not None else partition

    def append(self, partition: Partition, records: bytes | memoryview) -> AppendResult:
        assert partition.is_leader, "only a leader appends client batches"
        result = partition.log.append(records, leader_epoch=partition.leader_epoch)
        partition.wake_waiters()
        return result

    async def wait_for_data(self, partitions: Iterable[Partition], timeout_s: float) -> None:
        """Return when any of ``partitions`` receives an append or changes role, or after
        ``timeout_s``."""
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

    async def _every(self, interval_ms: int, action: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                action()
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
        await asyncio.gather(*self._tasks, return_exceptions=True)
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


def _explicit(config: TopicConfig) -> dict[str, str]:
    return {key: config.values[key] for key in config.overrides}
