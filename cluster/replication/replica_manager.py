"""The broker's partition replicas, driven by the controller's metadata image.

``ReplicaManager`` owns every ``Partition`` this broker hosts. It is driven from one asyncio
event loop (single owner, no locks). Each new ``MetadataImage`` is applied as
``(old image, delta, new image)``: the delta's role changes for this broker open logs for new
replicas, switch partitions between leader and follower with their leader epochs, close and
delete replicas that moved away or whose topic was deleted, and push topic config changes to
the logs. Request handlers then ask ``partition_for_leader`` and get either the partition or
the Kafka error that explains why this broker cannot serve it.

Followers fetch through ``FetchSession``s (``open_fetch_session``, see ``session.py``). A
client fetch that must wait for data awaits ``wait_for_data``, which completes when any of the
partitions it names receives an append or changes role. Background tasks apply retention, the
time-based flush policy, and checkpoint recovery points to the node-local LMDB store.

Each partition directory holds ``partition.metadata`` with the topic id, so a topic deleted and
re-created under the same name while this broker was down is never mistaken for the old one.

Disk faults (Kafka's offline log directory): the node has one log directory, ``data_dir``,
holding every on-disk replica and the LMDB store. The first I/O error met there (ENOSPC, EIO,
EROFS: a log's write, fsync or read, a checkpoint commit, opening a replica) takes the whole
directory offline (``fail_log_directory``): every on-disk replica goes offline
(``Partition.go_offline``) and answers KAFKA_STORAGE_ERROR, nothing is written there again
(no flush, checkpoint or clean-shutdown marker, so the next start recovers the logs by CRC),
and the offline listeners are told (the lifecycle asks the controller to fence this broker,
which moves leadership to the other in-sync replicas; fetchers stop). Memory topics and
everything that needs no disk keep working. Recovery is a restart once the disk is fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import resource
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from flux.controller.image import (
    MetadataDelta,
    MetadataImage,
    PartitionState,
    RoleChanges,
    TopicImage,
)
from flux.protocol.control import ABORT, ControlMarker, control_marker
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.storage import (
    AppendResult,
    BatchInfo,
    CheckpointStore,
    LogDirectoryError,
    MemoryLog,
    OffsetOutOfRangeError,
    PartitionLog,
    create_segment_file,
)
from flux.storage.leader_epochs import LeaderEpochCache
from flux.storage.producer_state import (
    CompletedTxn,
    ProducerSnapshotError,
    ProducerStateManager,
)
from flux.storage.txn_index import AbortedTxn

from ..config import NodeConfig
from ..http.dedup import MessageIdIndex
from ..open_files import low_limit_advice
from ..topics import TopicConfig
from .partition import Partition
from .session import FetchSession
from .throttle import ReplicationThrottle, rate_from_configs

__all__ = ["Partition", "ReplicaManager"]  # Partition is re-exported for the handlers

#: Distinct topic override sets whose effective config is remembered (then forgotten at once).
MAX_REMEMBERED_TOPIC_CONFIGS = 1024
#: An image that gives this broker at least this many new on-disk replicas has their
#: directories and first segment files created on the file worker thread before it is applied
#: (``prepare_image``); fewer are created inline, as part of applying it.
PREPARE_OFF_LOOP_MIN = 32

log = logging.getLogger("flux.cluster.replicas")

_RECOVERY_POINTS = "recovery-point"
_HIGH_WATERMARKS = "high-watermark"
_LEADER_EPOCHS = "leader-epochs"
_PRODUCER_STATE = "producer-state"
_DELETE_SUFFIX = "-delete"
#: The longest file name the file systems we run on allow (a directory name is one).
_FILE_NAME_BYTES_MAX = 255
_PARTITION_METADATA = "partition.metadata"
_CHECKPOINT_NAMESPACES = (_RECOVERY_POINTS, _HIGH_WATERMARKS, _LEADER_EPOCHS, _PRODUCER_STATE)

TopicPartition = tuple[str, int]
#: Pending leader epochs, recovery points, high watermarks and producer snapshots by key.
_Checkpoints = tuple[
    dict[str, list[tuple[int, int]]], dict[str, int], dict[str, int], dict[str, object]
]


def _ignore(partition: Partition) -> None:
    """``on_change`` of a removed partition."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    """Every partition replica on this broker, following the metadata image."""

    def __init__(self, config: NodeConfig) -> None:
        self._config = config
        self._broker_id = config.node.id
        self.roles_changed = True
        #: Replicas the last applied image opened and removed (the node's heap policy
        #: re-freezes after big ones: ``cluster.heap``).
        self.last_opened = 0
        self.last_removed = 0
        self._data_dir = config.data_dir
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._checkpoints = CheckpointStore(self._data_dir / "node-state.lmdb")
        self._recovery_points = self._checkpoints.get_all(_RECOVERY_POINTS)
        self._saved_recovery_points: dict[str, int] = dict(self._recovery_points)
        self._high_watermarks = self._checkpoints.get_all(_HIGH_WATERMARKS)
        self._saved_high_watermarks: dict[str, int] = dict(self._high_watermarks)
        self._saved_producer_offsets: dict[str, int] = {}
        self.image = MetadataImage.EMPTY
        self._partitions: dict[TopicPartition, Partition] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._image_listeners: list[Callable[[MetadataImage], None]] = []
        #: Per topic, since this broker started: [bytes appended as leader, records appended,
        #: bytes sent to consumers] (``flux_topic_*_total`` in /metrics).
        self.traffic: dict[str, list[int]] = {}
        #: ISR changes this broker's leaders had committed (``IsrManager``).
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._sessions: set[FetchSession] = set()
        # Partitions that changed since the housekeeping (flush and checkpoints) and the ISR
        # manager last looked: periodic work visits these, never every hosted partition.
        self._flush_due: set[Partition] = set()
        # Leader-epoch checkpoints changed while an image is applied, written in one LMDB
        # transaction at its end (a topic of thousands of partitions: one fsync, not one per
        # partition). None outside ``apply_image``.
        self._epoch_writes: dict[str, list[tuple[int, int]]] | None = None
        # Leader-epoch caches that only grew (a follower's first batch of a new epoch, a new
        # leader's epoch) since they were last written: written lazily, with the next
        # recovery-point checkpoint and before it (see ``_write_checkpoints``), so a
        # fetch answer never waits for an fsync. A crash loses at most entries for offsets past
        # the checkpointed recovery point, and opening the log rebuilds those from its batch
        # headers (``_open_partition``), as Kafka does since KAFKA-15046.
        self._epochs_pending: dict[str, list[tuple[int, int]]] = {}
        self._topic_configs: dict[tuple[tuple[str, str | None], ...], TopicConfig] = {}
        self._isr_due: set[Partition] = set()
        # Checkpoint keys of replicas removed while an image is applied, deleted in one LMDB
        # transaction at its end (before its epoch writes). None outside ``apply_image``.
        self._checkpoint_deletes: set[str] | None = None
        # File-system work that must not stall the event loop (creating the directories of a
        # new topic's thousands of replicas, deleting a deleted topic's): one worker thread,
        # so its jobs run in the order given.
        self._file_worker = ThreadPoolExecutor(1, thread_name_prefix="flux-replica-files")
        # Replicas whose directory ``prepare_image`` created, by checkpoint key: the open fd of
        # their first segment file, consumed when the image is applied.
        self._prepared: dict[str, int] = {}
        # The last checkpoint write handed to the file worker (``flush_by_time``).
        self._checkpoint_job: Future[None] | None = None
        # (current image, next image, delta, roles) from ``prepare_image``, for its apply.
        self._prepared_roles: (
            tuple[MetadataImage, MetadataImage, MetadataDelta, RoleChanges] | None
        ) = None
        #: Caps what this broker, as leader, sends to replicas a reassignment adds
        #: (``throttle.py``); its rate follows the dynamic broker configs.
        self.throttle = ReplicationThrottle()
        #: The I/O error that took the log directory offline (``fail_log_directory``).
        self.offline_error: LogDirectoryError | None = None
        self._offline_listeners: list[Callable[[LogDirectoryError], None]] = []
        # The event loop that owns this manager (set when its tasks start): failures met on the
        # file worker thread cross into it there.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._remove_deleted_directories()

    # -- metadata -----------------------------------------------------------------------------

    def add_image_listener(self, listener: Callable[[MetadataImage], None]) -> None:
        self._image_listeners.append(listener)

    def topic_config(self, overrides: dict[str, str | None]) -> TopicConfig:
        """The effective config of a topic with these overrides (the node's defaults are fixed
        for its life, so equal overrides give an equal config: remembered, because opening
        10,000 partitions of one topic asks 10,000 times)."""
        key = tuple(sorted(overrides.items(), key=lambda item: item[0]))
        config = self._topic_configs.get(key)
        if config is None:
            config = TopicConfig.from_defaults(
                {**self._config["topic"], "message_ttl_ms": self._config.message.ttl_ms},
                overrides,
                message_max_bytes=self._config.broker.message_max_bytes,
            )
            if len(self._topic_configs) >= MAX_REMEMBERED_TOPIC_CONFIGS:
                self._topic_configs.clear()
            self._topic_configs[key] = config
        return config

    def _roles(self, new_image: MetadataImage) -> tuple[MetadataDelta, RoleChanges]:
        """The delta from the current image to ``new_image`` and this broker's role changes
        (computed once for ``prepare_image`` and the ``apply_image`` after it)."""
        cached = self._prepared_roles
        if cached is not None and cached[0] is self.image and cached[1] is new_image:
            return cached[2], cached[3]
        delta = MetadataDelta.between(self.image, new_image)
        roles = delta.partition_roles(self._broker_id)
        self._prepared_roles = (self.image, new_image, delta, roles)
        return delta, roles

    async def prepare_image(self, new_image: MetadataImage) -> None:
        """Create, on the file worker thread, the directories (with their topic id) and first
        segment files of the replicas that ``new_image`` adds to this broker, so that applying
        it opens them without touching the file system. A new topic of thousands of
        partitions is thousands of directory and file creations per broker, seconds of
        journaled file-system work that would otherwise stall every request, heartbeat and
        replica fetch of this node while ``apply_image`` runs. A directory that already exists
        (a restart, a leftover) is left to ``apply_image``, which checks whose it is."""
        if new_image.version <= self.image.version or self.offline_error is not None:
            return
        _delta, roles = self._roles(new_image)
        fresh: list[tuple[str, str]] = []
        on_disk: dict[str, bool] = {}
        for topic, index, _state in itertools.chain(roles.leader, roles.follower):
            if (topic.name, index) in self._partitions:
                continue
            disk = on_disk.get(topic.name)
            if disk is None:
                config = self.topic_config(dict(topic.config_dict()))
                disk = on_disk[topic.name] = config.get("storage") != "memory"
            key = f"{topic.name}-{index}"
            if disk and key not in self._prepared:
                fresh.append((key, topic.topic_id))
        if len(fresh) < PREPARE_OFF_LOOP_MIN:
            return
        loop = asyncio.get_running_loop()
        created = await loop.run_in_executor(
            self._file_worker, _create_replica_directories, self._data_dir, fresh
        )
        self._prepared.update(created)

    def apply_image(self, new_image: MetadataImage) -> None:
        """Act on ``(old image, delta, new image)`` for this broker's replicas."""
        old_image = self.image
        if new_image.version <= old_image.version:
            return
        delta, roles = self._roles(new_image)
        self._prepared_roles = None
        first_image = old_image.version == 0
        opened_before = len(self._partitions)
        self.last_removed = len(roles.removed)
        self.image = new_image
        #: Whether the last image moved a leader or a replica of this broker's partitions
        #: (listeners that group partitions by leader skip images that did not).
        self.roles_changed = first_image or bool(roles.leader or roles.follower or roles.removed)
        # Nothing is served while this (synchronous) method runs, so the epochs it assigns are
        # durable before any batch of theirs is appended or answered. (Removals come first, so
        # no write here revives a removed replica's.)
        with self.batched_epoch_writes():
            for name, topic_id, index in roles.removed:
                self._remove_partition(name, topic_id, index)
            for topic, index, state in roles.leader:
                self._set_role(topic, index, state, is_leader=True)
            for topic, index, state in roles.follower:
                self._set_role(topic, index, state, is_leader=False)
            self._refresh_states_and_configs(old_image, new_image, delta.changed_topics)
        self._close_unused_prepared()
        if new_image.broker_configs is not old_image.broker_configs:
            rate = rate_from_configs(new_image.broker_configs, self._broker_id)
            if rate != self.throttle.rate:
                log.info("reassignment traffic throttled to %s bytes/s", rate or "unlimited")
                self.throttle.set_rate(rate)
        self.last_opened = max(0, len(self._partitions) - opened_before + len(roles.removed))
        if first_image:
            self._remove_stray_directories()
        for listener in self._image_listeners:
            try:
                listener(new_image)
            except Exception:
                log.exception("image listener %r failed", listener)

    def _set_role(
        self, topic: TopicImage, index: int, state: PartitionState, *, is_leader: bool
    ) -> None:
        partition = self._partitions.get((topic.name, index))
        if partition is not None and partition.topic_id != topic.topic_id:
            self._remove_partition(partition.topic, partition.topic_id, index)
            partition = None
        if partition is not None and partition.offline:
            # Neither leader nor follower until the restart; the fenced broker is moved out
            # of the ISR by the controller, which then elects no offline replica.
            if state.leader_epoch >= partition.state.leader_epoch:
                partition.state = state
            return
        if partition is None:
            if self.offline_error is not None and self._on_disk(topic):
                log.warning("%s-%d: not opened: the log directory is offline", topic.name, index)
                return
            try:
                partition = self._open_partition(topic, index, state)
            except OSError as error:  # LogDirectoryError included
                self.fail_log_directory(error, what=f"opening {topic.name}-{index}")
                return
        was_leader = partition.is_leader
        if is_leader:
            partition.become_leader(state)
        else:
            partition.become_follower(state)
        if was_leader != is_leader or not is_leader:
            log.info(
                "%s-%d: now %s in leader epoch %d",
                topic.name,
                index,
                "leader" if is_leader else f"follower of {state.leader}",
                state.leader_epoch,
            )

    def _refresh_states_and_configs(
        self, old_image: MetadataImage, image: MetadataImage, changed: Iterable[str]
    ) -> None:
        """Keep the hosted partitions of the ``changed`` topics in step with the image (ISR,
        epochs, topic config). Images share unchanged parts, so a partition whose state object
        is the old one (and whose topic config is the same) is skipped at the cost of an
        identity check: an update costs what changed, not how many partitions there are."""
        for name in changed:
            topic = image.topics.get(name)
            if topic is None:
                continue
            before = old_image.topics.get(name)
            if before is not None and before.topic_id != topic.topic_id:
                before = None
            config_changed = before is None or before.config != topic.config
            overrides = topic.config_dict() if config_changed else None
            config = None
            for index, state in enumerate(topic.partitions):
                if (
                    not config_changed
                    and before is not None
                    and index < len(before.partitions)
                    and before.partitions[index] is state
                ):
                    continue
                partition = self._partitions.get((name, index))
                if partition is None or partition.topic_id != topic.topic_id:
                    continue
                if state != partition.state and state.leader_epoch == partition.leader_epoch:
                    partition.update_state(state)
                if overrides is not None and overrides != _explicit(partition.config):
                    config = config or self.topic_config(dict(overrides))
                    partition.config = config
                    partition.log.update_config(config.log_config())
                    self._partition_changed(partition)  # a new flush policy applies now

    def _on_disk(self, topic: TopicImage) -> bool:
        return self.topic_config(dict(topic.config_dict())).get("storage") != "memory"

    def _open_partition(self, topic: TopicImage, index: int, state: PartitionState) -> Partition:
        config = self.topic_config(dict(topic.config_dict()))
        key = f"{topic.name}-{index}"
        recovery_point = self._recovery_points.get(key, 0)
        if config.get("storage") == "memory":
            partition_log: PartitionLog | MemoryLog = MemoryLog.open(config.log_config())
        else:
            directory = self._data_dir / key
            segment_fd = self._prepared.pop(key, None)
            # A directory ``prepare_image`` created is new and this topic's.
            created = segment_fd is not None or self._claim_directory(directory, topic.topic_id)
            partition_log = PartitionLog.open(
                directory,
                config.log_config(),
                recovery_point=recovery_point,
                new=created,
                segment_fd=segment_fd,
            )
            partition_log.on_failure = self._log_failed
        try:
            return self._load_partition(topic, index, state, config, partition_log)
        except OSError:
            partition_log.close()  # a failed log is released without a flush
            raise

    def _load_partition(
        self,
        topic: TopicImage,
        index: int,
        state: PartitionState,
        config: TopicConfig,
        partition_log: PartitionLog | MemoryLog,
    ) -> Partition:
        """The ``Partition`` around a log just opened: epochs, producer state and message ids
        rebuilt from the checkpoints and the log."""
        key = f"{topic.name}-{index}"
        recovery_point = self._recovery_points.get(key, 0)
        # A replica of the same name removed by this same image (its topic re-created) still
        # has its checkpoints until the image's deletions are written: they are not this one's.
        removed = self._checkpoint_deletes is not None and key in self._checkpoint_deletes
        epochs = LeaderEpochCache(
            () if removed else self._checkpoints.get_json(_LEADER_EPOCHS, key) or (),
            on_change=lambda entries, key=key: self._save_epochs(key, entries),
            on_append=lambda entries, key=key: self._epochs_pending.__setitem__(key, entries),
        )
        epochs.truncate_from_end(partition_log.log_end_offset)
        # Epochs first written past the checkpointed recovery point may not have been
        # checkpointed (they are written lazily): the batch headers there say what they are.
        # (Opening the log may already have flushed it past that point: its own recovery
        # point is no guide here.)
        for info in partition_log.batch_infos(min(recovery_point, partition_log.log_end_offset)):
            epochs.assign(info.partition_leader_epoch, info.base_offset)
        producers = self._load_producer_state(key, partition_log, stale=removed)
        partition = Partition(
            broker_id=self._broker_id,
            topic=topic.name,
            topic_id=topic.topic_id,
            index=index,
            log=partition_log,
            config=config,
            # Epoch -1: the first role change from the image always applies.
            state=PartitionState(state.replicas, state.isr, -1, -1, -1),
            epochs=epochs,
            producers=producers,
            high_watermark=self._high_watermarks.get(key, 0),
            dedup=MessageIdIndex(
                0 if topic.name.startswith("__") else self._config.dedup.window_ms,
                covered_end=partition_log.log_start_offset,
            ),
            on_change=self._partition_changed,
        )
        found = partition.rebuild_dedup()
        if found:
            log.info("%s: %d message ids within the dedup window rebuilt from the log", key, found)
        self._partition_changed(partition)
        self._partitions[(topic.name, index)] = partition
        return partition

    @contextlib.contextmanager
    def batched_epoch_writes(self) -> Iterator[None]:
        """Leader-epoch changes made inside the block (an image's role changes, one fetch
        answer's first batches of new epochs on many partitions) are written in one LMDB
        transaction when it ends, instead of one each; so are the checkpoint deletions of
        replicas removed inside it (one transaction, written first). The block must be
        synchronous: nothing is answered from the new epochs before they are written. Nested
        blocks write once, at the outermost end."""
        if self._epoch_writes is not None:
            yield
            return
        self._epoch_writes = {}
        self._checkpoint_deletes = set()
        try:
            yield
        finally:
            writes, self._epoch_writes = self._epoch_writes, None
            deletes, self._checkpoint_deletes = self._checkpoint_deletes, None
            if self.offline_error is None:
                try:
                    if deletes:
                        self._checkpoints.delete_everywhere(_CHECKPOINT_NAMESPACES, deletes)
                    if writes:
                        self._checkpoints.put_many_json(_LEADER_EPOCHS, writes)
                except LogDirectoryError as error:
                    self.fail_log_directory(error, what="writing leader epochs")

    def _save_epochs(self, key: str, entries: list[tuple[int, int]]) -> None:
        self._epochs_pending.pop(key, None)  # superseded by this whole list
        if self._epoch_writes is not None:
            self._epoch_writes[key] = list(entries)  # written when the batched block ends
        elif self.offline_error is None:
            try:
                self._checkpoints.put_json(_LEADER_EPOCHS, key, entries)
            except LogDirectoryError as error:
                self.fail_log_directory(error, what=f"writing the leader epochs of {key}")

    def _load_producer_state(
        self, key: str, partition_log: PartitionLog | MemoryLog, *, stale: bool = False
    ) -> ProducerStateManager:
        """The snapshot from LMDB, brought up to the log end by replaying batch headers (all
        of them when there is no usable snapshot)."""
        start = partition_log.log_start_offset
        producers = ProducerStateManager(last_offset=start)
        # ``stale``: the snapshot stored under this key is a removed replica's.
        snapshot = None if stale else self._checkpoints.get_json(_PRODUCER_STATE, key)
        if snapshot is not None:
            try:
                loaded = ProducerStateManager.from_snapshot(snapshot)
            except ProducerSnapshotError as error:
                log.warning("%s: producer state snapshot unusable (%s): rebuilding", key, error)
            else:
                if start <= loaded.last_offset <= partition_log.log_end_offset:
                    producers = loaded
        # The aborted-transaction index is rebuilt from the same point: the replay re-adds
        # every abort it meets (an index written further than the snapshot, or torn, ends up
        # as the log says).
        txn_index = partition_log.txn_index
        rebuilt = (
            not txn_index.found and partition_log.log_end_offset > partition_log.log_start_offset
        )
        if rebuilt:
            found = _rebuild_txn_index(partition_log)
            if found:
                log.info("%s: %d aborted transactions indexed from the log", key, found)
        txn_index.truncate_to(producers.last_offset)

        def aborted(completed: CompletedTxn) -> None:
            if completed.is_aborted:
                txn_index.append(
                    AbortedTxn.ended(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        producers.first_unstable_offset(),
                    )
                )

        replayed = producers.rebuild_from(
            (
                (
                    info.producer_id,
                    info.producer_epoch,
                    info.base_sequence,
                    info.record_count,
                    info.base_offset,
                    info.last_offset - info.base_offset,
                    info.max_timestamp,
                    info.is_control,
                    info.is_transactional,
                    *_marker_fields(partition_log, info),
                )
                for info in partition_log.batch_infos(producers.last_offset)
            ),
            aborted,
        )
        if replayed:
            log.info("%s: producer state rebuilt from %d batches", key, replayed)
        if rebuilt and isinstance(partition_log, PartitionLog):
            txn_index.persist()  # kept, even empty: the next open need not scan again
        self._saved_producer_offsets[key] = producers.last_offset
        return producers

    def _claim_directory(self, directory: Path, topic_id: str) -> bool:
        """Make ``directory`` belong to ``topic_id``: a leftover of an older topic of the same
        name is removed first. True when the directory was created here (so it is empty).

        A directory whose ``partition.metadata`` is missing or empty is adopted, as Kafka
        does (it writes the topic id into a log that has none): the marker is written
        without an fsync, so a crash (or a dying disk) soon after the replica was created can
        leave it empty while the log's fsynced batches survive, and those may be the only
        copy of acknowledged records. (Removing such a directory lost a replica's log after
        its disk died: tests/integration/test_disk_faults.py.) A marker naming another topic
        id is durable, being older than the crash window, and its directory is removed."""
        marker = directory / _PARTITION_METADATA
        try:
            os.mkdir(directory)
        except FileNotFoundError:
            directory.mkdir(parents=True)
        except FileExistsError:
            try:
                owner = marker.read_text().strip()
            except FileNotFoundError:
                owner = ""
            if owner == topic_id:
                return False
            if not owner:
                log.warning("%s has no topic id: adopting it for %s", directory, topic_id)
                marker.write_text(topic_id + "\n")
                return False
            log.warning(
                "removing %s: it belongs to topic id %r, not %s", directory, owner, topic_id
            )
            self._delete_directory(directory)
            self._recovery_points.pop(directory.name, None)
            directory.mkdir(parents=True)
        marker.write_text(topic_id + "\n")
        return True

    def _remove_partition(self, name: str, topic_id: str, index: int) -> None:
        partition = self._partitions.get((name, index))
        if partition is None or partition.topic_id != topic_id:
            return
        del self._partitions[(name, index)]
        self._flush_due.discard(partition)
        self._isr_due.discard(partition)
        partition.on_change = _ignore
        partition.is_leader = False
        partition.wake_waiters()
        directory = getattr(partition.log, "directory", None)
        partition.log.close()
        if directory is not None:
            try:
                self._delete_directory(directory)
            except OSError as error:
                # A failed disk: the next start removes it as a stray (not hosted any more).
                log.warning("cannot remove %s (%s): left for the next start", directory, error)
        key = f"{name}-{index}"
        partition.fail_delayed(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._epochs_pending.pop(key, None)
        if self._checkpoint_deletes is not None:
            self._checkpoint_deletes.add(key)  # with the image's other removals, in one go
            self._epoch_writes.pop(key, None)  # type: ignore[union-attr]
        elif self.offline_error is None:
            try:
                self._checkpoints.delete_everywhere(_CHECKPOINT_NAMESPACES, (key,))
            except LogDirectoryError as error:
                self.fail_log_directory(error, what=f"removing the checkpoints of {key}")
        for table in (self._saved_recovery_points, self._recovery_points, self._high_watermarks):
            table.pop(key, None)
        self._saved_high_watermarks.pop(key, None)
        self._saved_producer_offsets.pop(key, None)
        log.info("removed replica %s-%d", name, index)

    def _delete_directory(self, directory: Path) -> None:
        """Rename ``directory`` out of the way now (its name is free again at once), and
        remove its files on the file worker thread when an event loop runs (a deleted topic
        of thousands of partitions is seconds of unlinking); leftovers of a crash are removed
        at the next start."""
        # Kafka's rule: the topic part is cut so that the name fits a file name (a 249-byte
        # topic name, legal, plus the tag would not: ENAMETOOLONG is no disk fault).
        tag = f".{uuid.uuid4().hex}{_DELETE_SUFFIX}"
        doomed = directory.with_name(directory.name[: _FILE_NAME_BYTES_MAX - len(tag)] + tag)
        os.replace(directory, doomed)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            shutil.rmtree(doomed, ignore_errors=True)
        else:
            self._file_worker.submit(shutil.rmtree, doomed, ignore_errors=True)

    def _close_unused_prepared(self) -> None:
        """Close the segment files of prepared directories the image did not open after all;
        the directories stay, owned by their topic id, for a later open or stray removal."""
        for fd in self._prepared.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._prepared.clear()

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
                and not entry.name.endswith(_DELETE_SUFFIX)  # already going (maybe just now)
                and (entry / _PARTITION_METADATA).exists()
                and entry.name not in hosted
            ):
                log.warning("removing stray replica directory %s", entry)
                try:
                    self._delete_directory(entry)
                except OSError as error:
                    # Housekeeping: the image is applied and its listeners told regardless
                    # (before, a failure here left the fetchers without the image).
                    log.warning("stray replica directory %s not removed: %s", entry, error)

    # -- partitions ---------------------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self._broker_id

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def _partition_changed(self, partition: Partition) -> None:
        self._flush_due.add(partition)
        self._isr_due.add(partition)

    def take_isr_due(self) -> set[Partition]:
        """The partitions that changed since the last call (for the ISR manager)."""
        due, self._isr_due = self._isr_due, set()
        return due

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
        if partition.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if not partition.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        error = partition.check_leader_epoch(current_leader_epoch)
        return error if error is not None else partition

    def append(
        self,
        partition: Partition,
        records: bytes | memoryview,
        *,
        known_ids: list[list[tuple[int, str]]] | None = None,
    ) -> AppendResult:
        """Append as leader (``known_ids``: see ``Partition.append_as_leader``); an I/O error
        (raised on) takes the log directory offline."""
        try:
            result = partition.append_as_leader(records, known_ids=known_ids)
        except OSError as error:  # LogDirectoryError, or a file the log does not own
            self.fail_log_directory(error, what=f"appending to {partition.key}")
            raise
        counts = self.traffic.get(partition.topic)
        if counts is None:
            counts = self.traffic[partition.topic] = [0, 0, 0]
        counts[0] += len(records)
        counts[1] += result.record_count
        return result

    def count_read(self, topic: str, size: int) -> None:
        """``size`` bytes of ``topic`` were sent to a consumer (``traffic``)."""
        counts = self.traffic.get(topic)
        if counts is None:
            counts = self.traffic[topic] = [0, 0, 0]
        counts[2] += size

    # -- disk faults --------------------------------------------------------------------------

    @property
    def log_dir_offline(self) -> bool:
        return self.offline_error is not None

    def add_offline_listener(self, listener: Callable[[LogDirectoryError], None]) -> None:
        """``listener(error)`` is called once, on the event loop, when the log directory goes
        offline."""
        self._offline_listeners.append(listener)

    def _log_failed(self, failure: LogDirectoryError) -> None:
        """A log's ``on_failure``: its directory is ours, so all of it goes offline."""
        self.fail_log_directory(failure, what=f"in {failure.path.name}")

    def fail_log_directory(self, error: OSError, *, what: str = "") -> None:
        """Take the log directory offline after the I/O ``error`` (see the module docstring).
        Idempotent; call it on the event loop (``_report_failure`` crosses from a thread)."""
        if self.offline_error is not None:
            return
        failure = (
            error
            if isinstance(error, LogDirectoryError)
            else LogDirectoryError(self._data_dir, error)
        )
        self.offline_error = failure
        offline = 0
        for partition in self._partitions.values():
            if isinstance(partition.log, PartitionLog):
                partition.log.fail(failure)
                partition.go_offline()
                self._flush_due.discard(partition)
                offline += 1
        self._checkpoints.failure = self._checkpoints.failure or failure
        log.error(
            "log directory %s is offline after an I/O error%s: %s. Its %d replica(s) are "
            "offline (KAFKA_STORAGE_ERROR) and this broker asks the controller to fence it, so "
            "their leadership moves to the other in-sync replicas; nothing more is written "
            "there. %s.",
            self._data_dir,
            f" ({what})" if what else "",
            failure,
            offline,
            _remedy(failure),
        )
        for listener in self._offline_listeners:
            try:
                listener(failure)
            except Exception:
                log.exception("offline listener %r failed", listener)

    def _report_failure(self, error: OSError, what: str) -> None:
        """``fail_log_directory`` from any thread (the file worker writes checkpoints)."""
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(lambda: self.fail_log_directory(error, what=what))
        else:
            self.fail_log_directory(error, what=what)

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

    # -- leader side of replication ----------------------------------------------------------

    def open_fetch_session(self, replica_id: int, incarnation_id: str) -> FetchSession:
        """A follower connected (``GET /replication/session``): its session, until closed."""
        session = FetchSession(
            replica_id=replica_id,
            incarnation_id=incarnation_id,
            broker_id=self._broker_id,
            lookup=self.partition,
            image=lambda: self.image,
            throttle=self.throttle,
        )
        self._sessions.add(session)
        return session

    def close_fetch_session(self, session: FetchSession) -> None:
        # Its partitions lose a follower's session: the ISR manager looks at them again.
        for key in session.positions:
            partition = self._partitions.get(key)
            if partition is not None:
                self._isr_due.add(partition)
        session.close()
        self._sessions.discard(session)

    def fetch_sessions(self) -> list[FetchSession]:
        return list(self._sessions)

    # -- housekeeping -------------------------------------------------------------------------

    def start_background_tasks(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
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
            if partition.offline:
                continue
            try:
                # Never past an open transaction's first offset (nor the high watermark).
                removed = partition.log.enforce_retention(
                    now_ms, high_watermark=partition.last_stable_offset
                )
                deleted += removed
                partition.producers.truncate_before(partition.log.log_start_offset)
                partition.epochs.truncate_from_start(partition.log.log_start_offset)
                if removed:
                    partition.notify_sessions(urgent=False)  # followers adopt the new log start
            except OSError:
                log.exception("retention of %s-%d failed", partition.topic, partition.index)
        if deleted:
            log.info("retention deleted %d segments", deleted)
        return deleted

    def flush_by_time(self) -> None:
        """Apply each changed log's ``flush.ms`` policy, then checkpoint recovery points, high
        watermarks and producer states that moved (by these flushes, by ``flush.messages``,
        or by segment rolls). Visits only the partitions that changed since the last run, and
        those whose ``flush.ms`` is still counting. The checkpoints are taken here and written
        (JSON, LMDB, fsync) on the file worker thread when an event loop runs: after a burst
        over 10,000 partitions that was most of a second of the loop's time, and even a small
        one's fsync stalled the loop for tens of milliseconds."""
        due, self._flush_due = self._flush_due, set()
        if self.offline_error is not None:
            return  # nothing is written to an offline directory, checkpoints included
        for partition in due:
            if partition.offline:
                continue
            try:
                partition.log.maybe_flush()
                if partition.log.flush_pending():
                    self._flush_due.add(partition)
            except OSError:
                log.exception("flush of %s-%d failed", partition.topic, partition.index)
        # Written on the file worker, small ones too: each kind is one LMDB commit with an
        # fsync, 20-60 ms on this disk, which py-lmdb waits for without the GIL, so the event
        # loop goes on serving meanwhile (on the loop those commits were the acks=all latency
        # tail of a paced run: benchmarks/stallwatch). The worker's jobs keep their order.
        self._write_checkpoints(self._take_checkpoints(due), background=True)

    def _take_checkpoints(self, partitions: Iterable[Partition] | None) -> _Checkpoints:
        """What moved since the last checkpoint, among ``partitions`` (default: all):
        ``(pending epochs, recovery points, high watermarks, producer snapshots)``. The
        bookkeeping counts them written from here on."""
        chosen = list(self._partitions.values() if partitions is None else partitions)
        epochs, self._epochs_pending = self._epochs_pending, {}
        points = {}
        saved_points = self._saved_recovery_points
        for p in chosen:
            if isinstance(p.log, PartitionLog) and saved_points.get(p.key) != p.log.recovery_point:
                points[p.key] = p.log.recovery_point
        saved_points.update(points)
        watermarks = {
            p.key: p.high_watermark
            for p in chosen
            if self._saved_high_watermarks.get(p.key) != p.high_watermark
        }
        self._saved_high_watermarks.update(watermarks)
        snapshots = {}
        for p in chosen:
            if self._saved_producer_offsets.get(p.key) != p.producers.last_offset:
                snapshots[p.key] = p.producers.snapshot()
                self._saved_producer_offsets[p.key] = p.producers.last_offset
        return epochs, points, watermarks, snapshots

    def _write_checkpoints(self, taken: _Checkpoints, *, background: bool = False) -> None:
        """Write what ``_take_checkpoints`` took, one transaction per kind. The lazily written
        leader epochs go first: an epoch that starts below a checkpointed recovery point is
        never rebuilt from the log at the next start, so it must be durable before that
        checkpoint is. ``background``: on the file worker thread (when a loop runs), whose
        jobs keep their order; ``close`` waits for them."""
        if not any(taken):
            return
        if background:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                self._checkpoint_job = self._file_worker.submit(self._write_now, taken)
                return
        self._write_now(taken)

    def _write_now(self, taken: _Checkpoints) -> None:
        epochs, points, watermarks, snapshots = taken
        if self.offline_error is not None or self._checkpoints.failure is not None:
            return
        try:
            if epochs:
                self._checkpoints.put_many_json(_LEADER_EPOCHS, epochs)
            if points:
                self._checkpoints.put_many(_RECOVERY_POINTS, points)
            if watermarks:
                self._checkpoints.put_many(_HIGH_WATERMARKS, watermarks)
            if snapshots:
                # One transaction (one fsync) for every partition appended to since the last run.
                self._checkpoints.put_many_json(_PRODUCER_STATE, snapshots)
        except LogDirectoryError as error:
            self._report_failure(error, "writing checkpoints")
        except Exception:
            log.exception("writing checkpoints failed")
            raise

    def checkpoint_all(self) -> None:
        """Write now every checkpoint that moved (the final one, at close)."""
        self._write_checkpoints(self._take_checkpoints(None))

    async def close(self) -> None:
        for session in list(self._sessions):
            self.close_fetch_session(session)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for partition in self._partitions.values():
            partition.wake_waiters()
            if partition.offline:
                continue  # released below without a flush: the next start recovers it
            try:
                partition.log.flush()
            except OSError:
                log.exception("final flush of %s-%d failed", partition.topic, partition.index)
        if self._checkpoint_job is not None:
            # The last background checkpoint first: jobs and this final one stay in order.
            await asyncio.wrap_future(self._checkpoint_job)
        if self.offline_error is None:
            self.checkpoint_all()
        for partition in self._partitions.values():
            partition.fail_delayed(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            partition.log.close()
        self._close_unused_prepared()
        self._checkpoints.close()
        # Removals still unlinking finish in their thread; later ones are left for the next
        # start (``_remove_deleted_directories``).
        self._file_worker.shutdown(wait=False, cancel_futures=True)


def _create_replica_directories(data_dir: Path, fresh: list[tuple[str, str]]) -> dict[str, int]:
    """On the file worker thread: for each ``(key, topic id)``, create the directory
    ``data_dir/key`` with its ``partition.metadata`` and an empty first segment file; the
    segment fds by key. A directory that exists already is skipped (the event loop checks
    whose it is); an error stops the work, and the replicas not created here are created by
    ``apply_image``, which reports the error where it happens."""
    created: dict[str, int] = {}
    for key, topic_id in fresh:
        directory = data_dir / key
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue
        except OSError:
            break
        try:
            marker = os.open(
                directory / _PARTITION_METADATA,
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                0o644,
            )
            try:
                os.write(marker, (topic_id + "\n").encode())
            finally:
                os.close(marker)
            created[key] = create_segment_file(directory, 0)
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)
            break
    return created


def _explicit(config: TopicConfig) -> dict[str, str]:
    return {key: config.values[key] for key in config.overrides}


def _rebuild_txn_index(partition_log: PartitionLog | MemoryLog) -> int:
    """Index every abort of the whole log (its index file was missing); returns how many.
    The first offset of each transaction is its producer's first transactional batch after
    the previous marker (before the log start, if the transaction began there)."""
    ongoing: dict[int, int] = {}
    found = 0
    index = partition_log.txn_index
    for info in partition_log.batch_infos(partition_log.log_start_offset):
        if info.producer_id < 0 or not info.is_transactional:
            continue
        if not info.is_control:
            ongoing.setdefault(info.producer_id, info.base_offset)
            continue
        first = ongoing.pop(info.producer_id, info.base_offset)
        marker = _stored_marker(partition_log, info)
        if marker is not None and marker.kind == ABORT:
            first_unstable = min(ongoing.values(), default=None)
            index.append(
                AbortedTxn.ended(info.producer_id, first, info.last_offset, first_unstable)
            )
            found += 1
    return found


def _marker_fields(
    partition_log: PartitionLog | MemoryLog, info: BatchInfo
) -> tuple[int | None, int]:
    """``(control type, coordinator epoch)`` of a stored batch for the producer state's
    replay: ``(None, -1)`` for a data batch or an unreadable control batch."""
    marker = _stored_marker(partition_log, info) if info.is_control else None
    return (None, -1) if marker is None else (marker.kind, marker.coordinator_epoch)


def _stored_marker(
    partition_log: PartitionLog | MemoryLog, info: BatchInfo
) -> ControlMarker | None:
    """The control record of the stored control batch ``info`` (None: unreadable)."""
    try:
        batch = partition_log.read(info.base_offset, info.size, max_offset=info.last_offset + 1)
        return control_marker(batch[: info.size])
    except (CorruptRecordError, OffsetOutOfRangeError, OSError):
        log.warning("control batch at %d unreadable: no transaction ended there", info.base_offset)
        return None


def _remedy(failure: LogDirectoryError) -> str:
    """What the operator does about ``failure``: the disk is fine when the process (EMFILE) or
    the system (ENFILE) ran out of file descriptors."""
    if failure.errno == errno.EMFILE:
        limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (
            f"The disk is fine: this process ran out of file descriptors; {low_limit_advice(limit)}"
        )
    if failure.errno == errno.ENFILE:
        return (
            "The disk is fine: the system's file table is full (fs.file-max); raise it or "
            "stop what holds the files, then restart the node"
        )
    return "Free space or fix the disk, then restart the node"
