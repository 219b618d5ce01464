"""Start, stop and find node processes on this machine (``fluxctl cluster`` and the tests).

A ``NodeProcess`` is a node running ``python -m flux.cli.main node start --config FILE`` in its
own session (so signals to the launcher do not reach it), with output in ``<dir>/node.log``.
Readiness is the node's ``ready.json`` (see ``flux.cluster.node``), never a sleep.

Secured local clusters (``fluxctl cluster up --secure``, ``fluxctl chaos run --secure``):

1. ``write_cluster_tls`` makes a throwaway CA and one node certificate in ``<root>/tls/``;
2. ``local_cluster_configs(..., tls=...)`` gives every node one ``SASL_SSL`` Kafka listener and
   the ``[security]`` settings of ``secure_settings`` (authorizer on, ``User:admin`` the only
   super user, HTTP API and node-to-node traffic authenticated, the latter over TLS);
3. once the nodes are ready, ``provision_admin`` creates the SCRAM credentials of ``admin``
   through the active controller (the cluster's node credential, over HTTPS) and waits until
   a ``SASL_SSL`` login as ``admin`` works on every broker;
4. ``write_client_properties`` saves the client settings (Kafka's names) for clients and
   ``fluxctl --client-config``.

This module is the operator's tool, not part of a node: the login check uses ``flux.sdk`` as
any client would (imported where it is used, so starting plain nodes never loads it).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import SASL_MECHANISMS

__all__ = [
    "ADMIN_MECHANISMS",
    "ADMIN_USER",
    "CLIENT_PROPERTIES_FILE",
    "READY_FILE",
    "STATE_FILE",
    "TLS_DIR",
    "ClusterSecurityError",
    "ClusterTls",
    "NodeProcess",
    "NodeStartError",
    "client_properties",
    "create_scram_user",
    "free_port",
    "port_window",
    "provision_admin",
    "read_cluster_secret",
    "read_node_state",
    "secure_settings",
    "wait_client_login",
    "write_client_properties",
    "write_cluster_tls",
    "write_json_atomically",
    "local_cluster_configs",
    "running_local_cluster",
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
    tls: ClusterTls | None = None,
    hosts: Mapping[int, str] | None = None,
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

    With ``tls`` (see ``write_cluster_tls``) the cluster is secured: each node's only Kafka
    listener is ``SASL_SSL`` on its Kafka port, with ``secure_settings(tls)``; ``extra`` still
    wins over both.

    ``hosts`` gives nodes their own address (node id -> host; ``host`` for the others), which
    they bind and advertise, e.g. one per network namespace (``flux.chaos.netns``). Free ports
    are probed on the node's own address, so with addresses that are not this namespace's,
    give the base ports.
    """
    secret = secrets.token_hex(16)
    all_ids = range(1, nodes + 1)
    controllers = set(controller_ids if controller_ids is not None else all_ids)
    brokers = set(broker_ids if broker_ids is not None else all_ids)
    node_hosts = {node_id: (hosts or {}).get(node_id, host) for node_id in all_ids}
    voters = []
    for node_id in sorted(controllers):
        if controller_base_port:
            raft_port = controller_base_port + 2 * (node_id - 1)
            http_port = raft_port + 1
        else:
            raft_port = free_port(node_hosts[node_id])
            http_port = free_port(node_hosts[node_id])
        voters.append((node_id, raft_port, http_port))
    voter_list = [
        f"{node_id}@{node_hosts[node_id]}:{raft}:{http}" for node_id, raft, http in voters
    ]
    ports = {node_id: (raft, http) for node_id, raft, http in voters}
    processes = []
    for node_id in all_ids:
        host = node_hosts[node_id]
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
        if tls is not None:
            sections["broker"]["listeners"] = [f"SASL_SSL://{host}:{kafka_port}"]
            sections["security"] = secure_settings(tls)
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


@contextlib.contextmanager
def running_local_cluster(
    root: Path,
    nodes: int = 3,
    *,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    ready_timeout_s: float = 30.0,
    stop_timeout_s: float = 10.0,
) -> Iterator[list[NodeProcess]]:
    """``local_cluster_configs(root, nodes, extra=extra)`` started, every node ready, for the
    ``with`` block; every node is stopped on the way out (also when starting one failed)."""
    processes = local_cluster_configs(root, nodes, extra=extra)
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.wait_ready(ready_timeout_s)
        yield processes
    finally:
        for process in processes:
            process.stop(timeout_s=stop_timeout_s)


def write_node_config(path: Path, sections: Mapping[str, Mapping[str, Any]]) -> None:
    """Write a node TOML file (flat sections of strings, numbers, booleans and string lists),
    mode 0600: it holds the cluster's shared secret."""
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        for key, value in keys.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    _write_file(path, "\n".join(lines).encode(), _PRIVATE_FILE_MODE)


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
    #: Prepended to the node's command line on every start (e.g. ``ip netns exec NS``, which
    #: execs the node, so ``pid`` stays the node's), and environment variables added to it.
    command_prefix: Sequence[str] = ()
    environment: Mapping[str, str] = field(default_factory=dict)

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
                    *self.command_prefix,
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
                env={**os.environ, **self.environment, **(env or {})},
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


# -- secured clusters ---------------------------------------------------------------------------

#: The super user of a secured local cluster; its SCRAM credentials are made at start-up.
ADMIN_USER = "admin"
#: Folder of the CA and node certificate, under the cluster's root.
TLS_DIR = "tls"
#: The admin's client settings (Kafka's names), under the cluster's root.
CLIENT_PROPERTIES_FILE = "client.properties"
#: The admin's credentials are made for both SCRAM mechanisms; clients are given the first.
ADMIN_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
_PRIVATE_FILE_MODE = 0o600
_PRIVATE_DIR_MODE = 0o700
#: ``shared=True`` (a container user must read them through a bind mount).
_SHARED_FILE_MODE = 0o644
_SHARED_DIR_MODE = 0o755
#: One HTTP request to a controller gives up after this long (the caller retries).
_CONTROLLER_REQUEST_TIMEOUT_S = 5.0
#: Pause between rounds over the controllers, and between login attempts.
_RETRY_PAUSE_S = 0.2


class ClusterSecurityError(RuntimeError):
    """Securing a started cluster failed (no controller took the credentials in time, or the
    admin's login kept failing); the message says which and why."""


@dataclass(frozen=True)
class ClusterTls:
    """Where a secured cluster's PEM files are: the CA certificate clients verify nodes with,
    and the certificate and key every node presents (one for all nodes: they run on the same
    host names). Paths as the nodes see them (in a container, the mount's)."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    @classmethod
    def in_directory(cls, directory: Path) -> ClusterTls:
        return cls(directory / "ca.pem", directory / "node.pem", directory / "node.key")


def write_cluster_tls(directory: Path, hosts: Sequence[str], *, shared: bool = False) -> ClusterTls:
    """Create a CA and one node certificate valid for ``hosts`` (IP addresses and DNS names)
    in ``directory``: ``ca.pem``, ``ca.key`` (kept to issue client certificates later),
    ``node.pem``, ``node.key``. Keys are mode 0600 in a 0700 folder; with ``shared`` the node
    key is 0644 in a 0755 folder, for a node that runs as another user (a container's, through
    a bind mount) — only for clusters on a machine whose other users may read it. The CA key
    stays 0600 either way: only the operator uses it."""
    from flux.auth.certificates import CertificateAuthority

    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, _SHARED_DIR_MODE if shared else _PRIVATE_DIR_MODE)
    key_mode = _SHARED_FILE_MODE if shared else _PRIVATE_FILE_MODE
    authority = CertificateAuthority.create(f"Flux cluster CA ({directory.parent.name})")
    node = authority.issue_server("flux-node", list(dict.fromkeys(hosts)))
    tls = ClusterTls.in_directory(directory)
    _write_file(tls.ca_file, authority.certificate_pem, _SHARED_FILE_MODE)
    _write_file(directory / "ca.key", authority.key_pem, _PRIVATE_FILE_MODE)
    _write_file(tls.cert_file, node.certificate_pem, _SHARED_FILE_MODE)
    _write_file(tls.key_file, node.key_pem, key_mode)
    return tls


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a fresh file created with ``mode`` (never briefly readable by others,
    whatever the umask), replacing ``path`` atomically."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, path)


def secure_settings(tls: ClusterTls) -> dict[str, Any]:
    """The ``[security]`` section of every node of a secured cluster: SASL (every mechanism)
    over TLS without client certificates, ACLs with ``User:admin`` as the only super user and
    nothing open without an ACL, HTTP API logins required, node-to-node HTTP over TLS with the
    cluster's node credential."""
    return {
        "ssl_certfile": str(tls.cert_file),
        "ssl_keyfile": str(tls.key_file),
        "ssl_cafile": str(tls.ca_file),
        "ssl_client_auth": "none",
        "sasl_enabled_mechanisms": list(SASL_MECHANISMS),
        "authorizer_enable": True,
        "super_users": [f"User:{ADMIN_USER}"],
        "allow_everyone_if_no_acl_found": False,
        "http_auth": "required",
        "internal_tls": True,
        "internal_auth": True,
    }


def read_cluster_secret(config_path: Path) -> str:
    """``controller.secret`` of a node config: the key of the cluster's node credential."""
    with open(config_path, "rb") as file:
        return str(tomllib.load(file).get("controller", {}).get("secret", ""))


def client_properties(
    bootstrap_servers: str, *, password: str, ca_file: Path, user: str = ADMIN_USER
) -> dict[str, str]:
    """The Kafka client settings of ``user`` on a secured cluster (librdkafka's and the Java
    client's names; ``flux.sdk`` and ``fluxctl --client-config`` read them too)."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": ADMIN_MECHANISMS[0],
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(Path(ca_file).resolve()),
    }


def write_client_properties(path: Path, settings: Mapping[str, str]) -> None:
    """Write ``settings`` as a Java properties file, mode 0600 (it holds the password)."""
    lines = ["# Flux client settings written by fluxctl (holds a password: keep it private)"]
    for key, value in settings.items():
        lines.append(f"{key}={_properties_escape(value)}")
    _write_file(path, ("\n".join(lines) + "\n").encode(), _PRIVATE_FILE_MODE)


def _properties_escape(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n")
    # A leading blank would be eaten by the reader (Java properties semantics).
    return "\\" + escaped if escaped[:1] in (" ", "\t") else escaped


def create_scram_user(
    controller_addresses: Sequence[str],
    *,
    user: str,
    password: str,
    secret: str,
    ca_file: Path | None,
    timeout_s: float = 30.0,
) -> int:
    """Set ``user``'s SCRAM-SHA-512 and SCRAM-SHA-256 credentials through the active
    controller's ``POST /controller/scram-credentials`` (over HTTPS verified with ``ca_file``,
    or HTTP without one), carrying the node credential derived from ``secret``. Asks each
    controller in turn (the others answer 421) until one commits, retrying until
    ``timeout_s``; returns the metadata version that holds the credentials."""
    from flux.auth.internal import authorization_value
    from flux.auth.scram import ScramCredential

    upsertions = [
        {"name": user, **ScramCredential.from_password(mechanism, password).to_dict()}
        for mechanism in ADMIN_MECHANISMS
    ]
    body = json.dumps({"upsertions": upsertions, "deletions": []}).encode()
    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else None
    scheme = "https" if ca_file is not None else "http"
    headers = {"Content-Type": "application/json", "Authorization": authorization_value(secret)}
    deadline = time.monotonic() + timeout_s
    last_problem = "no controller answered"
    while True:
        for address in controller_addresses:
            request = urllib.request.Request(
                f"{scheme}://{address}/controller/scram-credentials",
                data=body,
                method="POST",
                headers=headers,
            )
            status, answer = _call_controller(request, context)
            if status == 200 and isinstance(answer, dict):
                _raise_for_results(answer, user)
                return int(answer.get("version", 0))
            last_problem = f"{address}: {status or ''} {_describe(answer)}".strip()
        if time.monotonic() > deadline:
            raise ClusterSecurityError(
                f"could not create the SCRAM credentials of {user!r} in {timeout_s:.0f} s "
                f"(last answer: {last_problem})"
            )
        time.sleep(_RETRY_PAUSE_S)


def _call_controller(
    request: urllib.request.Request, context: ssl.SSLContext | None
) -> tuple[int, Any]:
    """(HTTP status, JSON answer); (0, reason) when the controller did not answer."""
    try:
        with urllib.request.urlopen(
            request, timeout=_CONTROLLER_REQUEST_TIMEOUT_S, context=context
        ) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"null")
        except ValueError:
            return error.code, error.reason
    except (OSError, ValueError) as error:
        return 0, str(getattr(error, "reason", error))


def _raise_for_results(answer: dict[str, Any], user: str) -> None:
    problems = [
        f"{result.get('user')}: {result.get('error_message') or result.get('error_code')}"
        for result in answer.get("results", [])
        if result.get("error_code")
    ]
    if answer.get("error_code"):
        problems.append(str(answer.get("error_message") or answer["error_code"]))
    if problems:
        raise ClusterSecurityError(
            f"the controller refused the credentials of {user!r}: {'; '.join(problems)}"
        )


def _describe(answer: Any) -> str:
    if isinstance(answer, dict):
        return str(answer.get("error_message") or answer.get("message") or answer)
    return str(answer)


def wait_client_login(
    addresses: Sequence[str], settings: Mapping[str, str], *, timeout_s: float = 30.0
) -> None:
    """Wait until a client with ``settings`` (Kafka's names) logs in on every broker of
    ``addresses`` (``host:port``): a broker accepts a new user only once it has the metadata
    that holds the credentials. ``ClusterSecurityError`` with the last refusal after
    ``timeout_s``."""
    import asyncio

    from flux.sdk.connection import BrokerConnection
    from flux.sdk.errors import FluxError
    from flux.sdk.metadata import parse_bootstrap
    from flux.sdk.security import ClientSecurity

    security = ClientSecurity.from_config(settings)

    async def log_in(address: tuple[str, int]) -> None:
        connection = await BrokerConnection.open(
            address,
            node_id=None,
            client_id="fluxctl-login-check",
            timeout_s=_CONTROLLER_REQUEST_TIMEOUT_S,
            security=security,
        )
        connection.close()

    deadline = time.monotonic() + timeout_s
    pending = [address for entry in addresses for address in parse_bootstrap(entry)]
    last_problem = ""
    while pending:
        try:
            asyncio.run(log_in(pending[0]))
            pending.pop(0)
            continue
        except FluxError as error:
            last_problem = f"{pending[0][0]}:{pending[0][1]}: {error}"
        if time.monotonic() > deadline:
            raise ClusterSecurityError(
                f"a {security.security_protocol} login as {security.sasl_username!r} still "
                f"fails after {timeout_s:.0f} s ({last_problem})"
            )
        time.sleep(_RETRY_PAUSE_S)


def provision_admin(
    processes: Sequence[NodeProcess],
    tls: ClusterTls,
    *,
    password: str,
    timeout_s: float = 30.0,
) -> dict[str, str]:
    """Make ``admin`` on a started secured local cluster (``create_scram_user`` through its
    controllers, then ``wait_client_login`` on its brokers); its client settings."""
    controllers = [p.ready["controller_http"] for p in processes if p.ready.get("controller_http")]
    brokers = [p.ready["bootstrap_servers"] for p in processes if p.ready.get("bootstrap_servers")]
    deadline = time.monotonic() + timeout_s
    create_scram_user(
        controllers,
        user=ADMIN_USER,
        password=password,
        secret=read_cluster_secret(processes[0].config_path),
        ca_file=tls.ca_file,
        timeout_s=timeout_s,
    )
    settings = client_properties(",".join(brokers), password=password, ca_file=tls.ca_file)
    wait_client_login(brokers, settings, timeout_s=max(deadline - time.monotonic(), 5.0))
    return settings
