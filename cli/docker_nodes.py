"""``fluxctl cluster add-node --docker`` and ``remove-node N --docker``: grow and shrink the
docker cluster of ``fluxctl cluster up --docker`` (``flux.chaos.docker_cluster``).

**add-node --docker** starts one *broker-only* container next to the compose services of the
project (``--project``). It copies a compose node's settings (every ``FLUX_`` variable: the
controller voters and secret, session and heartbeat timeouts, topic defaults, cluster id,
listener protocols; image, restart policy) and changes only the node's identity: ``FLUX_NODE__ID``
N (default: one above every id the project knows: its containers, the controller voters, the
registered brokers, and ``PROJECT_fluxN-data`` volumes), the role ``broker``, and its listeners:
INTERNAL advertised as ``fluxN:9092`` (the container joins the project network with the alias
``fluxN``, as compose names its services), EXTERNAL published on the host and advertised as
``FLUX_EXTERNAL_HOST:port``. Ports follow the layout of ``up --docker`` (Kafka ``base + N - 1``,
broker HTTP ``base + 200 + N - 1``) when free, else free ports. Its data is a new named
volume ``PROJECT_fluxN-data``.

The container carries compose's labels (project, service ``fluxN``), so ``fluxctl cluster
status | kill | restart | partition | heal --docker`` see it as node N and ``cluster down
--docker`` (``docker-compose down --remove-orphans``) removes it, and ``ADDED_LABEL``, which
marks what fluxctl started and may remove again. The command returns once the container is
healthy (the broker's ``/health``: registered) and the controller lists the broker as
unfenced; if it does not get there the container and its volume are removed again.

A ``--secure`` docker cluster is refused: its one node certificate names only flux1..flux3,
so brokers replicating from ``fluxN`` over TLS would reject it (see ``SECURE_UNSUPPORTED``).

**remove-node N --docker** is the drain of ``flux.cli.nodes`` (refusals, drain, unregister)
with the container as the process: a broker N that fluxctl added (``ADDED_LABEL``) is stopped
and removed with its volume once drained (its data holds nothing any more), then
unregistered. A compose service (flux1..flux3: controller voters) is refused before anything
moves. A broker started some other way is drained and, once stopped by hand, unregistered.
"""

from __future__ import annotations

import time
from typing import Any

import click
from flux.sdk.admin import Admin
from flux.sdk.security import ClientSecurity

from .nodes import _admin_for, retire_broker

__all__ = [
    "ADDED_LABEL",
    "SECURE_UNSUPPORTED",
    "add_docker_node",
    "broker_environment",
    "docker_admin",
    "remove_docker_node",
]

#: The label of a container (and its volume) that ``add-node --docker`` started; its value is
#: the node id. ``remove-node --docker`` stops and removes only containers carrying it.
ADDED_LABEL = "io.flux.added-node"
#: Container ports of the compose file: Kafka EXTERNAL and INTERNAL listeners, broker HTTP.
EXTERNAL_PORT = 19092
INTERNAL_PORT = 9092
BROKER_HTTP_PORT = 8080
#: How long a stopping container may take before it is killed (the compose file's value).
STOP_GRACE_S = 20
#: How often add-node asks whether the new broker is registered.
REGISTERED_POLL_S = 0.5

SECURE_UNSUPPORTED = (
    "--docker: this docker cluster is --secure, and its node certificate (DATA_DIR/"
    "docker-PROJECT-tls/node.pem, shared by every node) names only flux1..flux3, 127.0.0.1 and "
    "localhost: the other brokers would reject a new fluxN when they replicate from it over "
    "TLS, so add-node refuses rather than start a broker that cannot serve its replicas. Grow "
    "a secure cluster with a local cluster (fluxctl cluster up --secure), or recreate this "
    "one with more compose services."
)


# -- add-node --------------------------------------------------------------------------------


def broker_environment(
    template: dict[str, str], *, node_id: int, external_host: str, kafka_port: int
) -> dict[str, str]:
    """The environment of broker ``node_id`` from a compose node's (``template``): every
    ``FLUX_`` variable copied but the node's identity, its role (broker only) and its
    advertised listeners (INTERNAL ``fluxN:9092``, EXTERNAL ``external_host:kafka_port``)."""
    environment = {name: value for name, value in template.items() if name.startswith("FLUX_")}
    environment.update(
        {
            "FLUX_NODE__ID": str(node_id),
            "FLUX_NODE__ROLES": "broker",
            "FLUX_BROKER__ADVERTISED_HOST": f"flux{node_id}",
            "FLUX_BROKER__LISTENERS": (
                f"INTERNAL://0.0.0.0:{INTERNAL_PORT},EXTERNAL://0.0.0.0:{EXTERNAL_PORT}"
            ),
            "FLUX_BROKER__ADVERTISED_LISTENERS": (
                f"INTERNAL://flux{node_id}:{INTERNAL_PORT},EXTERNAL://{external_host}:{kafka_port}"
            ),
        }
    )
    return environment


def _environment(container: Any) -> dict[str, str]:
    pairs = (item.partition("=") for item in container.attrs["Config"]["Env"] or [])
    return {name: value for name, _, value in pairs}


def _roles(container: Any) -> list[str]:
    return _environment(container).get("FLUX_NODE__ROLES", "broker,controller").split(",")


def _external_host(template: dict[str, str]) -> str:
    for listener in template.get("FLUX_BROKER__ADVERTISED_LISTENERS", "").split(","):
        name, _, address = listener.partition("://")
        if name == "EXTERNAL":
            return address.rpartition(":")[0]
    return "127.0.0.1"


def _voter_ids(template: dict[str, str]) -> set[int]:
    voters = template.get("FLUX_CONTROLLER__VOTERS", "").split(",")
    return {int(voter.partition("@")[0]) for voter in voters if voter.partition("@")[0].isdigit()}


def _volume_name(project: str, node_id: int) -> str:
    return f"{project}_flux{node_id}-data"  # as compose names flux1-data of the project


def _project_volume_ids(client: Any, project: str) -> set[int]:
    prefix = f"{project}_flux"
    ids = set()
    for volume in client.volumes.list():
        middle = volume.name.removeprefix(prefix).removesuffix("-data")
        if volume.name.startswith(prefix) and volume.name.endswith("-data") and middle.isdigit():
            ids.add(int(middle))
    return ids


def _host_port(preferred: int, *, taken: set[int]) -> int:
    from flux.chaos.docker_cluster import _port_free
    from flux.cluster.launcher import free_port

    if 0 < preferred < 65536 and preferred not in taken and _port_free(preferred):
        return preferred
    return free_port()


def docker_admin(
    cluster: Any, bootstrap: str | None, timeout_s: float, security: ClientSecurity
) -> Admin:
    """An admin client of the docker cluster: ``--bootstrap``, else its running brokers (with
    the admin settings of a secure one when no security option was given)."""
    status = cluster.status()
    if bootstrap is None and not status["bootstrap_servers"]:
        raise click.ClickException(
            f"docker cluster {cluster.project!r} has no running broker "
            "(start it with: fluxctl cluster up --docker)"
        )
    return _admin_for(bootstrap, timeout_s, security, status)


def add_docker_node(cluster: Any, *, node_id: int | None, timeout_s: float) -> dict[str, Any]:
    """Start one broker-only container in the docker cluster ``cluster`` (a
    ``DockerCluster``; see the module docstring); its status entry."""
    from flux.chaos.docker_cluster import PROJECT_LABEL, SERVICE_LABEL, Ports

    if cluster.secure:
        raise click.ClickException(SECURE_UNSUPPORTED)
    containers = cluster.containers()
    # A running compose node (controller and broker) carries the cluster's settings.
    templates = [
        container
        for _, container in sorted(containers.items())
        if container.status == "running" and "controller" in _roles(container)
    ]
    if not templates:
        raise click.ClickException(
            f"docker cluster {cluster.project!r} is not running "
            "(start it with: fluxctl cluster up --docker)"
        )
    template_container = templates[0]
    template = _environment(template_container)
    with docker_admin(cluster, None, timeout_s, ClientSecurity()) as admin:
        registered = {broker.node_id for broker in admin.describe_cluster().brokers}
        known = {*containers, *_voter_ids(template), *registered}
        volumes = _project_volume_ids(cluster.client, cluster.project)
        if node_id is None:
            node_id = max(known | volumes, default=0) + 1
        elif node_id in known:
            raise click.ClickException(
                f"node {node_id} already exists in docker cluster {cluster.project!r} "
                "(a container, a controller voter or a registered broker)"
            )
        elif node_id in volumes:
            raise click.ClickException(
                f"volume {_volume_name(cluster.project, node_id)} exists (data of an earlier "
                f"node {node_id}): remove it (docker volume rm) or pick another --id"
            )
        ports = Ports(cluster.base_port or 9092)
        kafka_port = _host_port(ports.kafka(node_id), taken=set())
        http_port = _host_port(ports.broker_http(node_id), taken={kafka_port})
        container = _start_container(
            cluster,
            template_container,
            node_id=node_id,
            environment=broker_environment(
                template,
                node_id=node_id,
                external_host=_external_host(template),
                kafka_port=kafka_port,
            ),
            ports={f"{EXTERNAL_PORT}/tcp": kafka_port, f"{BROKER_HTTP_PORT}/tcp": http_port},
            labels={
                PROJECT_LABEL: cluster.project,
                SERVICE_LABEL: f"flux{node_id}",
                # docker-compose finds a project's containers (its orphans too) by these.
                "com.docker.compose.oneoff": "False",
                "com.docker.compose.container-number": "1",
                ADDED_LABEL: str(node_id),
            },
        )
        try:
            cluster.wait_healthy([node_id], timeout_s)
            _wait_registered(admin, node_id, timeout_s)
        except BaseException:
            _remove_container(cluster, container, node_id)
            raise
    return next(node for node in cluster.status()["nodes"] if node["id"] == node_id)


def _start_container(
    cluster: Any,
    template: Any,
    *,
    node_id: int,
    environment: dict[str, str],
    ports: dict[str, int],
    labels: dict[str, str],
) -> Any:
    """Create the volume and the container (on the project network, alias ``fluxN``, the
    compose nodes' image, restart policy and publish address) and start it."""
    client = cluster.client
    network = cluster.network_name()
    bindings = template.attrs["HostConfig"].get("PortBindings") or {}
    publish_host = next(iter(bindings.get(f"{EXTERNAL_PORT}/tcp") or []), {}).get("HostIp", "")
    volume = client.volumes.create(
        name=_volume_name(cluster.project, node_id),
        labels={
            "com.docker.compose.project": cluster.project,
            "com.docker.compose.volume": f"flux{node_id}-data",
            ADDED_LABEL: str(node_id),
        },
    )
    try:
        container = client.containers.create(
            template.image.id,
            name=f"{cluster.project}_flux{node_id}_1",
            hostname=f"flux{node_id}",
            environment=environment,
            labels=labels,
            ports={
                port: (publish_host or "0.0.0.0", host_port) for port, host_port in ports.items()
            },
            volumes={volume.name: {"bind": "/var/lib/flux", "mode": "rw"}},
            restart_policy=template.attrs["HostConfig"].get("RestartPolicy") or None,
            stop_signal=template.attrs["Config"].get("StopSignal") or "SIGTERM",
            network=network,
            networking_config={
                network: client.api.create_endpoint_config(aliases=[f"flux{node_id}"])
            },
            detach=True,
        )
    except BaseException:
        volume.remove(force=True)
        raise
    try:
        container.start()
    except BaseException:
        container.remove(force=True)
        volume.remove(force=True)
        raise
    return container


def _wait_registered(admin: Admin, node_id: int, timeout_s: float) -> None:
    """Until the controller lists broker ``node_id`` as a live (unfenced) broker."""
    deadline = time.monotonic() + timeout_s
    while node_id not in {broker.node_id for broker in admin.describe_cluster().brokers}:
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"broker {node_id} is healthy but not registered after {timeout_s:g} s"
            )
        time.sleep(REGISTERED_POLL_S)


def _remove_container(cluster: Any, container: Any, node_id: int) -> None:
    """Stop and remove a container fluxctl added, then its volume."""
    from docker.errors import NotFound

    container.reload()
    if container.status in ("running", "paused", "restarting"):
        container.stop(timeout=STOP_GRACE_S)
    container.remove(force=True)
    try:
        cluster.client.volumes.get(_volume_name(cluster.project, node_id)).remove(force=True)
    except NotFound:
        pass


# -- remove-node -----------------------------------------------------------------------------


def remove_docker_node(
    admin: Admin,
    cluster: Any,
    broker_id: int,
    *,
    drain_timeout_s: float,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Drain broker ``broker_id``, stop and remove its container if fluxctl added it, and
    unregister it (see the module docstring); what was done, as ``nodes.remove_node``."""
    container = cluster.containers().get(broker_id)
    if container is not None and ADDED_LABEL not in container.labels:
        if "controller" in _roles(container):
            raise click.ClickException(
                f"node {broker_id} is the compose service flux{broker_id}, a controller voter "
                f"(roles: {', '.join(_roles(container))}): remove it from the quorum first "
                f"(fluxctl controller remove {broker_id}); remove-node removes brokers"
            )
        container = None  # not one fluxctl started: drained and unregistered, not stopped

    def stop() -> bool:
        if container is None:
            return False
        _remove_container(cluster, container, broker_id)
        return True

    return retire_broker(
        admin,
        broker_id,
        stop=stop,
        drain_timeout_s=drain_timeout_s,
        show_progress=show_progress,
    )
