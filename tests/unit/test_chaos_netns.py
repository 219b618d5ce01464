"""The pure parts of partitions on local processes and of clock jumps: partition shapes, the
packet filter rules each node namespace gets, subnet and stale-namespace choices, the nemesis
steps that drive them (against a recording fake backend), the schedules of the scenarios, and
the clock shim's patched ``time``. No namespace is created here (``chaos/tests/test_netns.py``
does that)."""

from __future__ import annotations

import ipaddress
import logging
import random
import threading
import time
from pathlib import Path
from typing import Any

import flux.chaos.nemesis as nemesis_module
import pytest
from click.testing import CliRunner
from flux.chaos import clock_shim
from flux.chaos import netns as netns_module
from flux.chaos.history import History
from flux.chaos.nemesis import Nemesis, Step, format_schedule
from flux.chaos.netns import _free_subnet, _route_prefixes, stale_namespaces
from flux.chaos.partitions import (
    CLIENT,
    FilterRule,
    Shape,
    bridge,
    filter_rules,
    healed,
    iptables_restore_input,
    isolate,
    nft_input,
    one_way,
    split,
)
from flux.chaos.scenarios import CLOCK_JUMPS_S, SCENARIOS, SHAPE_FAULTS, generate_schedule
from flux.cli.chaos import chaos

NODES = [1, 2, 3]
ADDRESSES = {1: "10.9.8.1", 2: "10.9.8.2", 3: "10.9.8.3"}
CLIENT_ADDRESS = "10.9.8.254"


def _reachability(shape: Shape) -> set[tuple[Any, Any]]:
    endpoints: list[Any] = [*NODES, CLIENT]
    return {(a, b) for a in endpoints for b in endpoints if a != b and shape.reaches(a, b)}


# -- shapes ---------------------------------------------------------------------------------------


def test_a_split_cuts_both_ways_between_the_sides_and_keeps_the_clients() -> None:
    shape = split([1], NODES)
    assert shape.drops == {(1, 2), (2, 1), (1, 3), (3, 1)}
    assert shape.reaches(CLIENT, 1) and shape.reaches(1, CLIENT)
    assert shape.reaches(2, 3) and shape.reaches(3, 2)


def test_a_majority_minority_split_of_five() -> None:
    shape = split([4, 5], [1, 2, 3, 4, 5])
    assert shape.reaches(4, 5) and shape.reaches(1, 3)
    assert not shape.reaches(4, 1) and not shape.reaches(1, 5)
    assert len(shape.drops) == 2 * 2 * 3


def test_isolate_cuts_the_clients_too() -> None:
    shape = isolate(2, NODES)
    assert _reachability(shape) == {(1, 3), (3, 1), (1, CLIENT), (CLIENT, 1), (3, CLIENT),
                                    (CLIENT, 3)}  # fmt: skip


def test_one_way_drops_one_direction_only() -> None:
    shape = one_way([1], [2, 3])
    assert not shape.reaches(1, 2) and not shape.reaches(1, 3)
    assert shape.reaches(2, 1) and shape.reaches(3, 1) and shape.reaches(CLIENT, 1)


def test_a_bridge_of_three_is_a_line() -> None:
    shape = bridge(2, NODES)
    assert shape.drops == {(1, 3), (3, 1)}
    assert shape.reaches(1, 2) and shape.reaches(2, 3)


def test_a_bridge_of_five_splits_the_others_in_halves() -> None:
    shape = bridge(3, [1, 2, 3, 4, 5])
    assert not shape.reaches(1, 4) and not shape.reaches(2, 5) and shape.reaches(1, 2)
    assert all(shape.reaches(3, n) and shape.reaches(n, 3) for n in (1, 2, 4, 5))


@pytest.mark.parametrize(
    "make",
    [
        lambda: split([], NODES),
        lambda: split(NODES, NODES),
        lambda: split([7], NODES),
        lambda: one_way([1], [1, 2]),
        lambda: bridge(1, [1, 2]),
        lambda: isolate(4, NODES),
    ],
)
def test_shapes_that_make_no_sense_are_refused(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


def test_a_shape_describes_itself_sorted_for_the_history() -> None:
    assert isolate(1, [1, 2]).describe() == {
        "shape": "isolate",
        "drops": [[1, 2], [1, "client"], [2, 1], ["client", 1]],
    }


# -- rules ----------------------------------------------------------------------------------------


def test_a_drop_is_filtered_where_the_packet_arrives() -> None:
    rules = filter_rules(one_way([1], [2, 3]), ADDRESSES, CLIENT_ADDRESS)
    assert rules == {
        1: [],
        2: [FilterRule("input", "10.9.8.1")],
        3: [FilterRule("input", "10.9.8.1")],
    }


def test_isolation_filters_the_clients_on_the_isolated_node() -> None:
    rules = filter_rules(isolate(1, NODES), ADDRESSES, CLIENT_ADDRESS)
    assert rules[1] == [
        FilterRule("input", "10.9.8.2"),
        FilterRule("input", "10.9.8.254"),
        FilterRule("input", "10.9.8.3"),
        FilterRule("output", "10.9.8.254"),
    ]
    assert rules[2] == [FilterRule("input", "10.9.8.1")]
    assert rules[3] == [FilterRule("input", "10.9.8.1")]


def test_healing_gives_every_node_an_empty_rule_set() -> None:
    assert filter_rules(healed(), ADDRESSES, CLIENT_ADDRESS) == {1: [], 2: [], 3: []}


def test_a_node_without_an_address_is_an_error() -> None:
    with pytest.raises(ValueError):
        filter_rules(split([1], [1, 2, 4]), ADDRESSES, CLIENT_ADDRESS)


def test_iptables_restore_input_replaces_the_filter_table() -> None:
    text = iptables_restore_input(
        [FilterRule("input", "10.9.8.1"), FilterRule("output", "10.9.8.254")]
    )
    assert text.splitlines() == [
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        "-A INPUT -s 10.9.8.1/32 -j DROP",
        "-A OUTPUT -d 10.9.8.254/32 -j DROP",
        "COMMIT",
    ]
    assert "-A" not in iptables_restore_input([])


def test_nft_input_replaces_its_table() -> None:
    text = nft_input([FilterRule("input", "10.9.8.1"), FilterRule("output", "10.9.8.254")])
    assert "ip saddr 10.9.8.1 drop" in text and "ip daddr 10.9.8.254 drop" in text
    assert text.index("delete table") < text.index("table ip flux_chaos {")


# -- subnets and names ----------------------------------------------------------------------------


def test_a_subnet_avoids_every_route() -> None:
    taken = _route_prefixes(
        '[{"dst": "default"}, {"dst": "10.64.0.0/11"}, {"dst": "10.100.0.0/16"},'
        ' {"dst": "192.0.2.2"}, {"dst": "172.17.0.0/16"}]'
    )
    assert ipaddress.ip_network("10.64.0.0/11") in taken
    for seed in range(50):
        subnet = _free_subnet(taken, random.Random(seed))
        assert subnet.prefixlen == 24 and subnet.subnet_of(netns_module.SUBNET_POOL)
        assert not any(subnet.overlaps(prefix) for prefix in taken)


def test_no_free_subnet_is_an_error() -> None:
    with pytest.raises(netns_module.NetnsError):
        _free_subnet([ipaddress.ip_network("10.0.0.0/8")], random.Random(1))


def test_only_our_namespaces_of_dead_processes_are_stale() -> None:
    names = ["flux-100-abc123-br", "flux-100-abc123-n1", "flux-200-def456-n2", "other-ns",
             "flux-abc-n1"]  # fmt: skip
    assert stale_namespaces(names, alive=lambda pid: pid == 200) == [
        "flux-100-abc123-br",
        "flux-100-abc123-n1",
    ]


def test_interface_names_fit_the_kernel_limit() -> None:
    network = netns_module.NetnsNetwork([1, 2, 3])
    assert len(network.client_link) <= netns_module.LINK_NAME_MAX
    assert network.namespace(2).startswith(network.name) and network.namespace(2).endswith("-n2")


# -- nemesis --------------------------------------------------------------------------------------


class RecordingControl:
    """A ``ClusterControl`` that records what the nemesis asks of it."""

    backend = "netns"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def nodes(self) -> list[int]:
        return list(NODES)

    def bootstrap_servers(self) -> str:
        return "10.9.8.1:9092"

    def client_config(self) -> dict[str, str]:
        return {}

    def is_running(self, node: int) -> bool:
        return True

    def cut(self, shape: Shape) -> None:
        self.calls.append(("cut", shape))

    def partition(self, nodes: list[int]) -> None:
        self.calls.append(("partition", list(nodes)))

    def heal(self) -> None:
        self.calls.append(("heal", None))

    def jump_clock(self, node: int, offset_s: float) -> None:
        self.calls.append(("clock", (node, offset_s)))


@pytest.mark.parametrize(
    ("f", "expected"),
    [
        ("isolate", isolate(2, NODES)),
        ("one-way-out", one_way([2], [1, 3])),
        ("one-way-in", one_way([1, 3], [2])),
        ("bridge", bridge(2, NODES)),
    ],
)
def test_shape_steps_cut_the_shape_around_their_target(f: str, expected: Shape) -> None:
    control = RecordingControl()
    history = History()
    Nemesis(control, history, seed=1, topic="t").execute(Step(1.0, f, "node-2"))  # type: ignore[arg-type]
    assert control.calls == [("cut", expected)]
    ok = history.ops()[-1]
    assert ok.type == "ok" and ok.value["shape"] == expected.name


def test_recover_heals_and_sets_jumped_clocks_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nemesis_module, "wait_full_isr", lambda *a, **k: True)
    control = RecordingControl()
    history = History()
    nemesis = Nemesis(control, history, seed=1, topic="t")  # type: ignore[arg-type]
    nemesis.execute(Step(1.0, "clock", "node-3", offset_s=-3600.0))
    nemesis.execute(Step(2.0, "one-way-out", "node-1"))
    nemesis.execute(Step(3.0, "recover"))
    assert control.calls == [
        ("clock", (3, -3600.0)),
        ("cut", one_way([1], [2, 3])),
        ("heal", None),
        ("clock", (3, 0.0)),
    ]
    recovered = history.ops()[-1]
    assert recovered.value["healed"] is True and recovered.value["clocks_reset"] == [3]
    assert history.ops()[0].value == {"target": "node-3", "offset_s": -3600.0}


def test_a_clock_step_carries_its_offset_and_prints_it() -> None:
    with pytest.raises(AssertionError):
        Step(1.0, "clock", "leader")
    with pytest.raises(AssertionError):
        Step(1.0, "kill", "leader", offset_s=5.0)
    assert format_schedule([Step(2.5, "clock", "leader", offset_s=-300.0)]) == (
        "  +  2.50s  clock leader -300s"
    )


# -- scenarios ------------------------------------------------------------------------------------


def test_partition_shapes_meets_different_shapes_in_turn() -> None:
    scenario = SCENARIOS["partition-shapes"]
    assert scenario.needs_partitions and scenario.partition_shapes
    steps = generate_schedule(scenario, seed=3, duration_s=60, nodes=3, partitions=True)
    faults = [(s.f, s.target) for s in steps if s.f != "recover"]
    assert len(faults) >= 5 and len(set(faults[: len(SHAPE_FAULTS)])) == min(
        len(faults), len(SHAPE_FAULTS)
    )
    assert [s.f for s in steps[1::2]] == ["recover"] * (len(steps) // 2)


def test_clock_jump_jumps_one_node_then_recovers() -> None:
    scenario = SCENARIOS["clock-jump"]
    assert scenario.needs_clock and not scenario.needs_partitions
    assert scenario.settings() == {"broker": {"retention_check_interval_ms": 500}}
    assert dict(scenario.topic_configs)["retention.ms"] == str(7 * 86400 * 1000)
    steps = generate_schedule(scenario, seed=20240601, duration_s=120, nodes=3, partitions=False)
    jumps = [s for s in steps if s.f == "clock"]
    assert jumps and all(abs(s.offset_s or 0) in CLOCK_JUMPS_S for s in jumps)
    assert {s.offset_s > 0 for s in jumps if s.offset_s} == {True, False}
    assert [s.f for s in steps] == ["clock", "recover"] * len(jumps)


def test_docker_runs_only_the_partitions_it_can_make(tmp_path: Path) -> None:
    for name in ("partition-shapes", "clock-jump"):
        result = CliRunner().invoke(
            chaos, ["run", name, "--seed", "1", "--docker", "--out", str(tmp_path / name)]
        )
        assert result.exit_code != 0 and "drop --docker" in result.output


# -- the clock shim -------------------------------------------------------------------------------


def test_the_shim_moves_the_wall_clock_and_not_the_monotonic_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("time", "time_ns", "localtime", "gmtime", "ctime", "asctime", "strftime"):
        monkeypatch.setattr(time, name, getattr(time, name))  # restored after the test
    offset_file = tmp_path / "clock-offset"
    clock_shim.write_offset(offset_file, 3600.0)
    real, monotonic = time.time(), time.monotonic()
    assert clock_shim.install(str(offset_file))
    assert abs(time.time() - real - 3600.0) < 5
    assert abs(time.time_ns() / 1e9 - real - 3600.0) < 5
    assert abs(time.monotonic() - monotonic) < 5
    # The functions that default to now follow the jump, and still work where the library
    # keeps them as class attributes (logging's Formatter.converter is time.localtime).
    assert abs(time.mktime(time.localtime()) - real - 3600.0) < 5
    record = logging.makeLogRecord({"msg": "jumped"})

    class Formatter(logging.Formatter):
        converter = time.localtime

    assert Formatter("%(asctime)s %(message)s").format(record).endswith(" jumped")
    clock_shim.write_offset(offset_file, -7200.0)
    deadline = time.monotonic() + 5
    while time.time() - real > -3600 and time.monotonic() < deadline:
        threading.Event().wait(clock_shim.REFRESH_S)  # the shim re-reads after REFRESH_S
    assert abs(time.time() - real + 7200.0) < 5


def test_the_shim_without_a_file_patches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(clock_shim.CLOCK_FILE_ENV, raising=False)
    before = time.time
    assert clock_shim.install() is False and time.time is before


def test_absurd_offsets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        clock_shim.write_offset(tmp_path / "x", 1e12)
    (tmp_path / "y").write_text("garbage")
    assert clock_shim.read_offset(tmp_path / "y") == 0.0


def test_the_sitecustomize_installs_the_shim(tmp_path: Path) -> None:
    folder = clock_shim.write_sitecustomize(tmp_path / "shim")
    text = (folder / "sitecustomize.py").read_text()
    assert "flux.chaos.clock_shim.install()" in text


def test_a_process_cluster_without_namespaces_or_shim_refuses_partitions_and_jumps(
    tmp_path: Path,
) -> None:
    from flux.chaos.nemesis import NemesisUnsupportedError
    from flux.cli.chaos import ProcessCluster

    plain = ProcessCluster([])
    assert plain.backend == "process"
    with pytest.raises(NemesisUnsupportedError, match="network namespaces"):
        plain.partition([1])
    with pytest.raises(NemesisUnsupportedError, match="clock shim"):
        plain.jump_clock(1, 60.0)
    offset_file = tmp_path / "clock-offset"
    ProcessCluster([], clock_files={1: offset_file}).jump_clock(1, -300.0)
    assert clock_shim.read_offset(offset_file) == -300.0
