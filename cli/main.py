"""``fluxctl``: run Flux nodes and local clusters.

fluxctl node start --config node.toml        run one node in the foreground
fluxctl node start --data-dir d --kafka-port 9092   the same without a file
fluxctl cluster up [--nodes 1]              start a local cluster in the background
fluxctl cluster status | down | kill N | restart N
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click
from flux.cluster.config import ConfigError, load_config
from flux.cluster.launcher import NodeProcess, NodeStartError, write_node_config

__all__ = ["main"]

DEFAULT_CLUSTER_DIR = ".flux/cluster"
STATE_FILE = "cluster.json"
DEFAULT_KAFKA_PORT = 9092


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
    """Run a local cluster of node processes (no Docker needed)."""


_dir_option = click.option(
    "--dir",
    "cluster_dir",
    default=DEFAULT_CLUSTER_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="where configs, data and logs of the local cluster live",
)


@cluster.command("up")
@_dir_option
@click.option("--nodes", default=1, show_default=True, type=click.IntRange(1, 9))
@click.option(
    "--kafka-port",
    default=DEFAULT_KAFKA_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Kafka port of node 1 (node N gets this + N - 1); 0 picks free ports",
)
@click.option("--timeout", default=60.0, show_default=True, help="seconds to wait for readiness")
def cluster_up(cluster_dir: str, nodes: int, kafka_port: int, timeout: float) -> None:
    """Start the cluster in the background, wait until it serves, print its addresses as JSON."""
    root = Path(cluster_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    state = _load_state(root)
    if state and any(_alive(entry) for entry in state["nodes"]):
        click.echo(json.dumps(_status(state), indent=2))
        click.echo("cluster already running (fluxctl cluster down stops it)", err=True)
        return
    processes = []
    for node_id in range(1, nodes + 1):
        node_dir = root / f"node-{node_id}"
        node_dir.mkdir(exist_ok=True)
        config_path = node_dir / "node.toml"
        if not config_path.exists():
            write_node_config(
                config_path,
                {
                    "node": {
                        "id": node_id,
                        "roles": ["broker"],
                        "data_dir": str(node_dir / "data"),
                    },
                    "broker": {"kafka_port": kafka_port + node_id - 1 if kafka_port else 0},
                },
            )
        processes.append(_process(node_id, node_dir))
    for process in processes:
        process.start()
    entries = []
    try:
        for process in processes:
            process.wait_ready(timeout)
            entries.append(_entry(process))
    except NodeStartError as error:
        for process in processes:
            process.stop()
        raise click.ClickException(str(error)) from None
    state = {"dir": str(root), "nodes": entries}
    (root / STATE_FILE).write_text(json.dumps(state, indent=2))
    click.echo(json.dumps(_status(state), indent=2))


@cluster.command("status")
@_dir_option
def cluster_status(cluster_dir: str) -> None:
    """Print each node's pid, address and whether it runs, as JSON."""
    state = _require_state(Path(cluster_dir).resolve())
    click.echo(json.dumps(_status(state), indent=2))


@cluster.command("down")
@_dir_option
def cluster_down(cluster_dir: str) -> None:
    """Stop every node (SIGTERM, then SIGKILL after 15 s)."""
    root = Path(cluster_dir).resolve()
    state = _load_state(root)
    if not state:
        click.echo("no cluster is running", err=True)
        return
    for entry in state["nodes"]:
        _terminate(entry)
    (root / STATE_FILE).unlink(missing_ok=True)
    click.echo(json.dumps({"stopped": [entry["id"] for entry in state["nodes"]]}))


@cluster.command("kill")
@_dir_option
@click.argument("node_id", type=int)
def cluster_kill(cluster_dir: str, node_id: int) -> None:
    """SIGKILL one node (a crash)."""
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
def cluster_restart(cluster_dir: str, node_id: int, timeout: float) -> None:
    """Stop one node (if running) and start it again with the same config and data."""
    root = Path(cluster_dir).resolve()
    state = _require_state(root)
    entry = _find(state, node_id)
    _terminate(entry)
    process = _process(node_id, root / f"node-{node_id}")
    process.start()
    try:
        process.wait_ready(timeout)
    except NodeStartError as error:
        raise click.ClickException(str(error)) from None
    entry.update(_entry(process))
    (root / STATE_FILE).write_text(json.dumps(state, indent=2))
    click.echo(json.dumps(_status(state), indent=2))


def _process(node_id: int, node_dir: Path) -> NodeProcess:
    return NodeProcess(
        node_id=node_id,
        config_path=node_dir / "node.toml",
        data_dir=node_dir / "data",
        log_path=node_dir / "node.log",
    )


def _entry(process: NodeProcess) -> dict[str, Any]:
    return {
        "id": process.node_id,
        "pid": process.pid,
        "bootstrap": process.bootstrap_servers,
        "config": str(process.config_path),
        "data_dir": str(process.data_dir),
        "log": str(process.log_path),
    }


def _status(state: dict[str, Any]) -> dict[str, Any]:
    nodes = [{**entry, "running": _alive(entry)} for entry in state["nodes"]]
    return {
        "bootstrap_servers": ",".join(entry["bootstrap"] for entry in nodes if entry["running"]),
        "nodes": nodes,
    }


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
    raise click.ClickException(f"no node {node_id} in this cluster")


def _alive(entry: dict[str, Any]) -> bool:
    """True if the recorded pid runs and is still the node that wrote the ready file."""
    pid = entry.get("pid")
    if not pid or not _pid_alive(pid):
        return False
    try:
        ready = json.loads((Path(entry["data_dir"]) / "ready.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return _cmdline_is_node(pid)
    return ready.get("pid") == pid


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


if __name__ == "__main__":
    sys.exit(main())
