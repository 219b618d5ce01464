"""Each chaos detector against a tiny hand-written history (STYLE.md: Jepsen's split), plus the
history's JSON Lines round trip, availability figures and seeded schedules."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from flux.chaos import history as history_module
from flux.chaos.checker import check
from flux.chaos.history import History, Op
from flux.chaos.nemesis import Step
from flux.chaos.scenarios import SCENARIOS, generate_schedule


def _history(*rows: tuple[str, str, str, Any]) -> list[Op]:
    """Ops from (process, type, f, value) rows, one second apart."""
    return [
        Op(index=i, time=float(i), process=p, type=t, f=f, value=v)
        for i, (p, t, f, v) in enumerate(rows)
    ]


def _send(
    process: str,
    value: str,
    partition: int,
    offset: int | None,
    *,
    outcome: str = "ok",
    idempotent: bool = False,
) -> list[tuple[str, str, str, Any]]:
    request = {"partition": partition, "value": value, "idempotent": idempotent}
    result = {**request, "offset": offset} if outcome == "ok" else {**request, "error": "x"}
    return [(process, "invoke", "send", request), (process, outcome, "send", result)]


def _poll(process: str, *records: tuple[int, int, str]) -> list[tuple[str, str, str, Any]]:
    return [
        (process, "invoke", "poll", None),
        (process, "ok", "poll", {"records": [list(r) for r in records]}),
    ]


def _assign(process: str, *partitions: int) -> list[tuple[str, str, str, Any]]:
    return [(process, "ok", "assign", {"partitions": list(partitions)})]


FINAL = [
    ("final-reader", "invoke", "final-read", None),
    ("final-reader", "ok", "final-read", {"high_watermarks": [[0, 3]]}),
]


def _names(ops: list[Op]) -> set[str]:
    return set(check(ops).anomalies)


def test_a_clean_history_is_valid() -> None:
    ops = _history(
        *_send("p", "a", 0, 0),
        *_send("p", "b", 0, 1),
        *_assign("c", 0),
        *_poll("c", (0, 0, "a"), (0, 1, "b")),
        *FINAL,
    )
    result = check(ops)
    assert result.valid is True, result.anomalies
    assert result.stats["sends-acknowledged"] == 2


def test_lost_write_is_an_acknowledged_value_missing_before_later_reads() -> None:
    ops = _history(
        *_send("p", "a", 0, 0),
        *_send("p", "b", 0, 1),
        *_poll("c", (0, 1, "b")),
        *FINAL,
    )
    result = check(ops)
    assert set(result.anomalies) == {"lost-write"}
    assert result.anomalies["lost-write"].examples[0]["value"] == "a"
    assert result.valid is False


def test_unseen_needs_a_completed_final_read_to_be_illegal() -> None:
    rows = [*_send("p", "a", 0, 0), *_send("p", "b", 0, 1), *_poll("c", (0, 0, "a"))]
    assert _names(_history(*rows, *FINAL)) == {"unseen"}
    without_final = check(_history(*rows))
    assert without_final.anomalies == {}
    assert without_final.valid == "unknown"
    assert "the final read did not complete" in without_final.unknown_reasons


def test_duplicate_of_an_idempotent_producer_is_illegal() -> None:
    ops = _history(
        *_send("p", "a", 0, 0, idempotent=True),
        *_poll("c", (0, 0, "a"), (0, 1, "a")),
        *FINAL,
    )
    result = check(ops)
    assert set(result.anomalies) == {"duplicate"}
    assert result.anomalies["duplicate"].examples[0]["positions"] == [[0, 0], [0, 1]]


def test_duplicate_of_a_plain_producer_is_a_legal_note() -> None:
    ops = _history(*_send("p", "a", 0, 0), *_poll("c", (0, 0, "a"), (0, 1, "a")), *FINAL)
    result = check(ops)
    assert result.anomalies == {} and result.valid is True
    assert result.notes["duplicate-non-idempotent"].count == 1


def test_inconsistent_offsets_is_one_offset_with_two_values() -> None:
    ops = _history(
        *_send("p", "a", 0, 0),
        *_poll("c", (0, 0, "a")),
        *_poll("d", (0, 0, "z")),
        *FINAL,
    )
    assert "inconsistent-offsets" in _names(ops)


def test_non_monotonic_send_is_a_later_ack_at_a_lower_offset() -> None:
    ops = _history(
        *_send("p", "a", 0, 5),
        *_send("p", "b", 0, 4),
        *_poll("c", (0, 4, "b"), (0, 5, "a")),
        *FINAL,
    )
    assert _names(ops) == {"non-monotonic-send"}


def test_non_monotonic_poll_within_one_assignment() -> None:
    ops = _history(
        *_assign("c", 0),
        *_poll("c", (0, 0, "a"), (0, 1, "b")),
        *_poll("c", (0, 1, "b")),
        *FINAL,
    )
    assert _names(ops) == {"non-monotonic-poll"}


def test_a_new_assignment_may_start_over() -> None:
    ops = _history(
        *_assign("c", 0),
        *_poll("c", (0, 0, "a"), (0, 1, "b")),
        *_assign("c", 0),
        *_poll("c", (0, 0, "a")),
        *FINAL,
    )
    assert _names(ops) == set()


def test_poll_skip_jumps_over_offsets_known_to_hold_values() -> None:
    ops = _history(
        *_assign("c", 0),
        *_poll("c", (0, 0, "a")),
        *_poll("c", (0, 2, "c")),
        *_poll("d", (0, 0, "a"), (0, 1, "b"), (0, 2, "c")),
        *FINAL,
    )
    result = check(ops)
    assert set(result.anomalies) == {"poll-skip"}
    assert result.anomalies["poll-skip"].examples[0]["skipped_offsets"] == [1]


def test_a_gap_nobody_saw_a_value_in_is_no_skip() -> None:
    ops = _history(*_assign("c", 0), *_poll("c", (0, 0, "a")), *_poll("c", (0, 2, "c")), *FINAL)
    assert _names(ops) == set()


def test_aborted_read_counts_only_definite_failures() -> None:
    failed = _history(*_send("p", "a", 0, None, outcome="fail"), *_poll("c", (0, 0, "a")), *FINAL)
    assert _names(failed) == {"aborted-read"}
    unknown = _history(*_send("p", "a", 0, None, outcome="info"), *_poll("c", (0, 0, "a")), *FINAL)
    assert _names(unknown) == set()
    assert check(unknown).valid == "unknown"  # nothing acknowledged, yet no anomaly


def test_info_sends_never_read_are_no_loss() -> None:
    ops = _history(*_send("p", "a", 0, None, outcome="info"), *FINAL)
    result = check(ops)
    assert result.anomalies == {}
    assert result.valid == "unknown"  # nothing was acknowledged, so nothing was tested


def _commit(process: str, kind: str, offset: int) -> list[tuple[str, str, str, Any]]:
    value = {"group": "g", "offsets": [[0, offset]]}
    return [(process, "invoke", kind, value), (process, "ok", kind, value)]


def test_committed_offset_going_backwards_after_an_acknowledged_commit() -> None:
    ops = _history(*_commit("m1", "commit", 10), *_commit("m2", "committed", 7))
    assert _names(ops) == {"committed-offset-backwards"}
    ops = _history(*_commit("m1", "commit", 10), *_commit("m2", "commit", 9))
    assert _names(ops) == {"committed-offset-backwards"}


def test_overlapping_commits_are_not_ordered() -> None:
    ops = _history(
        ("m2", "invoke", "committed", {"group": "g"}),
        *_commit("m1", "commit", 10),
        ("m2", "ok", "committed", {"group": "g", "offsets": [[0, 7]]}),
        *_commit("m2", "commit", 12),
    )
    assert _names(ops) == set()


def test_availability_reports_the_longest_gap_between_acknowledged_sends() -> None:
    ops = _history(
        *_send("p", "a", 0, 0),  # acked at t=1
        *_send("p", "b", 0, None, outcome="info"),
        *_send("p", "c", 0, None, outcome="info"),
        *_send("p", "d", 0, 1),  # acked at t=7
    )
    availability = check(ops).availability
    assert availability.longest_produce_gap_s == 6.0
    assert availability.longest_produce_gap_at_s == 1.0
    assert availability.error_rates["send"] == {"fail": 0.0, "info": 0.5}


def test_availability_reports_each_whole_cluster_crash() -> None:
    nemesis = "nemesis"
    ops = _history(
        *_send("p", "a", 0, 0),  # acked at t=1
        (nemesis, "invoke", "crash", {"target": None}),
        (nemesis, "ok", "crash", {"target": None, "nodes": [1, 2, 3]}),  # t=3
        *_send("p", "b", 0, None, outcome="info"),
        (nemesis, "invoke", "start", {"target": "node-2"}),
        (nemesis, "ok", "start", {"target": "node-2", "node": 2}),  # t=7: one of three
        (nemesis, "invoke", "start", {"target": "node-3"}),
        (nemesis, "ok", "start", {"target": "node-3", "node": 3}),  # t=9: a majority
        *_send("p", "c", 0, 1),  # acked at t=11
        (nemesis, "invoke", "recover", None),
        (nemesis, "ok", "recover", {"restarted": [1]}),
    )
    [crash] = check(ops).availability.crash_recoveries
    assert crash == {
        "crash_at_s": 3.0,
        "majority_back_at_s": 9.0,
        "unavailable_s": 8.0,
        "available_after_majority_s": 2.0,
    }


def test_history_round_trips_through_json_lines(tmp_path: Path) -> None:
    clock = iter(range(100))
    history = History(clock=lambda: float(next(clock)))
    invocation = history.invoke("p", "send", {"partition": 0, "value": "a", "idempotent": True})
    history.complete(invocation, "ok", {"partition": 0, "value": "a", "offset": 3})
    history.append("c", "ok", "poll", {"records": [[0, 3, "a"]]}, time=0.5)
    history_module.save(history.ops(), tmp_path / "history.jsonl")
    loaded = history_module.load(tmp_path / "history.jsonl")
    assert loaded == history.ops()
    assert [op.index for op in loaded] == [0, 1, 2]
    assert check(loaded).stats["sends-acknowledged"] == 1


def test_history_is_bounded() -> None:
    history = History(ops_max=1)
    history.append("p", "ok", "assign", {"partitions": [0]})
    with pytest.raises(history_module.HistoryFullError):
        history.append("p", "ok", "assign", {"partitions": [0]})


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_schedules_are_reproducible_from_the_seed(name: str) -> None:
    scenario = SCENARIOS[name]
    first = generate_schedule(scenario, seed=42, duration_s=60, nodes=3, partitions=True)
    again = generate_schedule(scenario, seed=42, duration_s=60, nodes=3, partitions=True)
    other = generate_schedule(scenario, seed=43, duration_s=60, nodes=3, partitions=True)
    assert first == again and first != other
    # A cycle that starts before the end finishes soon after it (a crash cycle is longest).
    assert all(isinstance(step, Step) and step.at_s < 60 + 20 for step in first)


def test_mixed_schedules_use_partitions_only_when_the_backend_can() -> None:
    mixed = SCENARIOS["mixed"]
    for seed in range(20):
        steps = generate_schedule(mixed, seed=seed, duration_s=120, nodes=3, partitions=False)
        assert all(step.f != "partition" for step in steps)
    with_partitions = [
        step.f
        for seed in range(20)
        for step in generate_schedule(mixed, seed=seed, duration_s=120, nodes=3, partitions=True)
    ]
    assert "partition" in with_partitions


def test_whole_cluster_crashes_bring_every_node_back_in_each_way() -> None:
    shapes = set()
    for seed in range(30):
        steps = SCENARIOS["whole-cluster-crash"].generate(random.Random(seed), 60.0, 3, False)
        cycle: list[Step] = []
        for step in steps:
            cycle.append(step)
            if step.f != "recover":
                continue
            assert cycle[0].f == "crash", cycle
            starts = [s for s in cycle if s.f == "start"]
            assert len({s.target for s in starts}) == len(starts) < 3, cycle
            assert all(s.f in ("crash", "start", "recover") for s in cycle), cycle
            if not starts:
                shapes.add("all")
            elif starts[0].at_s == starts[1].at_s:
                shapes.add("majority")
            else:
                shapes.add("one-at-a-time")
            assert starts == [] or cycle[-1].at_s > starts[-1].at_s, cycle
            cycle = []
        assert not cycle and steps[-1].f == "recover"
    assert shapes == {"all", "majority", "one-at-a-time"}


def test_every_fault_is_followed_by_a_recovery() -> None:
    steps = SCENARIOS["kill-leader"].generate(random.Random(1), 30.0, 3, False)
    assert [step.f for step in steps[:4]] == ["kill", "recover", "kill", "recover"]
    assert steps[-1].f == "recover"
