"""Reports of a checked history: JSON (``report.json``), text (``report.txt``, also printed)
and a plot (``plot.png``) of throughput and errors over time with the faults marked.

matplotlib is imported only to draw (with the non-interactive Agg backend), so checking a
history never needs it; without it the report says the plot was skipped.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .checker import NEMESIS_PROCESS, CheckResult
from .history import Op, pairs

__all__ = ["format_report", "plot", "report_data", "write_report"]

_BUCKET_S = 1.0
#: The final reader's burst after the run is left out of the plot: it would flatten the rest.
_FINAL_READER = "final-reader"


def report_data(result: CheckResult, **context: Any) -> dict[str, Any]:
    """The report as JSON-ready data; ``context`` (scenario, seed, ...) is put first."""
    return {
        **context,
        "valid": result.valid,
        "unknown_reasons": result.unknown_reasons,
        "anomalies": {name: asdict(anomaly) for name, anomaly in result.anomalies.items()},
        "notes": {name: asdict(note) for name, note in result.notes.items()},
        "stats": result.stats,
        "availability": asdict(result.availability),
    }


def format_report(result: CheckResult, **context: Any) -> str:
    lines = [f"{key}: {value}" for key, value in context.items()]
    verdict = {True: "VALID", False: "INVALID"}.get(result.valid, "UNKNOWN")
    lines.append(f"result: {verdict}")
    lines.extend(f"  unknown because {reason}" for reason in result.unknown_reasons)
    stats = result.stats
    lines.append(
        "operations: {ops} ops, {attempted} sends, {acked} acknowledged, {read} records read, "
        "{faults} nemesis ops".format(
            ops=stats.get("ops", 0),
            attempted=stats.get("sends-attempted", 0),
            acked=stats.get("sends-acknowledged", 0),
            read=stats.get("records-read", 0),
            faults=stats.get("nemesis-ops", 0),
        )
    )
    if "replica-logs-compared" in stats:
        lines.append(f"replicas: {stats['replica-logs-compared']} replica logs compared")
    availability = result.availability
    lines.append(
        f"availability: longest produce gap {availability.longest_produce_gap_s:.2f} s "
        f"(from +{availability.longest_produce_gap_at_s:.1f} s)"
    )
    for f, rates in availability.error_rates.items():
        lines.append(f"  {f}: fail {rates['fail']:.2%}, info (unknown) {rates['info']:.2%}")
    for crash in availability.crash_recoveries:
        lines.append(
            f"  whole-cluster crash at +{crash['crash_at_s']:.1f} s: first acknowledged send "
            f"{_seconds(crash.get('unavailable_s'))} after the crash, "
            f"{_seconds(crash.get('available_after_majority_s'))} after a majority was back"
        )
    if not result.anomalies:
        lines.append("anomalies: none")
    for name, anomaly in result.anomalies.items():
        lines.append(f"anomaly {name}: {anomaly.count}")
        lines.extend(f"    {json.dumps(example)}" for example in anomaly.examples)
    for name, note in result.notes.items():
        lines.append(f"note (legal) {name}: {note.count}")
        lines.extend(f"    {json.dumps(example)}" for example in note.examples[:3])
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


def write_report(
    result: CheckResult, ops: Sequence[Op], out_dir: Path, **context: Any
) -> dict[str, Path]:
    """Write ``report.json``, ``report.txt`` and (if matplotlib is there) ``plot.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "text": out_dir / "report.txt"}
    paths["json"].write_text(json.dumps(report_data(result, **context), indent=2))
    paths["text"].write_text(format_report(result, **context) + "\n")
    if plot(ops, out_dir / "plot.png", title=" ".join(f"{v}" for v in context.values())):
        paths["plot"] = out_dir / "plot.png"
    return paths


def _series(ops: Sequence[Op]) -> tuple[dict[str, dict[int, int]], list[tuple[float, float, str]]]:
    """Per-second counts of acknowledged, failed and unknown sends and of records read by
    the workload's consumers; and the faults as (start, end, label) in seconds since the
    first op."""
    start = ops[0].time if ops else 0.0
    counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    faults: list[tuple[float, float, str]] = []
    for invocation, completion in pairs(ops):
        if invocation.process == NEMESIS_PROCESS:
            if completion is not None and completion.type == "ok" and invocation.f != "recover":
                label = f"{invocation.f} {completion.value.get('node', '')}".strip()
                if "offset_s" in completion.value:  # a clock jump: by how much
                    label += f" {completion.value['offset_s']:+g}s"
                faults.append((invocation.time - start, completion.time - start, label))
            elif completion is not None and invocation.f == "recover" and faults:
                begin, _, label = faults[-1]
                faults[-1] = (begin, completion.time - start, label)
            continue
        if completion is None:
            continue
        bucket = int((completion.time - start) / _BUCKET_S)
        if invocation.f == "send":
            counts[f"send {completion.type}"][bucket] += 1
        elif (
            invocation.f == "poll"
            and completion.type == "ok"
            and invocation.process != _FINAL_READER
        ):
            counts["records read"][bucket] += len(completion.value.get("records", ()))
    return counts, faults


def plot(ops: Sequence[Op], path: Path, *, title: str = "") -> bool:
    """Draw sends (ok / fail / info) and reads per second, faults as shaded spans. False if
    matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        return False
    counts, faults = _series(ops)
    figure, (sends, reads) = pyplot.subplots(2, 1, sharex=True, figsize=(12, 6))
    # Every second from the first to the last, so a second without any op plots as 0.
    seconds = list(range(max((max(c, default=0) for c in counts.values()), default=0) + 1))
    for label, color in (
        ("send ok", "tab:green"),
        ("send info", "tab:orange"),
        ("send fail", "tab:red"),
    ):
        series = counts.get(label, {})
        if series:
            values = [series.get(x, 0) for x in seconds]
            sends.plot(seconds, values, label=label, color=color, linewidth=1)
    reads_series = counts.get("records read", {})
    if reads_series:
        values = [reads_series.get(x, 0) for x in seconds]
        reads.plot(seconds, values, label="records read", color="tab:blue")
    for axis in (sends, reads):
        for begin, end, _ in faults:
            axis.axvspan(begin, max(end, begin + 0.2), color="tab:gray", alpha=0.25)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper right", fontsize="small")
    for begin, _, label in faults:
        sends.annotate(
            label, (begin, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7, va="top"
        )
    sends.set_ylabel("sends / s")
    reads.set_ylabel("records read / s")
    reads.set_xlabel("seconds since start (gray: fault in place)")
    sends.set_title(title or "chaos run")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return True
