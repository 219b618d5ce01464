"""Run a scenario against a cluster: the one entry point shared by pytest and ``fluxctl chaos``.

``run_scenario(scenario, control, ...)`` is the hook every backend plugs into: give it any
object implementing ``flux.chaos.nemesis.ClusterControl`` (the process backend's
``flux.cli.chaos.ProcessCluster``, or a Docker backend's) and it

1. creates the workload topic (3 partitions, replication factor up to 3,
   ``min.insync.replicas=2``, plus the scenario's ``topic_configs``),
2. prints the seeded schedule and starts the workloads,
3. runs the nemesis through the schedule, then lets the load run on for ``QUIET_S``,
4. stops the workloads, heals everything, waits for full ISRs and reads every partition
   (for a scenario with ``check_replicas``, then reads every replica's log from the nodes'
   data directories: ``flux.chaos.replicas``),
5. checks the history and writes ``history.jsonl``, ``schedule.txt``, ``report.json``,
   ``report.txt`` and ``plot.png`` into ``out_dir``.

On a secured cluster (``control.client_config()`` is not empty) every client of the run, from
the topic's creation to the final read, uses those settings.

A Docker backend is found by ``docker_backend_factory()``: the module
``flux.chaos.docker_backend`` defining ``docker_cluster(work_dir: Path, *, nodes: int)``, a
context manager that brings a cluster up, yields its ``ClusterControl`` (with working
``partition`` / ``heal``) and tears it down. Until that module exists, scenarios that need
partitions are skipped by pytest and refused by ``fluxctl chaos run``.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux.sdk import Admin, TopicAlreadyExistsError

from . import history as history_module
from .checker import CheckResult, check
from .history import History
from .nemesis import ClusterControl, Nemesis, Step, format_schedule, wait_full_isr
from .replicas import replica_check
from .report import format_report, write_report
from .scenarios import Scenario, generate_schedule
from .txn_workload import TXN_TOPIC, TxnWorkload, transactional_id, txn_final_read
from .workloads import GroupWorkload, LogWorkload, final_read

__all__ = [
    "DOCKER_BACKEND_MODULE",
    "DockerBackendFactory",
    "RunResult",
    "docker_backend_factory",
    "run_scenario",
]

DOCKER_BACKEND_MODULE = "flux.chaos.docker_backend"
DockerBackendFactory = Callable[..., AbstractContextManager[ClusterControl]]

TOPIC = "chaos"
GROUP = "chaos-group"
PARTITIONS = 3
#: Load keeps running this long after the last fault healed, so recovery shows in the history.
QUIET_S = 2.0


@dataclass(frozen=True, slots=True)
class RunResult:
    scenario: str
    seed: int
    duration_s: float
    schedule: list[Step]
    result: CheckResult
    out_dir: Path
    files: dict[str, Path]
    report: str


def docker_backend_factory() -> DockerBackendFactory | None:
    """The Docker backend's ``docker_cluster`` factory, or None while it does not exist."""
    try:
        module = importlib.import_module(DOCKER_BACKEND_MODULE)
    except ModuleNotFoundError as error:
        if error.name == DOCKER_BACKEND_MODULE:
            return None
        raise
    factory: DockerBackendFactory = module.docker_cluster
    return factory


def run_scenario(
    scenario: Scenario,
    control: ClusterControl,
    *,
    seed: int,
    duration_s: float,
    out_dir: Path,
    log: Callable[[str], None] = print,
) -> RunResult:
    """Run ``scenario`` against ``control`` for ``duration_s`` seconds of faults; see the
    module docstring. Never raises for anomalies: the caller reads ``RunResult.result``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    nodes = control.nodes()
    schedule = generate_schedule(
        scenario,
        seed=seed,
        duration_s=duration_s,
        nodes=len(nodes),
        partitions=control.backend != "process",
        disks=control.disks,
    )
    schedule_text = format_schedule(schedule)
    (out_dir / "schedule.txt").write_text(
        f"scenario {scenario.name} seed {seed} duration {duration_s}\n{schedule_text}\n"
    )
    log(f"chaos: scenario {scenario.name}, seed {seed}, {duration_s:g} s of faults, schedule:")
    log(schedule_text or "  (no steps)")
    bootstrap = control.bootstrap_servers()
    client_config = control.client_config()
    replication_factor = min(3, len(nodes))
    transactional = scenario.workload.transactional_producers > 0
    topics = [TOPIC, TXN_TOPIC] if transactional else [TOPIC]
    for topic in topics:
        _create_topic(
            bootstrap, replication_factor=replication_factor, client_config=client_config,
            topic=topic, configs=dict(scenario.topic_configs) if topic == TOPIC else {},
        )  # fmt: skip
    history = History()
    partitions = list(range(PARTITIONS))
    workloads: list[Any] = [
        LogWorkload(history, bootstrap, TOPIC, partitions, scenario.workload, log, client_config)
    ]
    if scenario.workload.group_members:
        workloads.append(
            GroupWorkload(
                history, bootstrap, TOPIC, GROUP, scenario.workload, seed, log, client_config
            )
        )
    if transactional:
        workloads.append(
            TxnWorkload(
                history,
                bootstrap,
                TXN_TOPIC,
                partitions,
                scenario.workload.transactional_producers,
                seed,
                log,
                client_config,
            )  # fmt: skip
        )
    group = GROUP if scenario.workload.group_members else None
    nemesis = Nemesis(
        control,
        history,
        seed=seed,
        topic=TOPIC,
        group=group,
        transactional_id=transactional_id(0) if transactional else None,
        replication_factor=replication_factor,
        log=log,
    )
    stop = threading.Event()
    for workload in workloads:
        workload.start()
    try:
        nemesis.run(schedule, stop)
        stop.wait(QUIET_S)
    finally:
        for workload in workloads:
            workload.stop()
    if not wait_full_isr(bootstrap, topics, client_config=client_config, every_broker=True):
        log("chaos: the topic did not regain full ISRs in time; reading anyway")
    final_read(history, bootstrap, TOPIC, client_config=client_config)
    if scenario.check_replicas:
        replica_check(history, control, TOPIC, replication_factor=replication_factor, log=log)
    if transactional:
        txn_final_read(history, bootstrap, TXN_TOPIC, partitions, client_config=client_config)
    ops = history.ops()
    history_module.save(ops, out_dir / "history.jsonl")
    result = check(ops)
    context = {"scenario": scenario.name, "seed": seed, "duration_s": duration_s}
    files = write_report(result, ops, out_dir, **context)
    files["history"] = out_dir / "history.jsonl"
    files["schedule"] = out_dir / "schedule.txt"
    report = format_report(result, **context)
    log(report)
    return RunResult(scenario.name, seed, duration_s, schedule, result, out_dir, files, report)


def _create_topic(
    bootstrap: str,
    *,
    replication_factor: int,
    client_config: Mapping[str, str],
    topic: str = TOPIC,
    configs: Mapping[str, str] | None = None,
) -> None:
    with Admin(bootstrap, timeout_s=30, security=client_config or None) as admin:
        try:
            admin.create_topic(
                topic,
                partitions=PARTITIONS,
                replication_factor=replication_factor,
                configs={"min.insync.replicas": str(min(2, replication_factor)), **(configs or {})},
            )
        except TopicAlreadyExistsError:
            pass
        # Leaders of a new topic appear in every broker's metadata a moment after creation.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(p.leader >= 0 for p in admin.describe_topic(topic).partitions):
                return
            time.sleep(0.1)
