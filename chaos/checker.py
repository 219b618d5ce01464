"""The checker: named anomalies and availability figures from a history (pure; no I/O).

After Jepsen's Kafka workload (``jepsen/tests/kafka.clj``). The workloads of ``flux.chaos``
write these ops (values are plain JSON; partitions and offsets are ints; pairs are lists so a
JSON round trip keeps their types):

======================  ======================================================================
f                       value
======================  ======================================================================
``send``                invoke ``{"partition", "value", "idempotent"}``; ``ok`` adds
                        ``"offset"``; ``fail`` / ``info`` add ``"error"``
``assign``              ``ok`` ``{"partitions": [p, ...]}``: the process starts a new
                        assignment (also after a rebalance, a seek or an offset reset), so its
                        poll positions start afresh
``poll``                ``ok`` ``{"records": [[p, offset, value], ...]}`` in the order returned
``commit``              invoke and ``ok`` ``{"group", "offsets": [[p, offset], ...]}``
``committed``           ``ok`` ``{"group", "offsets": [[p, offset], ...]}``: offsets a member
                        found committed when it got its assignment
``final-read``          ``ok`` ``{"high_watermarks": [[p, hw], ...]}`` once the final reader
                        (whose records are ordinary ``poll`` ops) read every partition to its
                        high watermark after the faults healed
``replicas``            ``ok`` (process ``replica-checker``, ``flux.chaos.replicas``): what every
                        replica of every partition held after the faults healed, per replica
                        its log end offset, record count and ``records_digest``
``crash``               ``info``: the process died (its last op, if open, is ``info``)
``txn``, ``txn-poll``,  the transactional workload's (``txn_workload``), checked by
``txn-final-read``      ``txn_checker``: ``txn-aborted-read`` (G1a), ``txn-intermediate-read``
                        (G1b), ``txn-lost-write``, ``txn-duplicate``, ``txn-non-atomic``
nemesis ops             process ``nemesis``: ``kill``, ``pause``, ``restart``, ... (marked on
                        the plot; ignored by the detectors)
======================  ======================================================================

Detectors, one per anomaly (``ANOMALIES``); each returns examples with the values and op
indexes that show it:

* ``lost-write``: an acknowledged send never read, although a later offset of its partition was;
  or, once the final read completed, an acknowledged send missing from it although the final
  read went past its offset (a consumer may have read it before a new leader truncated it
  away: read once is not kept).
* ``unseen``: an acknowledged send never read, and nothing after it either. Illegal once the
  final read completed (it read every partition to its high watermark, which must have passed
  every acknowledged ``acks=all`` write); without a completed final read it makes the result
  ``unknown``.
* ``duplicate``: one value at several offsets. Illegal only for values of idempotent
  producers: a non-idempotent producer may legitimately write a retried batch twice, so those
  are reported as the legal note ``duplicate-non-idempotent``.
* ``inconsistent-offsets``: one offset of a partition holding several values.
* ``non-monotonic-send``: a producer's later acknowledged send at an offset not above an
  earlier one's in the same partition.
* ``non-monotonic-poll`` / ``poll-skip``: within one assignment of one process, a poll
  returning an offset not above the previous one of that partition, or jumping over offsets
  known (from any read or acknowledgement) to hold values.
* ``aborted-read``: a value whose send definitely failed (``fail``, never ``info``) was read.
* ``committed-offset-backwards``: a group's committed offset of a partition, committed or
  observed after an acknowledged commit completed, is below that commit.
* ``replica-divergence`` (with a ``replicas`` op): the replicas of a partition hold different
  records or log ends, one could not be read, or they differ from what the completed final
  read read (to its high watermark).
* ``reassignment-stuck``: a reassignment still ran when the replica check gave up waiting.
* ``replication-factor-changed``: a partition ended with more or fewer replicas than the topic
  was created with (moves keep the replication factor; nobody asked to change it).

Legal note ``stray-replica``: a node outside a partition's replicas still holds a directory of
it (disk not given back, no data at risk).

``info`` is never a failure: an ``info`` send may or may not appear in reads, and neither is an
anomaly.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import limits
from .history import Op, pairs
from .txn_checker import TXN_ANOMALIES, check_transactions

__all__ = [
    "ANOMALIES",
    "LEGAL_NOTES",
    "Anomaly",
    "Availability",
    "CheckResult",
    "check",
    "records_digest",
]

ANOMALIES = (
    "lost-write",
    "unseen",
    "duplicate",
    "inconsistent-offsets",
    "non-monotonic-send",
    "non-monotonic-poll",
    "poll-skip",
    "aborted-read",
    "committed-offset-backwards",
    "replica-divergence",
    "reassignment-stuck",
    "replication-factor-changed",
    *TXN_ANOMALIES,
)
LEGAL_NOTES = ("duplicate-non-idempotent", "stray-replica")
#: The process of the final reader, whose reads the replica check compares with.
FINAL_READER = "final-reader"
NEMESIS_PROCESS = "nemesis"


@dataclass(frozen=True, slots=True)
class Anomaly:
    """``count`` occurrences, the first ``limits.EXAMPLES_PER_ANOMALY`` of them as examples."""

    name: str
    count: int
    examples: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Availability:
    """Produce availability: the longest stretch without an acknowledged send while the
    workload ran (``..._at_s``: when it began, in seconds since the history's first op), and
    error rates per operation kind (``fail`` and ``info`` separately)."""

    longest_produce_gap_s: float
    longest_produce_gap_at_s: float
    error_rates: dict[str, dict[str, float]]
    #: One entry per whole-cluster crash: when it happened (``crash_at_s``), when a majority
    #: of the nodes had been started again (``majority_back_at_s``), and the seconds from each
    #: of the two to the first acknowledged send after it (None: no send was acknowledged).
    crash_recoveries: list[dict[str, float | None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """``valid`` is True, False (an illegal anomaly) or ``"unknown"`` (nothing illegal, but
    the history cannot show that nothing was lost: no final read, or no acknowledged send)."""

    valid: bool | str
    anomalies: dict[str, Anomaly]
    notes: dict[str, Anomaly]
    stats: dict[str, int]
    availability: Availability
    unknown_reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Read:
    op_index: int
    process: str
    partition: int
    offset: int
    value: str


@dataclass
class _Facts:
    """What the detectors share, computed once from the history."""

    ops: list[Op]
    send_pairs: list[tuple[Op, Op | None]]
    reads: list[_Read]
    # value -> (partition, offset, completion index) of its acknowledged send
    acked: dict[str, tuple[int, int, int]]
    idempotent_values: set[str]
    failed_values: dict[str, int]
    final_read_ok: bool


def check(ops: Iterable[Op]) -> CheckResult:
    """Run every detector over ``ops`` (the transactional ones of ``txn_checker`` too) and sum
    up."""
    ops = list(ops)
    facts = _facts(ops)
    txn_found, txn_unknown, txn_stats = check_transactions(ops)
    found: dict[str, list[dict[str, Any]]] = {
        "lost-write": _lost_writes(facts),
        "unseen": _unseen(facts),
        "inconsistent-offsets": _inconsistent_offsets(facts),
        "non-monotonic-send": _non_monotonic_sends(facts),
        "aborted-read": _aborted_reads(facts),
        "committed-offset-backwards": _committed_offsets_backwards(facts),
    }
    replicas_found, strays = _replica_anomalies(facts)
    found.update(replicas_found)
    duplicates_illegal, duplicates_legal = _duplicates(facts)
    found["duplicate"] = duplicates_illegal
    found["non-monotonic-poll"], found["poll-skip"] = _poll_anomalies(facts)
    for name in TXN_ANOMALIES:
        found[name] = txn_found.get(name, [])
    anomalies = {name: _summary(name, found[name]) for name in ANOMALIES if found[name]}
    notes = {}
    if duplicates_legal:
        notes["duplicate-non-idempotent"] = _summary("duplicate-non-idempotent", duplicates_legal)
    if strays:
        notes["stray-replica"] = _summary("stray-replica", strays)
    unknown_reasons = list(txn_unknown)
    if _replica_checks(ops) == ["info"]:
        unknown_reasons.append("the replica check could not read the replicas")
    if not facts.acked:
        unknown_reasons.append("no send was acknowledged")
    if not facts.final_read_ok:
        unknown_reasons.append("the final read did not complete")
        # Without a complete final read, "never read" is no proof of loss.
        anomalies.pop("unseen", None)
    valid: bool | str = not anomalies
    if valid and unknown_reasons:
        valid = "unknown"
    return CheckResult(
        valid=valid,
        anomalies=anomalies,
        notes=notes,
        stats={**_stats(facts), **txn_stats},
        availability=_availability(facts),
        unknown_reasons=unknown_reasons,
    )


def records_digest(records: Iterable[tuple[int, str]]) -> str:
    """A short fingerprint of ``(offset, value)`` records in order: equal digests, equal logs."""
    digest = hashlib.sha256()
    for offset, value in records:
        digest.update(f"{offset}:{value}\n".encode())
    return digest.hexdigest()[:16]


def _summary(name: str, examples: list[dict[str, Any]]) -> Anomaly:
    return Anomaly(name, len(examples), examples[: limits.EXAMPLES_PER_ANOMALY])


# -- facts ------------------------------------------------------------------------------------


def _facts(ops: list[Op]) -> _Facts:
    send_pairs = [(i, c) for i, c in pairs(ops) if i.f == "send"]
    reads = [
        _Read(op.index, op.process, int(p), int(o), str(v))
        for op in ops
        if op.f == "poll" and op.type == "ok"
        for p, o, v in (op.value or {}).get("records", ())
    ]
    acked: dict[str, tuple[int, int, int]] = {}
    idempotent_values: set[str] = set()
    failed_values: dict[str, int] = {}
    for invocation, completion in send_pairs:
        value = str(invocation.value["value"])
        if invocation.value.get("idempotent"):
            idempotent_values.add(value)
        if completion is None:
            continue
        if completion.type == "ok":
            acked[value] = (
                int(completion.value["partition"]),
                int(completion.value["offset"]),
                completion.index,
            )
        elif completion.type == "fail":
            failed_values[value] = completion.index
    final_read_ok = any(op.f == "final-read" and op.type == "ok" for op in ops)
    return _Facts(ops, send_pairs, reads, acked, idempotent_values, failed_values, final_read_ok)


def _read_values(facts: _Facts) -> set[str]:
    return {read.value for read in facts.reads}


def _max_read_offsets(facts: _Facts) -> dict[int, int]:
    highest: dict[int, int] = {}
    for read in facts.reads:
        highest[read.partition] = max(highest.get(read.partition, -1), read.offset)
    return highest


# -- detectors --------------------------------------------------------------------------------


def _lost_writes(facts: _Facts) -> list[dict[str, Any]]:
    seen = _read_values(facts)
    highest = _max_read_offsets(facts)
    final_reads = [read for read in facts.reads if read.process == FINAL_READER]
    final_values = {read.value for read in final_reads}
    # Only partitions the final reader read records of (hand-written histories may mark the
    # final read done without its polls).
    read_by_final = {read.partition for read in final_reads}
    final_ends = {p: end for p, (end, _) in _final_read_logs(facts).items() if p in read_by_final}
    lost = []
    for value, (p, o, index) in sorted(facts.acked.items(), key=lambda item: item[1]):
        never_read = value not in seen and highest.get(p, -1) > o
        gone = facts.final_read_ok and value not in final_values and final_ends.get(p, -1) > o
        if never_read or gone:
            lost.append(
                {
                    "value": value,
                    "partition": p,
                    "offset": o,
                    "ack_op": index,
                    "highest_read_offset": highest[p],
                    "read_before_lost": value in seen,
                }
            )
    return lost


def _unseen(facts: _Facts) -> list[dict[str, Any]]:
    seen = _read_values(facts)
    highest = _max_read_offsets(facts)
    return [
        {
            "value": value,
            "partition": p,
            "offset": o,
            "ack_op": index,
            "highest_read_offset": highest.get(p, -1),
        }
        for value, (p, o, index) in sorted(facts.acked.items(), key=lambda item: item[1])
        if value not in seen and highest.get(p, -1) <= o
    ]


def _observed_positions(facts: _Facts) -> dict[str, set[tuple[int, int]]]:
    """value -> every (partition, offset) a read or an acknowledgement put it at."""
    positions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for read in facts.reads:
        positions[read.value].add((read.partition, read.offset))
    for value, (p, o, _) in facts.acked.items():
        positions[value].add((p, o))
    return positions


def _duplicates(facts: _Facts) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    illegal, legal = [], []
    for value, positions in sorted(_observed_positions(facts).items()):
        if len(positions) < 2:
            continue
        example = {"value": value, "positions": [list(p) for p in sorted(positions)]}
        (illegal if value in facts.idempotent_values else legal).append(example)
    return illegal, legal


def _inconsistent_offsets(facts: _Facts) -> list[dict[str, Any]]:
    values_at: dict[tuple[int, int], set[str]] = defaultdict(set)
    for value, positions in _observed_positions(facts).items():
        for position in positions:
            values_at[position].add(value)
    return [
        {"partition": p, "offset": o, "values": sorted(values)}
        for (p, o), values in sorted(values_at.items())
        if len(values) > 1
    ]


def _non_monotonic_sends(facts: _Facts) -> list[dict[str, Any]]:
    last: dict[tuple[str, int], tuple[int, int]] = {}
    found = []
    completions = sorted(
        (c for _, c in facts.send_pairs if c is not None and c.type == "ok"),
        key=lambda op: op.index,
    )
    for op in completions:
        key = (op.process, int(op.value["partition"]))
        offset = int(op.value["offset"])
        previous = last.get(key)
        if previous is not None and offset <= previous[0]:
            found.append(
                {
                    "process": op.process,
                    "partition": key[1],
                    "offset": offset,
                    "previous_offset": previous[0],
                    "op": op.index,
                    "previous_op": previous[1],
                }
            )
        last[key] = (offset, op.index)
    return found


def _poll_anomalies(facts: _Facts) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Walk each process's polls in history order; an ``assign`` or ``crash`` starts afresh."""
    known_offsets: dict[int, list[int]] = defaultdict(list)
    for _, positions in _observed_positions(facts).items():
        for p, o in positions:
            known_offsets[p].append(o)
    for offsets in known_offsets.values():
        offsets.sort()
    non_monotonic, skips = [], []
    last: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    for op in facts.ops:
        if op.f in ("assign", "crash") and op.type in ("ok", "info"):
            last.pop(op.process, None)
            continue
        if op.f != "poll" or op.type != "ok":
            continue
        positions = last[op.process]
        for p, o, value in (op.value or {}).get("records", ()):
            previous = positions.get(p)
            if previous is not None:
                example = {
                    "process": op.process,
                    "partition": p,
                    "offset": o,
                    "previous_offset": previous[0],
                    "op": op.index,
                    "previous_op": previous[1],
                    "value": value,
                }
                if o <= previous[0]:
                    non_monotonic.append(example)
                elif o > previous[0] + 1:
                    skipped = _known_between(known_offsets[p], previous[0], o)
                    if skipped:
                        skips.append({**example, "skipped_offsets": skipped[:10]})
            positions[p] = (o, op.index)
    return non_monotonic, skips


def _known_between(sorted_offsets: list[int], low: int, high: int) -> list[int]:
    """Distinct known offsets strictly between ``low`` and ``high``."""
    start = bisect.bisect_right(sorted_offsets, low)
    end = bisect.bisect_left(sorted_offsets, high)
    return sorted(set(sorted_offsets[start:end]))


def _aborted_reads(facts: _Facts) -> list[dict[str, Any]]:
    found = []
    reported: set[str] = set()
    for read in facts.reads:
        if read.value in facts.failed_values and read.value not in reported:
            reported.add(read.value)
            found.append(
                {
                    "value": read.value,
                    "partition": read.partition,
                    "offset": read.offset,
                    "fail_op": facts.failed_values[read.value],
                    "read_op": read.op_index,
                }
            )
    return found


def _committed_offsets_backwards(facts: _Facts) -> list[dict[str, Any]]:
    """Per (group, partition): every commit or observation invoked after an acknowledged
    commit completed must be at least that commit's offset. Ops that overlap in time are not
    ordered and not compared."""
    # (group, partition) -> [(completion time, offset, completion index)] of acked commits
    acked: dict[tuple[str, int], list[tuple[float, int, int]]] = defaultdict(list)
    # (group, partition) -> [(invoke time, offset, op index, kind)] of commits and observations
    events: dict[tuple[str, int], list[tuple[float, int, int, str]]] = defaultdict(list)
    for invocation, completion in pairs(facts.ops):
        if invocation.f not in ("commit", "committed"):
            continue
        if completion is None or completion.type != "ok":
            continue
        value = completion.value
        for p, o in value["offsets"]:
            key = (str(value["group"]), int(p))
            events[key].append((invocation.time, int(o), completion.index, invocation.f))
            if invocation.f == "commit":
                acked[key].append((completion.time, int(o), completion.index))
    found = []
    for key, key_events in sorted(events.items()):
        commits = sorted(acked.get(key, ()))
        best: list[tuple[int, int]] = []  # prefix maxima (offset, index) over completion time
        for _, offset, index in commits:
            best.append(max(best[-1], (offset, index)) if best else (offset, index))
        times = [completed_at for completed_at, _, _ in commits]
        for invoked_at, offset, index, kind in sorted(key_events):
            position = bisect.bisect_left(times, invoked_at)
            if position == 0:
                continue
            highest, highest_index = best[position - 1]
            if offset < highest:
                found.append(
                    {
                        "group": key[0],
                        "partition": key[1],
                        "offset": offset,
                        "kind": kind,
                        "op": index,
                        "earlier_commit": highest,
                        "earlier_commit_op": highest_index,
                    }
                )
    return found


def _replica_checks(ops: list[Op]) -> list[str]:
    """The outcomes of the history's ``replicas`` ops, in order."""
    return [c.type if c else "info" for i, c in pairs(ops) if i.f == "replicas"]


def _final_read_logs(facts: _Facts) -> dict[int, tuple[int, str]]:
    """Per partition: (high watermark, ``records_digest`` of the records below it) of the
    completed final read; empty without one. A retried final read reads again from 0, so the
    last value read at each offset counts (two different ones are ``inconsistent-offsets``)."""
    final = next(
        (op for op in reversed(facts.ops) if op.f == "final-read" and op.type == "ok"), None
    )
    if final is None:
        return {}
    read: dict[int, dict[int, str]] = defaultdict(dict)
    for record in facts.reads:
        if record.process == FINAL_READER:
            read[record.partition][record.offset] = record.value
    logs = {}
    for p, high_watermark in final.value["high_watermarks"]:
        records = sorted((o, v) for o, v in read[int(p)].items() if o < int(high_watermark))
        logs[int(p)] = (int(high_watermark), records_digest(records))
    return logs


def _replica_anomalies(
    facts: _Facts,
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """``replica-divergence``, ``reassignment-stuck`` and ``replication-factor-changed`` from
    the last ``ok`` replica check, and the ``stray-replica`` notes."""
    found: dict[str, list[dict[str, Any]]] = {
        "replica-divergence": [],
        "reassignment-stuck": [],
        "replication-factor-changed": [],
    }
    checks = [op for op in facts.ops if op.f == "replicas" and op.type == "ok"]
    if not checks:
        return found, []
    value = checks[-1].value
    final = _final_read_logs(facts)
    strays = []
    for state in value["partitions"]:
        p = int(state["partition"])
        logs = state["logs"]
        problems = []
        if len({(log["log_end_offset"], log["digest"]) for log in logs}) > 1:
            problems.append("the replicas differ")
        unreadable = [log["node"] for log in logs if log["error"]]
        if unreadable or not logs:
            problems.append(f"replicas not read: {unreadable}")
        if p in final and any((log["log_end_offset"], log["digest"]) != final[p] for log in logs):
            problems.append("a replica differs from the final read")
        if problems:
            example = {
                "partition": p,
                "problems": problems,
                "replicas": state["replicas"],
                "logs": logs,
                "first_difference": state["first_difference"],
            }
            if p in final:
                example["final_read"] = {"high_watermark": final[p][0], "digest": final[p][1]}
            found["replica-divergence"].append(example)
        if len(state["replicas"]) != value["replication_factor"]:
            found["replication-factor-changed"].append(
                {
                    "partition": p,
                    "replicas": state["replicas"],
                    "replication_factor": value["replication_factor"],
                }
            )
        if state["stray"]:
            strays.append({"partition": p, "replicas": state["replicas"], "on": state["stray"]})
    found["reassignment-stuck"] = list(value["reassignments_running"])
    return found, strays


# -- figures ----------------------------------------------------------------------------------


def _stats(facts: _Facts) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for op in facts.ops:
        counts["ops"] += 1
        if op.process == NEMESIS_PROCESS and op.type == "invoke":
            counts["nemesis-ops"] += 1
        elif op.type != "invoke":
            counts[f"{op.f}-{op.type}"] += 1
    counts["sends-attempted"] = len(facts.send_pairs)
    counts["sends-acknowledged"] = len(facts.acked)
    counts["records-read"] = len(facts.reads)
    counts["distinct-values-read"] = len(_read_values(facts))
    for op in facts.ops:
        if op.f == "replicas" and op.type == "ok":
            counts["replica-logs-compared"] = sum(len(p["logs"]) for p in op.value["partitions"])
    return dict(sorted(counts.items()))


def _availability(facts: _Facts) -> Availability:
    acked_times = sorted(c.time for _, c in facts.send_pairs if c is not None and c.type == "ok")
    invoke_times = [i.time for i, _ in facts.send_pairs]
    gap, gap_at = 0.0, 0.0
    run_start = facts.ops[0].time if facts.ops else 0.0
    if invoke_times:
        start = min(invoke_times)
        end = max([c.time for _, c in facts.send_pairs if c is not None] + [max(invoke_times)])
        previous = start
        for moment in [*acked_times, end]:
            if moment - previous > gap:
                gap, gap_at = moment - previous, previous
            previous = moment
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for invocation, completion in pairs(facts.ops):
        if invocation.process == NEMESIS_PROCESS:
            continue
        outcome = completion.type if completion is not None else "info"
        totals[invocation.f][outcome] += 1
    rates = {
        f: {
            outcome: round(outcomes.get(outcome, 0) / sum(outcomes.values()), 4)
            for outcome in ("fail", "info")
        }
        for f, outcomes in sorted(totals.items())
    }
    return Availability(
        round(gap, 3),
        round(gap_at - run_start, 3),
        rates,
        _crash_recoveries(facts.ops, acked_times, run_start),
    )


def _crash_times(ops: list[Op]) -> list[tuple[float, float | None]]:
    """``(crash time, time a majority of the crashed nodes had been started or None)`` for
    every whole-cluster crash the nemesis made."""
    crashes: list[tuple[float, float | None]] = []
    crashed = started = 0
    for invocation, completion in pairs(ops):
        if invocation.process != NEMESIS_PROCESS or completion is None or completion.type != "ok":
            continue
        if invocation.f == "crash":
            value = completion.value if isinstance(completion.value, dict) else {}
            crashed, started = len(value.get("nodes", [])), 0
            crashes.append((completion.time, None))
        elif crashes and crashes[-1][1] is None and invocation.f in ("start", "recover"):
            started = started + 1 if invocation.f == "start" else crashed
            if started > crashed // 2:
                # A recover is timed from its start: it waits for full ISRs before it ends.
                back = completion.time if invocation.f == "start" else invocation.time
                crashes[-1] = (crashes[-1][0], back)
    return crashes


def _crash_recoveries(
    ops: list[Op], acked_times: list[float], run_start: float
) -> list[dict[str, float | None]]:
    recoveries: list[dict[str, float | None]] = []
    for crash_at, back in _crash_times(ops):
        index = bisect.bisect_right(acked_times, crash_at)
        first = acked_times[index] if index < len(acked_times) else None
        recoveries.append(
            {
                "crash_at_s": round(crash_at - run_start, 3),
                "majority_back_at_s": None if back is None else round(back - run_start, 3),
                "unavailable_s": None if first is None else round(first - crash_at, 3),
                "available_after_majority_s": (
                    None if first is None or back is None else round(first - back, 3)
                ),
            }
        )
    return recoveries
