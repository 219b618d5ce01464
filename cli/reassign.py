"""``fluxctl partition`` and ``fluxctl cluster rebalance``: move partitions between brokers.

fluxctl partition reassign --plan FILE [--wait]     Kafka's reassignment JSON
fluxctl partition reassignments [--json]            the running ones
fluxctl partition cancel TOPIC PARTITION            cancel one
fluxctl cluster rebalance [--dry-run] [--exclude N ...] [--no-bytes] [--throttle 50MB] [--wait]
                          [--json]
fluxctl cluster throttle [RATE | --clear]           the reassignment throttle

The plan file is Kafka's (``kafka-reassign-partitions.sh``): ``{"version": 1, "partitions":
[{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}, ...]}`` (a null ``replicas`` cancels).
``rebalance`` computes such a plan with ``flux.controller.rebalance.plan_moves`` from the
cluster's metadata (replicas, preferred leaders and bytes evened out over the live brokers,
each partition spread over as many racks as it can; ``--exclude`` drains brokers), with each
partition's size from DescribeLogDirs (the largest of its replicas; ``--no-bytes`` skips it and
weighs every replica the same), prints it as a table with the bytes each move copies, and
unless ``--dry-run`` submits it;
``--wait`` follows the reassignments with a progress bar until none runs. Every command takes
``--bootstrap`` and the client options of the other client commands (``flux.cli._sdk``).

``--throttle RATE`` (bytes per second: ``52428800``, ``50MB``, ``500KB``; decimal units, as
Kafka's ``--throttle`` takes a plain number) sets the cluster-wide dynamic broker config
``leader.replication.throttled.rate`` before the moves are submitted: what replicas being added
copy from their leaders is capped at that rate, while in-sync followers are never throttled
(``flux.cluster.replication.throttle``). With ``--wait`` the throttle is removed once every
reassignment completed (what ``kafka-reassign-partitions.sh --verify`` does); without it, it
stays until ``fluxctl cluster throttle --clear``.

JSON shapes: ``reassignments`` -> ``{"reassignments": [{"topic", "partition", "replicas",
"adding", "removing"}]}``; ``rebalance --json`` / ``reassign --json`` -> ``{"moves":
[{"topic", "partition", "replicas", "target"}], "errors": {"topic-partition": message}}``
(``rebalance`` without ``--no-bytes`` adds ``"bytes"`` to each move: what it copies).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from flux.controller.rebalance import Move, bytes_to_copy, plan_moves
from flux.sdk.admin import Admin
from flux.sdk.security import ClientSecurity

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors

__all__ = ["partition", "rebalance", "throttle"]

THROTTLE_KEY = "leader.replication.throttled.rate"
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}


def parse_rate(text: str) -> int:
    """Bytes per second from ``52428800``, ``50MB``, ``512KiB`` (a trailing ``/s`` is allowed)."""
    raw = text.strip().upper().removesuffix("/S")
    number = raw.rstrip("KMGIB")
    unit = raw[len(number) :]
    try:
        value = float(number) * _UNITS[unit]
    except (KeyError, ValueError):
        raise click.BadParameter(
            f"{text!r} is not a rate: give bytes per second, e.g. 52428800, 50MB or 512KiB"
        ) from None
    if value < 1:
        raise click.BadParameter(f"{text!r}: the rate must be at least 1 byte per second")
    return int(value)


def _rate_option(function: Any) -> Any:
    return click.option(
        "--throttle",
        "rate",
        default=None,
        help="cap reassignment traffic at this many bytes/s (50MB, 500KB, 52428800)",
    )(function)


def _set_throttle(admin: Admin, rate: int | None) -> None:
    if rate is None:
        admin.alter_broker_configs(None, delete=[THROTTLE_KEY])
    else:
        admin.alter_broker_configs(None, set={THROTTLE_KEY: str(rate)})


#: How often ``--wait`` looks at the running reassignments, and for how long at most.
WAIT_POLL_S = 0.5
WAIT_MAX_S = 3600.0


@click.group()
def partition() -> None:
    """Move partitions: reassign, list and cancel reassignments."""


def _admin(bootstrap: str | None, timeout_s: float, security: ClientSecurity) -> Admin:
    return Admin(
        resolve_bootstrap(bootstrap), client_id="fluxctl", timeout_s=timeout_s, security=security
    )


def read_plan(path: Path) -> list[tuple[str, int, list[int] | None]]:
    """The partitions of a Kafka reassignment JSON file; ``click.UsageError`` naming what is
    wrong."""
    try:
        document = json.loads(path.read_text())
        entries = document["partitions"]
        plan = [
            (
                str(entry["topic"]),
                int(entry["partition"]),
                None if entry["replicas"] is None else [int(r) for r in entry["replicas"]],
            )
            for entry in entries
        ]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise click.UsageError(
            f'{path}: not a reassignment plan ({{"partitions": [{{"topic", "partition", '
            f'"replicas"}}]}}): {error!r}'
        ) from None
    return plan


def _submit(admin: Admin, plan: list[tuple[str, int, list[int] | None]]) -> dict[str, str]:
    answer = admin.alter_partition_reassignments({(t, p): r for t, p, r in plan})
    return {f"{t}-{p}": str(error) for (t, p), error in answer.items() if error is not None}


def _wait(admin: Admin, total: int) -> None:
    """A progress bar over the running reassignments until none is left."""
    from rich.progress import Progress

    deadline = time.monotonic() + WAIT_MAX_S
    with Progress(transient=False) as progress:
        task = progress.add_task("reassigning", total=max(total, 1))
        while time.monotonic() < deadline:
            running = len(admin.list_partition_reassignments())
            progress.update(task, completed=max(total, 1) - running)
            if running == 0:
                return
            time.sleep(WAIT_POLL_S)
    raise click.ClickException(f"reassignments still running after {WAIT_MAX_S:g} s")


def _print_moves(
    moves: list[Move],
    errors: dict[str, str],
    as_json: bool,
    sizes: Mapping[tuple[str, int], int] | None = None,
) -> None:
    """The moves as JSON or a table; with ``sizes``, the bytes each move copies too."""
    copied = [None if sizes is None else bytes_to_copy(m, sizes) for m in moves]
    if as_json:
        rows: list[dict[str, Any]] = [
            {
                "topic": m.topic,
                "partition": m.partition,
                "replicas": list(m.replicas),
                "target": list(m.target),
            }  # fmt: skip
            for m in moves
        ]
        if sizes is not None:
            for row, size in zip(rows, copied, strict=True):
                row["bytes"] = size
        click.echo(json.dumps({"moves": rows, "errors": errors}))
        return
    from rich.console import Console
    from rich.table import Table

    columns = ["topic", "partition", "replicas", "target"]
    table = Table(*columns, *(["bytes"] if sizes is not None else []), "result")
    for move, size in zip(moves, copied, strict=True):
        key = f"{move.topic}-{move.partition}"
        table.add_row(
            move.topic,
            str(move.partition),
            ",".join(map(str, move.replicas)),
            ",".join(map(str, move.target)),
            *([str(size)] if size is not None else []),
            errors.get(key, ""),
        )
    Console().print(table)
    if not moves:
        click.echo("nothing to move")
    elif sizes is not None:
        click.echo(f"{sum(s or 0 for s in copied)} bytes to copy")


@partition.command("reassign")
@click.option("--plan", "plan_file", required=True, type=click.Path(path_type=Path))
@click.option("--wait", is_flag=True, help="follow the reassignments until they completed")
@_rate_option
@client_options
@json_option
def reassign(
    plan_file: Path,
    wait: bool,
    rate: str | None,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Submit the reassignments of a Kafka reassignment JSON file."""
    plan = read_plan(plan_file)
    throttle_rate = parse_rate(rate) if rate is not None else None
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        if throttle_rate is not None:
            _set_throttle(admin, throttle_rate)
        current = {
            (t, p.partition): tuple(p.replicas)
            for t in {t for t, _, _ in plan}
            for p in admin.describe_topic(t).partitions
        }
        errors = _submit(admin, plan)
        moves = [
            Move(t, p, current.get((t, p), ()), tuple(r) if r is not None else ())
            for t, p, r in plan
        ]
        _print_moves(moves, errors, as_json)
        if wait:
            _wait(admin, len(plan))
        _after_moves(admin, throttle_rate, wait, as_json)
    if errors:
        raise SystemExit(1)


@partition.command("reassignments")
@client_options
@json_option
def reassignments(
    bootstrap: str | None, timeout_s: float, security: ClientSecurity, as_json: bool
) -> None:
    """List the running reassignments."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        running = admin.list_partition_reassignments()
    rows = [{"topic": t, "partition": p, **state} for (t, p), state in sorted(running.items())]
    if as_json:
        click.echo(json.dumps({"reassignments": rows}))
        return
    for row in rows:
        click.echo(
            f"{row['topic']}-{row['partition']}: replicas {row['replicas']} "
            f"adding {row['adding']} removing {row['removing']}"
        )
    if not rows:
        click.echo("no reassignment running")


@partition.command("cancel")
@click.argument("topic")
@click.argument("index", metavar="PARTITION", type=int)
@client_options
def cancel(
    topic: str, index: int, bootstrap: str | None, timeout_s: float, security: ClientSecurity
) -> None:
    """Cancel the running reassignment of TOPIC's PARTITION (back to its original replicas)."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        errors = _submit(admin, [(topic, index, None)])
    if errors:
        raise click.ClickException(next(iter(errors.values())))
    click.echo(f"cancelled {topic}-{index}")


@click.command("rebalance")
@click.option("--dry-run", is_flag=True, help="print the plan, move nothing")
@click.option(
    "--exclude", "excluded", multiple=True, type=int, help="a broker to drain (repeatable)"
)
@click.option(
    "--no-bytes",
    is_flag=True,
    help="weigh every replica the same: do not ask the brokers for partition sizes",
)
@click.option("--wait", is_flag=True, help="follow the reassignments until they completed")
@_rate_option
@client_options
@json_option
def rebalance(
    dry_run: bool,
    excluded: tuple[int, ...],
    no_bytes: bool,
    wait: bool,
    rate: str | None,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Even out replicas, preferred leaders and bytes over the live brokers, each partition
    over as many racks as it can (``--exclude`` drains brokers): print the plan and submit
    it."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        brokers = admin.describe_cluster().brokers
        live = [broker.node_id for broker in brokers]
        racks = {broker.node_id: broker.rack for broker in brokers}
        current: dict[tuple[str, int], tuple[int, ...]] = {}
        for name in admin.list_topics():
            for item in admin.describe_topic(name).partitions:
                current[(name, item.partition)] = tuple(item.replicas)
        # A partition being reassigned lists its leaving replicas too: plan with where it is
        # going (so the load counts are right and no plan grows its replication factor) and
        # leave it alone (its running reassignment is not replaced).
        running = admin.list_partition_reassignments()
        for key, state in running.items():
            if key in current:
                current[key] = tuple(r for r in current[key] if r not in state["removing"])
        sizes = None if no_bytes else _partition_sizes(admin, current)
        moves = [
            move
            for move in plan_moves(current, live, exclude=excluded, racks=racks, sizes=sizes)
            if (move.topic, move.partition) not in running
        ]
        errors: dict[str, Any] = {}
        throttle_rate = parse_rate(rate) if rate is not None else None
        submit = bool(moves) and not dry_run
        if submit and throttle_rate is not None:
            _set_throttle(admin, throttle_rate)
        if submit:
            errors = _submit(admin, [(m.topic, m.partition, list(m.target)) for m in moves])
        _print_moves(moves, errors, as_json, sizes)
        if submit and wait:
            _wait(admin, len(moves))
        if submit:
            _after_moves(admin, throttle_rate, wait, as_json)
    if errors:
        raise SystemExit(1)


def _partition_sizes(
    admin: Admin, current: Mapping[tuple[str, int], tuple[int, ...]]
) -> dict[tuple[str, int], int]:
    """Each partition's size: the largest of its replicas (DescribeLogDirs to every broker; a
    follower behind its leader holds less, and a broker that cannot be reached tells
    nothing)."""
    sizes = dict.fromkeys(current, 0)
    for replicas in admin.describe_log_dirs().values():
        for key, size in replicas.items():
            if key in sizes:
                sizes[key] = max(sizes[key], size)
    return sizes


def _after_moves(admin: Admin, rate: int | None, waited: bool, as_json: bool) -> None:
    """Remove the throttle this command set once its moves completed; else say it stays."""
    if rate is None:
        return
    if waited:
        _set_throttle(admin, None)
        if not as_json:
            click.echo("reassignment throttle removed")
    elif not as_json:
        click.echo(
            f"reassignment traffic throttled to {rate} bytes/s until "
            "`fluxctl cluster throttle --clear`",
            err=True,
        )


@click.command("throttle")
@click.argument("rate", required=False)
@click.option("--clear", is_flag=True, help="remove the throttle")
@client_options
def throttle(
    rate: str | None,
    clear: bool,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
) -> None:
    """Set (RATE, bytes/s: 50MB, 500KB, 52428800) or --clear the cluster-wide throttle of
    reassignment traffic (``leader.replication.throttled.rate`` on every broker)."""
    if clear == (rate is not None):
        raise click.UsageError("give a RATE or --clear")
    value = parse_rate(rate) if rate is not None else None
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        _set_throttle(admin, value)
    click.echo(
        "reassignment throttle removed"
        if value is None
        else f"reassignment traffic throttled to {value} bytes/s"
    )
