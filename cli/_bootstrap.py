"""Where fluxctl's client commands find the cluster when ``--bootstrap`` is not given."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_CLUSTER_DIR",
    "LOCAL_CLUSTER_STATE",
    "cluster_dir_option",
    "default_bootstrap",
    "default_broker_http",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
#: Where ``fluxctl cluster up`` keeps a local cluster, relative to the working directory.
DEFAULT_CLUSTER_DIR = ".flux/cluster"
#: The state file ``fluxctl cluster up`` writes there.
LOCAL_CLUSTER_STATE = Path(DEFAULT_CLUSTER_DIR) / "cluster.json"


def cluster_dir_option(help_text: str) -> Callable[[Any], Any]:
    """``--data-dir`` (parameter ``cluster_dir``): a local cluster's directory."""
    return click.option(
        "--data-dir",
        "cluster_dir",
        default=DEFAULT_CLUSTER_DIR,
        show_default=True,
        type=click.Path(file_okay=False),
        help=help_text,
    )


def default_bootstrap(state_path: Path | str | None = None) -> str:
    """The bootstrap servers of the local cluster ``fluxctl cluster up`` started, else
    ``127.0.0.1:9092``.

    Reads ``state_path`` (default ``.flux/cluster/cluster.json``): its top-level
    ``bootstrap_servers`` if present, else each node's Kafka address (``"kafka"``, or
    ``"bootstrap"`` in the older format) joined with commas. Nodes recorded without a pid
    (stopped by ``cluster down``) are skipped.
    """
    path = Path(state_path) if state_path is not None else LOCAL_CLUSTER_STATE
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return DEFAULT_BOOTSTRAP
    if not isinstance(state, dict):
        return DEFAULT_BOOTSTRAP
    servers = state.get("bootstrap_servers")
    if isinstance(servers, str) and servers:
        return servers
    addresses = []
    for node in state.get("nodes") or []:
        if not isinstance(node, dict) or ("pid" in node and not _alive(node["pid"])):
            continue
        address = node.get("kafka") or node.get("bootstrap")
        if isinstance(address, str) and address:
            addresses.append(address)
    return ",".join(addresses) or DEFAULT_BOOTSTRAP


def default_broker_http(state_path: Path | str | None = None) -> str | None:
    """The HTTP address of a running broker of the local cluster ``fluxctl cluster up``
    started (its ``broker_http``), else None."""
    path = Path(state_path) if state_path is not None else LOCAL_CLUSTER_STATE
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for node in (state.get("nodes") or []) if isinstance(state, dict) else []:
        if not isinstance(node, dict) or ("pid" in node and not _alive(node["pid"])):
            continue
        address = node.get("broker_http")
        if isinstance(address, str) and address:
            return address
    return None


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
