"""``fluxctl console``: the address printed for a given broker, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from flux.cli.main import main


def test_a_brokers_console_address() -> None:
    result = CliRunner().invoke(main, ["console", "--broker", "10.0.0.5:8080", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"url": "http://10.0.0.5:8080/ui/"}


def test_a_bad_broker_address_is_named() -> None:
    result = CliRunner().invoke(main, ["console", "--broker", "no-port"])
    assert result.exit_code == 2 and "HOST:PORT" in result.output


def test_no_local_cluster_says_how_to_start_one(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["console", "--data-dir", str(tmp_path / "none")])
    assert result.exit_code == 1 and "fluxctl cluster up" in result.output
