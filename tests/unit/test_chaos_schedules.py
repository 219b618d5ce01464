"""The mixed scenario's full mix (crashes of several nodes, full disks where the backend can)
and the table of ``fluxctl chaos run --schedules N`` (``flux.chaos.schedules``)."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest
from flux.chaos import schedules
from flux.chaos.checker import Anomaly, Availability, CheckResult
from flux.chaos.history import Op
from flux.chaos.nemesis import Step
from flux.chaos.scenarios import SCENARIOS, generate_schedule
from flux.cli.chaos import _StopAfterThisSchedule


def _mixed(seed: int, *, disks: bool, duration_s: float = 120.0) -> list[Step]:
    return generate_schedule(
        SCENARIOS["mixed"], seed=seed, duration_s=duration_s, nodes=3, partitions=False,
        disks=disks,
    )  # fmt: skip


def test_mixed_fills_disks_only_when_the_backend_can() -> None:
    without = [step.f for seed in range(30) for step in _mixed(seed, disks=False)]
    with_disks = [step.f for seed in range(30) for step in _mixed(seed, disks=True)]
    assert "disk-full" not in without
    assert "disk-full" in with_disks


def test_mixed_crashes_a_majority_or_every_node_and_brings_them_back_in_any_order() -> None:
    crashes: set[tuple[int, ...]] = set()
    orders: set[tuple[int, ...]] = set()
    for seed in range(60):
        steps = _mixed(seed, disks=True)
        for index, step in enumerate(steps):
            at_once = [s for s in steps if s.at_s == step.at_s and s.f == "kill" and s.target]
            if step.f == "crash" or (step.f == "kill" and len(at_once) > 1 and step is at_once[0]):
                crashed = (1, 2, 3) if step.f == "crash" else tuple(
                    int(s.target.removeprefix("node-")) for s in at_once  # type: ignore[union-attr]
                )  # fmt: skip
                crashes.add(crashed)
                cycle = steps[index + len(at_once or [step]) :]
                end = next(i for i, s in enumerate(cycle) if s.f == "recover")
                started = tuple(
                    int(s.target.removeprefix("node-"))  # type: ignore[union-attr]
                    for s in cycle[:end]
                    if s.f == "start"
                )
                assert set(started) <= set(crashed) and len(started) < len(crashed)
                orders.add(started)
    assert (1, 2, 3) in crashes
    assert {len(c) for c in crashes} == {2, 3}
    assert len(orders) >= 4  # several nodes first, in several orders (and none: all at once)


def test_a_whole_cluster_crash_keeps_its_schedule() -> None:
    """The crash cycle the mixed scenario shares gives the whole-cluster-crash scenario the
    schedules it had (seeds replayed from earlier reports stay valid)."""
    steps = SCENARIOS["whole-cluster-crash"].generate(random.Random(3), 14.0, 3, frozenset())
    assert [(s.at_s, s.f, s.target) for s in steps] == [
        (2.0, "crash", None),
        (4.48, "start", "node-3"),
        (8.9, "start", "node-1"),
        (13.64, "recover", None),
    ]


def _op(index: int, process: str, kind: str, f: str, value: object = None) -> Op:
    return Op(index=index, time=float(index), process=process, type=kind, f=f, value=value)


def _result(valid: bool | str, anomalies: dict[str, int], stats: dict[str, int]) -> CheckResult:
    return CheckResult(
        valid=valid,
        anomalies={name: Anomaly(name, count, []) for name, count in anomalies.items()},
        notes={},
        stats=stats,
        availability=Availability(0.0, 0.0, {}),
    )


def test_a_row_counts_faults_done_and_not_and_the_clients_operations(tmp_path: Path) -> None:
    ops = [
        _op(0, "nemesis", "invoke", "kill", {"target": "leader"}),
        _op(1, "nemesis", "ok", "kill", {"target": "leader", "node": 2}),
        _op(2, "nemesis", "invoke", "disk-full", {"target": "any"}),
        _op(3, "nemesis", "ok", "disk-full", {"target": "any", "node": 3}),
        _op(4, "nemesis", "invoke", "pause", {"target": "follower"}),
        _op(5, "nemesis", "info", "pause", {"target": "follower", "error": "none"}),
        _op(6, "nemesis", "invoke", "recover", {"target": None}),
        _op(7, "nemesis", "ok", "recover", {"target": None}),
    ]
    stats = {"ops": 20, "send-ok": 7, "send-info": 1, "poll-ok": 3, "kill-ok": 1,
             "recover-ok": 1, "nemesis-ops": 4}  # fmt: skip
    row = schedules.row_of(
        41, _result(False, {"lost-write": 2}, stats), ops, seconds=12.34,
        reproduce="fluxctl chaos run mixed --seed 41", out_dir=tmp_path,
    )  # fmt: skip
    assert row.verdict == "invalid"
    assert row.faults == {"disk-full": 1, "kill": 1}
    assert row.faults_not_done == {"pause": 1}
    assert row.operations == {"poll-ok": 3, "send-info": 1, "send-ok": 7}
    assert row.anomalies == {"lost-write": 2}
    line = schedules.format_row(row)
    assert line.startswith("seed 41: invalid; 2 faults (disk-full 1, kill 1)")
    assert "7 sends acknowledged" in line and "lost-write 2" in line


def test_the_table_survives_a_reload_and_sums_up(tmp_path: Path) -> None:
    table = tmp_path / schedules.TABLE_FILE
    rows = [
        schedules.row_of(
            seed,
            _result(valid, anomalies, {"send-ok": 10}),
            [
                _op(0, "nemesis", "invoke", "crash"),
                _op(1, "nemesis", "ok", "crash"),
            ],
            seconds=30.0,
            reproduce=f"r {seed}",
            out_dir=tmp_path,
        )
        for seed, valid, anomalies in ((1, True, {}), (2, "unknown", {}), (3, False, {"x": 1}))
    ]
    for row in rows:
        schedules.append(table, row)
    assert schedules.load(table) == rows
    summary = schedules.totals(schedules.load(table))
    assert summary["schedules"] == 3
    assert summary["verdicts"] == {"invalid": 1, "unknown": 1, "valid": 1}
    assert summary["faults"] == {"crash": 3}
    assert summary["operations"] == {"send-ok": 30}
    assert summary["anomalies"] == {"x": 1}
    assert summary["failed_seeds"] == [2, 3]
    assert summary["seconds"] == 90.0
    text = schedules.format_totals(summary)
    assert "schedules: 3 (invalid 1, unknown 1, valid 1)" in text
    assert "seeds not valid: 2, 3" in text


def test_a_first_ctrl_c_lets_the_running_schedule_finish_a_second_stops_at_once() -> None:
    before = signal.getsignal(signal.SIGINT)
    stop = _StopAfterThisSchedule()
    try:
        os.kill(os.getpid(), signal.SIGINT)  # handled: no KeyboardInterrupt
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        stop.restore()
