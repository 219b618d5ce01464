"""Shared fixtures: real node processes on free loopback ports in temporary directories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flux.cluster.launcher import NodeProcess, write_node_config

NodeFactory = Callable[..., NodeProcess]


@pytest.fixture
def node_factory(tmp_path: Path) -> Iterator[NodeFactory]:
    """Start broker nodes: ``node_factory(topic={"partitions": 3})``; all are stopped at teardown.

    Each node gets ``kafka_port = 0`` (the node binds a free port and reports it in its ready
    file) and its own data directory under ``tmp_path``.
    """
    started: list[NodeProcess] = []

    def start(node_id: int = 1, **sections: dict[str, Any]) -> NodeProcess:
        node_dir = tmp_path / f"node-{node_id}-{len(started)}"
        node_dir.mkdir()
        config: dict[str, dict[str, Any]] = {
            "node": {"id": node_id, "data_dir": str(node_dir / "data"), "log_level": "INFO"},
            "broker": {"host": "127.0.0.1", "kafka_port": 0},
        }
        for section, keys in sections.items():
            config.setdefault(section, {}).update(keys)
        write_node_config(node_dir / "node.toml", config)
        process = NodeProcess(
            node_id=node_id,
            config_path=node_dir / "node.toml",
            data_dir=node_dir / "data",
            log_path=node_dir / "node.log",
        )
        started.append(process)
        process.start()
        process.wait_ready()
        return process

    yield start
    for process in started:
        process.stop(timeout_s=10.0)


@pytest.fixture
def broker(node_factory: NodeFactory) -> NodeProcess:
    """One running broker with default settings."""
    return node_factory()
