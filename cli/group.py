"""``fluxctl group``: list, describe, reset the offsets of and delete consumer groups.

fluxctl group list [--json]
fluxctl group describe billing [--json]
fluxctl group reset-offsets billing --topic orders (--to-earliest | --to-latest | --to-offset N)
fluxctl group delete billing

Every command takes ``--bootstrap`` (env ``FLUX_BOOTSTRAP``; default: the local cluster of
``fluxctl cluster up``), ``--timeout`` and the security options (``--security-protocol``,
``--sasl-*``, ``--ssl-*``, ``--client-config``; see ``flux.cli._sdk``). Broker errors print ``Error: <message>`` and exit 1
(resetting the offsets of, or deleting, a group with active members is such an error).

JSON shapes (stable keys): ``list`` -> ``{"groups": [{"group_id", "protocol_type",
"state"}]}``; ``describe`` -> ``{"group_id", "state", "protocol_type", "protocol",
"members": [{"member_id", "client_id", "host", "assignment": {topic: [partition]}}],
"partitions": [{"topic", "partition", "committed_offset", "high_watermark", "lag",
"member_id", "client_id"}]}`` with ``null`` where a value is unknown (no commit, no owner);
``reset-offsets`` -> ``{"group_id", "topic", "offsets": {partition: offset}}``.
"""

from __future__ import annotations

import json
from typing import Any

import click
from flux.sdk.admin import Admin, GroupDescription
from flux.sdk.security import ClientSecurity

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors
from .progress import progress

__all__ = ["group"]


@click.group()
def group() -> None:
    """List, describe, reset and delete consumer groups."""


def _admin(bootstrap: str | None, timeout_s: float, security: ClientSecurity) -> Admin:
    return Admin(
        resolve_bootstrap(bootstrap), client_id="fluxctl", timeout_s=timeout_s, security=security
    )


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def _console() -> Any:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped output: whole headers, no wrapping at 80 columns
    return console


@group.command("list")
@client_options
@json_option
def list_(bootstrap: str | None, timeout_s: float, security: ClientSecurity, as_json: bool) -> None:
    """List every consumer group of the cluster."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        listings = admin.list_groups()
    if as_json:
        _emit_json(
            {
                "groups": [
                    {"group_id": g.group_id, "protocol_type": g.protocol_type, "state": g.state}
                    for g in listings
                ]
            }
        )
        return
    for listing in listings:
        click.echo(f"{listing.group_id}\t{listing.state or '-'}\t{listing.protocol_type or '-'}")


def _partition_rows(description: GroupDescription) -> list[dict[str, Any]]:
    keys = sorted(set(description.offsets) | set(description.high_watermarks))
    rows = []
    for topic, partition in keys:
        owner = description.owner_of(topic, partition)
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "committed_offset": description.offsets.get((topic, partition)),
                "high_watermark": description.high_watermarks.get((topic, partition)),
                "lag": description.lag.get((topic, partition)),
                "member_id": owner.member_id if owner else None,
                "client_id": owner.client_id if owner else None,
            }
        )
    return rows


def _description_json(description: GroupDescription) -> dict[str, Any]:
    return {
        "group_id": description.group_id,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": m.assignment,
            }
            for m in description.members
        ],
        "partitions": _partition_rows(description),
    }


@group.command("describe")
@click.argument("group_id", metavar="GROUP")
@client_options
@json_option
def describe(
    group_id: str, bootstrap: str | None, timeout_s: float, security: ClientSecurity, as_json: bool
) -> None:
    """Show GROUP's state, members, committed offsets and lag per partition."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        description = admin.describe_group(group_id)
    if as_json:
        _emit_json(_description_json(description))
        return
    from rich.table import Table

    def text(value: object) -> str:
        return "-" if value is None else str(value)

    table = Table(
        title=f"Group {group_id}",
        caption=f"state {description.state}"
        + (f", protocol {description.protocol}" if description.protocol else ""),
    )
    numeric = ("partition", "committed", "high watermark", "lag")
    for column in ("topic", *numeric, "member", "client"):
        table.add_column(column, justify="right" if column in numeric else "left")
    for row in _partition_rows(description):
        table.add_row(
            row["topic"],
            str(row["partition"]),
            text(row["committed_offset"]),
            text(row["high_watermark"]),
            text(row["lag"]),
            text(row["member_id"]),
            text(row["client_id"]),
        )
    members = Table(title="Members")
    for column in ("member", "client", "host", "assignment"):
        members.add_column(column)
    for member in description.members:
        assigned = " ".join(
            f"{topic}:{','.join(map(str, parts))}"
            for topic, parts in sorted(member.assignment.items())
        )
        members.add_row(member.member_id, member.client_id, member.host, assigned or "-")
    console = _console()
    console.print(table)
    if description.members:
        console.print(members)
    else:
        console.print("no active members")


@group.command("reset-offsets")
@click.argument("group_id", metavar="GROUP")
@click.option("--topic", "-t", required=True, help="the topic whose offsets to reset")
@click.option("--to-earliest", "to", flag_value="earliest", help="to the log start offsets")
@click.option("--to-latest", "to", flag_value="latest", help="to the high watermarks")
@click.option("--to-offset", type=click.IntRange(min=0), default=None, metavar="N")
@client_options
@json_option
def reset_offsets(
    group_id: str,
    topic: str,
    to: str | None,
    to_offset: int | None,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Commit new offsets of TOPIC for GROUP (which must have no active members)."""
    if (to is None) == (to_offset is None):
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset N")
    target: str | int = to if to is not None else int(to_offset)  # type: ignore[arg-type]
    with (
        sdk_errors(),
        _admin(bootstrap, timeout_s, security) as admin,
        progress(f"resetting the offsets of {group_id} on {topic}", as_json=as_json),
    ):
        offsets = admin.reset_offsets(group_id, topic, to=target)
    if as_json:
        _emit_json(
            {
                "group_id": group_id,
                "topic": topic,
                "offsets": {str(p): o for p, o in offsets.items()},
            }
        )
        return
    for partition, offset in offsets.items():
        click.echo(f"{topic}-{partition}\t{offset}")


@group.command("delete")
@click.argument("group_id", metavar="GROUP")
@client_options
def delete(
    group_id: str, bootstrap: str | None, timeout_s: float, security: ClientSecurity
) -> None:
    """Delete GROUP and its committed offsets (it must have no active members)."""
    with (
        sdk_errors(),
        _admin(bootstrap, timeout_s, security) as admin,
        progress(f"deleting group {group_id}"),
    ):
        admin.delete_group(group_id)
    click.echo(f"Deleted group {group_id}")
