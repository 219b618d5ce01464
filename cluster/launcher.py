"""Start, stop and find node processes on this machine (``fluxctl cluster`` and the tests).

A ``NodeProcess`` is a node running ``python -m flux.cli.main node start --config FILE`` in its
own session (so signals to the launcher do not reach it), with output in ``<dir>/node.log``.
Readiness is the node's ``ready.json`` (see ``flux.cluster.node``), never a sleep.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "READY_FILE",
    "STATE_FILE",
    "NodeProcess",
    "NodeStartError",
    "free_port",
    "port_window",
    "read_node_state",
    "write_json_atomically",
    "local_cluster_configs",
    "write_node_config",
]

# Written by a node once it listens (see flux.cluster.node); read here to learn its ports.
READY_FILE = "ready.json"
# Kept up to date by a running node: its pid, bound ports and what it is doing.
STATE_FILE = "node-state.json"
WAITING_FOR_QUORUM = "waiting for quorum"

_POLL_INTERVAL_S = 0.02


def write_json_atomically(
    path: Path, document: Mapping[str, Any], *, indent: int | None = None, fsync: bool = False
) -> None:
    """Replace ``path`` with ``document`` as JSON so that a reader never sees half of it (a
    temporary file per process, then ``os.replace``); ``fsync`` also makes it survive a power
    loss."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w") as file:
        json.dump(document, file, indent=indent)
        if fsync:
            file.flush()
            os.fsync(file.fileno())
    os.replace(temporary, path)


def read_node_state(data_dir: Path, pid: int | None) -> dict[str, Any] | None:
    """The ``node-state.json`` in ``data_dir`` if process ``pid`` wrote it (any process for
    None); None if there is none or it is another's."""
    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or (pid is not None and state.get("pid") != pid):
        return None
    return state


class NodeStartError(RuntimeError):
    """A node exited or did not become ready in time; the message quotes its log tail."""


#: Ports handed out by ``free_port`` lie below this when the kernel's ephemeral range cannot
#: be read (Linux's default range starts at 32768).
_EPHEMERAL_START_DEFAULT = 32768
_LOWEST_PICKED_PORT = 10000
_PICK_ATTEMPTS = 500
#: ``lo-hi``: the ports ``free_port`` may hand out in this process and its children (the test
#: suite gives each pytest-xdist worker its own window, so parallel workers never collide).
PORT_WINDOW_ENV = "FLUX_PORT_WINDOW"

_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def _ephemeral_start() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_START_DEFAULT
    return low if low > _LOWEST_PICKED_PORT + 1000 else _EPHEMERAL_START_DEFAULT


def port_window(slot: int | None = None, slots: int = 1) -> tuple[int, int]:
    """The ports ``free_port`` picks from: below the ephemeral range, split into ``slots``
    equal windows of which this is number ``slot`` (``FLUX_PORT_WINDOW`` overrides)."""
    configured = os.environ.get(PORT_WINDOW_ENV)
    if configured and slot is None:
        low, _, high = configured.partition("-")
        return int(low), int(high)
    low, high = _LOWEST_PICKED_PORT, _ephemeral_start() - 1
    if slot is None:
        return low, high
    size = (high - low + 1) // slots
    start = low + (slot % slots) * size
    return start, start + size - 1


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now, chosen below the kernel's ephemeral range and
    never handed out twice by this process.

    Ports picked here are written into node configs and reused when a node restarts, so they
    must not be ones the kernel hands out to other sockets in the meantime (an outgoing
    connection's local port, another process binding port 0): those all come from the
    ephemeral range. Random within ``port_window()``."""
    rng = random.SystemRandom()
    low, high = port_window()
    for _ in range(_PICK_ATTEMPTS):
        port = rng.randint(low, high)
        with _handed_out_lock:
            if port in _handed_out:
                continue
            if len(_handed_out) > (high - low) // 2:
                _handed_out.clear()  # a long-lived process wraps around its window
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        with _handed_out_lock:
            if port in _handed_out:
                continue
            _handed_out.add(port)
        return port
    raise OSError(f"no free port found in {low}-{high} after {_PICK_ATTEMPTS} attempts")


def local_cluster_configs(
    root: Path,
    nodes: int,
    *,
    host: str = "127.0.0.1",
    kafka_base_port: int = 0,
    controller_base_port: int = 0,
    http_base_port: int = 0,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    controller_ids: Sequence[int] | None = None,
    broker_ids: Sequence[int] | None = None,
) -> list[NodeProcess]:
    """Write the configs of a local cluster of ``nodes`` combined (controller + broker) nodes
    under ``root/node-<id>/`` and return their (not yet started) processes.

    Ports: Kafka ``kafka_base_port + id - 1``; broker HTTP ``http_base_port + id - 1``;
    controller Raft and HTTP ports ``controller_base_port + 2 * (id - 1)`` and ``+ 1``. With a
    base port of 0, free ports are picked now (``free_port``) and written into the configs:
    every voter must know the others' addresses in advance, and a restarted node must listen
    where clients' bootstrap lists point. One
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
        kafka_port = kafka_base_port + node_id - 1 if kafka_base_port else free_port(host)
        sections: dict[str, dict[str, Any]] = {
            "node": {
                "id": node_id,
                "roles": roles,
                "data_dir": str(node_dir / "data"),
            },
            "broker": {
                "host": host,
                "kafka_port": kafka_port,
                "http_port": http_base_port + node_id - 1 if http_base_port else free_port(host),
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

    def read_state(self) -> dict[str, Any] | None:
        """The node's ``node-state.json`` if this process wrote it (else None)."""
        return read_node_state(self.data_dir, self.pid)

    def wait_started(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Block until the node is ready or up and waiting for its quorum (a node restarted
        while most controllers are down); its state. Raise NodeStartError if it died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._raise_if_exited()
            state = self.read_state()
            if state is not None and (
                state.get("state") == "ready"
                or str(state.get("state")).startswith(WAITING_FOR_QUORUM)
            ):
                if state.get("state") == "ready":
                    self.wait_ready(max(deadline - time.monotonic(), 1.0))
                return state
            time.sleep(_POLL_INTERVAL_S)
        raise NodeStartError(
            f"node {self.node_id} neither ready nor waiting for its quorum after {timeout_s} s:\n"
            f"{self.log_tail()}"
        )

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
            self._raise_if_exited()
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

    def _raise_if_exited(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise NodeStartError(
                f"node {self.node_id} exited with {self.process.returncode}:\n{self.log_tail()}"
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
