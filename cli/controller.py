"""``fluxctl controller``: the controller quorum's voters.

fluxctl controller status [--json]                            every controller's view
fluxctl controller add --id N --raft HOST:PORT --http HOST:PORT  add a voter
fluxctl controller remove N                                   remove a voter

A change goes to the active controller (the others answer with a leader hint, followed here)
and is made one voter at a time: ``flux.controller.quorum_changes`` and
``docs/operations.md`` ("Changing the controller quorum") say how. The controller to add must
already run, started with every current voter and itself in its ``controller.voters``.

Where the controllers are: ``--controller HOST:PORT`` (controller HTTP addresses, repeatable
or comma-separated); else the voters of ``--config node.toml``; else the local cluster of
``fluxctl cluster up`` (``--data-dir``). A node config also gives the cluster's internal
security (HTTPS verified with its CA, and the node credential a secured cluster's controllers
require); ``--controller`` without ``--config`` speaks plain HTTP.

JSON shapes: ``add`` / ``remove`` -> the active controller's answer ``{"error_code",
"error_message", "voters": [{"node_id", "raft_address", "http_address"}], "members": [raft
addresses]}``; ``status --json`` -> ``{"voters": [...], "controllers": [{"http_address",
"status" or "error"}]}``.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from flux.controller.membership import MAX_NODE_ID, MembershipRefused, parse_address

from ._bootstrap import cluster_dir_option

__all__ = ["controller"]

#: One HTTP request to a controller gives up after this long (a change retries until
#: ``--timeout``); adding waits for the new voter to catch up, so it may take a while.
REQUEST_TIMEOUT_S = 60.0
STATUS_TIMEOUT_S = 3.0
RETRY_PAUSE_S = 0.2


@dataclass
class _Controllers:
    """Where the controllers are and how to call them."""

    addresses: list[str]
    scheme: str = "http"
    ssl_context: ssl.SSLContext | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def call(
        self, method: str, address: str, path: str, body: Any = None, timeout_s: float = 5.0
    ) -> tuple[int, Any]:
        """(HTTP status, JSON answer); (0, reason) when the controller did not answer."""
        request = urllib.request.Request(
            f"{self.scheme}://{address}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json", **self.headers},
        )
        try:
            with urllib.request.urlopen(
                request, timeout=timeout_s, context=self.ssl_context
            ) as reply:
                return reply.status, json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as error:
            try:
                return error.code, json.loads(error.read() or b"null")
            except ValueError:
                return error.code, {"error_message": f"HTTP {error.code} {error.reason}"}
        except (OSError, ValueError) as error:
            return 0, {"error_message": str(getattr(error, "reason", error))}


def _split(values: tuple[str, ...]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _from_config(config_path: Path, addresses: list[str]) -> _Controllers:
    from flux.cluster.config import ConfigError, load_config
    from flux.cluster.internal_security import InternalSecurity

    try:
        config = load_config(config_path)
    except (ConfigError, OSError) as error:
        raise click.ClickException(f"cannot read {config_path}: {error}") from None
    internal = InternalSecurity.from_config(config)
    return _Controllers(
        addresses=addresses or [voter.http_address for voter in config.controller.voters],
        scheme=internal.scheme,
        ssl_context=internal.client_ssl,
        headers=internal.headers,
    )


def _resolve(
    controllers: tuple[str, ...], config_path: str | None, cluster_dir: str
) -> _Controllers:
    addresses = _split(controllers)
    for address in addresses:
        _check_address(address, "--controller")
    if config_path is not None:
        return _from_config(Path(config_path), addresses)
    if addresses:
        return _Controllers(addresses)
    state_path = Path(cluster_dir) / "cluster.json"
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        raise click.UsageError(
            f"no controller given and no local cluster in {cluster_dir}: use --controller "
            "HOST:PORT (a controller's HTTP address) or --config node.toml"
        ) from None
    nodes = [n for n in state.get("nodes", []) if isinstance(n, dict)]
    http = [n["http"] for n in nodes if n.get("http")]
    config_files = [Path(n["config"]) for n in nodes if n.get("config")]
    existing = [path for path in config_files if path.exists()]
    if existing:
        found = _from_config(existing[0], [])
        found.addresses = list(dict.fromkeys([*http, *found.addresses]))
        return found
    if not http:
        raise click.ClickException(f"the local cluster in {cluster_dir} has no controller")
    return _Controllers(http)


def _check_address(text: str, option: str) -> None:
    try:
        parse_address(text, option)
    except MembershipRefused as error:
        raise click.BadParameter(error.message, param_hint=option) from None


def _change(
    controllers: _Controllers, method: str, path: str, body: Any, timeout_s: float
) -> dict[str, Any]:
    """Send a change to the active controller: follow leader hints, retry while no controller
    is active or a commit timed out (a change is safe to retry); the answer."""
    deadline = time.monotonic() + timeout_s
    candidates = list(controllers.addresses)
    last_problem = "no controller answered"
    hint: str | None = None
    while True:
        for address in [hint] if hint else candidates:
            remaining = max(deadline - time.monotonic(), 1.0)
            status, answer = controllers.call(
                method, address, path, body, timeout_s=min(REQUEST_TIMEOUT_S, remaining)
            )
            answer = answer if isinstance(answer, dict) else {}
            if status == 421:
                next_hint = answer.get("leader_http")
                last_problem = f"{address}: {answer.get('error_message')}"
                if next_hint and next_hint not in candidates:
                    candidates.append(next_hint)
                hint = next_hint if next_hint and next_hint != address else None
                break
            if status == 0 or status >= 500:
                last_problem = f"{address}: {answer.get('error_message') or status}"
                hint = None
                continue
            return answer
        else:
            hint = None
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"no active controller completed the change in {timeout_s:g} s "
                f"(last answer: {last_problem})"
            )
        time.sleep(RETRY_PAUSE_S)


def _finish(answer: dict[str, Any], as_json: bool, done: str) -> None:
    if as_json:
        click.echo(json.dumps(answer, indent=2))
    if answer.get("error_code"):
        raise click.ClickException(str(answer.get("error_message") or answer["error_code"]))
    if not as_json:
        click.echo(done)
        _print_voters(answer.get("voters", []))


def _print_voters(voters: list[dict[str, Any]]) -> None:
    for voter in voters:
        click.echo(
            f"  voter {voter['node_id']}: raft {voter['raft_address']}, "
            f"http {voter['http_address']}"
        )


_controller_option = click.option(
    "--controller",
    "controllers",
    multiple=True,
    metavar="HOST:PORT",
    help="a controller's HTTP address (repeatable or comma-separated)",
)
_config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, exists=True),
    help="a node config: its voters and the cluster's internal security",
)
_dir_option = cluster_dir_option(
    "the local cluster of fluxctl cluster up (when neither of the above is given)"
)
_timeout_option = click.option(
    "--timeout", default=90.0, show_default=True, help="seconds to wait for the change"
)
_json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")


@click.group()
def controller() -> None:
    """The controller quorum: status, add a voter, remove a voter."""


@controller.command("add")
@click.option("--id", "node_id", required=True, type=click.IntRange(0, MAX_NODE_ID))
@click.option("--raft", "raft_address", required=True, metavar="HOST:PORT", help="its Raft address")
@click.option(
    "--http", "http_address", required=True, metavar="HOST:PORT", help="its controller HTTP address"
)
@_controller_option
@_config_option
@_dir_option
@_timeout_option
@_json_option
def controller_add(
    node_id: int,
    raft_address: str,
    http_address: str,
    controllers: tuple[str, ...],
    config_path: str | None,
    cluster_dir: str,
    timeout: float,
    as_json: bool,
) -> None:
    """Add controller N as a voter. It must run already, started with every current voter
    and itself in controller.voters; the change completes once it has caught up."""
    _check_address(raft_address, "--raft")
    _check_address(http_address, "--http")
    target = _resolve(controllers, config_path, cluster_dir)
    body = {"node_id": node_id, "raft_address": raft_address, "http_address": http_address}
    answer = _change(target, "POST", "/controller/quorum/voters", body, timeout)
    _finish(answer, as_json, f"controller {node_id} is a voter")


@controller.command("remove")
@click.argument("node_id", type=click.IntRange(0, MAX_NODE_ID))
@_controller_option
@_config_option
@_dir_option
@_timeout_option
@_json_option
def controller_remove(
    node_id: int,
    controllers: tuple[str, ...],
    config_path: str | None,
    cluster_dir: str,
    timeout: float,
    as_json: bool,
) -> None:
    """Remove voter N (the active controller first hands leadership to another voter). Stop
    its process afterwards, or keep it as a broker: it no longer takes part in the quorum."""
    target = _resolve(controllers, config_path, cluster_dir)
    answer = _change(target, "DELETE", f"/controller/quorum/voters/{node_id}", None, timeout)
    _finish(answer, as_json, f"controller {node_id} is no longer a voter")


@controller.command("status")
@_controller_option
@_config_option
@_dir_option
@_json_option
def controller_status(
    controllers: tuple[str, ...], config_path: str | None, cluster_dir: str, as_json: bool
) -> None:
    """Every controller's view: active or standby, Raft members, the voters it knows of."""
    target = _resolve(controllers, config_path, cluster_dir)
    rows, voters = _statuses(target)
    if as_json:
        click.echo(json.dumps({"voters": voters, "controllers": rows}, indent=2))
        return
    click.echo("voters:")
    _print_voters(voters)
    for row in rows:
        status = row.get("status")
        if status is None:
            click.echo(f"{row['http_address']}: not answering ({row['error']})")
            continue
        raft = status.get("raft") or {}
        click.echo(
            f"{row['http_address']}: controller {status.get('node_id')} "
            f"{'active' if status.get('active') else 'standby'}, leader "
            f"{status.get('leader_id')}, metadata version {status.get('version')}, "
            f"raft members {', '.join(raft.get('members') or [])}"
        )


def _statuses(target: _Controllers) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each controller's status, asking also the voters the answers name; the voters as the
    active controller (else the most recent answer) sees them."""
    pending = list(dict.fromkeys(target.addresses))
    asked: set[str] = set()
    rows: list[dict[str, Any]] = []
    best: tuple[bool, int] | None = None
    voters: list[dict[str, Any]] = []
    while pending:
        address = pending.pop(0)
        if address in asked:
            continue
        asked.add(address)
        code, answer = target.call("GET", address, "/controller/status", timeout_s=STATUS_TIMEOUT_S)
        if code != 200 or not isinstance(answer, dict):
            reason = answer.get("error_message") if isinstance(answer, dict) else answer
            rows.append({"http_address": address, "error": reason or f"HTTP {code}"})
            continue
        rows.append({"http_address": address, "status": answer})
        rank = (bool(answer.get("active")), int(answer.get("version") or 0))
        if best is None or rank > best:
            best, voters = rank, list(answer.get("voters") or [])
        pending.extend(
            v["http_address"] for v in answer.get("voters") or [] if v.get("http_address")
        )
    return rows, voters
