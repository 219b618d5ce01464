"""Options and error handling shared by fluxctl's client commands (topic, group, user,
produce, consume).

``client_options`` gives a command ``--bootstrap`` (env ``FLUX_BOOTSTRAP``), ``--timeout`` and
the security options of Kafka's clients, which it hands to the command as one ``security``
argument (a ``flux.sdk.security.ClientSecurity``):

    --security-protocol PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL     env FLUX_SECURITY_PROTOCOL
    --sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512            env FLUX_SASL_MECHANISM
    --sasl-username NAME                                          env FLUX_SASL_USERNAME
    --sasl-password-file FILE       the password, alone in a file env FLUX_SASL_PASSWORD_FILE
    --ssl-cafile / --ssl-certfile / --ssl-keyfile FILE            env FLUX_SSL_CAFILE, ...
    --client-config FILE            Kafka client properties       env FLUX_CLIENT_CONFIG

A password is never taken from the command line, where ``ps`` and the shell history would show
it: it comes from ``--sasl-password-file`` (its first line), else from the environment variable
``FLUX_SASL_PASSWORD``, else from ``sasl.password`` (or ``sasl.jaas.config``) in the client
config file. ``--sasl-password`` exists only to say so. ``FLUX_SASL_PASSWORD`` is used only when
the protocol is a SASL one, so exporting it does not break commands against a PLAINTEXT
cluster.

``--client-config`` reads a Java properties file like the one Kafka's tools take with
``--command-config`` (``security.protocol=SASL_SSL``, ``sasl.mechanism=...``,
``ssl.ca.location=...``, ...). Options given on the command line (or their environment
variables) win over the file. The file's other settings (``bootstrap.servers``, ``acks``, ...)
are ignored, with a note on stderr.

Every error (a bad setting, a refused login, a broker error) goes through ``sdk_errors``:
``Error: <message>`` on stderr and exit code 1, without a traceback.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from flux.sdk.errors import ConfigurationError, FluxError
from flux.sdk.security import (
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    ClientSecurity,
    load_client_properties,
)

from ._bootstrap import default_bootstrap

__all__ = [
    "PASSWORD_ENV",
    "client_options",
    "json_option",
    "read_password_file",
    "resolve_bootstrap",
    "resolve_security",
    "sdk_errors",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Client commands give up after this long by default (fast feedback when nothing listens).
DEFAULT_TIMEOUT_S = 15.0
#: The environment variable holding the SASL password (when no password file is given).
PASSWORD_ENV = "FLUX_SASL_PASSWORD"
#: A password file larger than this is refused (it holds one line).
_PASSWORD_FILE_BYTES_MAX = 4096

# Option parameter -> the Kafka client setting it overrides.
_OPTION_SETTINGS = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
}
_SECURITY_PARAMETERS = (*_OPTION_SETTINGS, "sasl_password_file", "client_config")
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")

_FILE = click.Path(dir_okay=False)


def client_options(command: F) -> F:
    """``--bootstrap``, ``--timeout`` and the security options (see the module docstring);
    the command receives ``bootstrap``, ``timeout_s`` and ``security``."""

    @functools.wraps(command)
    def with_security(*args: Any, **kwargs: Any) -> Any:
        settings = {name: kwargs.pop(name) for name in _SECURITY_PARAMETERS}
        with sdk_errors():
            kwargs["security"] = resolve_security(**settings)
        return command(*args, **kwargs)

    decorated: Callable[..., Any] = with_security
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated  # type: ignore[return-value]


def _refuse_password(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise click.UsageError(
            "a password is never given on the command line (ps and the shell history would "
            f"show it): use --sasl-password-file FILE or the environment variable {PASSWORD_ENV}"
        )


_OPTIONS: tuple[Callable[[Callable[..., Any]], Callable[..., Any]], ...] = (
    click.option(
        "--bootstrap",
        "-b",
        envvar="FLUX_BOOTSTRAP",
        default=None,
        metavar="HOST:PORT[,...]",
        help="brokers to bootstrap from [env FLUX_BOOTSTRAP; default: the local cluster of "
        "`fluxctl cluster up`, else 127.0.0.1:9092]",
    ),
    click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0.1),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="seconds to keep retrying before giving up",
    ),
    click.option(
        "--security-protocol",
        envvar="FLUX_SECURITY_PROTOCOL",
        type=click.Choice(SECURITY_PROTOCOLS, case_sensitive=False),
        default=None,
        help="how to reach the brokers [env FLUX_SECURITY_PROTOCOL; default: PLAINTEXT]",
    ),
    click.option(
        "--sasl-mechanism",
        envvar="FLUX_SASL_MECHANISM",
        type=click.Choice(SASL_MECHANISMS, case_sensitive=False),
        default=None,
        help="SASL mechanism for SASL_PLAINTEXT / SASL_SSL [env FLUX_SASL_MECHANISM]",
    ),
    click.option(
        "--sasl-username",
        envvar="FLUX_SASL_USERNAME",
        default=None,
        metavar="NAME",
        help="SASL user name [env FLUX_SASL_USERNAME]",
    ),
    click.option(
        "--sasl-password-file",
        envvar="FLUX_SASL_PASSWORD_FILE",
        type=_FILE,
        default=None,
        help=f"file holding the SASL password (first line) [env FLUX_SASL_PASSWORD_FILE; or "
        f"the password itself in env {PASSWORD_ENV}]",
    ),
    click.option(
        "--sasl-password",
        expose_value=False,
        hidden=True,
        callback=_refuse_password,
        help="refused: see --sasl-password-file",
    ),
    click.option(
        "--ssl-cafile",
        envvar="FLUX_SSL_CAFILE",
        type=_FILE,
        default=None,
        help="CA certificates (PEM) to verify the brokers with [env FLUX_SSL_CAFILE; default: "
        "the system's]",
    ),
    click.option(
        "--ssl-certfile",
        envvar="FLUX_SSL_CERTFILE",
        type=_FILE,
        default=None,
        help="client certificate (PEM) for SSL client authentication [env FLUX_SSL_CERTFILE]",
    ),
    click.option(
        "--ssl-keyfile",
        envvar="FLUX_SSL_KEYFILE",
        type=_FILE,
        default=None,
        help="the client certificate's private key (PEM) [env FLUX_SSL_KEYFILE]",
    ),
    click.option(
        "--client-config",
        envvar="FLUX_CLIENT_CONFIG",
        type=_FILE,
        default=None,
        help="Kafka client properties file (security.protocol=..., sasl.mechanism=..., "
        "ssl.ca.location=...), like Kafka's --command-config [env FLUX_CLIENT_CONFIG]",
    ),
)


def resolve_security(
    *,
    security_protocol: str | None = None,
    sasl_mechanism: str | None = None,
    sasl_username: str | None = None,
    sasl_password_file: str | None = None,
    ssl_cafile: str | None = None,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    client_config: str | None = None,
    environ: dict[str, str] | None = None,
) -> ClientSecurity:
    """The ``ClientSecurity`` the security options describe (see the module docstring);
    ``ConfigurationError`` names what is wrong."""
    environ = dict(os.environ) if environ is None else environ
    settings: dict[str, str] = {}
    if client_config is not None:
        settings = _security_settings(load_client_properties(client_config), client_config)
    given = {
        "security_protocol": security_protocol,
        "sasl_mechanism": sasl_mechanism,
        "sasl_username": sasl_username,
        "ssl_cafile": ssl_cafile,
        "ssl_certfile": ssl_certfile,
        "ssl_keyfile": ssl_keyfile,
    }
    for parameter, value in given.items():
        if value is not None:
            settings[_OPTION_SETTINGS[parameter]] = value
    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if sasl_password_file is not None:
        settings["sasl.password"] = read_password_file(sasl_password_file)
    elif environ.get(PASSWORD_ENV) and protocol.startswith("SASL_"):
        settings["sasl.password"] = environ[PASSWORD_ENV]
    jaas = settings.get("sasl.jaas.config", "")
    if (
        protocol.startswith("SASL_")
        and not settings.get("sasl.password")
        and "password" not in jaas
    ):
        raise ConfigurationError(
            f"{protocol} needs a password: --sasl-password-file FILE, the environment variable "
            f"{PASSWORD_ENV}, or sasl.password in --client-config"
        )
    return ClientSecurity.from_config(settings)


def _security_settings(properties: dict[str, str], path: str) -> dict[str, str]:
    """The security settings of a client config file; the others are noted and left out."""
    ignored = sorted(key for key in properties if not key.lower().startswith(_SECURITY_PREFIXES))
    if ignored:
        click.echo(
            f"fluxctl: {path}: ignoring {', '.join(ignored)} (only security settings are read)",
            err=True,
        )
    return {key.lower(): value for key, value in properties.items() if key not in ignored}


def read_password_file(path: str) -> str:
    """The first line of ``path`` (without its line end); ``ConfigurationError`` if it cannot
    be read or holds no password. Never quotes the file's contents."""
    try:
        with open(path, "rb") as file:
            data = file.read(_PASSWORD_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise ConfigurationError(
            f"password file {path!r} cannot be read: {error.strerror or error}"
        ) from None
    if len(data) > _PASSWORD_FILE_BYTES_MAX:
        raise ConfigurationError(f"password file {path!r} is larger than a password")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigurationError(f"password file {path!r} is not UTF-8") from None
    lines = text.splitlines()
    password = lines[0] if lines else ""
    if not password:
        raise ConfigurationError(f"password file {path!r} holds no password on its first line")
    return password


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
