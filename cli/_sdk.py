"""Options and error handling shared by fluxctl's client commands (topic, produce, consume)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from flux.sdk.errors import FluxError

from ._bootstrap import default_bootstrap

__all__ = ["client_options", "json_option", "resolve_bootstrap", "sdk_errors"]

F = TypeVar("F", bound=Callable[..., Any])

#: Client commands give up after this long by default (fast feedback when nothing listens).
DEFAULT_TIMEOUT_S = 15.0


def client_options(command: F) -> F:
    """``--bootstrap`` (env ``FLUX_BOOTSTRAP``) and ``--timeout``."""
    command = click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0.1),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="seconds to keep retrying before giving up",
    )(command)
    return click.option(
        "--bootstrap",
        "-b",
        envvar="FLUX_BOOTSTRAP",
        default=None,
        metavar="HOST:PORT[,...]",
        help="brokers to bootstrap from [env FLUX_BOOTSTRAP; default: the local cluster of "
        "`fluxctl cluster up`, else 127.0.0.1:9092]",
    )(command)


def json_option(command: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="print machine-readable JSON (stable keys)"
    )(command)


def resolve_bootstrap(bootstrap: str | None) -> str:
    return bootstrap or default_bootstrap()


@contextmanager
def sdk_errors() -> Iterator[None]:
    """Turn an SDK error into ``Error: <message>`` on stderr and exit code 1 (no traceback)."""
    try:
        yield
    except FluxError as error:
        raise click.ClickException(str(error)) from None
