"""``fluxctl``: run Flux nodes and local clusters.

fluxctl node start --config node.toml        run one node in the foreground
fluxctl node start --data-dir d --kafka-port 9092   the same without a file
fluxctl cluster up [--nodes 1]              start a local cluster in the background
fluxctl cluster up --secure                 the same with TLS, SASL, ACLs and an admin user
fluxctl cluster status | down | kill N | restart N
fluxctl cluster add-node | remove-node N     grow and shrink it (flux.cli.nodes)
fluxctl cluster up --docker                 the same in containers (docker-compose.cluster.yml)
fluxctl cluster partition N | heal --docker cut a node off the network and reconnect it
fluxctl chaos run SCENARIO [--seed N] [--docker]  fault injection checked for anomalies
fluxctl controller status | add --id N ... | remove N  the controller quorum (flux.cli.controller)
fluxctl topic | group | user | acl | produce | consume  client commands (flux.cli.topic, ...)
fluxctl schema register | list | get | check | delete | compatibility  the schema registry
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from flux.chaos.docker_cluster import controller_status
from flux.cluster.config import ConfigError, load_config
from flux.cluster.launcher import (
    ADMIN_MECHANISMS,
    ADMIN_USER,
    CLIENT_PROPERTIES_FILE,
    TLS_DIR,
    ClusterSecurityError,
    ClusterTls,
    NodeProcess,
    NodeStartError,
    client_properties,
    create_scram_user,
    local_cluster_configs,
    provision_admin,
    read_node_state,
    secure_settings,
    wait_client_login,
    write_client_properties,
    write_cluster_tls,
    write_json_atomically,
)

from ._bootstrap import cluster_dir_option
from .progress import progress

__all__ = ["main"]

STATE_FILE = "cluster.json"
STATE_LOCK_FILE = "cluster.lock"
DEFAULT_KAFKA_PORT = 9092
CONTROLLER_PORT_OFFSET = 100
BROKER_HTTP_PORT_OFFSET = 200
DEFAULT_DOCKER_PROJECT = "flux"
#: Host names the node certificate of ``--secure`` is valid for besides the advertised host.
LOCAL_HOSTS = ("127.0.0.1", "localhost")
#: The docker nodes' names on their network (their certificate must name them too).
DOCKER_NODE_HOSTS = ("flux1", "flux2", "flux3")


@click.group()
def main() -> None:
    """Flux: a Kafka-compatible event-streaming platform."""


# -- node ---------------------------------------------------------------------------------------


@main.group()
def node() -> None:
    """Run a single node."""


@node.command("start")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="node TOML file")
@click.option("--id", "node_id", type=int, help="node id (overrides node.id)")
@click.option("--data-dir", type=click.Path(file_okay=False), help="overrides node.data_dir")
@click.option("--host", help="overrides broker.host")
@click.option("--kafka-port", type=int, help="overrides broker.kafka_port")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="override any key, e.g. --set topic.partitions=3",
)
def node_start(
    config_path: str | None,
    node_id: int | None,
    data_dir: str | None,
    host: str | None,
    kafka_port: int | None,
    settings: tuple[str, ...],
) -> None:
    """Run a node in the foreground until SIGTERM or SIGINT."""
    from flux.cluster.node import run_node

    overrides: dict[str, dict[str, Any]] = {}
    for flag, section, key in (
        (node_id, "node", "id"),
        (data_dir, "node", "data_dir"),
        (host, "broker", "host"),
        (kafka_port, "broker", "kafka_port"),
    ):
        if flag is not None:
            overrides.setdefault(section, {})[key] = flag
    for setting in settings:
        name, sep, text = setting.partition("=")
        section, dot, key = name.partition(".")
        if not sep or not dot:
            raise click.UsageError(f"--set expects SECTION.KEY=VALUE, got {setting!r}")
        overrides.setdefault(section, {})[key] = _parse_value(text)
    try:
        config = load_config(config_path, overrides=overrides)
    except ConfigError as error:
        raise click.ClickException(f"configuration error: {error}") from None
    run_node(config)


def _parse_value(text: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


# -- cluster ------------------------------------------------------------------------------------


@main.group()
def cluster() -> None:
    """Run a local cluster of node processes (no Docker needed), or with --docker a cluster of
    containers from docker-compose.cluster.yml."""


_dir_option = cluster_dir_option("where configs, data and logs of the local cluster live")
_json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")
_docker_option = click.option(
    "--docker", is_flag=True, help="the cluster of containers (docker-compose.cluster.yml)"
)
_project_option = click.option(
    "--project",
    default=DEFAULT_DOCKER_PROJECT,
    show_default=True,
    help="compose project name of the docker cluster",
)


@cluster.command("up")
@_dir_option
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option(
    "--base-port",
    default=DEFAULT_KAFKA_PORT,
    show_default=True,
    type=click.IntRange(0, 65000),
    help="Kafka port of node 1 (node N: +N-1); controller ports start at +100, broker HTTP "
    "ports at +200; 0 picks free ports (written into the node configs: kept on restart)",
)
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for readiness")
@_json_option
@_docker_option
@_project_option
@click.option("--base-image", help="--docker: base image of the node image (default: see docs)")
@click.option(
    "--env",
    "settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="--docker: a compose variable, e.g. --env FLUX_SESSION_TIMEOUT_MS=2000",
)
@click.option(
    "--secure",
    is_flag=True,
    help="TLS + SASL listeners, ACLs, authenticated HTTP API and node traffic, and a SCRAM "
    "super user 'admin' whose client settings go to DATA_DIR/client.properties",
)
@click.option(
    "--v1",
    "v1",
    is_flag=True,
    help="also open each node's FLUX V1 line-protocol listener (a free port, shown as 'v1' "
    "by cluster status --json; docs/v1-protocol.md)",
)
def cluster_up(
    cluster_dir: str,
    nodes: int,
    base_port: int,
    timeout: float,
    as_json: bool,
    docker: bool,
    project: str,
    base_image: str | None,
    settings: tuple[str, ...],
    secure: bool,
    v1: bool,
) -> None:
    """Start N nodes (each controller + broker) in the background and wait until every broker
    is registered and a controller is active; print the bootstrap servers.

    With --docker: build the node image if it is missing or stale, start the 3 nodes of
    docker-compose.cluster.yml and wait until every container is healthy.

    With --secure: a CA and a node certificate (for 127.0.0.1 and localhost) in DATA_DIR/tls;
    every node's one Kafka listener is SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), the
    authorizer is on with User:admin the only super user and nothing allowed without an ACL,
    the HTTP API wants a SCRAM user's Basic login, and nodes talk to each other over TLS with
    the cluster's node credential. Once the nodes are ready, the SCRAM credentials of 'admin'
    (a random password) are created through the active controller, its client settings are
    written to DATA_DIR/client.properties (mode 0600), and the command returns when a login as
    admin works. It prints client settings for confluent-kafka, kafka-python, aiokafka and
    fluxctl --client-config (never the password: it is in client.properties). The cluster
    stays secure across down / up / restart; `up` without --secure refuses it.

    --docker --secure: the same settings through the compose file's variables, with the
    certificates in DATA_DIR/docker-PROJECT-tls mounted into the containers at /etc/flux/tls
    and the settings in DATA_DIR/docker-PROJECT-client.properties. Limits: the node key in
    that folder is readable by every user of this machine (mode 0644: the containers' user,
    uid 10001, reads it through the bind mount); the certificate names flux1..3, 127.0.0.1
    and localhost, so clients must use those names (FLUX_EXTERNAL_HOST is added when set; the
    folder is reused by later `up`s: remove it after changing FLUX_EXTERNAL_HOST); chaos runs
    in Docker stay without security."""
    if docker:
        if nodes != 3:
            raise click.UsageError("--docker runs the 3 nodes of docker-compose.cluster.yml")
        env = {}
        for setting in settings:
            name, sep, value = setting.partition("=")
            if not sep or not name:
                raise click.UsageError(f"--env expects NAME=VALUE, got {setting!r}")
            env[name] = value
        with _docker_errors():
            status = _docker_up(
                cluster_dir,
                project,
                base_port=base_port or DEFAULT_KAFKA_PORT,
                timeout_s=max(timeout, 120.0),
                base_image=base_image,
                env=env,
                secure=secure,
            )
        _print_status(status, as_json)
        return
    root = Path(cluster_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with _state_lock(root):
        _cluster_up_locked(root, nodes, base_port, timeout, as_json, secure=secure, v1=v1)


def _cluster_up_locked(
    root: Path,
    nodes: int,
    base_port: int,
    timeout: float,
    as_json: bool,
    *,
    secure: bool,
    v1: bool = False,
) -> None:
    state = _load_state(root)
    if state and bool(state.get("secure")) != secure:
        was = "with --secure" if state.get("secure") else "without --secure"
        raise click.ClickException(
            f"the cluster in {root} was created {was}: start it the same way, or use another "
            "--data-dir for a new cluster"
        )
    if state and any(_alive(entry) for entry in state["nodes"]):
        _print_status(_status(state), as_json)
        click.echo(f"cluster already running in {root} (fluxctl cluster down stops it)", err=True)
        return
    tls = ClusterTls.in_directory(root / TLS_DIR) if secure else None
    # A cluster grown or shrunk by add-node / remove-node (flux.cli.nodes) restarts as recorded.
    if state and (len(state["nodes"]) == nodes or state.get("membership_changed")):
        processes = [
            _process(entry["id"], root / f"node-{entry['id']}") for entry in state["nodes"]
        ]
    else:
        if secure:
            # Nodes advertise 127.0.0.1 (local_cluster_configs' host): the certificate names it.
            tls = write_cluster_tls(root / TLS_DIR, LOCAL_HOSTS)
        processes = local_cluster_configs(
            root,
            nodes,
            kafka_base_port=base_port,
            controller_base_port=base_port + CONTROLLER_PORT_OFFSET if base_port else 0,
            http_base_port=base_port + BROKER_HTTP_PORT_OFFSET if base_port else 0,
            tls=tls,
            extra=_new_cluster_settings(nodes, v1=v1),
        )
    for process in processes:
        process.start()
    try:
        with progress("nodes ready", len(processes), as_json=as_json) as advance:
            for process in processes:
                process.wait_ready(timeout)
                advance()
        if tls is not None:
            with progress("provisioning the admin user", as_json=as_json):
                _secure_local_cluster(root, processes, tls, timeout)
    except (NodeStartError, ClusterSecurityError) as error:
        for process in processes:
            process.stop()
        raise click.ClickException(str(error)) from None
    state = {"dir": str(root), "nodes": [_entry(process) for process in processes]}
    if tls is not None:
        state["secure"] = True
        state["security"] = _security_record(tls.ca_file, root / CLIENT_PROPERTIES_FILE)
    _save_state(root, state)
    _print_status(_status(state), as_json)


def _new_cluster_settings(nodes: int, *, v1: bool) -> dict[str, dict[str, Any]]:
    """Config sections a new local cluster of ``nodes`` gets over the node defaults.

    Topics created without a replication factor (auto-created by ``POST /publish`` or a
    client's Metadata request, CreateTopics with -1) get ``min(3, nodes)`` replicas and, with
    three, ``min.insync.replicas=2``: what ``docker-compose.cluster.yml`` sets and what a
    Kafka operator runs in production. A node's own default stays Kafka's 1 (one node alone
    cannot hold more); a first publish to a 3-node ``make up`` cluster is replicated."""
    replicas = min(3, nodes)
    settings: dict[str, dict[str, Any]] = {
        "topic": {"replication_factor": replicas, "min_insync_replicas": 2 if replicas >= 3 else 1}
    }
    if v1:
        settings["v1"] = {"port": 0}
    return settings


def _secure_local_cluster(
    root: Path, processes: list[NodeProcess], tls: ClusterTls, timeout: float
) -> None:
    """Create (or renew) the admin user and write its client settings."""
    properties_path = root / CLIENT_PROPERTIES_FILE
    settings = provision_admin(
        processes, tls, password=_admin_password(properties_path), timeout_s=timeout
    )
    write_client_properties(properties_path, settings)


def _admin_password(properties_path: Path) -> str:
    """The admin password of an earlier `up` (kept, so clients' settings stay valid), or a
    new random one."""
    from flux.sdk.security import load_client_properties

    if properties_path.exists():
        password = load_client_properties(properties_path).get("sasl.password")
        if password:
            return password
    return secrets.token_urlsafe(24)


def _security_record(ca_file: Path, properties_path: Path) -> dict[str, Any]:
    """What the state file keeps of a secure cluster (no password: that is in the file)."""
    return {
        "protocol": "SASL_SSL",
        "user": ADMIN_USER,
        "mechanism": ADMIN_MECHANISMS[0],
        "ca_file": str(ca_file),
        "client_properties": str(properties_path),
    }


def _docker_up(
    cluster_dir: str,
    project: str,
    *,
    base_port: int,
    timeout_s: float,
    base_image: str | None,
    env: dict[str, str],
    secure: bool,
) -> dict[str, Any]:
    """``up --docker``; with ``secure``, certificates in a folder the containers mount, the
    security settings as compose variables, then the admin user as in the local mode."""
    from flux.chaos.docker_cluster import TLS_MOUNT, Ports, secure_compose_env

    cluster = _docker_cluster(cluster_dir, project)
    root = Path(cluster_dir).resolve()
    tls = None
    if secure:
        tls_dir = root / f"docker-{project}-tls"
        tls = ClusterTls.in_directory(tls_dir)
        if not tls.ca_file.exists():
            hosts = [*DOCKER_NODE_HOSTS, *LOCAL_HOSTS]
            if env.get("FLUX_EXTERNAL_HOST") or os.environ.get("FLUX_EXTERNAL_HOST"):
                hosts.append(env.get("FLUX_EXTERNAL_HOST") or os.environ["FLUX_EXTERNAL_HOST"])
            write_cluster_tls(tls_dir, hosts, shared=True)
        env = {
            **secure_compose_env(tls_dir, secure_settings(ClusterTls.in_directory(TLS_MOUNT))),
            **env,
        }
    cluster.up(
        base_port=base_port,
        timeout_s=timeout_s,
        base_image=base_image,
        settings=env,
        ca_file=tls.ca_file if tls is not None else None,
        echo=lambda line: click.echo(line, err=True),
    )
    if tls is None:
        return _docker_status(cluster)
    ports = Ports(cluster.base_port or base_port)
    properties_path = root / f"docker-{project}-client.properties"
    password = _admin_password(properties_path)
    try:
        create_scram_user(
            [f"127.0.0.1:{ports.controller_http(node_id)}" for node_id in (1, 2, 3)],
            user=ADMIN_USER,
            password=password,
            secret=cluster.secret,
            ca_file=tls.ca_file,
            timeout_s=timeout_s,
        )
        brokers = [f"127.0.0.1:{ports.kafka(node_id)}" for node_id in (1, 2, 3)]
        settings = client_properties(",".join(brokers), password=password, ca_file=tls.ca_file)
        wait_client_login(brokers, settings, timeout_s=timeout_s)
    except ClusterSecurityError as error:
        raise click.ClickException(str(error)) from None
    write_client_properties(properties_path, settings)
    cluster.record_security(_security_record(tls.ca_file, properties_path))
    return _docker_status(cluster)


def _docker_status(cluster: Any) -> dict[str, Any]:
    """The docker cluster's status, with the client settings of a secure one."""
    status: dict[str, Any] = cluster.status()
    record = status.get("security")
    if record:
        status["security"] = _client_settings(
            record, ",".join(node["kafka"] for node in status["nodes"])
        )
    return status


@cluster.command("status")
@_dir_option
@_json_option
@_docker_option
@_project_option
def cluster_status(cluster_dir: str, as_json: bool, docker: bool, project: str) -> None:
    """Each node's pid, addresses, health and controller role."""
    if docker:
        with _docker_errors():
            cluster = _docker_cluster(cluster_dir, project)
            if not cluster.containers():
                raise click.ClickException(
                    f"no docker cluster {project!r} (start one with: fluxctl cluster up --docker)"
                )
            _print_status(_docker_status(cluster), as_json)
        return
    state = _require_state(Path(cluster_dir).resolve())
    _print_status(_status(state), as_json)


@cluster.command("down")
@_dir_option
@_docker_option
@_project_option
@click.option("--volumes", is_flag=True, help="--docker: also delete the nodes' data volumes")
def cluster_down(cluster_dir: str, docker: bool, project: str, volumes: bool) -> None:
    """Stop every node (SIGTERM, then SIGKILL after 15 s). Data stays for the next `up`.

    With --docker: remove the containers and the network (and with --volumes the data)."""
    if docker:
        with _docker_errors():
            removed = _docker_cluster(cluster_dir, project).down(volumes=volumes)
        if not removed:
            click.echo(f"no docker cluster {project!r} is running", err=True)
            return
        click.echo(json.dumps({"removed": project, "volumes": volumes}))
        return
    if volumes:
        raise click.UsageError("--volumes is for --docker (local data lives in --data-dir)")
    root = Path(cluster_dir).resolve()
    if not (root / STATE_FILE).exists():
        click.echo("no cluster is running", err=True)
        return
    with _state_lock(root):
        state = _load_state(root)
        if not state:
            click.echo("no cluster is running", err=True)
            return
        for entry in state["nodes"]:
            _terminate(entry)
        for entry in state["nodes"]:
            entry["pid"] = None
        _save_state(root, state)
    click.echo(json.dumps({"stopped": [entry["id"] for entry in state["nodes"]]}))


@cluster.command("kill")
@_dir_option
@click.argument("node_id", type=int)
@_docker_option
@_project_option
def cluster_kill(cluster_dir: str, node_id: int, docker: bool, project: str) -> None:
    """SIGKILL one node (a crash, for demos and tests)."""
    if docker:
        with _docker_errors():
            _docker_cluster(cluster_dir, project).kill(node_id)
        click.echo(json.dumps({"killed": node_id}))
        return
    root = Path(cluster_dir).resolve()
    entry = _find(_require_state(root), node_id)
    if _alive(entry):
        os.kill(entry["pid"], signal.SIGKILL)
        _wait_dead(entry["pid"], 10.0)
    click.echo(json.dumps({"killed": node_id}))


@cluster.command("restart")
@_dir_option
@click.argument("node_id", type=int)
@click.option("--timeout", default=60.0, show_default=True)
@_json_option
@_docker_option
@_project_option
def cluster_restart(
    cluster_dir: str, node_id: int, timeout: float, as_json: bool, docker: bool, project: str
) -> None:
    """Stop one node (if running) and start it again with the same config and data."""
    if docker:
        with _docker_errors():
            cluster = _docker_cluster(cluster_dir, project)
            cluster.restart(node_id, max(timeout, 120.0))
            _print_status(_docker_status(cluster), as_json)
        return
    root = Path(cluster_dir).resolve()
    entry = _find(_require_state(root), node_id)
    _terminate(entry)
    process = _process(node_id, root / f"node-{node_id}")
    process.start()
    try:
        # Ready, or up and waiting for its quorum (most controllers are down): either way the
        # node now runs and joins the cluster as soon as it can.
        started = process.wait_started(timeout)
    except NodeStartError as error:
        raise click.ClickException(str(error)) from None
    # Only this node's entry changes, under the lock, on the state as it is now: a restart of
    # another node running at the same time keeps its own update.
    with _state_lock(root):
        state = _require_state(root)
        _find(state, node_id).update(_entry(process))
        _save_state(root, state)
    _print_status(_status(state), as_json)
    if started.get("state") != "ready":
        click.echo(
            f"node {node_id} is up and {started.get('state')}; it joins the cluster once a "
            "majority of the controllers is up",
            err=True,
        )


@cluster.command("partition")
@_dir_option
@click.argument("node_ids", type=int, nargs=-1, required=True)
@_docker_option
@_project_option
def cluster_partition(
    cluster_dir: str, node_ids: tuple[int, ...], docker: bool, project: str
) -> None:
    """Cut nodes off the cluster network (they run on, reaching nobody); undo with heal."""
    if not docker:
        raise click.ClickException(
            "partition needs --docker: local nodes share the loopback interface"
        )
    with _docker_errors():
        cut = _docker_cluster(cluster_dir, project).partition(node_ids)
    click.echo(json.dumps({"partitioned": cut}))


@cluster.command("heal")
@_dir_option
@_docker_option
@_project_option
def cluster_heal(cluster_dir: str, docker: bool, project: str) -> None:
    """Reconnect every node cut off by partition."""
    if not docker:
        raise click.ClickException("heal needs --docker: local nodes are never partitioned")
    with _docker_errors():
        healed = _docker_cluster(cluster_dir, project).heal()
    click.echo(json.dumps({"healed": healed}))


@cluster.command("build-image")
@click.option("--base-image", help="base image (default: python:3.11-slim-bookworm or a local one)")
@click.option("--force", is_flag=True, help="rebuild even if the image is up to date")
def cluster_build_image(base_image: str | None, force: bool) -> None:
    """Build the node image flux:latest from docker/Dockerfile with wheels built here."""
    from flux.chaos import docker_cluster

    with _docker_errors():
        client = docker_cluster.connect()
        tag = docker_cluster.ensure_image(
            client,
            docker_cluster.find_root(),
            base_image=base_image,
            force=force,
            echo=lambda line: click.echo(line, err=True),
        )
    click.echo(json.dumps({"image": tag}))


@contextlib.contextmanager
def _docker_errors() -> Iterator[None]:
    """Docker problems end the command with their one-line message and a non-zero status."""
    from flux.chaos.docker_cluster import DockerError

    try:
        yield
    except DockerError as error:
        raise click.ClickException(str(error)) from None


def _docker_cluster(cluster_dir: str, project: str) -> Any:
    from flux.chaos import docker_cluster

    client = docker_cluster.connect()
    state_path = Path(cluster_dir).resolve() / f"docker-{project}.json"
    return docker_cluster.DockerCluster(client, docker_cluster.find_root(), project, state_path)


def _process(node_id: int, node_dir: Path) -> NodeProcess:
    return NodeProcess(
        node_id=node_id,
        config_path=node_dir / "node.toml",
        data_dir=node_dir / "data",
        log_path=node_dir / "node.log",
    )


def _entry(process: NodeProcess) -> dict[str, Any]:
    # A node still waiting for its quorum reports its ports in its state file.
    ready = process.ready or process.read_state() or {}
    return {
        "id": process.node_id,
        "pid": process.pid,
        "kafka": ready.get("bootstrap_servers"),
        "http": ready.get("controller_http"),
        "broker_http": ready.get("broker_http"),
        "v1": ready.get("v1"),
        "roles": ready.get("roles", []),
        "config": str(process.config_path),
        "data_dir": str(process.data_dir),
        "log": str(process.log_path),
    }


def _status(state: dict[str, Any]) -> dict[str, Any]:
    security = state.get("security") if state.get("secure") else None
    ca_file = security["ca_file"] if security else None
    nodes = []
    for entry in state["nodes"]:
        running = _alive(entry)
        controller = (
            controller_status(entry["http"], ca_file=ca_file)
            if running and entry.get("http")
            else None
        )
        node_state = _node_state(entry) if running else None
        nodes.append(
            {
                **entry,
                "running": running,
                "healthy": running and (Path(entry["data_dir"]) / "ready.json").exists(),
                "state": node_state or ("starting" if running else "down"),
                "active_controller": bool(controller and controller.get("active")),
                "metadata_version": controller.get("version") if controller else None,
            }
        )
    status: dict[str, Any] = {
        "bootstrap_servers": ",".join(n["kafka"] for n in nodes if n["running"] and n["kafka"]),
        "secure": security is not None,
        "nodes": nodes,
    }
    if security is not None:
        every_broker = ",".join(n["kafka"] for n in nodes if n["kafka"])
        status["security"] = _client_settings(security, every_broker)
    return status


def _client_settings(security: dict[str, Any], bootstrap_servers: str) -> dict[str, Any]:
    """Ready client settings of a secure cluster's admin for confluent-kafka, kafka-python,
    aiokafka and fluxctl, without the password: each names the setting that takes it, and
    ``client_properties`` is the file holding it (``sasl.password``)."""
    properties, ca_file = security["client_properties"], security["ca_file"]
    protocol, mechanism, user = security["protocol"], security["mechanism"], security["user"]
    python_settings = {
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
    }
    return {
        **security,
        "password": f"sasl.password in {properties}",
        "confluent_kafka": {
            "settings": {
                "bootstrap.servers": bootstrap_servers,
                "security.protocol": protocol,
                "sasl.mechanism": mechanism,
                "sasl.username": user,
                "ssl.ca.location": ca_file,
            },
            "password_setting": "sasl.password",
            "example": (
                "from flux.sdk.security import load_client_properties; "
                f"Producer(load_client_properties({properties!r}))"
            ),
        },
        "kafka_python": {
            "settings": {
                "bootstrap_servers": bootstrap_servers.split(","),
                **python_settings,
                "ssl_cafile": ca_file,
            },
            "password_setting": "sasl_plain_password",
        },
        "aiokafka": {
            "settings": {"bootstrap_servers": bootstrap_servers, **python_settings},
            "password_setting": "sasl_plain_password",
            "ssl_context": f"aiokafka.helpers.create_ssl_context(cafile={ca_file!r})",
        },
        "fluxctl": (
            f"fluxctl topic list --bootstrap {bootstrap_servers} --client-config {properties}"
        ),
    }


def _print_status(status: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Flux cluster")
    for column in ("id", "pid", "kafka", "controller http", "roles", "health", "controller"):
        table.add_column(column)
    for node in status["nodes"]:
        table.add_row(
            str(node["id"]),
            str(node["pid"] or "-"),
            node["kafka"] or "-",
            node["http"] or "-",
            ",".join(node["roles"]),
            "healthy" if node["healthy"] else node["state"],
            "active"
            if node["active_controller"]
            else ("standby" if "controller" in node["roles"] else "-"),
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped output: whole headers, no wrapping at 80 columns
    console.print(table)
    console.print(f"bootstrap servers: {status['bootstrap_servers'] or '(none running)'}")
    if status.get("security"):
        click.echo(_format_client_settings(status["security"]))


def _format_client_settings(settings: dict[str, Any]) -> str:
    """The text form of ``client_settings``: one ready call per client library."""
    password = f"PASSWORD (the sasl.password line of {settings['client_properties']})"
    confluent = dict(settings["confluent_kafka"]["settings"])
    kafka_python = settings["kafka_python"]["settings"]
    aiokafka = settings["aiokafka"]["settings"]

    def arguments(values: dict[str, Any], extra: str) -> str:
        return ", ".join([*(f"{key}={value!r}" for key, value in values.items()), extra])

    confluent_text = json.dumps({**confluent, "sasl.password": "PASSWORD"})
    return "\n".join(
        [
            f"secure: {settings['protocol']}, user {settings['user']} "
            f"({settings['mechanism']}), CA {settings['ca_file']}",
            f"client settings (with the password): {settings['client_properties']}",
            f"  confluent-kafka: Producer({confluent_text})",
            f"                   or {settings['confluent_kafka']['example']}",
            "  kafka-python:    KafkaProducer("
            + arguments(kafka_python, "sasl_plain_password=PASSWORD")
            + ")",
            "  aiokafka:        AIOKafkaProducer("
            + arguments(
                aiokafka,
                f"sasl_plain_password=PASSWORD, ssl_context={settings['aiokafka']['ssl_context']}",
            )
            + ")",
            f"  fluxctl:         {settings['fluxctl']}",
            f"  PASSWORD:        {password}",
        ]
    )


def _node_state(entry: dict[str, Any]) -> str | None:
    """What a running node says it is doing (``node-state.json``), if it is this process."""
    document = read_node_state(Path(entry["data_dir"]), entry.get("pid"))
    state = document.get("state") if document else None
    return str(state) if state else None


@contextlib.contextmanager
def _state_lock(root: Path) -> Iterator[None]:
    """Serialize the read-modify-write of the cluster state file between fluxctl commands
    (two restarts at once used to overwrite each other's update)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / STATE_LOCK_FILE, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _save_state(root: Path, state: dict[str, Any]) -> None:
    write_json_atomically(root / STATE_FILE, state, indent=2)


def _load_state(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((root / STATE_FILE).read_text())
    except FileNotFoundError:
        return None


def _require_state(root: Path) -> dict[str, Any]:
    state = _load_state(root)
    if state is None:
        raise click.ClickException(f"no cluster in {root} (start one with: fluxctl cluster up)")
    return state


def _find(state: dict[str, Any], node_id: int) -> dict[str, Any]:
    for entry in state["nodes"]:
        if entry["id"] == node_id:
            return entry
    known = ", ".join(str(entry["id"]) for entry in state["nodes"])
    raise click.ClickException(f"no node {node_id} in this cluster (nodes: {known})")


def _alive(entry: dict[str, Any]) -> bool:
    """True if the recorded pid runs and is still a Flux node process."""
    pid = entry.get("pid")
    return bool(pid) and _pid_alive(pid) and _cmdline_is_node(pid)


def _cmdline_is_node(pid: int) -> bool:
    try:
        return b"flux.cli.main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not running.
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0] != "Z"
    except OSError:
        return True


def _wait_dead(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.02)
    return False


def _terminate(entry: dict[str, Any]) -> None:
    if not _alive(entry):
        return
    pid = entry["pid"]
    os.kill(pid, signal.SIGTERM)
    if not _wait_dead(pid, 15.0):
        os.kill(pid, signal.SIGKILL)
        _wait_dead(pid, 10.0)


def _register_client_commands() -> None:
    from flux.cli.acl import acl
    from flux.cli.chaos import chaos
    from flux.cli.client_commands import consume, produce
    from flux.cli.console import console
    from flux.cli.controller import controller
    from flux.cli.group import group
    from flux.cli.nodes import add_node_command, remove_node_command
    from flux.cli.pipeline import pipeline
    from flux.cli.reassign import partition, rebalance, throttle
    from flux.cli.schema import schema
    from flux.cli.topic import topic
    from flux.cli.user import user

    main.add_command(topic)
    main.add_command(group)
    main.add_command(user)
    main.add_command(acl)
    main.add_command(produce)
    main.add_command(consume)
    main.add_command(chaos)
    main.add_command(pipeline)
    main.add_command(partition)
    main.add_command(controller)
    main.add_command(console)
    main.add_command(schema)
    cluster.add_command(rebalance)
    cluster.add_command(throttle)
    cluster.add_command(add_node_command)
    cluster.add_command(remove_node_command)


_register_client_commands()


if __name__ == "__main__":
    sys.exit(main())
