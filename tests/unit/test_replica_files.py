"""The replica manager's file-system work and its lazily written leader epochs, on a real
``ReplicaManager`` with real disk logs and a real LMDB checkpoint store (no network):

- a new topic's replica directories are created on the file worker thread by
  ``prepare_image`` and the image then opens them without creating anything;
- a deleted topic's directories are renamed at once and removed off the event loop, and its
  checkpoints go in the same image's one deletion;
- a follower's first batch of a new epoch is not written to LMDB at once (no fsync on the
  fetch path); it is written before the next recovery-point checkpoint, and after a crash
  that lost it the epoch is rebuilt from the log's batch headers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from flux.cluster.config import NodeConfig
from flux.cluster.replication import replica_manager as replica_manager_module
from flux.cluster.replication.replica_manager import PREPARE_OFF_LOOP_MIN, ReplicaManager
from flux.controller.image import MetadataImage
from flux.controller.records import CreateTopic, DeleteTopic, PartitionSpec
from flux.protocol.records import build_batch
from flux.storage import CheckpointStore

from tests.unit.test_config import node_config

BROKER = 2
TOPIC_ID = "topic-id-1"


def _config(data_dir: Path) -> NodeConfig:
    return node_config(BROKER, data_dir)


def _topic_image(partitions: int, leader: int = 1) -> MetadataImage:
    spec = PartitionSpec(replicas=(1, 2, 3), isr=(1, 2, 3), leader=leader)
    record = CreateTopic(name="t", topic_id=TOPIC_ID, partitions=(spec,) * partitions, config=())
    return MetadataImage.EMPTY.replay_all([record], 1)


def _follow(manager: ReplicaManager, image: MetadataImage) -> None:
    """What the broker's metadata loop does with each image."""

    async def run() -> None:
        await manager.prepare_image(image)
        manager.apply_image(image)

    asyncio.run(run())


def _epochs_in_lmdb(data_dir: Path, key: str) -> object:
    with CheckpointStore(data_dir / "node-state.lmdb") as store:
        return store.get_json("leader-epochs", key)


def test_a_new_topics_directories_are_created_before_the_image_is_applied(
    tmp_path: Path, monkeypatch
) -> None:
    count = PREPARE_OFF_LOOP_MIN + 8
    manager = ReplicaManager(_config(tmp_path))
    created_inline: list[Path] = []
    claim = ReplicaManager._claim_directory

    def counting_claim(self: ReplicaManager, directory: Path, topic_id: str) -> bool:
        created_inline.append(directory)
        return claim(self, directory, topic_id)

    monkeypatch.setattr(ReplicaManager, "_claim_directory", counting_claim)
    image = _topic_image(count)

    asyncio.run(manager.prepare_image(image))
    # Before the image is applied, the worker thread made every directory, with its owner.
    for index in range(count):
        directory = tmp_path / f"t-{index}"
        assert (directory / "partition.metadata").read_text() == TOPIC_ID + "\n"
        assert (directory / "00000000000000000000.log").stat().st_size == 0
    assert manager.partition("t", 0) is None

    manager.apply_image(image)
    assert created_inline == []  # nothing was created on the event loop
    for index in range(count):
        partition = manager.partition("t", index)
        assert partition is not None and not partition.is_leader
        assert partition.log.log_end_offset == 0
    # The logs write to the files the worker created.
    manager.partition("t", 3).append_as_follower(build_batch([(b"k", b"v", ())]))
    assert (tmp_path / "t-3" / "00000000000000000000.log").stat().st_size > 0
    asyncio.run(manager.close())


def test_a_few_new_replicas_are_created_inline(tmp_path: Path) -> None:
    manager = ReplicaManager(_config(tmp_path))
    image = _topic_image(2)
    asyncio.run(manager.prepare_image(image))
    assert not (tmp_path / "t-0").exists()  # not worth a thread hop
    manager.apply_image(image)
    assert (tmp_path / "t-0" / "partition.metadata").read_text() == TOPIC_ID + "\n"
    asyncio.run(manager.close())


def test_a_deleted_topic_is_renamed_at_once_and_removed_off_the_loop(tmp_path: Path) -> None:
    count = PREPARE_OFF_LOOP_MIN + 1
    manager = ReplicaManager(_config(tmp_path))
    created = _topic_image(count)
    _follow(manager, created)
    for index in range(count):
        manager.partition("t", index).append_as_follower(
            build_batch([(b"k", b"v", ())], partition_leader_epoch=0)
        )
    manager.flush_by_time()  # checkpoints (recovery points, high watermarks, epochs)
    deleted = created.replay_all([DeleteTopic(topic_id=TOPIC_ID)], 2)

    async def delete_and_watch() -> list[str]:
        await manager.prepare_image(deleted)
        manager.apply_image(deleted)
        # The name is free the moment the image is applied ...
        names = [entry.name for entry in tmp_path.iterdir()]
        # ... and the files go on the worker thread (drained here).
        await asyncio.get_running_loop().run_in_executor(manager._file_worker, lambda: None)
        return names

    names_right_after = asyncio.run(delete_and_watch())
    assert not any(name.startswith("t-") and "-delete" not in name for name in names_right_after)
    assert not any(entry.name.startswith("t-") for entry in tmp_path.iterdir())
    assert manager.partition("t", 0) is None
    asyncio.run(manager.close())
    with CheckpointStore(tmp_path / "node-state.lmdb") as store:
        for namespace in ("recovery-point", "high-watermark", "leader-epochs", "producer-state"):
            assert store.get_all(namespace) == {} and store.get_all_json(namespace) == {}


def test_epochs_are_written_before_the_recovery_point_that_covers_them(tmp_path: Path) -> None:
    manager = ReplicaManager(_config(tmp_path))
    _follow(manager, _topic_image(1))
    partition = manager.partition("t", 0)
    partition.append_as_follower(build_batch([(b"k", b"v", ())], partition_leader_epoch=4))
    assert partition.epochs.entries == [(4, 0)]
    # Not written on the fetch path ...
    assert manager._epochs_pending == {"t-0": [(4, 0)]}
    # ... but with the recovery-point checkpoint, first.
    partition.log.flush()
    manager.checkpoint_all()
    assert manager._epochs_pending == {}
    asyncio.run(manager.close())
    assert _epochs_in_lmdb(tmp_path, "t-0") == [[4, 0]]


def test_epochs_lost_in_a_crash_are_rebuilt_from_the_batch_headers(tmp_path: Path) -> None:
    manager = ReplicaManager(_config(tmp_path))
    image = _topic_image(1)
    _follow(manager, image)
    partition = manager.partition("t", 0)
    partition.append_as_follower(build_batch([(b"a", b"1", ())], partition_leader_epoch=0))
    manager.flush_by_time()
    partition.append_as_follower(
        build_batch([(b"b", b"2", ()), (b"c", b"3", ())], base_offset=1, partition_leader_epoch=5)
    )
    partition.append_as_follower(
        build_batch([(b"d", b"4", ())], base_offset=3, partition_leader_epoch=7)
    )
    assert partition.epochs.entries == [(0, 0), (5, 1), (7, 3)]
    # The process dies here: the lazily kept epochs 5 and 7 never reached LMDB, the appended
    # bytes are in the files (the page cache outlives a killed process).
    manager._checkpoints.close()
    assert _epochs_in_lmdb(tmp_path, "t-0") == [[0, 0]]

    restarted = ReplicaManager(_config(tmp_path))
    restarted.apply_image(image)
    again = restarted.partition("t", 0)
    assert again.log.log_end_offset == 4
    assert again.epochs.entries == [(0, 0), (5, 1), (7, 3)]
    assert again.epochs.end_offset_for(5, again.log_end_offset) == (5, 3)
    asyncio.run(restarted.close())
    assert _epochs_in_lmdb(tmp_path, "t-0") == [[0, 0], [5, 1], [7, 3]]


def test_a_truncation_is_written_at_once(tmp_path: Path, monkeypatch) -> None:
    manager = ReplicaManager(_config(tmp_path))
    _follow(manager, _topic_image(1))
    partition = manager.partition("t", 0)
    partition.append_as_follower(build_batch([(b"a", b"1", ())], partition_leader_epoch=2))
    partition.append_as_follower(
        build_batch([(b"b", b"2", ())], base_offset=1, partition_leader_epoch=3)
    )
    partition.epochs.truncate_from_end(1)  # what a divergent follower's truncation does
    # Written synchronously (an entry that must disappear cannot wait), superseding the
    # lazily kept list.
    assert manager._epochs_pending == {}
    assert _epochs_in_lmdb_open(manager, "t-0") == [[2, 0]]
    asyncio.run(manager.close())


def _epochs_in_lmdb_open(manager: ReplicaManager, key: str) -> object:
    return manager._checkpoints.get_json("leader-epochs", key)


def test_the_worker_leaves_existing_directories_to_the_event_loop(tmp_path: Path) -> None:
    count = PREPARE_OFF_LOOP_MIN
    (tmp_path / "t-5").mkdir()
    (tmp_path / "t-5" / "partition.metadata").write_text("another-topic\n")
    created = replica_manager_module._create_replica_directories(
        tmp_path, [(f"t-{index}", TOPIC_ID) for index in range(count)]
    )
    try:
        assert sorted(created) == sorted(f"t-{i}" for i in range(count) if i != 5)
        assert (tmp_path / "t-5" / "partition.metadata").read_text() == "another-topic\n"
    finally:
        import os

        for fd in created.values():
            os.close(fd)
    # Applying the image then claims t-5 for this topic (the older topic's leftover goes).
    manager = ReplicaManager(_config(tmp_path))
    _follow(manager, _topic_image(count))
    assert (tmp_path / "t-5" / "partition.metadata").read_text() == TOPIC_ID + "\n"
    assert manager.partition("t", 5) is not None
    asyncio.run(manager.close())


def test_a_replica_whose_topic_id_marker_was_lost_is_adopted_with_its_log(tmp_path: Path) -> None:
    # A dying disk took the unsynced partition.metadata (left empty) but not the fsynced log.
    image = _topic_image(1)
    manager = ReplicaManager(_config(tmp_path))
    _follow(manager, image)
    manager.partition("t", 0).append_as_follower(
        build_batch([(b"k", b"acknowledged", ())], partition_leader_epoch=0)
    )
    manager.flush_by_time()
    asyncio.run(manager.close())
    (tmp_path / "t-0" / "partition.metadata").write_text("")

    restarted = ReplicaManager(_config(tmp_path))
    _follow(restarted, image)
    assert restarted.partition("t", 0).log.log_end_offset == 1  # kept, not removed
    assert (tmp_path / "t-0" / "partition.metadata").read_text() == TOPIC_ID + "\n"
    assert [entry.name for entry in tmp_path.iterdir() if entry.name.endswith("-delete")] == []
    asyncio.run(restarted.close())


def test_stray_removal_leaves_directories_being_deleted_and_never_blocks_the_image(
    tmp_path: Path, monkeypatch
) -> None:
    # At start: t-0 is an older topic's leftover (renamed to *-delete, its files removed on
    # the worker thread, which may be at it while the stray pass looks) and u-0 is a stray
    # replica that cannot be removed. The image must still reach its listeners.
    for name, owner in (("t-0", "older-topic"), ("u-0", "gone-topic")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "partition.metadata").write_text(owner + "\n")
    manager = ReplicaManager(_config(tmp_path))
    removals: list[Path] = []
    monkeypatch.setattr(
        manager._file_worker, "submit", lambda _fn, path, **_: removals.append(path)
    )
    delete = manager._delete_directory

    def failing_delete(directory: Path) -> None:
        if directory.name == "u-0":
            raise FileNotFoundError(directory)
        delete(directory)

    monkeypatch.setattr(manager, "_delete_directory", failing_delete)
    seen: list[int] = []
    manager.add_image_listener(lambda image: seen.append(image.version))

    _follow(manager, _topic_image(1))

    assert seen == [1]
    assert len(removals) == 1 and removals[0].name.startswith("t-0.")  # renamed once only
    assert removals[0].exists()  # left to the worker
    assert manager.partition("t", 0) is not None
    assert (tmp_path / "t-0" / "partition.metadata").read_text() == TOPIC_ID + "\n"
    asyncio.run(manager.close())
