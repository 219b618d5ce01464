"""The Docker chaos backend: ``ClusterControl`` over a fresh compose project.

``docker_cluster(work_dir, nodes=3)`` (found by ``runner.docker_backend_factory``) builds the
node image if needed, starts ``docker-compose.cluster.yml`` as its own project on free host
ports with the chaos failure-detection settings (as the process backend's
``CHAOS_NODE_SETTINGS``), yields a ``DockerControl`` and removes the project with its volumes
on exit, also after an error.

Faults map onto the engine: kill = ``docker kill`` (SIGKILL), pause/resume = the cgroup
freezer (every process of the node stops, its sockets stay open, like SIGSTOP), restart =
``docker restart`` (SIGTERM, SIGKILL after 20 s) or start, and ``partition(nodes)`` =
disconnect those nodes' containers from the cluster network, ``heal`` = reconnect them. In
the 3-node cluster a partition of one node is both "isolate one node" and "split majority /
minority"; a larger minority would be isolated node by node (its members do not reach each
other either). ``data_dir`` is the node's volume on this machine (readable by root), so the
corrupt/truncate nemeses work on a stopped container too.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from flux.chaos.docker_cluster import (
    DockerCluster,
    Ports,
    connect,
    controller_status,
    find_root,
    free_base_port,
)
from flux.chaos.nemesis import NemesisUnsupportedError
from flux.chaos.partitions import CLIENT, Shape, isolate

__all__ = ["CHAOS_COMPOSE_SETTINGS", "DockerControl", "docker_cluster"]

#: The chaos settings of the process backend, as compose variables (docker-compose.cluster.yml).
CHAOS_COMPOSE_SETTINGS = {
    "FLUX_SESSION_TIMEOUT_MS": "2000",
    "FLUX_PREFERRED_LEADER_DELAY_MS": "1000",
    "FLUX_HEARTBEAT_INTERVAL_MS": "200",
    "FLUX_REPLICA_LAG_TIME_MAX_MS": "1500",
    "FLUX_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    "FLUX_OFFSETS_TOPIC_PARTITIONS": "3",
    "FLUX_REPLICATION_FACTOR": "3",
    "FLUX_MIN_INSYNC_REPLICAS": "2",
}
NODE_TIMEOUT_S = 120.0


class DockerControl:
    """``ClusterControl`` (see ``nemesis``) over the containers of one compose project."""

    backend = "docker"
    disks = False

    def __init__(self, cluster: DockerCluster, base_port: int) -> None:
        self._cluster = cluster
        self._ports = Ports(base_port)
        self._paused: set[int] = set()

    def nodes(self) -> list[int]:
        return sorted(self._cluster.containers())

    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self._ports.kafka(node)}" for node in self.nodes())

    def client_config(self) -> dict[str, str]:
        return {}  # chaos clusters in Docker run without security

    def is_running(self, node: int) -> bool:
        container = self._cluster.container(node)
        container.reload()
        return container.status in ("running", "paused")

    def active_controller(self) -> int | None:
        for node in self.nodes():
            if node in self._paused or not self.is_running(node):
                continue
            status = controller_status(f"127.0.0.1:{self._ports.controller_http(node)}")
            if status and status.get("active"):
                return node
        return None

    def kill(self, node: int) -> None:
        self._paused.discard(node)
        self._cluster.kill(node)

    def pause(self, node: int) -> None:
        self._cluster.pause(node)
        self._paused.add(node)

    def resume(self, node: int) -> None:
        self._cluster.resume(node)
        self._paused.discard(node)

    def restart(self, node: int, *, wait: bool = True) -> dict[str, Any]:
        self._paused.discard(node)
        self._cluster.restart(node, NODE_TIMEOUT_S if wait else None)
        return {}

    def wait_ready(self, node: int) -> None:
        self._cluster.wait_healthy([node], NODE_TIMEOUT_S)

    def data_dir(self, node: int) -> Path:
        volume = self._cluster.client.volumes.get(f"{self._cluster.project}_flux{node}-data")
        path = Path(volume.attrs["Mountpoint"])
        try:
            path.stat()
            next(path.iterdir(), None)
        except OSError as error:
            raise NemesisUnsupportedError(
                f"node {node}'s volume {path} is not readable here ({error.strerror}): "
                f"run as root to corrupt data in Docker"
            ) from None
        return path

    def partition(self, nodes: Sequence[int]) -> None:
        self._cluster.partition(nodes)

    def heal(self) -> None:
        self._cluster.heal()

    def cut(self, shape: Shape) -> None:
        """Only ``isolate`` (what disconnecting a container from the network is): the other
        shapes need the netns process backend."""
        isolated = [
            node
            for node in self.nodes()
            if (node, CLIENT) in shape.drops and shape == isolate(node, self.nodes())
        ]
        if not isolated:
            raise NemesisUnsupportedError(
                f"the Docker backend cannot make a {shape.name} partition (only isolate); "
                f"run on local processes in network namespaces (without --docker, as root)"
            )
        self._cluster.partition(isolated)

    def jump_clock(self, node: int, offset_s: float) -> None:
        raise NemesisUnsupportedError(
            "clock jumps need the local process backend (fluxctl chaos run without --docker)"
        )

    def fill_disk(self, node: int) -> dict[str, Any]:
        raise NemesisUnsupportedError(
            "full disks need the local process backend with --disks (without --docker)"
        )

    def free_disk(self, node: int) -> None:
        raise NemesisUnsupportedError("the Docker backend fills no disks")

    def stop_all(self) -> None:
        for node in list(self._paused):
            self.resume(node)


@contextlib.contextmanager
def docker_cluster(
    work_dir: Path, *, nodes: int = 3, settings: dict[str, str] | None = None
) -> Iterator[DockerControl]:
    """A fresh 3-node Docker cluster for one chaos run, removed (with its data) on exit."""
    if nodes != 3:
        raise NemesisUnsupportedError("the Docker backend runs the 3 nodes of the compose file")
    work_dir.mkdir(parents=True, exist_ok=True)
    project = f"fluxchaos{uuid.uuid4().hex[:8]}"
    cluster = DockerCluster(connect(), find_root(), project, work_dir / "docker.json")
    base_port = free_base_port()
    try:
        cluster.up(
            base_port=base_port,
            timeout_s=NODE_TIMEOUT_S,
            settings={**CHAOS_COMPOSE_SETTINGS, **(settings or {})},
        )
        control = DockerControl(cluster, base_port)
        try:
            yield control
        finally:
            control.stop_all()
    finally:
        _save_logs(cluster, work_dir)
        cluster.down(volumes=True)


def _save_logs(cluster: DockerCluster, work_dir: Path) -> None:
    """Each node's container log next to the run (the containers are removed afterwards)."""
    for node, container in cluster.containers().items():
        with contextlib.suppress(Exception):
            (work_dir / f"node-{node}.log").write_bytes(container.logs())
