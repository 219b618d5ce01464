"""Shared fixtures: real node processes on free loopback ports in temporary directories."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flux.cluster.launcher import PORT_WINDOW_ENV, NodeProcess, local_cluster_configs, port_window
from hypothesis import settings

# Property tests share 2 cores with cluster processes under xdist: hypothesis's per-example
# deadline (200 ms) would then fail on scheduling noise, not on a bug.
settings.register_profile("flux", deadline=None)
settings.load_profile("flux")

#: pytest-xdist workers (and the processes they start) pick ports from disjoint windows, so
#: clusters of parallel tests never choose the same port (flux.cluster.launcher.free_port).
PORT_WINDOWS = 8


def pytest_configure(config: pytest.Config) -> None:
    # A run without xdist takes the last window, so a developer's single test does not pick
    # the ports of worker gw0 of a whole suite running on the same machine.
    worker = os.environ.get("PYTEST_XDIST_WORKER", f"gw{PORT_WINDOWS - 1}")
    slot = int(worker[2:]) if worker[2:].isdigit() else 0
    low, high = port_window(slot, PORT_WINDOWS)
    os.environ[PORT_WINDOW_ENV] = f"{low}-{high}"


ClusterFactory = Callable[..., list[NodeProcess]]

# Short timeouts so failure tests run in seconds; production defaults are in docs/.
FAST_FAILURE_DETECTION = {
    "controller": {"session_timeout_ms": 2000, "preferred_leader_election_delay_ms": 1000},
    "broker": {"heartbeat_interval_ms": 200},
}


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[ClusterFactory]:
    """Start a local cluster: ``cluster_factory(3, broker={...})`` returns its ready nodes.

    Each node is controller + broker, with its own data directory under ``tmp_path``, Kafka on
    a port it picks itself (reported in ready.json) and controller ports picked free here.
    Every process started is stopped at teardown.
    """
    started: list[NodeProcess] = []
    clusters = itertools.count()

    def start(
        nodes: int = 1,
        *,
        controller_ids: list[int] | None = None,
        broker_ids: list[int] | None = None,
        **sections: dict[str, Any],
    ) -> list[NodeProcess]:
        extra: dict[str, dict[str, Any]] = {
            section: dict(keys) for section, keys in FAST_FAILURE_DETECTION.items()
        }
        for section, keys in sections.items():
            extra.setdefault(section, {}).update(keys)
        # next() on a count is atomic: tests that start clusters from threads get their own.
        root = tmp_path / f"cluster-{next(clusters)}"
        processes = local_cluster_configs(
            root, nodes, extra=extra, controller_ids=controller_ids, broker_ids=broker_ids
        )
        started.extend(processes)
        for process in processes:
            process.start()
        for process in processes:
            process.wait_ready()
        return processes

    yield start
    for process in started:
        process.stop(timeout_s=10.0)


@pytest.fixture
def node_factory(cluster_factory: ClusterFactory) -> Callable[..., NodeProcess]:
    """Start a single node (a quorum of one): ``node_factory(topic={"partitions": 3})``."""

    def start(**sections: dict[str, Any]) -> NodeProcess:
        return cluster_factory(1, **sections)[0]

    return start


@pytest.fixture
def broker(node_factory: Callable[..., NodeProcess]) -> NodeProcess:
    """One running node with default settings."""
    return node_factory()
