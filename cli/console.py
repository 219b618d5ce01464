"""``fluxctl console``: the address of the web console, opened in a browser with ``--open``.

    fluxctl console                      # the local cluster of `fluxctl cluster up`
    fluxctl console --broker HOST:PORT   # any broker's HTTP listener (broker.http_port)
    fluxctl console --open               # also open it in the default browser

Every broker serves the console at ``/ui/`` on its HTTP listener (docs/console.md); for the
local cluster the first running node's is printed. ``--json`` prints ``{"url": ...}``.
"""

from __future__ import annotations

import json
import webbrowser
from pathlib import Path

import click

from ._bootstrap import cluster_dir_option

__all__ = ["console"]


@click.command("console")
@cluster_dir_option("the local cluster's directory (fluxctl cluster up)")
@click.option("--broker", help="a broker's HTTP address HOST:PORT (default: the local cluster)")
@click.option("--open", "open_browser", is_flag=True, help="open the console in a browser")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def console(cluster_dir: str, broker: str | None, open_browser: bool, as_json: bool) -> None:
    """Print (or open) the address of the web console."""
    if broker is not None:
        host, _, port = broker.rpartition(":")
        if not host or not port.isdigit():
            raise click.BadParameter("expected HOST:PORT", param_hint="--broker")
        url = f"http://{broker}/ui/"
    else:
        url = _local_console(Path(cluster_dir).resolve())
    if as_json:
        click.echo(json.dumps({"url": url}))
    else:
        click.echo(url)
    if open_browser and not webbrowser.open(url):
        click.echo("no browser to open here: open the address above", err=True)


def _local_console(root: Path) -> str:
    from .main import _alive, _require_state

    state = _require_state(root)
    for entry in state["nodes"]:
        if entry.get("broker_http") and _alive(entry):
            return f"http://{entry['broker_http']}/ui/"
    raise click.ClickException(
        f"no broker of the cluster in {root} is running (start it with: fluxctl cluster up)"
    )
