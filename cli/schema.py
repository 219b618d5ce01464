"""``fluxctl schema``: register, list, show, check and delete schemas of the schema registry
every broker serves under ``/schemas`` of its HTTP listener (Confluent's REST API).

fluxctl schema register users-value --file user.avsc [--type AVRO|JSON|PROTOBUF] [--json]
fluxctl schema list [--deleted] [--prefix users-] [--json]
fluxctl schema get users-value [--version N|latest] [--json]
fluxctl schema get --id 3 [--json]
fluxctl schema check users-value --file user-v2.avsc [--version N|latest] [--json]
fluxctl schema delete users-value [--version N|latest] [--permanent] [--json]
fluxctl schema compatibility [users-value] [--set FULL] [--json]

Where the registry is: ``--registry-url URL[,URL...]`` (env ``FLUX_SCHEMA_REGISTRY_URL``), the
registry's own address such as ``http://127.0.0.1:9292/schemas``; else ``--http
HOST:PORT[,...]`` (env ``FLUX_HTTP``, as ``fluxctl topic describe`` takes it), a broker's HTTP
address, to which ``/schemas`` is added; else the first running broker of the local cluster of
``fluxctl cluster up`` (its ``broker_http``). Several addresses are tried in turn when one does
not answer. A cluster whose HTTP API wants a login (``security.http_auth = "required"``) is out
of reach for now: the client sends no credentials.

The schema of ``register`` and ``check`` comes from ``--file PATH`` (``-`` for stdin) or
``--schema TEXT``; an Avro or JSON Schema must be JSON, which is checked before anything is
sent. Registry errors print ``Error: <message> (HTTP status, error code N)`` and exit 1;
``check`` also exits 1 when the schema is incompatible (after printing why).

JSON shapes (stable keys): ``register`` -> ``{"subject", "id", "version", "schema_type"}``;
``list`` -> ``{"subjects": [{"subject", "versions", "latest_version", "latest_id",
"deleted"}]}`` (a soft-deleted subject, listed with ``--deleted``, has no versions and null
latest values); ``get`` -> ``{"subject", "version", "id", "schema_type", "schema",
"references"}`` (``subject`` and ``version`` null with ``--id``; ``schema`` is the registered
text); ``check`` -> ``{"subject", "version", "compatible", "compatibility", "messages"}``;
``delete`` -> ``{"subject", "versions", "permanent"}``; ``compatibility`` -> ``{"subject",
"compatibility"}`` (``subject`` null for the global level).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from flux.sdk.schema_registry import RegisteredSchema, SchemaRegistryClient, SchemaRegistryError

from ._bootstrap import default_broker_http
from ._sdk import DEFAULT_TIMEOUT_S, json_option

__all__ = ["registry_urls", "schema"]

F = TypeVar("F", bound=Callable[..., Any])

REGISTRY_URL_ENV = "FLUX_SCHEMA_REGISTRY_URL"
#: The path of the registry on a broker's HTTP listener (``flux.registry.PREFIX``).
REGISTRY_PATH = "/schemas"
#: A schema file larger than this is refused before it is read whole (the registry's own
#: limit, ``flux.registry.schemas.MAX_SCHEMA_BYTES``).
SCHEMA_BYTES_MAX = 1 << 20
# The registry's schema types and compatibility levels (``flux.registry.schemas.SCHEMA_TYPES``,
# ``flux.registry.state.COMPATIBILITY_LEVELS``), copied because importing the broker-side
# package would add aiohttp and the cluster code to every fluxctl start (about 0.6 s);
# tests/integration/test_cli_schema.py checks that the copies match.
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
#: Schema types whose text is JSON (pretty-printed by ``get``, checked before sending).
_JSON_TYPES = ("AVRO", "JSON")


@click.group()
def schema() -> None:
    """Register, list, show, check and delete schemas of the schema registry.

    The registry is served by every broker under /schemas of its HTTP listener. Its address:
    --registry-url URL (env FLUX_SCHEMA_REGISTRY_URL, e.g. http://127.0.0.1:9292/schemas),
    else --http HOST:PORT (env FLUX_HTTP; a broker's HTTP address, /schemas is added), else
    the local cluster of `fluxctl cluster up`. Comma-separated addresses are tried in turn.
    Errors print `Error: <message>` and exit 1; `check` also exits 1 when incompatible."""


# -- where the registry is -------------------------------------------------------------------


def registry_urls(
    registry_url: str | None, http_address: str | None, local_http: str | None
) -> list[str]:
    """The registry's URLs: ``registry_url`` (comma-separated) if given, else each
    ``http_address`` (``HOST:PORT``, comma-separated) with ``/schemas``, else the local
    cluster's broker ``local_http``; ``click.UsageError`` when none is known."""
    if registry_url:
        urls = _split(registry_url)
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise click.BadParameter(
                    f"{url!r} is not an http:// or https:// URL", param_hint="--registry-url"
                )
        return urls
    addresses = _split(http_address) if http_address else ([local_http] if local_http else [])
    if not addresses:
        raise click.UsageError(
            "no schema registry known: give --registry-url http://HOST:PORT/schemas or --http "
            "HOST:PORT (a broker's HTTP address), or start a local cluster with "
            "`fluxctl cluster up`"
        )
    return [_broker_registry_url(address) for address in addresses]


def _split(text: str) -> list[str]:
    return [part.strip().rstrip("/") for part in text.split(",") if part.strip()]


def _broker_registry_url(address: str) -> str:
    base = address if "://" in address else f"http://{address}"
    return base.rstrip("/") + REGISTRY_PATH


def registry_options(command: F) -> F:
    """``--registry-url``, ``--http`` and ``--timeout``; the command receives ``registry``
    (a ``SchemaRegistryClient``)."""

    @functools.wraps(command)
    def with_registry(
        *args: Any,
        registry_url: str | None,
        http_address: str | None,
        timeout_s: float,
        **kwargs: Any,
    ) -> Any:
        local_http = None if registry_url or http_address else default_broker_http()
        urls = registry_urls(registry_url, http_address, local_http)
        kwargs["registry"] = SchemaRegistryClient(urls, timeout_s=timeout_s)
        return command(*args, **kwargs)

    decorated: Callable[..., Any] = with_registry
    for option in reversed(_REGISTRY_OPTIONS):
        decorated = option(decorated)
    return decorated  # type: ignore[return-value]


_REGISTRY_OPTIONS: tuple[Callable[[Callable[..., Any]], Callable[..., Any]], ...] = (
    click.option(
        "--registry-url",
        envvar=REGISTRY_URL_ENV,
        default=None,
        metavar="URL[,URL...]",
        help=f"the schema registry, e.g. http://127.0.0.1:9292/schemas [env {REGISTRY_URL_ENV}; "
        "default: --http's]",
    ),
    click.option(
        "--http",
        "http_address",
        envvar="FLUX_HTTP",
        default=None,
        metavar="HOST:PORT[,...]",
        help="a broker's HTTP address; the registry is its /schemas [env FLUX_HTTP; default: "
        "the local cluster of `fluxctl cluster up`]",
    ),
    click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0.1),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="seconds one request to the registry may take",
    ),
)


@contextmanager
def _registry_errors() -> Iterator[None]:
    """``Error: <message>`` and exit 1 for a registry's error, with a hint where one helps."""
    try:
        yield
    except SchemaRegistryError as error:
        message = str(error)
        if error.status == 401:
            message += (
                "; this cluster's HTTP API wants a login (security.http_auth), which "
                "fluxctl schema does not send yet"
            )
        raise click.ClickException(message) from None


# -- the schema given ------------------------------------------------------------------------


class _Version(click.ParamType):
    """A subject's version: a positive number or ``latest``."""

    name = "N|latest"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) or str(value).lower() == "latest":
            return value if isinstance(value, int) else "latest"
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            self.fail(f"{value!r} is neither a version number (1, 2, ...) nor 'latest'", param, ctx)
        return number


_VERSION = _Version()


def _schema_source(command: F) -> F:
    """``--file``, ``--schema`` and ``--type``."""
    options = (
        click.option(
            "--file",
            "file_path",
            type=click.Path(dir_okay=False, allow_dash=True),
            help="read the schema from this file (- for stdin)",
        ),
        click.option("--schema", "schema_text", metavar="TEXT", help="the schema itself"),
        click.option(
            "--type",
            "schema_type",
            type=click.Choice(SCHEMA_TYPES, case_sensitive=False),
            default="AVRO",
            show_default=True,
            help="the schema's format",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def _read_schema(file_path: str | None, schema_text: str | None, schema_type: str) -> str:
    """The schema text of ``--file`` or ``--schema``; an Avro or JSON Schema must parse as
    JSON (a clear error here instead of the registry's)."""
    if (file_path is None) == (schema_text is None):
        raise click.UsageError("give the schema with exactly one of --file PATH and --schema TEXT")
    source = "--schema"
    if file_path is not None:
        source = "stdin" if file_path == "-" else f"schema file {file_path!r}"
        text = _read_file(file_path, source)
    else:
        text = str(schema_text)
    if not text.strip():
        raise click.ClickException(f"{source} is empty")
    if schema_type in _JSON_TYPES:
        try:
            json.loads(text)
        except ValueError as error:
            hint = " (a Protobuf schema needs --type PROTOBUF)" if schema_type == "AVRO" else ""
            raise click.ClickException(
                f"{source} is not valid JSON (a {schema_type} schema is JSON): {error}{hint}"
            ) from None
    return text


def _read_file(file_path: str, source: str) -> str:
    try:
        if file_path == "-":
            data = sys.stdin.buffer.read(SCHEMA_BYTES_MAX + 1)
        else:
            with open(file_path, "rb") as file:
                data = file.read(SCHEMA_BYTES_MAX + 1)
    except OSError as error:
        raise click.ClickException(f"{source} cannot be read: {error.strerror or error}") from None
    if len(data) > SCHEMA_BYTES_MAX:
        raise click.ClickException(f"{source} is larger than {SCHEMA_BYTES_MAX} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise click.ClickException(f"{source} is not UTF-8 text") from None


# -- output ----------------------------------------------------------------------------------


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def _console() -> Any:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped output: whole headers, no wrapping at 80 columns
    return console


def _pretty(text: str, schema_type: str) -> str:
    """Avro and JSON schemas indented; Protobuf (and anything not JSON) as registered."""
    if schema_type not in _JSON_TYPES:
        return text
    try:
        return json.dumps(json.loads(text), indent=2)
    except ValueError:
        return text


def _schema_json(registered: RegisteredSchema) -> dict[str, Any]:
    return {
        "subject": registered.subject,
        "version": registered.version,
        "id": registered.schema_id,
        "schema_type": registered.schema_type,
        "schema": registered.schema,
        "references": registered.references,
    }


# -- commands --------------------------------------------------------------------------------


@schema.command("register")
@click.argument("subject")
@_schema_source
@registry_options
@json_option
def register(
    subject: str,
    file_path: str | None,
    schema_text: str | None,
    schema_type: str,
    registry: SchemaRegistryClient,
    as_json: bool,
) -> None:
    """Register a schema under SUBJECT; print its id and version.

    A schema the subject already has keeps its id and version; one incompatible with the
    subject's compatibility level is refused."""
    schema_type = schema_type.upper()
    text = _read_schema(file_path, schema_text, schema_type)
    with _registry_errors():
        schema_id = registry.register(subject, text, schema_type)
        # The client returns only the id: the version is the lookup's.
        version = registry.lookup(subject, text, schema_type).version
    if as_json:
        _emit_json(
            {"subject": subject, "id": schema_id, "version": version, "schema_type": schema_type}
        )
        return
    click.echo(f"Registered {subject} version {version}: schema id {schema_id}")


@schema.command("list")
@click.option("--deleted", is_flag=True, help="also the soft-deleted subjects")
@click.option("--prefix", default="", metavar="TEXT", help="only subjects starting with TEXT")
@registry_options
@json_option
def list_(deleted: bool, prefix: str, registry: SchemaRegistryClient, as_json: bool) -> None:
    """List the subjects, their versions and the latest version's schema id.

    Versions soft-deleted from a live subject are not shown."""
    with _registry_errors():
        rows = _subject_rows(registry, deleted=deleted, prefix=prefix)
    if as_json:
        _emit_json({"subjects": rows})
        return
    if not rows:
        click.echo("no subjects")
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Schema registry subjects")
    table.add_column("subject")
    table.add_column("versions")
    table.add_column("latest version", justify="right")
    table.add_column("latest id", justify="right")
    if deleted:
        table.add_column("state")
    for row in rows:
        cells: list[str | Text] = [
            Text(row["subject"]),
            ",".join(str(v) for v in row["versions"]) or "-",
            str(row["latest_version"] or "-"),
            str(row["latest_id"] or "-"),
        ]
        if deleted:
            cells.append("soft-deleted" if row["deleted"] else "live")
        table.add_row(*cells)
    _console().print(table)


def _subject_rows(
    registry: SchemaRegistryClient, *, deleted: bool, prefix: str
) -> list[dict[str, Any]]:
    subjects = [s for s in registry.subjects(deleted=deleted) if s.startswith(prefix)]
    live = set(registry.subjects()) if deleted else set(subjects)
    rows = []
    for subject in subjects:
        versions: list[int] = []
        latest: RegisteredSchema | None = None
        if subject in live:
            try:
                versions = registry.versions(subject)
                latest = registry.version(subject, "latest")
            except SchemaRegistryError as error:
                if error.status != 404:
                    raise
                versions = []  # deleted since the listing: shown as such
        rows.append(
            {
                "subject": subject,
                "versions": versions,
                "latest_version": latest.version if latest else None,
                "latest_id": latest.schema_id if latest else None,
                "deleted": latest is None,
            }
        )
    return rows


@schema.command("get")
@click.argument("subject", required=False)
@click.option("--version", type=_VERSION, default=None, help="the version [default: latest]")
@click.option("--id", "schema_id", type=click.IntRange(min=1), help="the schema with this id")
@registry_options
@json_option
def get(
    subject: str | None,
    version: int | str | None,
    schema_id: int | None,
    registry: SchemaRegistryClient,
    as_json: bool,
) -> None:
    """Show a version of SUBJECT (the latest by default), or the schema with --id."""
    if (subject is None) == (schema_id is None):
        raise click.UsageError("give either SUBJECT (and perhaps --version) or --id ID")
    if schema_id is not None and version is not None:
        raise click.UsageError("--version goes with SUBJECT, not with --id")
    with _registry_errors():
        if schema_id is not None:
            registered = registry.schema(schema_id)
        else:
            registered = registry.version(str(subject), version or "latest")
    if as_json:
        _emit_json(_schema_json(registered))
        return
    where = f"{registered.subject} version {registered.version}, " if registered.subject else ""
    click.echo(f"# {where}schema id {registered.schema_id}, {registered.schema_type}")
    for reference in registered.references:
        click.echo(
            f"# references {reference.get('name')}: {reference.get('subject')} "
            f"version {reference.get('version')}"
        )
    click.echo(_pretty(registered.schema, registered.schema_type))


@schema.command("check")
@click.argument("subject")
@_schema_source
@click.option(
    "--version", type=_VERSION, default="latest", show_default=True, help="the version to check"
)
@registry_options
@json_option
def check(
    subject: str,
    file_path: str | None,
    schema_text: str | None,
    schema_type: str,
    version: int | str,
    registry: SchemaRegistryClient,
    as_json: bool,
) -> None:
    """Check a schema against a version of SUBJECT; exit 1 if incompatible.

    Whether the schema may follow --version of SUBJECT under the subject's compatibility
    level (a *_TRANSITIVE level is checked against that one version only), and why not."""
    schema_type = schema_type.upper()
    text = _read_schema(file_path, schema_text, schema_type)
    with _registry_errors():
        compatible, messages = registry.check(subject, text, schema_type, version=version)
        level = registry.compatibility(subject)
    if as_json:
        _emit_json(
            {
                "subject": subject,
                "version": version,
                "compatible": compatible,
                "compatibility": level,
                "messages": messages,
            }
        )
    else:
        verdict = "compatible" if compatible else "NOT compatible"
        click.echo(f"{verdict} with {subject} version {version} ({level})")
        for message in messages:
            click.echo(f"  - {message}")
    if not compatible:
        click.get_current_context().exit(1)


@schema.command("delete")
@click.argument("subject")
@click.option("--version", type=_VERSION, default=None, help="only this version")
@click.option(
    "--permanent",
    is_flag=True,
    help="remove for good what a soft delete (the default, without this flag) only hid",
)
@registry_options
@json_option
def delete(
    subject: str,
    version: int | str | None,
    permanent: bool,
    registry: SchemaRegistryClient,
    as_json: bool,
) -> None:
    """Delete SUBJECT (every version) or one --version of it.

    A soft delete hides the versions (their ids still resolve; `list --deleted` shows the
    subject); --permanent then removes them, and refuses what was not soft-deleted first."""
    with _registry_errors():
        if version is not None:
            versions = [registry.delete_version(subject, version, permanent=permanent)]
        else:
            versions = registry.delete_subject(subject, permanent=permanent)
    if as_json:
        _emit_json({"subject": subject, "versions": versions, "permanent": permanent})
        return
    how = "Permanently deleted" if permanent else "Soft-deleted"
    numbers = ", ".join(str(v) for v in versions) or "none"
    click.echo(f"{how} {subject} version{'s' if len(versions) != 1 else ''} {numbers}")


@schema.command("compatibility")
@click.argument("subject", required=False)
@click.option(
    "--set",
    "level",
    type=click.Choice(COMPATIBILITY_LEVELS, case_sensitive=False),
    default=None,
    help="set the level (of SUBJECT, else the global one)",
)
@registry_options
@json_option
def compatibility(
    subject: str | None, level: str | None, registry: SchemaRegistryClient, as_json: bool
) -> None:
    """Show or --set the compatibility level of SUBJECT (else the global one).

    A subject without a level of its own shows the global level."""
    with _registry_errors():
        if level is not None:
            current = registry.set_compatibility(level.upper(), subject)
        else:
            current = registry.compatibility(subject)
    if as_json:
        _emit_json({"subject": subject, "compatibility": current})
        return
    where = subject if subject is not None else "global"
    if level is not None:
        click.echo(f"Set the compatibility of {where} to {current}")
    else:
        click.echo(f"{where}: {current}")
