"""``fluxctl user``: create, list and delete SCRAM users (the credentials SASL logins check).

fluxctl user create alice                       prompts twice for the password (hidden)
printf '%s\\n' "$PW" | fluxctl user create alice --password-stdin
fluxctl user create alice --mechanism SCRAM-SHA-512 --iterations 8192
fluxctl user delete alice [--mechanism SCRAM-SHA-256]
fluxctl user list [--json]

``create`` sets the user's credential for each mechanism (``--mechanism``: SCRAM-SHA-256,
SCRAM-SHA-512, or ``both``, the default) from one password; for an existing user it replaces
them, which is how a password is changed. The password is read from stdin's first line with
``--password-stdin``, else prompted for twice without echo; never from the command line. It
never leaves fluxctl: ``flux.sdk.Admin.alter_user_scram_credentials`` sends a random salt and
the salted password, from which the brokers derive what they store. A user with a credential
can log in with that SCRAM mechanism, and with PLAIN.

``delete`` removes the named mechanism's credential, or with ``both`` (the default) every
credential the user has; a user without any is an error.

``list`` shows each user with its mechanisms and iteration counts (never a salt or a key). JSON
shape (stable keys): ``{"users": [{"name", "credentials": [{"mechanism", "iterations"}]}]}``.

Every command takes ``--bootstrap``, ``--timeout`` and the security options (see
``flux.cli._sdk``), so users can be managed over a secured listener. Errors print
``Error: <message>`` and exit 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click
from flux.sdk.admin import (
    Admin,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UserScramCredentials,
)
from flux.sdk.errors import ResourceNotFoundError
from flux.sdk.security import ClientSecurity

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors

__all__ = ["user"]

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_BOTH = "both"
#: Kafka's bounds of a SCRAM credential's iteration count.
_ITERATIONS = click.IntRange(4096, 16384)
#: A password longer than this (read from stdin) is refused.
_PASSWORD_CHARS_MAX = 1024


@click.group()
def user() -> None:
    """Create, list and delete SCRAM users."""


def _admin(bootstrap: str | None, timeout_s: float, security: ClientSecurity) -> Admin:
    return Admin(
        resolve_bootstrap(bootstrap), client_id="fluxctl", timeout_s=timeout_s, security=security
    )


def _mechanism_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--mechanism",
        "-m",
        type=click.Choice([*MECHANISMS, _BOTH], case_sensitive=False),
        default=_BOTH,
        show_default=True,
        help=help_text,
    )


def _mechanisms(choice: str) -> tuple[str, ...]:
    return MECHANISMS if choice.lower() == _BOTH else (choice.upper(),)


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline(_PASSWORD_CHARS_MAX + 2)
        password = line.rstrip("\r\n")
        if len(password) > _PASSWORD_CHARS_MAX:
            raise click.UsageError(f"the password is longer than {_PASSWORD_CHARS_MAX} characters")
    else:
        password = click.prompt(
            "Password", hide_input=True, confirmation_prompt="Repeat the password"
        )
    if not password:
        raise click.UsageError("the password must not be empty")
    return password


@user.command("create")
@click.argument("name")
@_mechanism_option("the SCRAM mechanism(s) to set a credential for")
@click.option(
    "--iterations",
    type=_ITERATIONS,
    default=4096,
    show_default=True,
    help="PBKDF2 iterations of the credential (Kafka accepts 4096 to 16384)",
)
@click.option("--password-stdin", is_flag=True, help="read the password from stdin's first line")
@client_options
def create(
    name: str,
    mechanism: str,
    iterations: int,
    password_stdin: bool,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
) -> None:
    """Create user NAME, or replace its credentials (a new password)."""
    if not name:
        raise click.UsageError("the user name must not be empty")
    password = _read_password(password_stdin)
    mechanisms = _mechanisms(mechanism)
    upsertions = [
        ScramCredentialUpsertion(name, each, password, iterations=iterations) for each in mechanisms
    ]
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        admin.alter_user_scram_credentials(upsertions=upsertions)
    click.echo(f"Set the {' and '.join(mechanisms)} credentials of user {name}")


@user.command("delete")
@click.argument("name")
@_mechanism_option("the SCRAM mechanism(s) to delete the credential of")
@client_options
def delete(
    name: str, mechanism: str, bootstrap: str | None, timeout_s: float, security: ClientSecurity
) -> None:
    """Delete user NAME's credentials (all of them by default)."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        if mechanism.lower() == _BOTH:
            # Deleting a credential the user lacks fails the whole (all-or-nothing) request.
            try:
                described = admin.describe_user_scram_credentials([name])
            except ResourceNotFoundError:
                raise click.ClickException(f"user {name!r} has no SCRAM credentials") from None
            mechanisms = tuple(info.mechanism for info in described[name].credentials)
        else:
            mechanisms = _mechanisms(mechanism)
        admin.alter_user_scram_credentials(
            deletions=[ScramCredentialDeletion(name, each) for each in mechanisms]
        )
    click.echo(f"Deleted the {' and '.join(mechanisms)} credentials of user {name}")


@user.command("list")
@client_options
@json_option
def list_(bootstrap: str | None, timeout_s: float, security: ClientSecurity, as_json: bool) -> None:
    """List users with their SCRAM mechanisms and iteration counts."""
    with sdk_errors(), _admin(bootstrap, timeout_s, security) as admin:
        users = admin.describe_user_scram_credentials()
    if as_json:
        click.echo(json.dumps({"users": [_user_json(u) for u in users.values()]}, indent=2))
        return
    for described in users.values():
        credentials = ", ".join(
            f"{info.mechanism} ({info.iterations} iterations)" for info in described.credentials
        )
        click.echo(f"{described.user}: {credentials}")


def _user_json(described: UserScramCredentials) -> dict[str, object]:
    return {
        "name": described.user,
        "credentials": [
            {"mechanism": info.mechanism, "iterations": info.iterations}
            for info in described.credentials
        ],
    }
