"""Disk faults on a real node: a full disk (ENOSPC), a dying disk (EIO) and a disk the kernel
turns read-only (EROFS), each under a leader taking ``acks=all`` writes from confluent-kafka.

Cluster: three controller+broker nodes and a broker-only node 4 whose data directory is a
small file system of its own (``flux.chaos.disks``), so the fault hits one broker's log directory
and never a controller's Raft journal. The topic's only partition has replicas [4, 1, 2]
(node 4 leads) and ``min.insync.replicas=2``. Each test:

1. writes records that are all acknowledged;
2. injects the fault while the producer keeps writing, and waits (producing) until the
   controller has moved leadership away from node 4;
3. writes more records on the new leader, all acknowledged;
4. checks that node 4 took its log directory offline and says so (log line with the errno,
   ``/health``, ``/metrics``), still answers ApiVersions and Metadata, answers a produce to the
   partition with KAFKA_STORAGE_ERROR, and is out of the ISR;
5. checks that every acknowledged record is readable from the new leader;
6. repairs the disk (frees the space, or mounts the file system again), restarts node 4
   (Flux's recovery is a restart: docs/operations.md, "Disk faults"), waits until node 4 is
   back in the ISR and leads again (preferred leader election), and reads every acknowledged
   record from node 4 itself.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from flux.chaos.disks import Ext4Disk, TmpfsDisk, missing_requirements
from flux.cluster.launcher import NodeProcess, local_cluster_configs
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.sdk.wire import KafkaConnection

from tests.conftest import FAST_FAILURE_DETECTION
from tests.integration.cluster_helpers import metadata, partitions
from tests.integration.helpers import produce, read_values, wait_until

pytestmark = pytest.mark.integration

TOPIC = "ledger"
FAULTY = 4
HEALTHY = (1, 2, 3)
BEFORE = 200
AFTER = 200
#: The full-disk test's tmpfs: room for the node's state and a few MiB of log.
TMPFS_MIB = 24
VALUE_PAD = b"." * 512


class Disk(Protocol):
    def close(self) -> None: ...


@contextlib.contextmanager
def disk_cluster(
    root: Path, make_disk: Callable[[Path], Disk]
) -> Iterator[tuple[list[NodeProcess], Disk]]:
    """Nodes 1-3 (controllers and brokers) and broker 4 on ``make_disk(its data dir)``; every
    process is stopped, then the disk unmounted and detached, whatever happens."""
    nodes = local_cluster_configs(
        root,
        4,
        controller_ids=list(HEALTHY),
        extra={**FAST_FAILURE_DETECTION, "broker": {**FAST_FAILURE_DETECTION["broker"]}},
    )
    disk: Disk | None = None
    try:
        disk = make_disk(nodes[FAULTY - 1].data_dir)
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_ready(60)
        yield nodes, disk
    finally:
        for node in nodes:
            node.stop(timeout_s=10.0)
        if disk is not None:
            disk.close()


def create_topic(node: NodeProcess, **configs: str) -> None:
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=15) as conn:
        answer = conn.request(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {
                        "name": TOPIC,
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [FAULTY, 1, 2]}],
                        "configs": [
                            {"name": name, "value": value}
                            for name, value in {"min.insync.replicas": "2", **configs}.items()
                        ],
                    }
                ],
                "timeout_ms": 10000,
            },
        )
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE, answer
    wait_until(lambda: (found := known_state(node)) and found["leader_id"] == FAULTY)


def state(node: NodeProcess) -> dict[str, Any]:
    """Partition 0 as ``node``'s metadata has it (leader_id, isr_nodes, ...)."""
    return partitions(node, TOPIC)[0]


def known_state(node: NodeProcess) -> dict[str, Any] | None:
    """``state``, or None while ``node`` cannot say (the topic not in its metadata yet)."""
    with contextlib.suppress(OSError, AssertionError):
        return state(node)
    return None


class AckedProducer:
    """confluent-kafka, ``acks=all``: remembers the values acknowledged and those refused."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 1,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.acknowledged: list[bytes] = []
        self.refused: list[str] = []
        self.sent = 0

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acknowledged.append(message.value())
        else:
            self.refused.append(str(error))

    def send(self, prefix: str) -> bytes:
        value = f"{prefix}-{self.sent:06d}".encode() + VALUE_PAD
        self.sent += 1
        self._producer.produce(TOPIC, value=value, partition=0, on_delivery=self._delivered)
        return value

    def send_all(self, prefix: str, count: int) -> None:
        """Send ``count`` values; every one must be acknowledged."""
        values = [self.send(prefix) for _ in range(count)]
        assert self._producer.flush(90) == 0, "not every record was delivered in time"
        missing = set(values) - set(self.acknowledged)
        assert not missing, f"{len(missing)} of {count} not acknowledged: {self.refused[-3:]}"

    def send_until(self, condition: Callable[[], bool], prefix: str, timeout_s: float) -> None:
        """Keep sending (one record per delivery round) until ``condition``; flush."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"condition not met in {timeout_s} s"
            for _ in range(5):
                self.send(prefix)
            self._producer.poll(0.05)  # waits for delivery reports, not a fixed sleep
        self._producer.flush(90)


def leader_moved(node: NodeProcess) -> bool:
    current = known_state(node)
    return (
        current is not None
        and current["leader_id"] not in (FAULTY, -1)
        and FAULTY not in current["isr_nodes"]
    )


def http_get(node: NodeProcess, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://{node.ready['broker_http']}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def values_on(node: NodeProcess) -> list[bytes]:
    """Every value of the partition up to the high watermark, read from ``node`` (its leader)."""
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=10) as conn:
        return [value for _offset, value in read_values(conn, TOPIC)]


def leader_node(nodes: list[NodeProcess]) -> NodeProcess:
    return nodes[state(nodes[0])["leader_id"] - 1]


def check_node_is_offline_but_serving(node: NodeProcess, errno_names: set[str]) -> None:
    """The faulty node took its log directory offline, says why, and serves what needs no
    disk; its replica answers KAFKA_STORAGE_ERROR."""
    offline_lines = [
        line
        for line in node.log_path.read_text(errors="replace").splitlines()
        if "is offline after an I/O error" in line
    ]
    assert len(offline_lines) == 1, offline_lines  # taken offline once
    assert any(name in offline_lines[0] for name in errno_names), offline_lines[0]
    assert node.is_running()
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=10) as conn:
        versions = conn.request(ApiKey.API_VERSIONS, 0, {})
        assert versions["error_code"] == ErrorCode.NONE
        result = produce(conn, TOPIC, build_batch([(None, b"refused", ())]), acks=1)
        assert result["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, result
    answer = metadata(node, [TOPIC])
    assert answer["topics"][0]["partitions"][0]["leader_id"] != FAULTY
    status, body = http_get(node, "/health")
    health = json.loads(body)
    assert status == 503 and health["log_dir_offline"] is True, health
    status, body = http_get(node, "/metrics")
    assert status == 200
    assert b"flux_broker_offline_log_dirs 1.0" in body
    assert b"flux_broker_offline_replicas 1.0" in body


def recover(nodes: list[NodeProcess], acknowledged: list[bytes]) -> None:
    """Restart the faulty node on its repaired disk: it recovers its log, catches up, rejoins
    the ISR and leads again; every acknowledged record is on it."""
    faulty = nodes[FAULTY - 1]
    faulty.start()
    faulty.wait_ready(60)
    wait_until(
        lambda: (found := known_state(nodes[0])) and FAULTY in found["isr_nodes"], timeout_s=60
    )
    wait_until(
        lambda: (found := known_state(nodes[0])) and found["leader_id"] == FAULTY, timeout_s=60
    )
    on_faulty = set(values_on(faulty))
    lost = [value for value in acknowledged if value not in on_faulty]
    assert not lost, f"{len(lost)} acknowledged records missing on node {FAULTY}: {lost[:3]}"
    _status, body = http_get(faulty, "/health")
    assert json.loads(body)["log_dir_offline"] is False


def run_fault(
    nodes: list[NodeProcess], inject: Callable[[], None], errno_names: set[str]
) -> list[bytes]:
    """Steps 1-5 of the module docstring; the acknowledged values."""
    bootstrap = ",".join(node.bootstrap_servers for node in nodes[: len(HEALTHY)])
    producer = AckedProducer(bootstrap)
    producer.send_all("before", BEFORE)
    inject()
    producer.send_until(lambda: leader_moved(nodes[0]), "during", timeout_s=60)
    producer.send_all("after", AFTER)
    check_node_is_offline_but_serving(nodes[FAULTY - 1], errno_names)
    leader = leader_node(nodes)
    on_leader = set(values_on(leader))
    lost = [value for value in producer.acknowledged if value not in on_leader]
    assert not lost, f"{len(lost)} acknowledged records lost: {lost[:3]}"
    return producer.acknowledged


def test_a_full_disk_moves_leadership_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    missing = missing_requirements()
    if missing:
        pytest.skip(missing)
    disks: list[TmpfsDisk] = []

    def make_disk(data_dir: Path) -> TmpfsDisk:
        disks.append(TmpfsDisk(data_dir, TMPFS_MIB))
        return disks[0]

    with disk_cluster(tmp_path, make_disk) as (nodes, _disk):
        create_topic(nodes[0])
        disk = disks[0]
        acknowledged = run_fault(nodes, lambda: disk.fill(), {"ENOSPC"})
        assert nodes[FAULTY - 1].stop() == 0  # stops cleanly on the full disk
        disk.free()  # the operator makes room
        recover(nodes, acknowledged)


def test_a_dying_disk_eio_on_write_and_fsync(tmp_path: Path) -> None:
    missing = missing_requirements("losetup", "mkfs.ext4", "e2fsck", loop=True)
    if missing:
        pytest.skip(missing)
    disks: list[Ext4Disk] = []

    def make_disk(data_dir: Path) -> Ext4Disk:
        disks.append(Ext4Disk(tmp_path / "node-4.img", data_dir))
        return disks[0]

    with disk_cluster(tmp_path / "cluster", make_disk) as (nodes, _disk):
        # Every append is fsynced: the dying disk is met by a write or by an fsync.
        create_topic(nodes[0], **{"flush.messages": "1"})
        disk = disks[0]
        acknowledged = run_fault(nodes, disk.shut_down, {"EIO"})
        assert nodes[FAULTY - 1].stop() == 0  # stops cleanly although every I/O fails
        disk.remount()  # a replaced disk with the old contents: the journal is replayed
        recover(nodes, acknowledged)


def test_a_disk_the_kernel_turns_read_only(tmp_path: Path) -> None:
    missing = missing_requirements("losetup", "mkfs.ext4", "e2fsck", loop=True)
    if missing:
        pytest.skip(missing)
    disks: list[Ext4Disk] = []

    def make_disk(data_dir: Path) -> Ext4Disk:
        disk = Ext4Disk(tmp_path / "node-4.img", data_dir)
        if not disk.can_error_read_only():
            disk.close()
            pytest.skip("this kernel's ext4 has no trigger_fs_error")
        disks.append(disk)
        return disk

    with disk_cluster(tmp_path / "cluster", make_disk) as (nodes, _disk):
        create_topic(nodes[0])
        disk = disks[0]

        def read_only() -> None:
            disk.error_read_only()
            assert disk.is_read_only()

        acknowledged = run_fault(nodes, read_only, {"EROFS"})
        assert nodes[FAULTY - 1].stop() == 0  # stops cleanly on the read-only disk
        disk.remount()  # fsck, then read-write again
        recover(nodes, acknowledged)
