"""``fluxctl topic``: create, list, describe, delete and grow topics.

fluxctl topic create orders --partitions 3 --replication-factor 1 --config retention.ms=3600000
fluxctl topic list [--internal] [--json]
fluxctl topic describe orders [--json]
fluxctl topic add-partitions orders --total 6
fluxctl topic delete orders

Every command takes ``--bootstrap`` (env ``FLUX_BOOTSTRAP``; default: the local cluster of
``fluxctl cluster up``), ``--timeout`` and the security options (``--security-protocol``,
``--sasl-*``, ``--ssl-*``, ``--client-config``; see ``flux.cli._sdk``). Broker errors print ``Error: <message>`` and exit 1.

JSON shapes (stable keys): ``list`` -> ``{"topics": [name, ...]}``; ``describe`` and
``create`` -> ``{"name", "topic_id", "internal", "partitions": [{"partition", "leader",
"leader_epoch", "replicas", "isr", "offline_replicas"}], "configs": {key: value}}`` where
``configs`` holds the values set on the topic (not the defaults); ``alter-config`` ->
``{"name", "set": {key: value}, "deleted": [key, ...], "validate_only", "configs": {key:
value}}`` with ``configs`` as the broker reports them after the change.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click
from flux.sdk.admin import Admin, TopicDescription
from flux.sdk.errors import FluxError
from flux.sdk.security import ClientSecurity

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors

__all__ = ["topic"]


@click.group()
def topic() -> None:
    """Create, list, describe, reconfigure, grow and delete topics."""


def _admin(bootstrap: str | None, timeout_s: float, security: ClientSecurity) -> Admin:
    return Admin(
        resolve_bootstrap(bootstrap), client_id="fluxctl", timeout_s=timeout_s, security=security
    )


def _parse_configs(pairs: tuple[str, ...], option: str = "--config") -> dict[str, str]:
    configs: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f"{option} expects KEY=VALUE, got {pair!r}")
        configs[key.strip()] = value
    return configs


def _topic_json(
    description: TopicDescription, configs: dict[str, str], offsets: _Offsets | None = None
) -> dict[str, Any]:
    partitions = []
    for partition in description.partitions:
        entry = asdict(partition)
        if offsets is not None:
            entry.update(offsets.for_partition(partition.partition, partition.leader))
        partitions.append(entry)
    return {
        "name": description.name,
        "topic_id": str(description.topic_id),
        "internal": description.internal,
        "partitions": partitions,
        "configs": configs,
    }


class _Offsets:
    """High watermarks (from leaders) and every replica's log end offset (from each replica).

    A replica's lag is how many offsets it is behind its leader's log end."""

    def __init__(self, admin: Admin, name: str) -> None:
        try:
            self.high_watermarks: dict[int, int] = admin.high_watermarks(name)
        except FluxError:
            self.high_watermarks = {}
        self.log_ends = admin.replica_log_end_offsets(name)

    def for_partition(self, partition: int, leader: int) -> dict[str, Any]:
        ends = self.log_ends.get(partition, {})
        leader_end = ends.get(leader)
        return {
            "high_watermark": self.high_watermarks.get(partition),
            "replica_log_end_offsets": {str(r): end for r, end in ends.items()},
            "replica_lag": {
                str(r): (leader_end - end if leader_end is not None and end is not None else None)
                for r, end in ends.items()
            },
        }


def _overrides(admin: Admin, name: str) -> dict[str, str]:
    return {
        key: entry.value or ""
        for key, entry in admin.describe_configs(name).items()
        if not entry.is_default
    }


def _emit_json(data: Any) -> None:
    import json

    click.echo(json.dumps(data, indent=2, sort_keys=False))


@topic.command("create")
@click.argument("name")
@click.option(
    "--partitions", "-p", type=int, default=-1, help="partition count [default: the broker's]"
)
@click.option(
    "--replication-factor",
    "-r",
    type=int,
    default=-1,
    help="replicas per partition [default: the broker's]",
)
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE")
@click.option("--validate-only", is_flag=True, help="check the request without creating")
@client_options
@json_option
def create(
    name: str,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
    validate_only: bool,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Create topic NAME."""
    config_map = _parse_configs(configs)
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        description = admin.create_topic(
            name,
            partitions=partitions,
            replication_factor=replication_factor,
            configs=config_map,
            validate_only=validate_only,
        )
    if as_json:
        _emit_json(_topic_json(description, config_map))
        return
    verb = "Validated" if validate_only else "Created"
    click.echo(f"{verb} topic {name} with {len(description.partitions)} partitions")


@topic.command("list")
@click.option("--internal", is_flag=True, help="include internal topics")
@client_options
@json_option
def list_(
    internal: bool, bootstrap: str | None, timeout_s: float, security: ClientSecurity, as_json: bool
) -> None:
    """List topic names."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        names = admin.list_topics(include_internal=internal)
    if as_json:
        _emit_json({"topics": names})
        return
    for name in names:
        click.echo(name)


@topic.command("describe")
@click.argument("name")
@click.option(
    "--http",
    "http_address",
    envvar="FLUX_HTTP",
    metavar="HOST:PORT",
    help="a broker's HTTP address, to show the log cleaner's state of a compacted topic "
    "(default: the local cluster's)",
)
@client_options
@json_option
def describe(
    name: str,
    http_address: str | None,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Show NAME's partitions (leader, leader epoch, replicas, ISR, offline) and configs; for a
    compacted topic also each replica's dirty ratio and last clean."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        description = admin.describe_topic(name)
        configs = _overrides(admin, name)
        offsets = _Offsets(admin, name)
        compacted = "compact" in admin.describe_configs(name)["cleanup.policy"].value
    cleaner = _cleaner_states(name, http_address, timeout_s) if compacted else None
    if as_json:
        data = _topic_json(description, configs, offsets)
        if cleaner is not None:
            for entry in data["partitions"]:
                entry["cleaner"] = cleaner.get(entry["partition"], {})
        _emit_json(data)
        return
    _print_description(description, configs, offsets, cleaner)


#: Partition -> {broker id -> that replica's cleaner state}.
_CleanerStates = dict[int, dict[str, dict[str, Any]]]


def _cleaner_states(name: str, http_address: str | None, timeout_s: float) -> _CleanerStates:
    """Each replica's cleaner state, from every broker's ``GET /topics/NAME`` (the brokers'
    HTTP addresses from ``GET /cluster`` of the one given). Empty when no HTTP address is
    known or a broker does not answer (its replicas are left out)."""
    import json
    import urllib.error
    import urllib.request

    from ._bootstrap import default_broker_http

    address = http_address or default_broker_http()
    if not address:
        return {}

    def get(where: str, path: str) -> Any:
        with urllib.request.urlopen(f"http://{where}{path}", timeout=timeout_s) as reply:
            return json.loads(reply.read())

    states: _CleanerStates = {}
    try:
        brokers = [b["http"] for b in get(address, "/cluster")["brokers"] if not b["fenced"]]
    except (OSError, ValueError, KeyError, urllib.error.URLError):
        return {}
    for broker in brokers:
        try:
            partitions = get(broker, f"/topics/{name}")["partitions"]
        except (OSError, ValueError, KeyError, urllib.error.URLError):
            continue
        for partition in partitions:
            state = partition.get("cleaner")
            if state:
                states.setdefault(partition["partition"], {})[str(state["broker"])] = state
    return states


def _cleaner_cells(states: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """'dirty ratio' and 'last clean' cells: one ``broker:value`` per replica."""
    import time

    now_ms = time.time() * 1000
    ratios = []
    cleans = []
    for broker, state in sorted(states.items()):
        ratio = state.get("dirty_ratio")
        ratios.append(f"{broker}:{ratio:.2f}" if ratio is not None else f"{broker}:?")
        last = state.get("last_clean_ms", -1)
        cleans.append(
            f"{broker}:{(now_ms - last) / 1000:.0f}s ago" if last > 0 else f"{broker}:never"
        )
    return " ".join(ratios) or "-", " ".join(cleans) or "-"


def _print_description(
    description: TopicDescription,
    configs: dict[str, str],
    offsets: _Offsets,
    cleaner: _CleanerStates | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    def ids(nodes: list[int]) -> str:
        return ",".join(str(node) for node in nodes) or "-"

    table = Table(
        title=f"Topic {description.name}",
        caption=f"id {description.topic_id}" + ("  (internal)" if description.internal else ""),
    )
    columns = (
        "partition",
        "leader",
        "leader epoch",
        "replicas",
        "isr",
        "offline",
        "high watermark",
        "log end (lag) per replica",
    ) + (("dirty ratio", "last clean") if cleaner is not None else ())
    for column in columns:
        left = column in ("replicas", "log end (lag) per replica", "dirty ratio", "last clean")
        table.add_column(column, justify="left" if left else "right")
    for partition in description.partitions:
        info = offsets.for_partition(partition.partition, partition.leader)
        ends = " ".join(
            f"{replica}:{end if end is not None else '?'}"
            + (f"({info['replica_lag'][replica]})" if info["replica_lag"][replica] else "")
            for replica, end in info["replica_log_end_offsets"].items()
        )
        high_watermark = info["high_watermark"]
        extra = _cleaner_cells(cleaner.get(partition.partition, {})) if cleaner is not None else ()
        table.add_row(
            str(partition.partition),
            str(partition.leader) if partition.leader >= 0 else "none",
            str(partition.leader_epoch),
            ids(partition.replicas),
            ids(partition.isr),
            ids(partition.offline_replicas),
            str(high_watermark) if high_watermark is not None else "-",
            ends or "-",
            *extra,
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped output: whole headers, no wrapping at 80 columns
    console.print(table)
    if cleaner == {}:
        console.print("log cleaner: pass --http HOST:PORT (a broker's HTTP address) to see it")
    if configs:
        console.print(
            "configs: " + ", ".join(f"{key}={value}" for key, value in sorted(configs.items()))
        )


@topic.command("alter-config")
@click.argument("name")
@click.option(
    "--set",
    "-s",
    "to_set",
    multiple=True,
    metavar="KEY=VALUE",
    help="set a config override (repeatable)",
)
@click.option(
    "--delete",
    "-d",
    "to_delete",
    multiple=True,
    metavar="KEY",
    help="delete an override: the key goes back to the broker's default (repeatable)",
)
@click.option("--validate-only", is_flag=True, help="check the change without making it")
@client_options
@json_option
def alter_config(
    name: str,
    to_set: tuple[str, ...],
    to_delete: tuple[str, ...],
    validate_only: bool,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Set and delete config overrides of topic NAME; the others stay as they are.

    All or nothing: an unknown key or a bad value changes nothing. Replicas apply the change
    without a restart."""
    changes = _parse_configs(to_set, "--set")
    deleted = [key.strip() for key in to_delete]
    if not changes and not deleted:
        raise click.UsageError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    both = sorted(set(changes) & set(deleted))
    if both:
        raise click.UsageError(f"{', '.join(both)}: both --set and --delete")
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        admin.alter_topic_configs(name, set=changes, delete=deleted, validate_only=validate_only)
        configs = _overrides(admin, name) if as_json else {}
    if as_json:
        _emit_json(
            {
                "name": name,
                "set": changes,
                "deleted": deleted,
                "validate_only": validate_only,
                "configs": configs,
            }
        )
        return
    done = [f"set {key}={value}" for key, value in changes.items()]
    done += [f"deleted {key}" for key in deleted]
    verb = "Validated" if validate_only else "Altered"
    click.echo(f"{verb} configs of topic {name}: {', '.join(done)}")


@topic.command("add-partitions")
@click.argument("name")
@click.option("--total", required=True, type=int, help="the new partition count")
@client_options
def add_partitions(
    name: str, total: int, bootstrap: str | None, timeout_s: float, security: ClientSecurity
) -> None:
    """Grow NAME to --total partitions (existing keys may move to other partitions)."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        admin.create_partitions(name, total)
    click.echo(f"Topic {name} now has {total} partitions")


@topic.command("delete")
@click.argument("name")
@client_options
def delete(name: str, bootstrap: str | None, timeout_s: float, security: ClientSecurity) -> None:
    """Delete topic NAME and its data."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        admin.delete_topic(name)
    click.echo(f"Deleted topic {name}")
