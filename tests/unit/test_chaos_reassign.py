"""The ``reassign`` chaos scenario's pure parts: its seeded schedule, the replica log reader of
``flux.chaos.replicas``, the replica detectors of the checker (each against a tiny hand-written
history), the nemesis's random replica move, and ``fluxctl chaos run``'s refusal of Docker."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from flux.chaos.checker import check, records_digest
from flux.chaos.history import Op
from flux.chaos.nemesis import MOVES, Nemesis
from flux.chaos.replicas import read_replica_log
from flux.chaos.scenarios import SCENARIOS
from flux.cli.chaos import chaos
from flux.protocol.records import build_batch

REASSIGN = SCENARIOS["reassign"]


# -- schedule ---------------------------------------------------------------------------------


def _cycles(seed: int, duration_s: float = 120.0) -> list[list[Any]]:
    steps = REASSIGN.generate(random.Random(seed), duration_s, REASSIGN.nodes, False)
    cycles, cycle = [], []
    for step in steps:
        cycle.append(step)
        if step.f == "recover":
            cycles.append(cycle)
            cycle = []
    assert not cycle and steps[-1].f == "recover"
    return cycles


def test_every_cycle_moves_replicas_and_kills_a_node_then_recovers() -> None:
    orders: set[tuple[str, ...]] = set()
    moves: set[str] = set()
    kill_targets: set[str | None] = set()
    for seed in range(20):
        for cycle in _cycles(seed):
            kinds = [step.f for step in cycle]
            assert kinds.count("kill") == 1 and kinds[-1] == "recover", kinds
            assert kinds.count("reassign") <= 1 and kinds.count("rebalance") <= 1, kinds
            assert kinds.count("cancel") <= 1
            assert all(step.target is None for step in cycle if step.f in MOVES)
            assert [step.at_s for step in cycle] == sorted(step.at_s for step in cycle)
            orders.add(tuple(kind for kind in kinds if kind not in ("cancel", "recover")))
            moves.update(kind for kind in kinds if kind in MOVES)
            kill_targets.update(step.target for step in cycle if step.f == "kill")
    assert orders == {
        (*move_set, "kill") if move_first else ("kill", *move_set)
        for move_set in (("reassign",), ("rebalance",), ("reassign", "rebalance"))
        for move_first in (True, False)
    }
    assert moves == {"reassign", "rebalance", "cancel"}
    assert {"controller", "leader", "adding", "removing"} <= kill_targets


def test_the_scenario_needs_a_fourth_broker_and_checks_replicas() -> None:
    assert REASSIGN.nodes == 4 and REASSIGN.check_replicas and not REASSIGN.needs_partitions


# -- replica logs -----------------------------------------------------------------------------


def _segment(directory: Path, base_offset: int, *batches: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{base_offset:020d}.log").write_bytes(b"".join(batches))


def _batch(base_offset: int, *values: str) -> bytes:
    return build_batch(
        [(None, value.encode()) for value in values], base_offset=base_offset, base_timestamp_ms=1
    )


def test_a_replica_log_is_read_across_segments_without_a_torn_tail(tmp_path: Path) -> None:
    directory = tmp_path / "chaos-0"
    _segment(directory, 0, _batch(0, "a", "b"), _batch(2, "c"))
    torn = _batch(4, "e")[:-3]  # still being written
    _segment(directory, 3, _batch(3, "d"), torn)
    replica = read_replica_log(2, directory)
    assert replica.error is None
    assert replica.records == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    assert replica.log_end_offset == 4
    assert replica.summary() == {
        "node": 2,
        "log_end_offset": 4,
        "records": 4,
        "digest": records_digest(replica.records),
        "error": None,
    }


def test_a_missing_or_corrupt_replica_says_so(tmp_path: Path) -> None:
    assert read_replica_log(1, tmp_path / "absent").error == "no replica directory"
    damaged = bytearray(_batch(0, "a", "b"))
    damaged[-1] ^= 0xFF
    _segment(tmp_path / "chaos-1", 0, bytes(damaged))
    assert "corrupt batch" in (read_replica_log(1, tmp_path / "chaos-1").error or "")


# -- detectors --------------------------------------------------------------------------------

RECORDS = [(0, "a"), (1, "b")]


def _log(node: int, records: list[tuple[int, str]] = RECORDS, **changes: Any) -> dict[str, Any]:
    return {
        "node": node,
        "log_end_offset": records[-1][0] + 1 if records else 0,
        "records": len(records),
        "digest": records_digest(records),
        "error": None,
        **changes,
    }


def _history(
    logs: list[dict[str, Any]],
    *,
    replicas: list[int] | None = None,
    stray: list[int] | None = None,
    running: list[dict[str, Any]] | None = None,
    check_type: str = "ok",
) -> list[Op]:
    rows: list[tuple[str, str, str, Any]] = [
        ("p", "invoke", "send", {"partition": 0, "value": "a", "idempotent": True}),
        ("p", "ok", "send", {"partition": 0, "value": "a", "offset": 0}),
        ("p", "invoke", "send", {"partition": 0, "value": "b", "idempotent": True}),
        ("p", "ok", "send", {"partition": 0, "value": "b", "offset": 1}),
        ("final-reader", "invoke", "final-read", None),
        ("final-reader", "invoke", "poll", None),
        ("final-reader", "ok", "poll", {"records": [[0, 0, "a"], [0, 1, "b"]]}),
        ("final-reader", "ok", "final-read", {"high_watermarks": [[0, 2]]}),
        ("replica-checker", "invoke", "replicas", {"topic": "chaos"}),
    ]
    value: Any = {
        "topic": "chaos",
        "replication_factor": 3,
        "reassignments_running": running or [],
        "partitions": [
            {
                "partition": 0,
                "replicas": replicas or [log["node"] for log in logs],
                "isr": [log["node"] for log in logs],
                "leader": logs[0]["node"],
                "logs": logs,
                "stray": stray or [],
                "first_difference": None,
            }
        ],
    }
    if check_type != "ok":
        value = {"error": "not here"}
    rows.append(("replica-checker", check_type, "replicas", value))
    return [
        Op(index=i, time=float(i), process=p, type=t, f=f, value=v)
        for i, (p, t, f, v) in enumerate(rows)
    ]


def test_identical_replicas_matching_the_final_read_are_valid() -> None:
    result = check(_history([_log(1), _log(2), _log(4)]))
    assert result.valid is True, result.anomalies
    assert result.stats["replica-logs-compared"] == 3


def test_replicas_that_differ_diverge() -> None:
    other = [(0, "a"), (1, "x")]
    result = check(_history([_log(1), _log(2), _log(4, other)]))
    assert set(result.anomalies) == {"replica-divergence"}
    example = result.anomalies["replica-divergence"].examples[0]
    assert example["partition"] == 0 and "the replicas differ" in example["problems"]


def test_replicas_that_agree_but_lack_what_the_final_read_read_diverge() -> None:
    short = [(0, "a")]
    result = check(_history([_log(1, short), _log(2, short), _log(4, short)]))
    assert set(result.anomalies) == {"replica-divergence"}
    assert result.anomalies["replica-divergence"].examples[0]["problems"] == [
        "a replica differs from the final read"
    ]


def test_an_unreadable_replica_diverges() -> None:
    result = check(_history([_log(1), _log(2), _log(4, [], error="no replica directory")]))
    assert "replica-divergence" in result.anomalies


def test_a_reassignment_still_running_is_stuck() -> None:
    running = [{"partition": 0, "replicas": [1, 2, 4, 3], "adding": [4], "removing": [3]}]
    result = check(_history([_log(1), _log(2), _log(4)], running=running))
    assert set(result.anomalies) == {"reassignment-stuck"}


def test_a_changed_replication_factor_is_reported() -> None:
    result = check(_history([_log(1), _log(2), _log(3), _log(4)]))
    assert set(result.anomalies) == {"replication-factor-changed"}


def test_a_stray_replica_directory_is_a_legal_note() -> None:
    result = check(_history([_log(1), _log(2), _log(4)], stray=[3]))
    assert result.valid is True and set(result.notes) == {"stray-replica"}


def test_a_replica_check_that_could_not_read_makes_the_result_unknown() -> None:
    result = check(_history([_log(1)], check_type="info"))
    assert result.valid == "unknown"


def test_a_write_read_once_but_missing_from_the_final_read_is_lost() -> None:
    """Seed 5 of the reassign scenario: a consumer read an acknowledged value before the new
    leader truncated it away; the final read holds another value at its offset."""
    rows: list[tuple[str, str, str, Any]] = [
        ("p", "invoke", "send", {"partition": 0, "value": "a", "idempotent": True}),
        ("p", "ok", "send", {"partition": 0, "value": "a", "offset": 0}),
        ("c", "invoke", "poll", None),
        ("c", "ok", "poll", {"records": [[0, 0, "a"]]}),
        ("q", "invoke", "send", {"partition": 0, "value": "b", "idempotent": True}),
        ("q", "ok", "send", {"partition": 0, "value": "b", "offset": 0}),
        ("final-reader", "invoke", "final-read", None),
        ("final-reader", "invoke", "poll", None),
        ("final-reader", "ok", "poll", {"records": [[0, 0, "b"]]}),
        ("final-reader", "ok", "final-read", {"high_watermarks": [[0, 1]]}),
    ]
    ops = [Op(i, float(i), p, t, f, v) for i, (p, t, f, v) in enumerate(rows)]
    result = check(ops)
    assert set(result.anomalies) == {"lost-write", "inconsistent-offsets"}
    [lost] = result.anomalies["lost-write"].examples
    assert lost["value"] == "a" and lost["read_before_lost"] is True


# -- moves ------------------------------------------------------------------------------------


class _FourNodes:
    backend = "fake"

    def nodes(self) -> list[int]:
        return [1, 2, 3, 4]


@pytest.mark.parametrize("seed", range(10))
def test_a_random_move_keeps_the_replication_factor(seed: int) -> None:
    nemesis = Nemesis(_FourNodes(), None, seed=seed, topic="chaos")  # type: ignore[arg-type]
    target = nemesis._replace_one([1, 2, 3])
    assert len(target) == len(set(target)) == 3
    assert len(set(target) - {1, 2, 3}) == 1 and 4 in target


def test_run_refuses_the_docker_backend_for_four_nodes(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        chaos, ["run", "reassign", "--docker", "--seed", "1", "--out", str(tmp_path / "run")]
    )
    assert result.exit_code == 1 and "3 nodes" in result.output, result.output
