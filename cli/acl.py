"""``fluxctl acl``: add, list and remove ACLs (Kafka's CreateAcls, DescribeAcls, DeleteAcls).

fluxctl acl add --allow-principal User:alice --operation WRITE --operation READ --topic orders
fluxctl acl add --allow-principal User:bob --operation ALL --topic orders- --prefixed
fluxctl acl add --deny-principal User:bob --operation WRITE --topic payments
fluxctl acl add --allow-principal User:alice --operation READ --group billing
fluxctl acl add --allow-principal User:ops --operation DESCRIBE --cluster
fluxctl acl list [--principal User:alice] [--topic orders] [--json]
fluxctl acl remove --principal User:bob --topic orders- --prefixed

The options follow Kafka's ``kafka-acls.sh``: one resource (``--topic``, ``--group``,
``--transactional-id`` or ``--cluster``; ``*`` is the wildcard name), ``--prefixed`` for a
prefixed pattern, ``--host`` (default ``*``), one or more ``--operation``. ``add`` creates one
binding per principal and operation. ``list`` without a resource lists every binding; with one
(and no ``--prefixed``) it lists every binding that applies to that name (literal, wildcard and
prefixes: Kafka's MATCH). ``remove`` deletes the bindings matching the resource, principal,
host and operations given (any value of what is not given) and prints them.

JSON (``--json``, stable keys): ``{"acls": [{"resource_type", "resource_name",
"pattern_type", "principal", "host", "operation", "permission"}]}``; ``add`` and ``remove``
print the same shape for the bindings created or deleted. Every command takes ``--bootstrap``,
``--timeout`` and the security options (``flux.cli._sdk``). Errors print ``Error: <message>``
and exit 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click
from flux.sdk.admin import ACL_OPERATIONS, AclBinding, AclFilter, Admin
from flux.sdk.security import ClientSecurity

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors

__all__ = ["acl"]

_OPERATIONS = [name for name in ACL_OPERATIONS if name != "ANY"]


@click.group()
def acl() -> None:
    """Add, list and remove ACLs."""


def _admin(bootstrap: str | None, timeout_s: float, security: ClientSecurity) -> Admin:
    return Admin(
        resolve_bootstrap(bootstrap), client_id="fluxctl", timeout_s=timeout_s, security=security
    )


def _resource_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--topic", help="a topic (or prefix with --prefixed; * = every topic)"),
            click.option("--group", help="a consumer group (or prefix; * = every group)"),
            click.option("--transactional-id", help="a transactional id (or prefix)"),
            click.option("--cluster", is_flag=True, help="the cluster resource"),
            click.option("--prefixed", is_flag=True, help="the name is a prefix"),
            click.option("--host", help="client address the ACL applies to (default *)"),
        ]
    ):
        function = option(function)
    return function


def _resource(
    topic: str | None, group: str | None, transactional_id: str | None, cluster: bool
) -> tuple[str, str] | None:
    given = [
        (kind, name)
        for kind, name in (
            ("TOPIC", topic),
            ("GROUP", group),
            ("TRANSACTIONAL_ID", transactional_id),
            ("CLUSTER", "kafka-cluster" if cluster else None),
        )
        if name is not None
    ]
    if len(given) > 1:
        raise click.UsageError(
            "name one resource: --topic, --group, --transactional-id or --cluster"
        )
    return given[0] if given else None


def _acl_json(binding: AclBinding) -> dict[str, str]:
    return {
        "resource_type": binding.resource_type,
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type,
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation,
        "permission": binding.permission,
    }


def _print(bindings: Sequence[AclBinding], as_json: bool, verb: str) -> None:
    if as_json:
        click.echo(json.dumps({"acls": [_acl_json(b) for b in bindings]}, indent=2))
        return
    if not bindings:
        click.echo(f"No ACLs {verb}")
        return
    for b in bindings:
        pattern = "" if b.pattern_type == "LITERAL" else f" ({b.pattern_type.lower()})"
        click.echo(
            f"{b.permission} {b.principal} from {b.host} to {b.operation} "
            f"{b.resource_type.lower()} {b.resource_name}{pattern}"
        )


@acl.command("add")
@click.option("--allow-principal", "allow", multiple=True, help="principal to allow, User:name")
@click.option("--deny-principal", "deny", multiple=True, help="principal to deny, User:name")
@click.option(
    "--operation",
    "operations",
    multiple=True,
    required=True,
    type=click.Choice(_OPERATIONS, case_sensitive=False),
    help="operation (repeatable)",
)
@_resource_options
@client_options
@json_option
def add(
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    operations: tuple[str, ...],
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster: bool,
    prefixed: bool,
    host: str | None,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Allow or deny principals operations on one resource."""
    resource = _resource(topic, group, transactional_id, cluster)
    if resource is None:
        raise click.UsageError(
            "name the resource: --topic, --group, --transactional-id or --cluster"
        )
    if not allow and not deny:
        raise click.UsageError("give --allow-principal and/or --deny-principal")
    bindings = [
        AclBinding(
            resource_type=resource[0],
            resource_name=resource[1],
            pattern_type="PREFIXED" if prefixed else "LITERAL",
            principal=principal,
            host=host or "*",
            operation=operation.upper(),
            permission=permission,
        )
        for permission, principals in (("ALLOW", allow), ("DENY", deny))
        for principal in principals
        for operation in operations
    ]
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        admin.create_acls(bindings)
    _print(bindings, as_json, "added")


@acl.command("list")
@click.option("--principal", help="only this principal's ACLs")
@_resource_options
@client_options
@json_option
def list_(
    principal: str | None,
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster: bool,
    prefixed: bool,
    host: str | None,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """List ACLs (those that apply to a resource, when one is named)."""
    resource = _resource(topic, group, transactional_id, cluster)
    acl_filter = AclFilter(
        resource_type=resource[0] if resource else "ANY",
        resource_name=resource[1] if resource else None,
        pattern_type=("PREFIXED" if prefixed else "MATCH") if resource else "ANY",
        principal=principal,
        host=host,
    )
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        bindings = admin.describe_acls(acl_filter)
    _print(bindings, as_json, "found")


@acl.command("remove")
@click.option("--principal", help="only this principal's ACLs")
@click.option(
    "--operation",
    "operations",
    multiple=True,
    type=click.Choice(_OPERATIONS, case_sensitive=False),
    help="only these operations (repeatable)",
)
@_resource_options
@client_options
@json_option
def remove(
    principal: str | None,
    operations: tuple[str, ...],
    topic: str | None,
    group: str | None,
    transactional_id: str | None,
    cluster: bool,
    prefixed: bool,
    host: str | None,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Remove the ACLs of a resource (all of its bindings matching the options)."""
    resource = _resource(topic, group, transactional_id, cluster)
    if resource is None and principal is None:
        raise click.UsageError("name a resource or a --principal (remove never means 'all')")
    filters = [
        AclFilter(
            resource_type=resource[0] if resource else "ANY",
            resource_name=resource[1] if resource else None,
            pattern_type=("PREFIXED" if prefixed else "LITERAL") if resource else "ANY",
            principal=principal,
            host=host,
            operation=operation.upper(),
        )
        for operation in (operations or ("ANY",))
    ]
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        deleted = admin.delete_acls(filters)
    _print(deleted, as_json, "removed")
