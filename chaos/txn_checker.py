"""The transactional anomalies of a history (pure; no I/O), from the ops of
``flux.chaos.txn_workload`` (``txn``, ``txn-poll``, ``txn-final-read``).

After Jepsen's Kafka transaction checks (``jepsen/tests/kafka.clj``), for a log read with
``read_committed``:

* ``txn-aborted-read`` (G1a): a value of a transaction known not to have committed (``ok``
  with ``committed: false``, or ``fail``) was read.
* ``txn-intermediate-read`` (G1b): a reader saw a value of a transaction whose outcome the
  client never learned (``info``), and the complete final read does not hold it: the reader
  saw a write that did not end committed.
* ``txn-lost-write``: a value of a transaction acknowledged as committed is missing from the
  complete final read.
* ``txn-duplicate``: one value at several offsets (in the final read, or across all reads).
* ``txn-non-atomic``: the complete final read holds some but not all of a transaction's values
  (whatever its outcome: a transaction is visible whole or not at all).
* ``txn-hanging``: after every producer stopped and every transaction timeout passed, a
  partition's last stable offset is still below its high watermark: a transaction there never
  ends (a marker that was never written), and read_committed readers are stuck behind it.

The last three need a completed final read (``txn-final-read`` ok); without one they are not
reported and the result is ``unknown`` for this part.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .history import Op, pairs

__all__ = ["TXN_ANOMALIES", "check_transactions"]

TXN_ANOMALIES = (
    "txn-hanging",
    "txn-aborted-read",
    "txn-intermediate-read",
    "txn-lost-write",
    "txn-duplicate",
    "txn-non-atomic",
)


def check_transactions(
    ops: Iterable[Op],
) -> tuple[dict[str, list[dict[str, Any]]], list[str], dict[str, int]]:
    """``(examples per anomaly, unknown reasons, stats)``; all empty without ``txn`` ops."""
    ops = list(ops)
    txns = [(i, c) for i, c in pairs(ops) if i.f == "txn"]
    if not txns:
        return {}, [], {}
    # value -> (transaction's invoke index, outcome); outcome: committed / aborted / unknown
    owner: dict[str, int] = {}
    outcome: dict[int, str] = {}
    values_of: dict[int, list[str]] = {}
    for invocation, completion in txns:
        values = [str(v) for _p, v in invocation.value["writes"]]
        values_of[invocation.index] = values
        for value in values:
            owner[value] = invocation.index
        if completion is None or completion.type == "info":
            outcome[invocation.index] = "unknown"
        elif completion.type == "fail":
            outcome[invocation.index] = "aborted"
        else:
            committed = bool((completion.value or {}).get("committed"))
            outcome[invocation.index] = "committed" if committed else "aborted"
    polled: list[tuple[int, int, int, str]] = [
        (op.index, int(p), int(o), str(v))
        for op in ops
        if op.f == "txn-poll" and op.type == "ok"
        for p, o, v in (op.value or {}).get("records", ())
    ]
    finals = [op for op in ops if op.f == "txn-final-read" and op.type == "ok"]
    final: list[tuple[int, int, str]] = (
        [(int(p), int(o), str(v)) for p, o, v in finals[-1].value["records"]] if finals else []
    )
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    final_values = {v for _p, _o, v in final}
    for op_index, partition, offset, value in [*polled, *((-1, p, o, v) for p, o, v in final)]:
        txn = owner.get(value)
        if txn is not None and outcome[txn] == "aborted":
            found["txn-aborted-read"].append(
                {
                    "value": value,
                    "partition": partition,
                    "offset": offset,
                    "read_op": op_index,
                    "txn_op": txn,
                }  # fmt: skip
            )
    positions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for _i, partition, offset, value in polled:
        positions[value].add((partition, offset))
    for partition, offset, value in final:
        positions[value].add((partition, offset))
    for value, seen in positions.items():
        if len(seen) > 1:
            found["txn-duplicate"].append({"value": value, "at": sorted(seen)})
    if finals:
        stable = dict(map(tuple, finals[-1].value.get("stable_offsets", [])))
        for partition, high in finals[-1].value.get("high_watermarks", []):
            if stable.get(partition, high) < high:
                found["txn-hanging"].append(
                    {
                        "partition": partition,
                        "stable_offset": stable[partition],
                        "high_watermark": high,
                    }  # fmt: skip
                )
    unknown_reasons = []
    if not finals:
        unknown_reasons.append("the transactional final read did not complete")
    else:
        for op_index, partition, offset, value in polled:
            txn = owner.get(value)
            if txn is not None and outcome[txn] == "unknown" and value not in final_values:
                found["txn-intermediate-read"].append(
                    {
                        "value": value,
                        "partition": partition,
                        "offset": offset,
                        "read_op": op_index,
                        "txn_op": txn,
                    }  # fmt: skip
                )
        for txn, values in values_of.items():
            present = [v for v in values if v in final_values]
            if outcome[txn] == "committed" and len(present) < len(values):
                found["txn-lost-write"].append(
                    {"txn_op": txn, "missing": sorted(set(values) - set(present))}
                )
            if 0 < len(present) < len(values):
                found["txn-non-atomic"].append(
                    {
                        "txn_op": txn,
                        "outcome": outcome[txn],
                        "visible": present,
                        "invisible": sorted(set(values) - set(present)),
                    }  # fmt: skip
                )
    stats = {
        "txn-committed": sum(1 for o in outcome.values() if o == "committed"),
        "txn-aborted": sum(1 for o in outcome.values() if o == "aborted"),
        "txn-unknown": sum(1 for o in outcome.values() if o == "unknown"),
        "txn-final-read-values": len(final),
    }
    return dict(found), unknown_reasons, stats
