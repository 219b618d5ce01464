"""Start, stop and find node processes on this machine (``fluxctl cluster`` and the tests).

A ``NodeProcess`` is a node running ``python -m flux.cli.main node start --config FILE`` in its
own session (so signals to the launcher do not reach it), with output in ``<dir>/node.log``.
Readiness is the node's ``ready.json`` (see ``flux.cluster.node``), never a sleep.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "READY_FILE",
    "NodeProcess",
    "NodeStartError",
    "free_port",
    "local_cluster_configs",
    "write_node_config",
]

# Written by a node once it listens (see flux.cluster.node); read here to learn its ports.
READY_FILE = "ready.json"

_POLL_INTERVAL_S = 0.02


class NodeStartError(RuntimeError):
    """A node exited or did not become ready in time; the message quotes its log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def local_cluster_configs(
    root: Path,
    nodes: int,
    *,
    host: str = "127.0.0.1",
    kafka_base_port: int = 0,
    controller_base_port: int = 0,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    controller_ids: Sequence[int] | None = None,
    broker_ids: Sequence[int] | None = None,
) -> list[NodeProcess]:
    """Write the configs of a local cluster of ``nodes`` combined (controller + broker) nodes
    under ``root/node-<id>/`` and return their (not yet started) processes.

    Ports: Kafka ``kafka_base_port + id - 1`` (0: any free port, reported in ready.json);
    controller Raft and HTTP ports ``controller_base_port + 2 * (id - 1)`` and ``+ 1`` (0: free
    ports picked now, since every voter must know the others' addresses in advance). One
    random shared secret protects the Raft transport. By default every node has both roles;
    ``controller_ids`` / ``broker_ids`` give the roles separately (e.g. one controller-only
    node and three broker-only nodes).
    """
    secret = secrets.token_hex(16)
    all_ids = range(1, nodes + 1)
    controllers = set(controller_ids if controller_ids is not None else all_ids)
    brokers = set(broker_ids if broker_ids is not None else all_ids)
    voters = []
    for node_id in sorted(controllers):
        if controller_base_port:
            raft_port = controller_base_port + 2 * (node_id - 1)
            http_port = raft_port + 1
        else:
            raft_port, http_port = free_port(host), free_port(host)
        voters.append((node_id, raft_port, http_port))
    voter_list = [f"{node_id}@{host}:{raft}:{http}" for node_id, raft, http in voters]
    ports = {node_id: (raft, http) for node_id, raft, http in voters}
    processes = []
    for node_id in all_ids:
        raft_port, http_port = ports.get(node_id, (0, 0))
        roles = [
            role
            for role, ids in (("broker", brokers), ("controller", controllers))
            if node_id in ids
        ]
        node_dir = root / f"node-{node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        sections: dict[str, dict[str, Any]] = {
            "node": {
                "id": node_id,
                "roles": roles,
                "data_dir": str(node_dir / "data"),
            },
            "broker": {
                "host": host,
                "kafka_port": kafka_base_port + node_id - 1 if kafka_base_port else 0,
            },
            "controller": {
                "host": host,
                "raft_port": raft_port or 9093,
                "http_port": http_port or 9094,
                "voters": voter_list,
                "secret": secret,
            },
        }
        for section, keys in (extra or {}).items():
            sections.setdefault(section, {}).update(keys)
        write_node_config(node_dir / "node.toml", sections)
        processes.append(
            NodeProcess(
                node_id=node_id,
                config_path=node_dir / "node.toml",
                data_dir=node_dir / "data",
                log_path=node_dir / "node.log",
            )
        )
    return processes


def write_node_config(path: Path, sections: Mapping[str, Mapping[str, Any]]) -> None:
    """Write a node TOML file (flat sections of strings, numbers, booleans and string lists)."""
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        for key, value in keys.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    path.write_text("\n".join(lines))


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(str(value))


@dataclass
class NodeProcess:
    """A node process with its config file, data directory and log file."""

    node_id: int
    config_path: Path
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    ready: dict[str, Any] = field(default_factory=dict)

    @property
    def ready_path(self) -> Path:
        return self.data_dir / READY_FILE

    @property
    def bootstrap_servers(self) -> str:
        return str(self.ready["bootstrap_servers"])

    @property
    def kafka_port(self) -> int:
        return int(self.ready["kafka_port"])

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, *, env: Mapping[str, str] | None = None) -> None:
        self.ready_path.unlink(missing_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "flux.cli.main",
                    "node",
                    "start",
                    "--config",
                    str(self.config_path),
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        finally:
            log_file.close()

    def wait_ready(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Block until the node wrote its ready file; raise NodeStartError if it died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise NodeStartError(
                    f"node {self.node_id} exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                self.ready = json.loads(self.ready_path.read_text())
                if self.process is None or self.ready.get("pid") == self.process.pid:
                    return self.ready
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            time.sleep(_POLL_INTERVAL_S)
        raise NodeStartError(
            f"node {self.node_id} not ready after {timeout_s} s:\n{self.log_tail()}"
        )

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the crash case."""
        self._signal(signal.SIGKILL)
        self.wait_exit(10.0)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited after ``timeout_s``."""
        if not self.is_running():
            return self.process.returncode if self.process is not None else None
        self._signal(signal.SIGTERM)
        if not self.wait_exit(timeout_s):
            self._signal(signal.SIGKILL)
            self.wait_exit(10.0)
        assert self.process is not None
        return self.process.returncode

    def wait_exit(self, timeout_s: float) -> bool:
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _signal(self, signum: int) -> None:
        if self.is_running():
            assert self.process is not None
            try:
                os.kill(self.process.pid, signum)
            except ProcessLookupError:
                pass

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
