"""``fluxctl partition`` and ``fluxctl cluster rebalance``: move partitions between brokers.

fluxctl partition reassign --plan FILE [--wait]     Kafka's reassignment JSON
fluxctl partition reassignments [--json]            the running ones
fluxctl partition cancel TOPIC PARTITION            cancel one
fluxctl cluster rebalance [--dry-run] [--exclude N ...] [--wait] [--json]

The plan file is Kafka's (``kafka-reassign-partitions.sh``): ``{"version": 1, "partitions":
[{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}, ...]}`` (a null ``replicas`` cancels).
``rebalance`` computes such a plan with ``flux.controller.rebalance.plan_moves`` from the
cluster's metadata (replicas and preferred leaders evened out over the live brokers;
``--exclude`` drains brokers), prints it as a table, and unless ``--dry-run`` submits it;
``--wait`` follows the reassignments with a progress bar until none runs. Every command takes
``--bootstrap`` and the client options of the other client commands (``flux.cli._sdk``).

JSON shapes: ``reassignments`` -> ``{"reassignments": [{"topic", "partition", "replicas",
"adding", "removing"}]}``; ``rebalance --json`` / ``reassign --json`` -> ``{"moves":
[{"topic", "partition", "replicas", "target"}], "errors": {"topic-partition": message}}``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
from flux.controller.rebalance import Move, plan_moves
from flux.sdk.admin import Admin
from flux.sdk.security import ClientSecurity

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors

__all__ = ["partition", "rebalance"]

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


def _print_moves(moves: list[Move], errors: dict[str, str], as_json: bool) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "moves": [
                        {
                            "topic": m.topic,
                            "partition": m.partition,
                            "replicas": list(m.replicas),
                            "target": list(m.target),
                        }  # fmt: skip
                        for m in moves
                    ],
                    "errors": errors,
                }
            )
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("topic", "partition", "replicas", "target", "result")
    for move in moves:
        key = f"{move.topic}-{move.partition}"
        table.add_row(
            move.topic,
            str(move.partition),
            ",".join(map(str, move.replicas)),
            ",".join(map(str, move.target)),
            errors.get(key, ""),
        )
    Console().print(table)
    if not moves:
        click.echo("nothing to move")


@partition.command("reassign")
@click.option("--plan", "plan_file", required=True, type=click.Path(path_type=Path))
@click.option("--wait", is_flag=True, help="follow the reassignments until they completed")
@client_options
@json_option
def reassign(
    plan_file: Path,
    wait: bool,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Submit the reassignments of a Kafka reassignment JSON file."""
    plan = read_plan(plan_file)
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
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
@click.option("--wait", is_flag=True, help="follow the reassignments until they completed")
@client_options
@json_option
def rebalance(
    dry_run: bool,
    excluded: tuple[int, ...],
    wait: bool,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Even out replicas and preferred leaders over the live brokers (``--exclude`` drains
    brokers): print the plan and submit it."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        live = [broker.node_id for broker in admin.describe_cluster().brokers]
        current: dict[tuple[str, int], tuple[int, ...]] = {}
        for name in admin.list_topics():
            for item in admin.describe_topic(name).partitions:
                current[(name, item.partition)] = tuple(item.replicas)
        moves = plan_moves(current, live, exclude=excluded)
        errors: dict[str, Any] = {}
        if moves and not dry_run:
            errors = _submit(admin, [(m.topic, m.partition, list(m.target)) for m in moves])
        _print_moves(moves, errors, as_json)
        if moves and wait and not dry_run:
            _wait(admin, len(moves))
    if errors:
        raise SystemExit(1)
