"""``fluxctl chaos`` commands that need no cluster: list, schedule, check, and the refusals of
``run`` (partitions where network namespaces cannot run, a Docker backend that does not exist yet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from flux.chaos import history as history_module
from flux.chaos import netns
from flux.chaos.history import Op
from flux.chaos.runner import docker_backend_factory
from flux.cli.chaos import chaos


def test_list_names_every_scenario() -> None:
    result = CliRunner().invoke(chaos, ["list"])
    assert result.exit_code == 0
    for name in (
        "kill-leader",
        "kill-controller",
        "pause-follower",
        "rolling-restart",
        "partition-leader",
        "corrupt-tail",
        "mixed",
    ):
        assert name in result.output


def test_schedule_is_printed_the_same_for_the_same_seed() -> None:
    arguments = ["schedule", "mixed", "--seed", "7", "--duration", "40"]
    first = CliRunner().invoke(chaos, arguments)
    second = CliRunner().invoke(chaos, arguments)
    assert first.exit_code == 0 and first.output == second.output
    assert "seed 7" in first.output and "recover" in first.output


def test_check_reports_a_saved_history_and_exits_1_when_invalid(tmp_path: Path) -> None:
    ops = [
        Op(0, 0.0, "p", "invoke", "send", {"partition": 0, "value": "a", "idempotent": True}),
        Op(1, 1.0, "p", "ok", "send", {"partition": 0, "value": "a", "offset": 0}),
        Op(2, 2.0, "p", "invoke", "send", {"partition": 0, "value": "b", "idempotent": True}),
        Op(3, 3.0, "p", "ok", "send", {"partition": 0, "value": "b", "offset": 1}),
        Op(4, 4.0, "c", "invoke", "poll", None),
        Op(5, 5.0, "c", "ok", "poll", {"records": [[0, 1, "b"]]}),
        Op(6, 6.0, "f", "invoke", "final-read", None),
        Op(7, 7.0, "f", "ok", "final-read", {"high_watermarks": [[0, 2]]}),
    ]
    path = tmp_path / "history.jsonl"
    history_module.save(ops, path)
    result = CliRunner().invoke(chaos, ["check", str(path)])
    assert result.exit_code == 1
    assert "result: INVALID" in result.output and "anomaly lost-write: 1" in result.output


def test_run_refuses_partitions_where_namespaces_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --docker a partition scenario runs in network namespaces; where they cannot run
    (here: pretended), the refusal says why."""
    monkeypatch.setattr(netns, "netns_unavailable_reason", lambda: "needs root (pretended)")
    result = CliRunner().invoke(
        chaos, ["run", "partition-leader", "--seed", "1", "--out", str(tmp_path / "run")]
    )
    assert result.exit_code != 0 and "needs root (pretended)" in result.output


def test_run_with_docker_and_no_daemon_says_so_in_one_line(tmp_path: Path) -> None:
    assert docker_backend_factory() is not None
    result = CliRunner().invoke(
        chaos,
        ["run", "kill-leader", "--docker", "--seed", "1", "--out", str(tmp_path / "run")],
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"},
    )
    assert result.exit_code != 0
    assert "Docker daemon is not reachable" in result.output, result.output
