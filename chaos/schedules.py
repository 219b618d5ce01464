"""The table of a run of many seeded schedules (``fluxctl chaos run SCENARIO --schedules N``).

One row per schedule: its seed, the faults the nemesis carried out (``ok``) and those it could
not (``info``: no node qualified, or the step failed), the client operations by outcome, the
anomalies the checker named, the verdict and the seconds it took. Rows are appended to
``schedules.jsonl`` as each schedule ends, so a long run interrupted keeps what it did;
``totals`` sums a table (also a table read back with ``load``). Pure, apart from the file.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .checker import CheckResult
from .history import Op
from .nemesis import FAULTS, NEMESIS_PROCESS

__all__ = [
    "TABLE_FILE",
    "ScheduleRow",
    "append",
    "format_row",
    "format_totals",
    "load",
    "row_of",
    "totals",
]

TABLE_FILE = "schedules.jsonl"
#: Nemesis steps that are not faults of their own.
NOT_FAULTS = ("recover", "start")
#: Completions of operations, as the checker's ``<f>-<type>`` statistics name them.
OP_OUTCOMES = ("ok", "fail", "info")
#: Completions of operations, as the checker's ``<f>-<type>`` statistics name them.


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    seed: int
    #: "valid", "invalid" (an illegal anomaly) or "unknown".
    verdict: str
    faults: dict[str, int]
    faults_not_done: dict[str, int]
    operations: dict[str, int]
    anomalies: dict[str, int]
    seconds: float
    reproduce: str
    out_dir: str
    notes: list[str] = field(default_factory=list)


def _verdict(valid: bool | str) -> str:
    if valid is True:
        return "valid"
    return "invalid" if valid is False else "unknown"


def row_of(
    seed: int,
    result: CheckResult,
    ops: Sequence[Op],
    *,
    seconds: float,
    reproduce: str,
    out_dir: Path,
) -> ScheduleRow:
    """The row of one schedule from its checked history."""
    done: Counter[str] = Counter()
    not_done: Counter[str] = Counter()
    for op in ops:
        if op.process != NEMESIS_PROCESS or op.f in NOT_FAULTS or op.type == "invoke":
            continue
        (done if op.type == "ok" else not_done)[op.f] += 1
    operations = {}  # what the workloads did, by kind and outcome (not the nemesis)
    for name, count in result.stats.items():
        f, _, outcome = name.rpartition("-")
        if outcome in OP_OUTCOMES and f not in FAULTS:
            operations[name] = count
    return ScheduleRow(
        seed=seed,
        verdict=_verdict(result.valid),
        faults=dict(sorted(done.items())),
        faults_not_done=dict(sorted(not_done.items())),
        operations=dict(sorted(operations.items())),
        anomalies={name: anomaly.count for name, anomaly in sorted(result.anomalies.items())},
        seconds=round(seconds, 1),
        reproduce=reproduce,
        out_dir=str(out_dir),
        notes=list(result.unknown_reasons),
    )


def append(path: Path, row: ScheduleRow) -> None:
    with open(path, "a", encoding="utf-8") as table:
        table.write(json.dumps(asdict(row), sort_keys=True) + "\n")


def load(path: Path) -> list[ScheduleRow]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append(ScheduleRow(**json.loads(line)))
    return rows


def totals(rows: Iterable[ScheduleRow]) -> dict[str, Any]:
    """Schedules by verdict, faults done and not done by kind, operations by kind and outcome,
    anomalies by name, and the seconds of the whole table."""
    rows = list(rows)
    sums: dict[str, Counter[str]] = {
        "verdicts": Counter(),
        "faults": Counter(),
        "faults_not_done": Counter(),
        "operations": Counter(),
        "anomalies": Counter(),
    }
    for row in rows:
        sums["verdicts"][row.verdict] += 1
        sums["faults"].update(row.faults)
        sums["faults_not_done"].update(row.faults_not_done)
        sums["operations"].update(row.operations)
        sums["anomalies"].update(row.anomalies)
    return {
        "schedules": len(rows),
        **{name: dict(sorted(counts.items())) for name, counts in sums.items()},
        "seconds": round(sum(row.seconds for row in rows), 1),
        "failed_seeds": [row.seed for row in rows if row.verdict != "valid"],
    }


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"


def format_row(row: ScheduleRow) -> str:
    """One line per schedule, as the run prints it."""
    faults = sum(row.faults.values())
    sends = row.operations.get("send-ok", 0)
    return (
        f"seed {row.seed}: {row.verdict}; {faults} faults ({_counts(row.faults)}); "
        f"{sum(row.operations.values())} operations, {sends} sends acknowledged; anomalies: "
        f"{_counts(row.anomalies)}; {row.seconds:g} s"
    )


def format_totals(summary: dict[str, Any]) -> str:
    lines = [
        f"schedules: {summary['schedules']} ({_counts(summary['verdicts'])}), "
        f"{summary['seconds']:g} s",
        f"faults: {sum(summary['faults'].values())} ({_counts(summary['faults'])})",
        f"faults that found no target or failed: {_counts(summary['faults_not_done'])}",
        f"operations: {sum(summary['operations'].values())} ({_counts(summary['operations'])})",
        f"anomalies: {_counts(summary['anomalies'])}",
    ]
    if summary["failed_seeds"]:
        lines.append(f"seeds not valid: {', '.join(map(str, summary['failed_seeds']))}")
    return "\n".join(lines)
