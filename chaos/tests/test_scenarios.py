"""Every chaos scenario on a short schedule against a real 3-node cluster: the checker must find
no illegal anomaly (``pytest chaos/``; ``make test`` runs them too).

Seeds and fault windows are fixed so CI runs the same schedules every time; set
``FLUX_CHAOS_SEED`` and ``FLUX_CHAOS_DURATION`` (seconds) to explore, or use
``fluxctl chaos run SCENARIO --seed N --duration S`` for the same run outside pytest. A failure
message carries the report, the seed and the directory of the history and plot.

Scenarios that cut the network run twice: on local processes in network namespaces
(``flux.chaos.netns``; skipped, with the reason, where that cannot run: not root, no ``ip``) and
on Docker (``partition_shapes`` scenarios, which need one-way and bridge partitions, on the
namespaces only). Scenarios that jump clocks run on local processes started with the clock
shim.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flux.chaos.netns import netns_unavailable_reason
from flux.chaos.runner import docker_backend_factory, run_scenario
from flux.chaos.scenarios import SCENARIOS
from flux.cli.chaos import start_process_cluster
from flux.sdk import Admin

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow]

#: Seconds of faults per scenario in CI: two or three fault cycles each, so the six process
#: scenarios together stay within a few minutes on two cores.
CI_DURATION_S = 12.0
CI_SEED = 20_240_601

PROCESS_SCENARIOS = sorted(name for name, s in SCENARIOS.items() if not s.needs_partitions)
NETNS_SCENARIOS = sorted(name for name, s in SCENARIOS.items() if s.needs_partitions)
DOCKER_SCENARIOS = sorted(
    name for name, s in SCENARIOS.items() if s.needs_partitions and not s.partition_shapes
)


def _seed() -> int:
    return int(os.environ.get("FLUX_CHAOS_SEED", CI_SEED))


def _duration_s() -> float:
    return float(os.environ.get("FLUX_CHAOS_DURATION", CI_DURATION_S))


def _assert_valid(outcome) -> None:
    assert outcome.result.valid is True, (
        f"{outcome.scenario} seed {outcome.seed}: {outcome.result.valid}; files in "
        f"{outcome.out_dir}\n{outcome.report}"
    )


@pytest.mark.parametrize("name", PROCESS_SCENARIOS)
def test_scenario_on_local_processes(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[name]
    with start_process_cluster(
        tmp_path / "cluster",
        nodes=scenario.nodes,
        extra=scenario.settings(),
        clock_jumps=scenario.needs_clock,
    ) as control:
        outcome = run_scenario(
            scenario,
            control,
            seed=_seed(),
            duration_s=_duration_s(),
            out_dir=tmp_path / "run",
        )
        if scenario.needs_clock:
            # Retention (checked twice a second) never trusted a jumped clock: every partition
            # of the 7-day topic still starts at offset 0.
            with Admin(control.bootstrap_servers(), timeout_s=10) as admin:
                assert set(admin.earliest_offsets("chaos").values()) == {0}
    _assert_valid(outcome)
    assert outcome.result.stats["nemesis-ops"] > 0
    assert (tmp_path / "run" / "history.jsonl").exists()
    if scenario.check_replicas:
        # Every replica of the 3 partitions of a topic replicated three ways was compared.
        assert outcome.result.stats.get("replica-logs-compared", 0) >= 9, outcome.report


@pytest.mark.parametrize("name", NETNS_SCENARIOS)
def test_scenario_on_network_namespaces(name: str, tmp_path: Path) -> None:
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    scenario = SCENARIOS[name]
    with start_process_cluster(
        tmp_path / "cluster", nodes=scenario.nodes, extra=scenario.settings(), netns=True
    ) as control:
        assert control.backend == "netns"
        outcome = run_scenario(
            scenario,
            control,
            seed=_seed(),
            duration_s=_duration_s(),
            out_dir=tmp_path / "run",
        )
    _assert_valid(outcome)
    assert outcome.result.stats["nemesis-ops"] > 0


@pytest.mark.docker
@pytest.mark.xdist_group("docker")  # one worker builds the image and runs Docker tests in turn
@pytest.mark.parametrize("name", DOCKER_SCENARIOS)
def test_scenario_on_docker(name: str, tmp_path: Path) -> None:
    factory = docker_backend_factory()
    assert factory is not None, "flux.chaos.docker_backend is missing"
    _require_docker()
    with factory(tmp_path / "cluster", nodes=3) as control:
        outcome = run_scenario(
            SCENARIOS[name],
            control,
            seed=_seed(),
            duration_s=_duration_s(),
            out_dir=tmp_path / "run",
        )
    _assert_valid(outcome)


def _require_docker() -> None:
    """The Docker engine answers; CI machines have it, so there its absence fails the test."""
    from flux.chaos.docker_cluster import DockerError, connect

    try:
        connect()
    except DockerError as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(error))


#: The scenario of the secured run: a controller failover with a consumer group running, so
#: every kind of client (both libraries' producers, consumers and group members) logs in.
SECURE_SCENARIO = "kill-controller"


def test_scenario_on_a_secured_cluster(tmp_path: Path) -> None:
    """The same checks on a cluster secured as by ``fluxctl cluster up --secure``: its only
    listener is SASL_SSL with ACLs on, so every client must log in as the admin."""
    with start_process_cluster(tmp_path / "cluster", secure=True) as control:
        assert control.client_config()["security.protocol"] == "SASL_SSL"
        outcome = run_scenario(
            SCENARIOS[SECURE_SCENARIO],
            control,
            seed=_seed(),
            duration_s=_duration_s(),
            out_dir=tmp_path / "run",
        )
    _assert_valid(outcome)
    assert outcome.result.stats["nemesis-ops"] > 0
    assert outcome.result.stats["sends-acknowledged"] > 0, outcome.report
    assert outcome.result.stats.get("commit-ok", 0) > 0, "the group members logged in too"
