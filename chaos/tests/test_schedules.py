"""``fluxctl chaos run mixed --schedules N --disks``: seeded schedules back to back on fresh
local clusters, with the table kept and the totals printed (root: the nodes' log directories
are file systems of their own; skipped, with the reason, elsewhere).

Seeds 13 and 14 with 6 s of faults are two short schedules that meet the new faults: seed 13
fills one node's log directory, seed 14 SIGKILLs two of the three nodes at once and brings
them back one after the other (``fluxctl chaos schedule mixed --seed 13 --duration 6 --disks``
prints them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from flux.chaos import schedules
from flux.chaos.disks import missing_requirements

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow]

FIRST_SEED = 13


def test_schedules_back_to_back_keep_a_table_and_print_totals(tmp_path: Path) -> None:
    reason = missing_requirements()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path / "runs"
    command = [
        sys.executable, "-m", "flux.cli.main", "chaos", "run", "mixed", "--schedules", "2",
        "--seed", str(FIRST_SEED), "--duration", "6", "--disks", "--out", str(out),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = schedules.load(out / schedules.TABLE_FILE)
    assert [row.seed for row in rows] == [FIRST_SEED, FIRST_SEED + 1]
    assert [row.verdict for row in rows] == ["valid", "valid"]
    filled, crashed = rows
    assert filled.faults == {"disk-full": 1}, filled
    assert crashed.faults.get("kill") == 2 and crashed.faults_not_done == {}, crashed
    assert all(row.operations.get("send-ok", 0) > 0 for row in rows)
    assert filled.reproduce == (f"fluxctl chaos run mixed --seed {FIRST_SEED} --duration 6 --disks")
    # A valid schedule keeps its history and report, not its cluster's files.
    for row in rows:
        assert (Path(row.out_dir) / "history.jsonl").exists()
        assert not (Path(row.out_dir) / "cluster").exists()
    assert f"seed {FIRST_SEED}: valid; 1 faults (disk-full 1)" in result.stdout
    assert "schedules: 2 (valid 2)" in result.stdout
    # The full disk was freed and its node restarted: the recovery says so.
    history = (Path(filled.out_dir) / "history.jsonl").read_text()
    assert '"disks_freed"' in history
