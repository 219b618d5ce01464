"""A Flux cluster in Docker containers: image build, compose project, node faults.

``fluxctl cluster ... --docker`` and the Docker chaos backend (``docker_backend``) drive this
module. It lives in ``flux.chaos``, which owns fault injection, and imports nothing of Flux
(only the ``docker`` library and the compose command), so both ``flux.cli`` and the chaos
backend may use it. The compose
file (``docker-compose.cluster.yml``) defines the nodes; the Docker engine, through the
``docker`` library, does everything per container: health, kill, pause, restart, and cutting a
node off the cluster network (``partition``) and back (``heal``).

Decisions:

- **Images without a registry.** ``ensure_image`` builds ``flux:latest`` from
  ``docker/Dockerfile`` with Flux and its dependencies as wheels built on the host
  (``pip wheel``), so nothing inside the build needs the network. The base image is, in order:
  ``--base-image``, ``python:3.11-slim-bookworm`` if present or pullable, else
  ``flux-base:bookworm`` built by ``docker/build-base`` (debootstrap + ``docker import``). The
  image carries a label with a hash of the sources it was built from; a missing image or one
  built from other sources is (re)built, an up-to-date one is reused.
- **Ports.** ``base_port`` B gives node N its Kafka EXTERNAL port B+N-1 (9092...), its
  controller HTTP B+100+2(N-1)+1 (9193, 9195, 9197, as the local mode) and its broker HTTP
  B+200+N-1, all published on 127.0.0.1. Clients inside the compose network use INTERNAL
  ``fluxN:9092``. Ports are checked before starting, and a port in use is named.
- **No restart policy** for clusters started here (``FLUX_RESTART_POLICY=no``): a killed node
  stays down until ``restart``, as in the local mode (the compose file defaults to
  ``unless-stopped`` for operators).
- **A partition** disconnects the node's container from the cluster network: it keeps running
  but reaches nobody and nobody reaches it (the host neither). ``heal`` reconnects every
  disconnected node under its service name, so the others find it again by name.
- **A secure cluster** (``fluxctl cluster up --docker --secure``): the caller writes the
  certificates into a host folder, ``secure_compose_env`` turns it and the nodes' ``[security]``
  settings into the compose file's variables (both listeners ``SASL_SSL``), and
  ``up(ca_file=...)`` records the CA, so that compose also reads ``SECURE_COMPOSE_FILE``
  (the folder mounted read-only at ``TLS_MOUNT``) and ``status`` reads the controllers over
  HTTPS. A cluster without security has no such mount. The caller then creates the admin user (``secret`` is the
  cluster credential's key) and stores its client settings with ``record_security``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "COMPOSE_FILE",
    "SECURE_COMPOSE_FILE",
    "TLS_MOUNT",
    "DockerCluster",
    "DockerError",
    "connect",
    "ensure_image",
    "find_root",
    "free_base_port",
    "secure_compose_env",
]

COMPOSE_FILE = "docker-compose.cluster.yml"
#: Added to ``COMPOSE_FILE`` for a secure cluster: mounts ``FLUX_TLS_DIR`` at ``TLS_MOUNT``.
SECURE_COMPOSE_FILE = "docker/compose.secure.yml"
IMAGE = "flux:latest"
SLIM_BASE = "python:3.11-slim-bookworm"
LOCAL_BASE = "flux-base:bookworm"
SOURCE_LABEL = "io.flux.source-hash"
NODES = (1, 2, 3)
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
NETWORK = "flux"  # the compose file's network; compose names it <project>_flux
#: Where a secure cluster's certificate folder is mounted in every container.
TLS_MOUNT = Path("/etc/flux/tls")
#: The compose file's variables of the nodes' ``[security]`` keys.
SECURITY_VARIABLES = {
    "ssl_certfile": "FLUX_SSL_CERTFILE",
    "ssl_keyfile": "FLUX_SSL_KEYFILE",
    "ssl_cafile": "FLUX_SSL_CAFILE",
    "ssl_client_auth": "FLUX_SSL_CLIENT_AUTH",
    "sasl_enabled_mechanisms": "FLUX_SASL_ENABLED_MECHANISMS",
    "authorizer_enable": "FLUX_AUTHORIZER_ENABLE",
    "super_users": "FLUX_SUPER_USERS",
    "allow_everyone_if_no_acl_found": "FLUX_ALLOW_EVERYONE_IF_NO_ACL_FOUND",
    "http_auth": "FLUX_HTTP_AUTH",
    "internal_tls": "FLUX_INTERNAL_TLS",
    "internal_auth": "FLUX_INTERNAL_AUTH",
}
#: The compose file's listeners (INTERNAL for the compose network, EXTERNAL for the host).
LISTENERS = ("INTERNAL", "EXTERNAL")

Echo = Callable[[str], None]


class DockerError(Exception):
    """Docker is missing or failed; the message is one line naming the problem."""


def _quiet(message: str) -> None:
    del message


# -- the engine --------------------------------------------------------------------------------


def connect() -> Any:
    """A ``docker.DockerClient`` whose daemon answered a ping, or ``DockerError``."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        raise DockerError(
            "the docker Python library is not installed (pip install docker)"
        ) from None
    if shutil.which("docker") is None and not os.environ.get("DOCKER_HOST"):
        raise DockerError("Docker is not installed (no docker command on PATH)")
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except DockerException as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DockerError(f"the Docker daemon is not reachable: {reason}") from None
    return client


def compose_command() -> list[str]:
    """``docker compose`` (v2 plugin) when available, else ``docker-compose`` (v1)."""
    if shutil.which("docker"):
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise DockerError(
        "Docker Compose is not installed (neither 'docker compose' nor docker-compose)"
    )


def find_root(start: Path | None = None) -> Path:
    """The Flux source tree holding ``docker-compose.cluster.yml``: the current directory or
    one above it, else the tree this module was installed from (an editable install)."""
    candidates = [start or Path.cwd(), Path(__file__).resolve().parent]
    for candidate in candidates:
        for folder in (candidate, *candidate.parents):
            if (folder / COMPOSE_FILE).is_file() and (folder / "docker" / "Dockerfile").is_file():
                return folder
    raise DockerError(
        f"cannot find {COMPOSE_FILE} and docker/Dockerfile: run fluxctl from a Flux checkout"
    )


# -- the image ---------------------------------------------------------------------------------


def source_hash(root: Path) -> str:
    """A hash of everything that goes into the image: packaged sources, pyproject, docker/."""
    with open(root / "pyproject.toml", "rb") as file:
        package_dirs = tomllib.load(file)["tool"]["setuptools"]["package-dir"].values()
    digest = hashlib.sha256()
    files = [
        root / "pyproject.toml",
        root / "docker" / "Dockerfile",
        root / "docker" / "healthcheck.py",
    ]
    for folder in sorted(package_dirs):
        files.extend(sorted((root / folder).rglob("*.py")))
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def ensure_image(
    client: Any,
    root: Path,
    *,
    tag: str = IMAGE,
    base_image: str | None = None,
    force: bool = False,
    echo: Echo = _quiet,
) -> str:
    """Build ``tag`` unless it exists and was built from the current sources; return it."""
    from docker.errors import ImageNotFound

    wanted = source_hash(root)
    if not force:
        try:
            labels = client.images.get(tag).labels or {}
            if labels.get(SOURCE_LABEL) == wanted:
                return tag
            echo(f"image {tag} was built from other sources; rebuilding")
        except ImageNotFound:
            echo(f"image {tag} is missing; building it")
    base = base_image or _base_image(client, root, echo)
    with tempfile.TemporaryDirectory(prefix="flux-image-") as context_dir:
        context = Path(context_dir)
        echo("building wheels of Flux and its dependencies on the host (pip wheel)")
        wheel = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
             "--wheel-dir", str(context / "wheels"), str(root)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if wheel.returncode != 0:
            raise DockerError(f"pip wheel failed: {_last_line(wheel.stderr or wheel.stdout)}")
        shutil.copy(root / "docker" / "Dockerfile", context / "Dockerfile")
        shutil.copy(root / "docker" / "healthcheck.py", context / "healthcheck.py")
        echo(f"building {tag} on {base}")
        _build(client, context, tag, {"BASE_IMAGE": base}, {SOURCE_LABEL: wanted})
    return tag


def _base_image(client: Any, root: Path, echo: Echo) -> str:
    from docker.errors import DockerException, ImageNotFound

    for name in (SLIM_BASE, LOCAL_BASE):
        try:
            client.images.get(name)
            return name
        except ImageNotFound:
            pass
    try:
        client.images.pull(SLIM_BASE)
        return SLIM_BASE
    except DockerException as error:
        echo(f"no registry answers ({_last_line(str(error))}); building {LOCAL_BASE}")
    script = root / "docker" / "build-base"
    built = subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "FLUX_BASE_IMAGE": LOCAL_BASE},
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise DockerError(f"docker/build-base failed: {_last_line(built.stderr or built.stdout)}")
    return LOCAL_BASE


def _build(
    client: Any, context: Path, tag: str, buildargs: dict[str, str], labels: dict[str, str]
) -> None:
    log: list[str] = []
    for chunk in client.api.build(
        path=str(context), tag=tag, buildargs=buildargs, labels=labels, rm=True,
        forcerm=True, decode=True,
    ):  # fmt: skip
        if "error" in chunk:
            tail = "".join(log[-5:]).strip().replace("\n", " | ")
            raise DockerError(f"docker build failed: {chunk['error'].strip()} ({tail})")
        if "stream" in chunk:
            log.append(chunk["stream"])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _error_lines(text: str) -> str:
    """docker-compose's ``ERROR`` lines (the cause, e.g. a port already allocated) and its
    last line (often only "Encountered errors while bringing up the project.")."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines[:-1] if "error" in line.lower()][-3:]
    return "; ".join([*errors, _last_line(text)])


# -- the cluster -------------------------------------------------------------------------------


def secure_compose_env(tls_dir: Path, security: dict[str, Any]) -> dict[str, str]:
    """The compose variables of a secure cluster: ``tls_dir`` (a host folder) mounted at
    ``TLS_MOUNT``, every listener ``SASL_SSL``, and ``security`` (the nodes' ``[security]``
    section, its file paths under ``TLS_MOUNT``) as the variables of ``SECURITY_VARIABLES``."""
    unknown = sorted(set(security) - set(SECURITY_VARIABLES))
    if unknown:
        raise DockerError(f"the compose file has no variable for security.{unknown[0]}")
    env = {
        "FLUX_TLS_DIR": str(tls_dir.resolve()),
        "FLUX_LISTENER_PROTOCOLS": ",".join(f"{name}:SASL_SSL" for name in LISTENERS),
    }
    for key, value in security.items():
        env[SECURITY_VARIABLES[key]] = _compose_value(value)
    return env


def _compose_value(value: Any) -> str:
    """A setting as the nodes' ``FLUX_`` parser reads it back (booleans as TOML, lists with
    commas)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)


@dataclass(frozen=True)
class Ports:
    """Host ports of a docker cluster whose node 1 has Kafka port ``base``."""

    base: int

    def kafka(self, node_id: int) -> int:
        return self.base + node_id - 1

    def controller_http(self, node_id: int) -> int:
        return self.base + 100 + 2 * (node_id - 1) + 1

    def broker_http(self, node_id: int) -> int:
        return self.base + 200 + node_id - 1

    def all(self) -> list[tuple[int, str]]:
        return [
            (port, f"node {node_id} {what}")
            for node_id in NODES
            for port, what in (
                (self.kafka(node_id), "Kafka"),
                (self.controller_http(node_id), "controller HTTP"),
                (self.broker_http(node_id), "broker HTTP"),
            )
        ]


class DockerCluster:
    """The compose project ``project`` (3 nodes) of the Flux tree at ``root``.

    ``state_path`` remembers the project's ports and secret between commands.
    """

    def __init__(self, client: Any, root: Path, project: str, state_path: Path) -> None:
        self.client = client
        self.root = root
        self.project = project
        self.state_path = state_path

    # -- lifecycle --------------------------------------------------------------------------

    def up(
        self,
        *,
        base_port: int,
        timeout_s: float = 120.0,
        base_image: str | None = None,
        settings: dict[str, str] | None = None,
        ca_file: Path | None = None,
        echo: Echo = _quiet,
    ) -> dict[str, Any]:
        """Build the image if needed, start the nodes, wait until all are healthy.
        ``ca_file``: the cluster is secure (``secure_compose_env`` in ``settings``), its
        controllers are read over HTTPS verified with this CA."""
        running = self.containers(running_only=True)
        if running:
            if self.secure != (ca_file is not None):
                was = "secure" if self.secure else "not secure"
                raise DockerError(
                    f"docker cluster {self.project!r} is running and {was}: take it down first"
                )
            echo(f"docker cluster {self.project!r} is already running")
            return self.status()
        state = self._load_state() or {}
        if state.get("base_port") != base_port or not state.get("secret"):
            state = {
                "project": self.project,
                "base_port": base_port,
                "secret": secrets.token_hex(16),
            }
        if ca_file is not None:
            state["ca_file"] = str(ca_file)
        else:
            state.pop("ca_file", None)
            state.pop("security", None)
        ports = Ports(base_port)
        for port, what in ports.all():
            if not _port_free(port):
                raise DockerError(
                    f"port {port} ({what}) is already in use; pick another --base-port"
                )
        image = ensure_image(self.client, self.root, base_image=base_image, echo=echo)
        env = {
            "FLUX_IMAGE": image,
            "FLUX_CLUSTER_SECRET": state["secret"],
            "FLUX_RESTART_POLICY": "no",
            **{f"FLUX_KAFKA_PORT_{n}": str(ports.kafka(n)) for n in NODES},
            **{f"FLUX_CONTROLLER_PORT_{n}": str(ports.controller_http(n)) for n in NODES},
            **{f"FLUX_HTTP_PORT_{n}": str(ports.broker_http(n)) for n in NODES},
            **(settings or {}),
        }
        state["env"] = env
        self._save_state(state)
        echo(f"starting docker cluster {self.project!r}")
        self._compose(["up", "-d", "--no-build"], env)
        self.wait_healthy(NODES, timeout_s)
        return self.status()

    @property
    def base_port(self) -> int | None:
        """Kafka port of node 1 on the host, as recorded by ``up``."""
        return (self._load_state() or {}).get("base_port")

    @property
    def secret(self) -> str:
        """The cluster's shared secret (the key of its node credential), as ``up`` chose it."""
        return str((self._load_state() or {}).get("secret", ""))

    @property
    def secure(self) -> bool:
        return bool((self._load_state() or {}).get("ca_file"))

    def record_security(self, record: dict[str, Any]) -> None:
        """Keep what clients of a secure cluster need (never a password) for ``status``."""
        state = self._load_state() or {}
        state["security"] = record
        self._save_state(state)

    def down(self, *, volumes: bool = False) -> bool:
        """Remove the containers and the network (and the volumes with ``volumes``); False if
        there was nothing to remove."""
        existing = self.containers()
        volume_names = self._volume_names()
        if not existing and not (volumes and volume_names):
            return False
        self._compose(["down", "--remove-orphans", *(["--volumes"] if volumes else [])], {})
        if volumes:
            # Compose removes the volumes of its file; a node added by `fluxctl cluster
            # add-node --docker` has one of the project's too.
            for name in self._volume_names():
                self.client.volumes.get(name).remove(force=True)
            self.state_path.unlink(missing_ok=True)
        return True

    def kill(self, node_id: int) -> None:
        """SIGKILL the node's process (``docker kill``): a crash."""
        container = self.container(node_id)
        container.reload()
        if container.status in ("running", "paused"):
            if container.status == "paused":
                container.unpause()
            container.kill()
            _wait(lambda: self._status_of(container) == "exited", 30, f"node {node_id} to stop")

    def restart(self, node_id: int, timeout_s: float | None = 120.0) -> None:
        """Start the node again (stopping it first if it runs), with its volume; wait healthy
        (``timeout_s=None``: do not wait, e.g. while its quorum is down)."""
        container = self.container(node_id)
        container.reload()
        if container.status == "paused":
            container.unpause()
        if container.status == "running":
            container.restart(timeout=20)
        else:
            container.start()
        if timeout_s is not None:
            self.wait_healthy([node_id], timeout_s)

    def pause(self, node_id: int) -> None:
        """Freeze every process of the node (cgroup freezer, like SIGSTOP)."""
        self.container(node_id).pause()

    def resume(self, node_id: int) -> None:
        self.container(node_id).unpause()

    def partition(self, node_ids: Iterable[int]) -> list[int]:
        """Cut ``node_ids`` off the cluster network (each loses every peer and the host)."""
        network = self.network()
        cut = []
        for node_id in node_ids:
            container = self.container(node_id)
            if self._connected(container):
                network.disconnect(container, force=True)
            cut.append(node_id)
        return cut

    def heal(self) -> list[int]:
        """Reconnect every node cut off by ``partition``; return their ids."""
        network = self.network()
        healed = []
        for node_id, container in sorted(self.containers().items()):
            if not self._connected(container):
                service = container.labels.get(SERVICE_LABEL, f"flux{node_id}")
                network.connect(container, aliases=[service])
                healed.append(node_id)
        return healed

    # -- inspection -------------------------------------------------------------------------

    def containers(self, *, running_only: bool = False) -> dict[int, Any]:
        """Node id -> container of this project."""
        found = {}
        for container in self.client.containers.list(
            all=not running_only, filters={"label": f"{PROJECT_LABEL}={self.project}"}
        ):
            service = container.labels.get(SERVICE_LABEL, "")
            if service.startswith("flux") and service[4:].isdigit():
                found[int(service[4:])] = container
        return found

    def container(self, node_id: int) -> Any:
        containers = self.containers()
        if node_id not in containers:
            known = ", ".join(map(str, sorted(containers))) or "none"
            raise DockerError(
                f"no node {node_id} in docker cluster {self.project!r} (nodes: {known})"
            )
        return containers[node_id]

    def network(self) -> Any:
        from docker.errors import NotFound

        name = self.network_name()
        try:
            return self.client.networks.get(name)
        except NotFound:
            raise DockerError(f"network {name} does not exist: is the cluster up?") from None

    def network_name(self) -> str:
        return f"{self.project}_{NETWORK}"

    def wait_healthy(self, node_ids: Iterable[int], timeout_s: float) -> None:
        pending = list(node_ids)
        deadline = time.monotonic() + timeout_s
        while pending:
            for node_id in list(pending):
                container = self.container(node_id)
                container.reload()
                if container.status == "exited":
                    tail = container.logs(tail=5).decode(errors="replace").strip()
                    raise DockerError(
                        f"node {node_id} exited with code "
                        f"{container.attrs['State']['ExitCode']}: {tail.splitlines()[-1:] or ''}"
                    )
                if container.attrs["State"].get("Health", {}).get("Status") == "healthy":
                    pending.remove(node_id)
            if pending and time.monotonic() > deadline:
                raise DockerError(
                    f"nodes {pending} not healthy after {timeout_s:.0f} s (docker logs "
                    f"{self.container(pending[0]).name} tells why)"
                )
            if pending:
                time.sleep(0.5)

    def status(self) -> dict[str, Any]:
        """The same document as the local mode's ``cluster status --json``, plus container
        facts (name, state, whether it is on the cluster network)."""
        state = self._load_state() or {}
        ports = Ports(state.get("base_port", 9092))
        ca_file = state.get("ca_file")
        nodes = []
        for node_id, container in sorted(self.containers().items()):
            container.reload()
            running = container.status == "running"
            health = container.attrs["State"].get("Health", {}).get("Status")
            connected = self._connected(container)
            # A broker-only node added by `fluxctl cluster add-node --docker` has its own roles
            # and ports: read both from the container, the compose layout as the fallback.
            roles = _container_roles(container)
            published = _published_ports(container)
            http = None
            if "controller" in roles:
                http = f"127.0.0.1:{published.get(9094, ports.controller_http(node_id))}"
            controller = (
                controller_status(http, ca_file=ca_file) if http and running and connected else None
            )
            nodes.append(
                {
                    "id": node_id,
                    "pid": container.attrs["State"].get("Pid") or None,
                    "kafka": f"127.0.0.1:{published.get(19092, ports.kafka(node_id))}",
                    "internal_kafka": f"flux{node_id}:9092",
                    "http": http,
                    "broker_http": f"127.0.0.1:{published.get(8080, ports.broker_http(node_id))}",
                    "roles": roles,
                    "container": container.name,
                    "state": container.status,
                    "connected": connected,
                    "data_dir": f"volume {self.project}_flux{node_id}-data",
                    "log": f"docker logs {container.name}",
                    "running": running,
                    "healthy": running and health == "healthy",
                    "active_controller": bool(controller and controller.get("active")),
                    "metadata_version": controller.get("version") if controller else None,
                }
            )
        status = {
            "mode": "docker",
            "project": self.project,
            "network": self.network_name(),
            "bootstrap_servers": ",".join(
                n["kafka"] for n in nodes if n["running"] and n["connected"]
            ),
            "secure": bool(ca_file),
            "nodes": nodes,
        }
        if ca_file and state.get("security"):
            status["security"] = state["security"]
        return status

    def run_client(self, command: list[str], *, timeout_s: float = 120.0) -> str:
        """Run ``command`` in a throwaway container of the node image on the cluster network
        (a client inside the compose network); return its output, or raise on failure."""
        state = self._load_state() or {}
        image = state.get("env", {}).get("FLUX_IMAGE", IMAGE)
        container = self.client.containers.run(
            image, command, network=self.network_name(), detach=True, entrypoint=[]
        )
        try:
            result = container.wait(timeout=timeout_s)
            output = container.logs().decode(errors="replace")
        finally:
            container.remove(force=True)
        if result.get("StatusCode") != 0:
            raise DockerError(
                f"client {command} exited {result.get('StatusCode')}: {output[-500:]}"
            )
        return output

    # -- internals --------------------------------------------------------------------------

    def _connected(self, container: Any) -> bool:
        container.reload()
        return self.network_name() in container.attrs["NetworkSettings"]["Networks"]

    def _status_of(self, container: Any) -> str:
        container.reload()
        return str(container.status)

    def _volume_names(self) -> list[str]:
        return [
            volume.name
            for volume in self.client.volumes.list(
                filters={"label": f"{PROJECT_LABEL}={self.project}"}
            )
        ]

    def _compose(self, args: list[str], env: dict[str, str]) -> None:
        files = [COMPOSE_FILE, *([SECURE_COMPOSE_FILE] if self.secure else [])]
        command = [
            *compose_command(), "-p", self.project,
            *(part for name in files for part in ("-f", str(self.root / name))), *args,
        ]  # fmt: skip
        state_env = (self._load_state() or {}).get("env", {})
        done = subprocess.run(
            command,
            env={**os.environ, **state_env, **env},
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            message = done.stderr.strip() or done.stdout.strip()
            raise DockerError(f"{' '.join(command[:2])} {args[0]} failed: {_error_lines(message)}")

    def _load_state(self) -> dict[str, Any] | None:
        try:
            state = json.loads(self.state_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return state if isinstance(state, dict) and state.get("project") == self.project else None

    def _save_state(self, state: dict[str, Any]) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        self.state_path.write_text(json.dumps(state, indent=2))


def _container_roles(container: Any) -> list[str]:
    """``FLUX_NODE__ROLES`` of a node container (the compose nodes': broker and controller)."""
    for item in container.attrs["Config"].get("Env") or []:
        name, _, value = item.partition("=")
        if name == "FLUX_NODE__ROLES":
            return [role.strip() for role in value.split(",") if role.strip()]
    return ["broker", "controller"]


def _published_ports(container: Any) -> dict[int, int]:
    """Container port -> the host port it is published on (as created, running or not)."""
    bindings = container.attrs["HostConfig"].get("PortBindings") or {}
    published = {}
    for port, hosts in bindings.items():
        if hosts and hosts[0].get("HostPort"):
            published[int(port.partition("/")[0])] = int(hosts[0]["HostPort"])
    return published


def free_base_port(host_ports_from: int = 20000, host_ports_to: int | None = None) -> int:
    """A base port whose every host port (``Ports(base).all()``) is free on 127.0.0.1 now,
    all of them below the kernel's ephemeral range (by default): a port in that range can be
    taken by any outgoing connection between this check and Docker publishing it, and then
    ``docker-compose up`` fails (seen in CI with base 32725, whose HTTP ports were 32925+)."""
    span = max(port for port, _ in Ports(0).all())
    if host_ports_to is None:
        host_ports_to = _ephemeral_start() - span - 1
    for _ in range(200):
        base = random.randrange(host_ports_from, max(host_ports_from + 1, host_ports_to))
        if all(_port_free(port) for port, _ in Ports(base).all()):
            return base
    raise DockerError("found no free range of host ports")


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def controller_status(
    http_address: str, *, ca_file: str | Path | None = None
) -> dict[str, Any] | None:
    """``GET /controller/status`` of a controller (None if it does not answer); used by both
    cluster modes of fluxctl and by the chaos backends. With ``ca_file`` (a secured cluster,
    ``internal_tls``) over HTTPS, the controller verified against that CA; the status page
    needs no credential."""
    scheme, context = "http", None
    if ca_file is not None:
        scheme, context = "https", ssl.create_default_context(cafile=str(ca_file))
    url = f"{scheme}://{http_address}/controller/status"
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as reply:
            answer = json.loads(reply.read())
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) else None


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise DockerError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)
