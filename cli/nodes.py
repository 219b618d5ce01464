"""``fluxctl cluster add-node`` and ``fluxctl cluster remove-node``: grow and shrink a cluster.

fluxctl cluster add-node [--id N] [--data-dir DIR] [--json] [--docker [--project P]]
fluxctl cluster remove-node N [--data-dir DIR] [--drain-timeout S] [--bootstrap ...] [--json]
                              [--docker [--project P]]

**add-node** starts one more *broker-only* node next to the local cluster of ``fluxctl cluster
up`` (the cluster in ``--data-dir``). Its config is derived from a running node's
(``broker_node_sections``): the same controller voters, shared secret, security settings
(TLS files, SASL, ACLs, internal authentication), topic defaults and other sections; its own
id, data directory, Kafka and HTTP ports, and the role ``broker`` only (never a controller
voter: the quorum changes with ``fluxctl controller``). The id is one above every id the
cluster folder knows (recorded nodes, controller voters, ``node-N`` folders, so the id of a
removed node is never reused by mistake); ports follow the cluster's layout (``--base-port``
clusters: Kafka ``base + id - 1``, HTTP ``base + 200 + id - 1``) when free, else free ports.
The command returns once the broker is registered and unfenced (its ready file), records it in
the cluster state (so ``cluster status | down | up | restart`` include it) and prints its id and
address. It holds no partition until the next ``fluxctl cluster rebalance`` (or a new topic).

**remove-node N** takes broker N out of any cluster it reaches (``--bootstrap``, default: the
local cluster), in four steps:

1. *Refusals, before anything moves.* N is a controller voter (point: ``fluxctl controller
   remove``): known from the local state's roles, and from the controller's answer to an
   UnregisterBroker sent first (it refuses voters before anything else; for a drained,
   stopped broker that first request already completes the removal). N is not registered.
   Removing N would leave a topic with a replication factor larger than the live brokers left
   (``flux.controller.rebalance.drain_refusals``).
2. *Drain.* ``plan_drain`` moves each replica N holds (internal topics included) to the least
   loaded live broker without one, as AlterPartitionReassignments: a new replica joins as a
   follower, catches up, enters the ISR, and only then does N leave the replica list; if N
   led, leadership moves to the first target replica in the ISR at that moment. Producers see
   at most a retriable NOT_LEADER_OR_FOLLOWER (an ``acks=all`` write is never lost or
   failed). A progress bar (on stderr) counts the partitions still on N until none is left
   and N leads nothing; partitions placed on N meanwhile (a topic created during the drain)
   are planned again (``DRAIN_ROUNDS_MAX`` rounds).
3. *Stop.* If N is a node of the local cluster in ``--data-dir`` (the command talks to that
   cluster: no ``--bootstrap``; or broker N advertises the recorded Kafka address) and its
   recorded process still runs (pid alive and a Flux node command line), it is stopped
   (SIGTERM, SIGKILL after 15 s) and taken out of the cluster state; its folder stays for
   inspection. A node started some
   other way is not touched: while its Kafka port still accepts connections the command ends
   here, saying so (``"unregistered": false``); stop the process and run ``remove-node N``
   again, which then only unregisters.
4. *Unregister* (Kafka's UnregisterBroker, ``flux.controller.handlers.unregister_broker``): once
   N is fenced (its session ended, at most ``broker.session.timeout.ms`` after it stopped) the
   controller removes its registration; clients no longer see it anywhere.

Exit status 0 when N is drained (and unregistered, unless it must still be stopped by hand); 1
with ``Error: ...`` for a refusal, an SDK error or a timeout. ``--json`` prints
``{"node", "moves": [{"topic", "partition", "replicas", "target"}], "drained", "stopped",
"unregistered"}``.

With ``--docker [--project P]`` both commands work on the docker cluster of ``fluxctl cluster
up --docker`` instead: add-node starts a broker-only container, remove-node drains as above and
then stops and removes the container if add-node started it (``flux.cli.docker_nodes``).
"""

from __future__ import annotations

import json
import socket
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from flux.controller.rebalance import Move, drain_refusals, plan_drain
from flux.protocol.errors import ErrorCode
from flux.sdk.admin import Admin
from flux.sdk.errors import KafkaError, UnknownTopicError
from flux.sdk.security import ClientSecurity, load_client_properties

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors

__all__ = [
    "add_node",
    "broker_node_sections",
    "drain",
    "remove_node",
    "retire_broker",
]

#: How often the drain looks at the partitions, and how many times it plans again for
#: partitions placed on the broker while it drains.
DRAIN_POLL_S = 0.5
DRAIN_ROUNDS_MAX = 5
#: How long remove-node waits for a stopped broker to be fenced and unregistered.
UNREGISTER_WAIT_S = 60.0
UNREGISTER_POLL_S = 0.25
#: A broker whose Kafka port answers a TCP connect within this long is taken as running.
REACHABLE_TIMEOUT_S = 1.0


# -- add-node -------------------------------------------------------------------------------


def broker_node_sections(
    template: Mapping[str, Mapping[str, Any]],
    *,
    node_id: int,
    data_dir: Path,
    kafka_port: int,
    http_port: int,
    pick_port: Callable[[], int],
) -> dict[str, dict[str, Any]]:
    """The config sections of a new broker-only node derived from a running node's
    (``template``, as read from its TOML file): every section copied (controller voters and
    secret, ``[security]``, topic defaults, ...) except the node's identity (``node.id``,
    ``node.roles`` = broker, ``node.data_dir``) and its ports. Each Kafka listener of the
    template gets a port of its own (the template's primary one ``kafka_port``, any other one
    from ``pick_port``), and an advertised listener of the same name follows it."""
    sections = {name: dict(keys) for name, keys in template.items()}
    sections["node"] = {
        **sections.get("node", {}),
        "id": node_id,
        "roles": ["broker"],
        "data_dir": str(data_dir),
    }
    broker = sections.setdefault("broker", {})
    old_primary = broker.get("kafka_port")
    broker["kafka_port"] = kafka_port
    broker["http_port"] = http_port
    if "api" in sections:
        sections["api"].pop("port", None)  # the original Flux name of broker.http_port
    parsed = [_split_listener(listener) for listener in broker.get("listeners", [])]
    primary = next((name for name, _, port in parsed if port == old_primary), None)
    new_ports: dict[str, int] = {}
    listeners = []
    for index, (name, host, _port) in enumerate(parsed):
        is_primary = name == primary or (primary is None and index == 0)
        new_ports[name] = kafka_port if is_primary else pick_port()
        listeners.append(f"{name}://{host}:{new_ports[name]}")
    if listeners:
        broker["listeners"] = listeners
    advertised = []
    for listener in broker.get("advertised_listeners", []):
        name, host, port = _split_listener(listener)
        advertised.append(f"{name}://{host}:{new_ports.get(name, port)}")
    if advertised:
        broker["advertised_listeners"] = advertised
    return sections


def _split_listener(listener: str) -> tuple[str, str, int]:
    name, _, address = str(listener).partition("://")
    host, _, port = address.rpartition(":")
    return name, host, int(port)


def _next_node_id(root: Path, state: dict[str, Any], template: Mapping[str, Any]) -> int:
    """One above every id this cluster folder knows (see the module docstring)."""
    known = {int(entry["id"]) for entry in state["nodes"]}
    for voter in template.get("controller", {}).get("voters", []):
        known.add(int(str(voter).partition("@")[0]))
    for folder in root.glob("node-*"):
        suffix = folder.name.removeprefix("node-")
        if suffix.isdigit():
            known.add(int(suffix))
    return max(known, default=0) + 1


def _layout_port(
    root: Path, state: dict[str, Any], node_id: int, key: str, *, taken: set[int]
) -> int:
    """``broker.<key>`` for node ``node_id``: the cluster's ``port - id`` if every recorded
    node follows one and that port is free, else a free port."""
    from flux.cluster.launcher import free_port

    offsets = set()
    for entry in state["nodes"]:
        config = _read_config(Path(entry["config"]))
        port = config.get("broker", {}).get(key)
        if not port:
            return free_port()
        offsets.add(int(port) - int(entry["id"]))
    if len(offsets) == 1:
        candidate = offsets.pop() + node_id
        if 0 < candidate < 65536 and candidate not in taken and _port_free(candidate):
            return candidate
    return free_port()


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _read_config(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise click.ClickException(f"cannot read node config {path}: {error}") from None


def add_node(root: Path, *, node_id: int | None, timeout_s: float) -> dict[str, Any]:
    """Start one broker-only node for the local cluster in ``root`` and record it (see the
    module docstring); its state entry."""
    import flux.cli.main as cli
    from flux.cluster.launcher import NodeStartError, free_port, write_node_config

    with cli._state_lock(root):
        state = cli._require_state(root)
        running = [entry for entry in state["nodes"] if cli._alive(entry)]
        if not running:
            raise click.ClickException(
                f"the cluster in {root} is not running (start it with: fluxctl cluster up)"
            )
        # A controller's config names the voters as they are; any running node's would do.
        template_entry = next(
            (e for e in running if "controller" in e.get("roles", [])), running[0]
        )
        template = _read_config(Path(template_entry["config"]))
        if node_id is None:
            node_id = _next_node_id(root, state, template)
        elif (
            any(int(entry["id"]) == node_id for entry in state["nodes"])
            or (root / f"node-{node_id}").exists()
        ):
            raise click.ClickException(f"node {node_id} already exists in {root}")
        kafka_port = _layout_port(root, state, node_id, "kafka_port", taken=set())
        http_port = _layout_port(root, state, node_id, "http_port", taken={kafka_port})
        node_dir = root / f"node-{node_id}"
        node_dir.mkdir(parents=True)
        sections = broker_node_sections(
            template,
            node_id=node_id,
            data_dir=node_dir / "data",
            kafka_port=kafka_port,
            http_port=http_port,
            pick_port=free_port,
        )
        write_node_config(node_dir / "node.toml", sections)
        process = cli._process(node_id, node_dir)
        process.start()
        try:
            process.wait_ready(timeout_s)
        except NodeStartError as error:
            process.stop()
            raise click.ClickException(str(error)) from None
        entry = cli._entry(process)
        state["nodes"].append(entry)
        # ``cluster up`` restarts the recorded nodes from now on, whatever --nodes says.
        state["membership_changed"] = True
        cli._save_state(root, state)
    return entry


# -- remove-node ----------------------------------------------------------------------------


def _holding(admin: Admin, broker_id: int) -> tuple[dict[tuple[str, int], tuple[int, ...]], int]:
    """Every partition's replicas as they will be (a running reassignment counts with its
    target), and how many partitions still involve ``broker_id`` (as a replica, a leaving
    replica or the leader)."""
    running = admin.list_partition_reassignments()
    current: dict[tuple[str, int], tuple[int, ...]] = {}
    involved = 0
    for name in admin.list_topics(include_internal=True):
        try:
            description = admin.describe_topic(name)
        except UnknownTopicError:
            continue  # deleted meanwhile
        for item in description.partitions:
            removing = running.get((name, item.partition), {}).get("removing", [])
            current[(name, item.partition)] = tuple(r for r in item.replicas if r not in removing)
            if broker_id in item.replicas or item.leader == broker_id:
                involved += 1
    return current, involved


def _submit(admin: Admin, moves: list[Move]) -> None:
    answer = admin.alter_partition_reassignments(
        {(m.topic, m.partition): list(m.target) for m in moves}
    )
    errors = [f"{t}-{p}: {error}" for (t, p), error in sorted(answer.items()) if error is not None]
    if errors:
        raise click.ClickException("the controller refused moves: " + "; ".join(errors))


def drain(
    admin: Admin,
    broker_id: int,
    *,
    live: list[int],
    timeout_s: float,
    show_progress: bool = True,
) -> list[Move]:
    """Move every replica and leadership off ``broker_id`` and wait until none is left (see
    the module docstring); the moves submitted (the last one per partition)."""
    from rich.console import Console
    from rich.progress import Progress

    current, involved = _holding(admin, broker_id)
    # Replacements go to a rack the partition does not have yet when one can take them.
    racks = {broker.node_id: broker.rack for broker in admin.describe_cluster().brokers}
    problems = drain_refusals(current, live, broker_id)
    if problems:
        raise click.ClickException(
            f"removing broker {broker_id} would leave too few brokers: "
            + "; ".join(problems)
            + ". Add a broker first (fluxctl cluster add-node) or start the stopped ones."
        )
    submitted: dict[tuple[str, int], Move] = {}
    deadline = time.monotonic() + timeout_s
    total = max(involved, 1)
    rounds = 0
    progress = Progress(console=Console(stderr=True), transient=False, disable=not show_progress)
    with progress:
        task = progress.add_task(f"draining broker {broker_id}", total=total)
        while True:
            total = max(total, involved)
            progress.update(task, total=total, completed=total - involved)
            if involved == 0:
                return list(submitted.values())
            # Partitions whose target still names the broker: all of them the first time,
            # then those placed on it meanwhile.
            moves = plan_drain(current, live, broker_id, racks=racks)
            if moves:
                if rounds == DRAIN_ROUNDS_MAX:
                    raise click.ClickException(
                        f"broker {broker_id} keeps receiving partitions (planned "
                        f"{DRAIN_ROUNDS_MAX} times)"
                    )
                rounds += 1
                _submit(admin, moves)
                submitted.update({(m.topic, m.partition): m for m in moves})
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"broker {broker_id} still holds {involved} partition(s) after "
                    f"{timeout_s:g} s (fluxctl partition reassignments shows the moves)"
                )
            # Also lets every broker's metadata show the moves just submitted before the next
            # look (a lagging one would make them look unplanned).
            time.sleep(DRAIN_POLL_S)
            current, involved = _holding(admin, broker_id)


def _reachable(address: tuple[str, int] | None) -> bool:
    if address is None:
        return False
    try:
        with socket.create_connection(address, timeout=REACHABLE_TIMEOUT_S):
            return True
    except OSError:
        return False


def _unregister(admin: Admin, broker_id: int, timeout_s: float) -> None:
    """UnregisterBroker, retried while the controller still counts the broker as running
    (its session has not ended yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.unregister_broker(broker_id)
            return
        except KafkaError as error:
            if error.code is not ErrorCode.INVALID_REQUEST or time.monotonic() > deadline:
                raise
        time.sleep(UNREGISTER_POLL_S)


def _preflight(admin: Admin, broker_id: int) -> bool:
    """The first UnregisterBroker: True if it already removed the broker (drained and
    stopped before); a refusal that draining cannot fix ends the command."""
    try:
        admin.unregister_broker(broker_id)
        return True
    except KafkaError as error:
        if error.code is ErrorCode.INVALID_REQUEST:
            return False  # holds replicas or still runs: what the next steps fix
        if error.code is ErrorCode.POLICY_VIOLATION:
            raise click.ClickException(str(error)) from None
        if error.code is ErrorCode.BROKER_ID_NOT_REGISTERED:
            raise click.ClickException(
                f"no broker {broker_id} is registered in this cluster (nothing to remove)"
            ) from None
        raise


def _admin_for(
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    state: dict[str, Any] | None,
) -> Admin:
    """An admin client: ``--bootstrap`` or the local cluster's running brokers; a secure local
    cluster's admin settings when no security option was given."""
    if bootstrap is None and state is not None:
        running = [e["kafka"] for e in state["nodes"] if e.get("kafka") and e.get("pid")]
        bootstrap = ",".join(running) or None
        record = state.get("security") if state.get("secure") else None
        if record and security.security_protocol == "PLAINTEXT":
            security = ClientSecurity.from_config(
                load_client_properties(record["client_properties"])
            )
    return Admin(
        resolve_bootstrap(bootstrap), client_id="fluxctl", timeout_s=timeout_s, security=security
    )


def retire_broker(
    admin: Admin,
    broker_id: int,
    *,
    stop: Callable[[], bool],
    drain_timeout_s: float,
    show_progress: bool = True,
    check: Callable[[bool, tuple[str, int] | None], None] | None = None,
) -> dict[str, Any]:
    """The steps every ``remove-node`` takes: refuse voters and unknown ids, ``check(already
    unregistered, the broker's Kafka address)`` (raises to refuse), drain, ``stop()`` (True if
    it stopped the node, False if the node is not ours to stop), and unregister the broker
    once it no longer answers. What was done: node, moves, drained, stopped, unregistered; a
    broker still running that ``stop`` could not stop is drained and left registered."""
    result: dict[str, Any] = {
        "node": broker_id,
        "moves": [],
        "drained": False,
        "stopped": False,
        "unregistered": False,
    }
    unregistered = _preflight(admin, broker_id)  # refuses voters and unknown ids
    brokers = {b.node_id: b for b in admin.describe_cluster().brokers}
    address = (brokers[broker_id].host, brokers[broker_id].port) if broker_id in brokers else None
    if check is not None:
        check(unregistered, address)
    if not unregistered:
        moves = drain(
            admin,
            broker_id,
            live=sorted(brokers),
            timeout_s=drain_timeout_s,
            show_progress=show_progress,
        )
        result["moves"] = [
            {"topic": m.topic, "partition": m.partition, "replicas": m.replicas, "target": m.target}
            for m in moves
        ]
    result["drained"] = True
    if stop():
        result["stopped"] = True
    elif not unregistered and _reachable(address):
        return result  # running, and not ours to stop
    if not unregistered:
        _unregister(admin, broker_id, UNREGISTER_WAIT_S)
    result["unregistered"] = True
    return result


def remove_node(
    admin: Admin,
    broker_id: int,
    *,
    root: Path | None,
    local_cluster: bool,
    drain_timeout_s: float,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Drain, stop (a local node of ``root``) and unregister broker ``broker_id`` (see the
    module docstring); what was done.

    The node recorded under ``broker_id`` in ``root``'s cluster state is taken as this broker
    (to stop its process) only if ``admin`` talks to that local cluster (``local_cluster``: no
    ``--bootstrap`` given) or the broker advertises the recorded Kafka address: a cluster
    reached with ``--bootstrap`` may have a broker of the same id that is not this process."""
    import flux.cli.main as cli

    state = cli._load_state(root) if root is not None else None
    recorded = next((e for e in (state or {}).get("nodes", []) if e["id"] == broker_id), None)
    entry: dict[str, Any] | None = None

    def check(unregistered: bool, address: tuple[str, int] | None) -> None:
        nonlocal entry
        entry = recorded
        if recorded is not None and not local_cluster:
            if address is None or f"{address[0]}:{address[1]}" != recorded.get("kafka"):
                entry = None
        if entry is not None and "controller" in entry.get("roles", []) and not unregistered:
            raise click.ClickException(
                f"node {broker_id} is a controller voter (roles: {', '.join(entry['roles'])}): "
                f"remove it from the quorum first (fluxctl controller remove {broker_id}); "
                "remove-node removes brokers"
            )

    def stop() -> bool:
        if entry is not None and cli._alive(entry):
            cli._terminate(entry)
            return True
        return False

    result = retire_broker(
        admin,
        broker_id,
        check=check,
        stop=stop,
        drain_timeout_s=drain_timeout_s,
        show_progress=show_progress,
    )
    if not result["unregistered"]:
        return result
    if entry is not None and root is not None:
        with cli._state_lock(root):
            state = cli._require_state(root)
            state["nodes"] = [e for e in state["nodes"] if e["id"] != broker_id]
            state["membership_changed"] = True
            cli._save_state(root, state)
    return result


# -- commands -------------------------------------------------------------------------------

_dir_option = click.option(
    "--data-dir",
    "cluster_dir",
    default=".flux/cluster",
    show_default=True,
    type=click.Path(file_okay=False),
    help="where configs, data and logs of the local cluster live",
)
_docker_option = click.option(
    "--docker", is_flag=True, help="the docker cluster of `fluxctl cluster up --docker`"
)
_project_option = click.option(
    "--project",
    default="flux",
    show_default=True,
    help="--docker: compose project name of the docker cluster",
)


@click.command("add-node")
@_dir_option
@click.option("--id", "node_id", type=click.IntRange(1, 2**31 - 1), help="default: the next id")
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for readiness")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@_docker_option
@_project_option
def add_node_command(
    cluster_dir: str,
    node_id: int | None,
    timeout: float,
    as_json: bool,
    docker: bool,
    project: str,
) -> None:
    """Start one more broker-only node that joins the local cluster (same voters, secret and
    security settings) and print its id and address; `fluxctl cluster rebalance` then moves
    partitions onto it.

    With --docker: a broker-only container in the docker cluster's compose project (same
    image, network and settings; its own volume and published ports). Refused for a --secure
    docker cluster (its certificate names only flux1..flux3)."""
    if docker:
        entry = _add_docker_node(cluster_dir, project, node_id=node_id, timeout_s=timeout)
        where = f"container {entry['container']}, internal {entry['internal_kafka']}"
    else:
        entry = add_node(Path(cluster_dir).resolve(), node_id=node_id, timeout_s=timeout)
        where = f"pid {entry['pid']}"
    if as_json:
        click.echo(json.dumps({"added": entry["id"], **entry}))
        return
    click.echo(
        f"node {entry['id']} (broker) is up: Kafka {entry['kafka']}, HTTP {entry['broker_http']}, "
        f"{where}"
    )
    click.echo("it holds no partitions yet: run `fluxctl cluster rebalance --wait` to move some")


@click.command("remove-node")
@click.argument("broker_id", metavar="N", type=int)
@_dir_option
@click.option(
    "--drain-timeout",
    "drain_timeout_s",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="seconds the replicas may take to move off the broker",
)
@_docker_option
@_project_option
@client_options
@json_option
def remove_node_command(
    broker_id: int,
    cluster_dir: str,
    drain_timeout_s: float,
    docker: bool,
    project: str,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Drain broker N (move every replica and leadership off it, with a progress bar), stop it
    if it is a node of the local cluster, and unregister it. Refuses a controller voter and a
    removal that would leave a topic with fewer live brokers than its replication factor.

    With --docker: the same in the docker cluster; a broker container that `add-node --docker`
    started is stopped and removed with its volume once drained."""
    import flux.cli.main as cli

    root = Path(cluster_dir).resolve()
    if docker:
        result = _remove_docker_node(
            cluster_dir,
            project,
            broker_id,
            bootstrap=bootstrap,
            timeout_s=timeout_s,
            security=security,
            drain_timeout_s=drain_timeout_s,
            show_progress=not as_json,
        )
        where = f"docker cluster {project!r}"
    else:
        state = cli._load_state(root)
        with sdk_errors(), _admin_for(bootstrap, timeout_s, security, state) as admin:
            result = remove_node(
                admin,
                broker_id,
                root=root if state is not None else None,
                local_cluster=state is not None and bootstrap is None,
                drain_timeout_s=drain_timeout_s,
                show_progress=not as_json,
            )
        where = f"local cluster in {root}"
    if as_json:
        click.echo(json.dumps(result))
        return
    moved = len(result["moves"])
    click.echo(f"broker {broker_id}: {moved} partition(s) moved off it")
    if result["unregistered"]:
        stopped = "stopped and " if result["stopped"] else ""
        click.echo(f"broker {broker_id} {stopped}unregistered: it is no longer in the cluster")
    else:
        click.echo(
            f"broker {broker_id} is drained but still running, and it is not a node fluxctl "
            f"started in the {where}: stop its process, then run `fluxctl cluster remove-node "
            f"{broker_id}` again to unregister it"
        )


def _add_docker_node(
    cluster_dir: str, project: str, *, node_id: int | None, timeout_s: float
) -> dict[str, Any]:
    import flux.cli.main as cli
    from flux.cli.docker_nodes import add_docker_node

    with cli._docker_errors(), sdk_errors(), _docker_api_errors():
        return add_docker_node(
            cli._docker_cluster(cluster_dir, project), node_id=node_id, timeout_s=timeout_s
        )


def _remove_docker_node(
    cluster_dir: str,
    project: str,
    broker_id: int,
    *,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    drain_timeout_s: float,
    show_progress: bool,
) -> dict[str, Any]:
    import flux.cli.main as cli
    from flux.cli.docker_nodes import docker_admin, remove_docker_node

    with cli._docker_errors(), sdk_errors(), _docker_api_errors():
        cluster = cli._docker_cluster(cluster_dir, project)
        with docker_admin(cluster, bootstrap, timeout_s, security) as admin:
            return remove_docker_node(
                admin,
                cluster,
                broker_id,
                drain_timeout_s=drain_timeout_s,
                show_progress=show_progress,
            )


@contextmanager
def _docker_api_errors() -> Iterator[None]:
    """An error of the Docker engine (e.g. a port taken meanwhile) ends the command with its
    message, as ``DockerError`` does."""
    from docker.errors import DockerException

    try:
        yield
    except DockerException as error:
        raise click.ClickException(f"docker: {error}") from None
