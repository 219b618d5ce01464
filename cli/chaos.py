"""``fluxctl chaos``: run a chaos scenario against a fresh local cluster, or re-check a history.

    fluxctl chaos list
    fluxctl chaos schedule mixed --seed 7 --duration 60
    fluxctl chaos run kill-leader [--seed N] [--duration S] [--out DIR] [--docker | --secure]
        [--netns] [--disks] [--schedules N]
    fluxctl chaos check DIR/history.jsonl

``run`` starts its own 3-node cluster of node processes (with the short failure-detection
settings below, in ``--out``), runs the scenario through ``flux.chaos.runner.run_scenario``,
stops every node, prints the report and exits 1 if the history shows an illegal anomaly
(2 if the result is unknown). It never touches the cluster of ``fluxctl cluster up``. With
``--secure`` that cluster is secured as by ``fluxctl cluster up --secure`` (TLS, SASL, ACLs, a
super user ``admin``; see ``flux.cluster.launcher``) and every client of the run logs in as
``admin``. Scenarios that cut the network run their nodes in network namespaces
(``flux.chaos.netns``: root, ``ip`` and iptables or nft needed), and ``--netns`` does that for
any scenario (``mixed`` then draws partitions too); scenarios that jump clocks start their nodes
with the clock shim (``flux.chaos.clock_shim``).

This module also holds ``ProcessCluster``, the process backend of ``flux.chaos``'s
``ClusterControl`` (``flux.chaos`` may not import ``flux.cluster``; the CLI and the tests may),
and ``start_process_cluster``, which the pytest scenarios share.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from flux.chaos import history as history_module
from flux.chaos import schedules as schedules_module
from flux.chaos.checker import check
from flux.chaos.clock_shim import CLOCK_FILE_ENV, write_offset, write_sitecustomize
from flux.chaos.disks import TmpfsDisk, missing_requirements
from flux.chaos.docker_cluster import DockerError, controller_status
from flux.chaos.nemesis import NemesisUnsupportedError, format_schedule
from flux.chaos.netns import NetnsError, NetnsNetwork, netns_network
from flux.chaos.partitions import Shape, split
from flux.chaos.report import format_report
from flux.chaos.runner import RunResult, docker_backend_factory, run_scenario
from flux.chaos.scenarios import SCENARIOS, Scenario, generate_schedule
from flux.cluster.launcher import (
    CLIENT_PROPERTIES_FILE,
    TLS_DIR,
    ClusterSecurityError,
    ClusterTls,
    NodeProcess,
    local_cluster_configs,
    provision_admin,
    write_client_properties,
    write_cluster_tls,
)

from .progress import progress

__all__ = ["CHAOS_NODE_SETTINGS", "ProcessCluster", "chaos", "start_process_cluster"]

#: Node settings of chaos clusters: failures detected in about two seconds (as the
#: integration tests' FAST_FAILURE_DETECTION), a follower out of the ISR after 1.5 s, groups
#: rebalancing without the initial delay, and topics (``__consumer_offsets`` too) replicated
#: three ways with ``min.insync.replicas=2``, so an acknowledged write or commit survives the
#: loss of any one node.
CHAOS_NODE_SETTINGS: dict[str, dict[str, Any]] = {
    "controller": {"session_timeout_ms": 2000, "preferred_leader_election_delay_ms": 1000},
    "broker": {
        "heartbeat_interval_ms": 200,
        "replica_lag_time_max_ms": 1500,
        "group_initial_rebalance_delay_ms": 0,
        "offsets_topic_partitions": 3,
    },
    "topic": {"replication_factor": 3, "min_insync_replicas": 2},
}
NODES = 3
DEFAULT_SEED_RANGE = 1_000_000
#: Waiting for a node to start gives up after this long.
NODE_TIMEOUT_S = 30.0
#: A node that has not exited this long after SIGTERM is SIGKILLed (and the restart says so).
GRACEFUL_STOP_TIMEOUT_S = 10.0
#: Host names of the node certificate of a secured chaos cluster (nodes advertise 127.0.0.1,
#: or their namespace's address, which is added).
SECURE_HOSTS = ("127.0.0.1", "localhost")
#: Ports of nodes in network namespaces: each namespace has ports of its own, so they are fixed
#: (node N: Kafka 9092+N-1, broker HTTP 9292+N-1, Raft 9192+2(N-1), controller HTTP one more).
NETNS_PORTS = {"kafka_base_port": 9092, "controller_base_port": 9192, "http_base_port": 9292}
#: Where a cluster with clock jumps keeps the shim's sitecustomize.py, and each node's offset.
CLOCK_SHIM_DIR = "clock-shim"
CLOCK_OFFSET_FILE = "clock-offset"
#: A cluster with disks (``disks=True``): each node's data directory is a tmpfs of this many
#: MiB (a chaos run writes a few MiB per node), and its controller's Raft files
#: (``<data_dir>/controller``, see ``flux.cluster.node``) a second tmpfs inside it, so filling
#: the log directory never touches the Raft journal.
LOG_DISK_MIB = 256
RAFT_DISK_MIB = 256
RAFT_SUBDIR = "controller"


class ProcessCluster:
    """``ClusterControl`` over local ``NodeProcess`` es: signals for kill / pause / resume,
    SIGTERM and a fresh start for restart. Network partitions only when the nodes run in
    network namespaces (``network``; the backend is then called ``netns``): ``partition``
    splits the nodes from the others with the clients still reaching everyone, ``cut``
    installs any ``flux.chaos.partitions`` shape. Clock jumps only when the nodes were started
    with the clock shim (``clock_files``: node -> its offset file). Full disks only when each
    node's log directory is a file system of its own (``log_disks``: node -> its tmpfs).

    Thread-safety: driven by one thread (the nemesis); ``stop_all`` after it finished.
    """

    backend = "process"

    def __init__(
        self,
        processes: Sequence[NodeProcess],
        *,
        client_config: Mapping[str, str] | None = None,
        ca_file: Path | None = None,
        network: NetnsNetwork | None = None,
        clock_files: Mapping[int, Path] | None = None,
        log_disks: Mapping[int, TmpfsDisk] | None = None,
    ) -> None:
        """``client_config`` and ``ca_file``: a secured cluster's client settings (Kafka's
        names, without ``bootstrap.servers``) and the CA its node HTTP is verified with."""
        self._processes = {process.node_id: process for process in processes}
        self._network = network
        self._clock_files = dict(clock_files or {})
        self._log_disks = dict(log_disks or {})
        self.disks = bool(self._log_disks)
        self.backend = "netns" if network is not None else "process"
        self._client_config = dict(client_config or {})
        self._ca_file = ca_file
        self._paused: set[int] = set()
        # Every port is written into the node configs (local_cluster_configs), so a restart
        # listens where it did and the bootstrap list every client was given stays true.
        self._addresses = {n: p.bootstrap_servers for n, p in self._processes.items()}

    def nodes(self) -> list[int]:
        return sorted(self._processes)

    def bootstrap_servers(self) -> str:
        return ",".join(self._addresses[node] for node in self.nodes())

    def client_config(self) -> dict[str, str]:
        return dict(self._client_config)

    def is_running(self, node: int) -> bool:
        return self._processes[node].is_running()

    def active_controller(self) -> int | None:
        for node, process in sorted(self._processes.items()):
            if not process.is_running() or node in self._paused:
                continue
            address = process.ready.get("controller_http")
            status = controller_status(address, ca_file=self._ca_file) if address else None
            if status and status.get("active"):
                return node
        return None

    def kill(self, node: int) -> None:
        self._paused.discard(node)  # SIGKILL ends a stopped process too
        self._processes[node].kill()

    def pause(self, node: int) -> None:
        self._signal(node, signal.SIGSTOP)
        self._paused.add(node)

    def resume(self, node: int) -> None:
        self._signal(node, signal.SIGCONT)
        self._paused.discard(node)

    def restart(self, node: int, *, wait: bool = True) -> dict[str, Any]:
        """SIGTERM, SIGKILL if the node has not exited after ``GRACEFUL_STOP_TIMEOUT_S``
        (reported as ``"graceful": False``), start, and with ``wait`` wait until ready."""
        process = self._processes[node]
        if node in self._paused:
            self.resume(node)
        was_running = process.is_running()
        returncode = process.stop(timeout_s=GRACEFUL_STOP_TIMEOUT_S)
        process.start()
        if wait:
            process.wait_ready(NODE_TIMEOUT_S)
        return {"graceful": returncode == 0} if was_running else {}

    def wait_ready(self, node: int) -> None:
        self._processes[node].wait_ready(NODE_TIMEOUT_S)

    def data_dir(self, node: int) -> Path:
        return self._processes[node].data_dir

    def partition(self, nodes: Sequence[int]) -> None:
        self._require_network().apply(split(nodes, self.nodes()))

    def cut(self, shape: Shape) -> None:
        self._require_network().apply(shape)

    def heal(self) -> None:
        self._require_network().heal()

    def _require_network(self) -> NetnsNetwork:
        if self._network is None:
            raise NemesisUnsupportedError(
                "network partitions need the nodes in network namespaces (fluxctl chaos run "
                "... --netns, as root) or the Docker backend (--docker)"
            )
        return self._network

    def jump_clock(self, node: int, offset_s: float) -> None:
        """Takes effect in a running node within ``flux.chaos.clock_shim.REFRESH_S``; a node
        started later starts with it (a machine's clock stays wrong across a restart)."""
        if node not in self._clock_files:
            raise NemesisUnsupportedError(
                "clock jumps need nodes started with the clock shim "
                "(start_process_cluster(clock_jumps=True))"
            )
        write_offset(self._clock_files[node], offset_s)

    def fill_disk(self, node: int) -> dict[str, Any]:
        if node not in self._log_disks:
            raise NemesisUnsupportedError(
                "full disks need nodes on disks of their own (fluxctl chaos run ... --disks, "
                "as root)"
            )
        return {"filled_bytes": self._log_disks[node].fill()}

    def free_disk(self, node: int) -> None:
        if node in self._log_disks:
            self._log_disks[node].free()

    def stop_all(self) -> None:
        """Resume paused nodes (a stopped process ignores SIGTERM), then stop every node."""
        for node in list(self._paused):
            self.resume(node)
        for process in self._processes.values():
            process.stop(timeout_s=10.0)

    def _signal(self, node: int, signum: int) -> None:
        pid = self._processes[node].pid
        if pid is None or not self._processes[node].is_running():
            raise RuntimeError(f"node {node} is not running")
        os.kill(pid, signum)


@contextlib.contextmanager
def start_process_cluster(
    root: Path,
    *,
    nodes: int = NODES,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    secure: bool = False,
    netns: bool = False,
    clock_jumps: bool = False,
    disks: bool = False,
) -> Iterator[ProcessCluster]:
    """Start ``nodes`` combined nodes under ``root`` with ``CHAOS_NODE_SETTINGS`` (plus
    ``extra``), yield their ``ProcessCluster``, stop every node on exit (also on errors).

    ``secure``: secured as by ``fluxctl cluster up --secure`` (certificates in ``root/tls``,
    the admin's client settings in ``root/client.properties``); the ``ProcessCluster`` hands
    every client the admin's settings. ``netns``: every node in a network namespace of its
    own (``flux.chaos.netns``; ``NetnsUnavailableError`` says why it cannot), removed with the
    cluster. ``clock_jumps``: nodes started with the clock shim, so ``jump_clock`` works.
    ``disks``: each node's data directory a tmpfs of its own (its Raft files on a second one),
    so ``fill_disk`` works; unmounted, with their contents, when the cluster stops (root)."""
    settings: dict[str, dict[str, Any]] = {s: dict(k) for s, k in CHAOS_NODE_SETTINGS.items()}
    for section, keys in (extra or {}).items():
        settings.setdefault(section, {}).update(keys)
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as network_scope:
        network = network_scope.enter_context(netns_network(range(1, nodes + 1))) if netns else None
        addresses = network.addresses if network is not None else {}
        hosts = SECURE_HOSTS + tuple(addresses.values())
        tls = write_cluster_tls(root / TLS_DIR, hosts) if secure else None
        processes = local_cluster_configs(
            root,
            nodes,
            extra=settings,
            tls=tls,
            hosts=addresses or None,
            **(NETNS_PORTS if network is not None else {}),
        )
        if network is not None:
            for process in processes:
                process.command_prefix = network.command_prefix(process.node_id)
        clock_files = _install_clock_shim(root, processes) if clock_jumps else {}
        cluster: ProcessCluster | None = None
        mounted: list[TmpfsDisk] = []
        try:
            log_disks = _mount_disks(processes, mounted) if disks else {}
            for process in processes:
                process.start()
            for process in processes:
                process.wait_ready(NODE_TIMEOUT_S)
            cluster = _process_cluster(root, processes, tls, network, clock_files, log_disks)
            _wait_for_controller(cluster)
            yield cluster
        finally:
            if cluster is not None:
                cluster.stop_all()
            else:
                for process in processes:
                    process.stop(timeout_s=10.0)
            for disk in reversed(mounted):
                disk.close()


def _mount_disks(
    processes: Sequence[NodeProcess], mounted: list[TmpfsDisk]
) -> dict[int, TmpfsDisk]:
    """A tmpfs for each node's data directory and one for its Raft files inside it (appended
    to ``mounted`` as they are made, for the caller to unmount in reverse); node -> log disk."""
    problem = missing_requirements()
    if problem is not None:
        raise NemesisUnsupportedError(f"disks for the nodes: {problem}")
    log_disks = {}
    for process in processes:
        log_disk = TmpfsDisk(process.data_dir, LOG_DISK_MIB)
        mounted.append(log_disk)
        mounted.append(TmpfsDisk(process.data_dir / RAFT_SUBDIR, RAFT_DISK_MIB))
        log_disks[process.node_id] = log_disk
    return log_disks


def _install_clock_shim(root: Path, processes: Sequence[NodeProcess]) -> dict[int, Path]:
    """Start every node with ``flux.chaos.clock_shim`` (a ``sitecustomize`` on its
    ``PYTHONPATH``) reading an offset file of its own, set to 0; node -> offset file."""
    shim = write_sitecustomize(root / CLOCK_SHIM_DIR)
    python_path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p)
    files = {}
    for process in processes:
        offset_file = process.config_path.parent / CLOCK_OFFSET_FILE
        write_offset(offset_file, 0.0)
        process.environment = {
            **process.environment,
            CLOCK_FILE_ENV: str(offset_file),
            "PYTHONPATH": python_path,
        }
        files[process.node_id] = offset_file
    return files


def _process_cluster(
    root: Path,
    processes: Sequence[NodeProcess],
    tls: ClusterTls | None,
    network: NetnsNetwork | None,
    clock_files: Mapping[int, Path],
    log_disks: Mapping[int, TmpfsDisk],
) -> ProcessCluster:
    """The ``ProcessCluster`` of started nodes; on a secured cluster, once ``admin`` exists."""
    if tls is None:
        return ProcessCluster(
            processes, network=network, clock_files=clock_files, log_disks=log_disks
        )
    password = secrets.token_urlsafe(24)
    settings = provision_admin(processes, tls, password=password, timeout_s=NODE_TIMEOUT_S)
    write_client_properties(root / CLIENT_PROPERTIES_FILE, settings)
    client_config = {key: value for key, value in settings.items() if key != "bootstrap.servers"}
    return ProcessCluster(
        processes,
        client_config=client_config,
        ca_file=tls.ca_file,
        network=network,
        clock_files=clock_files,
        log_disks=log_disks,
    )


def _wait_for_controller(cluster: ProcessCluster) -> None:
    deadline = time.monotonic() + NODE_TIMEOUT_S
    while cluster.active_controller() is None:
        if time.monotonic() > deadline:
            raise RuntimeError("no active controller after the cluster started")
        time.sleep(0.05)


# -- commands ------------------------------------------------------------------------------------


@click.group()
def chaos() -> None:
    """Fault-injection scenarios with Jepsen-style checking (see docs/chaos.md)."""


_scenario_argument = click.argument("scenario", type=click.Choice(sorted(SCENARIOS)))
_seed_option = click.option(
    "--seed", type=int, default=None, help="schedule seed (default: random, printed)"
)
_duration_option = click.option(
    "--duration",
    "duration_s",
    type=click.FloatRange(min=1.0),
    default=30.0,
    show_default=True,
    help="seconds of faults",
)


@chaos.command("list")
def chaos_list() -> None:
    """The scenarios and what each does."""
    for name in sorted(SCENARIOS):
        scenario = SCENARIOS[name]
        if scenario.partition_shapes:
            suffix = " [netns]"
        elif scenario.needs_partitions:
            suffix = " [netns or --docker]"
        else:
            suffix = ""
        click.echo(f"{name:18} {scenario.description}{suffix}")


@chaos.command("schedule")
@_scenario_argument
@_seed_option
@_duration_option
@click.option("--docker", is_flag=True, help="the schedule of a Docker run (with partitions)")
@click.option("--netns", is_flag=True, help="the schedule of a --netns run (with partitions)")
@click.option("--disks", is_flag=True, help="the schedule of a --disks run (with full disks)")
def chaos_schedule(
    scenario: str, seed: int | None, duration_s: float, docker: bool, netns: bool, disks: bool
) -> None:
    """Print the fault schedule a seed gives, without running anything."""
    seed = _pick_seed(seed)
    chosen = SCENARIOS[scenario]
    partitions = docker or netns or chosen.needs_partitions
    steps = generate_schedule(
        chosen,
        seed=seed,
        duration_s=duration_s,
        nodes=chosen.nodes,
        partitions=partitions,
        disks=disks and not docker,
    )
    click.echo(f"scenario {scenario} seed {seed} duration {duration_s:g}")
    click.echo(format_schedule(steps) or "  (no steps)")


@chaos.command("run")
@_scenario_argument
@_seed_option
@_duration_option
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="where the cluster, history and report go [default: .flux/chaos/SCENARIO-SEED, "
    "with --schedules .flux/chaos/SCENARIO-schedules-SEED]",
)
@click.option("--docker", is_flag=True, help="run on the Docker backend (network partitions)")
@click.option(
    "--netns",
    is_flag=True,
    help="run the local nodes in network namespaces, with partitions (root; automatic for "
    "scenarios that need partitions)",
)
@click.option(
    "--disks",
    is_flag=True,
    help="give each local node's log directory a small file system of its own, so the mixed "
    "scenario fills disks too (root)",
)
@click.option(
    "--secure",
    is_flag=True,
    help="secure the cluster as `fluxctl cluster up --secure` does (TLS, SASL, ACLs); every "
    "client logs in as its super user admin (process backend only)",
)
@click.option(
    "--schedules",
    type=click.IntRange(min=1),
    default=None,
    help="run N schedules back to back (seeds SEED, SEED+1, ...), each on a fresh cluster; "
    "print a line per schedule and the totals, keep the table in OUT/schedules.jsonl",
)
def chaos_run(
    scenario: str,
    seed: int | None,
    duration_s: float,
    out_dir: str | None,
    docker: bool,
    netns: bool,
    disks: bool,
    secure: bool,
    schedules: int | None,
) -> None:
    """Run SCENARIO on a fresh local cluster and check the history."""
    seed = _pick_seed(seed)
    chosen = SCENARIOS[scenario]
    if docker and (secure or netns or disks):
        raise click.UsageError(
            "--secure, --netns and --disks run on the process backend only (without --docker)"
        )
    if docker and (chosen.partition_shapes or chosen.needs_clock):
        raise click.ClickException(
            f"{scenario} runs on local processes only (one-way and bridge partitions, clock "
            f"jumps): drop --docker"
        )
    run = _Run(chosen, duration_s, docker, netns or chosen.needs_partitions, disks, secure)
    if schedules is not None:
        root = Path(out_dir or f".flux/chaos/{scenario}-schedules-{seed}").resolve()
        _check_empty(root)
        sys.exit(_run_schedules(run, seed, schedules, root))
    root = Path(out_dir or f".flux/chaos/{scenario}-{seed}").resolve()
    _check_empty(root)
    outcome = run.once(seed, root, click.echo)
    click.echo(f"files: {', '.join(str(path) for path in outcome.files.values())}")
    click.echo(f"reproduce: {run.reproduce(seed)}")
    sys.exit(_exit_code(outcome.result.valid))


def _check_empty(root: Path) -> None:
    if root.exists() and any(root.iterdir()):
        raise click.ClickException(f"{root} is not empty: pick another --out or remove it")


@dataclass(frozen=True, slots=True)
class _Run:
    """One scenario on one backend, runnable for any seed."""

    scenario: Scenario
    duration_s: float
    docker: bool
    netns: bool
    disks: bool
    secure: bool

    def once(self, seed: int, root: Path, log: Callable[[str], None]) -> RunResult:
        """The scenario for ``seed`` on a fresh cluster under ``root``; its outcome."""
        chosen = self.scenario
        if self.docker:
            factory = docker_backend_factory()
            if factory is None:
                raise click.ClickException(
                    "the Docker backend is not installed (flux.chaos.docker_backend is missing)"
                )
            backend = factory(root / "cluster", nodes=chosen.nodes)
        else:
            backend = start_process_cluster(
                root / "cluster",
                nodes=chosen.nodes,
                extra=chosen.settings(),
                secure=self.secure,
                netns=self.netns,
                clock_jumps=chosen.needs_clock,
                disks=self.disks,
            )
        try:
            with backend as control:
                return run_scenario(
                    chosen, control, seed=seed, duration_s=self.duration_s, out_dir=root, log=log
                )
        except (
            DockerError,
            ClusterSecurityError,
            NemesisUnsupportedError,
            NetnsError,
        ) as error:
            raise click.ClickException(str(error)) from None

    def reproduce(self, seed: int) -> str:
        """The command that runs this scenario for ``seed`` again."""
        flags = [("--docker", self.docker), ("--disks", self.disks), ("--secure", self.secure),
                 ("--netns", self.netns and not self.scenario.needs_partitions)]  # fmt: skip
        extra = "".join(f" {flag}" for flag, given in flags if given)
        return (
            f"fluxctl chaos run {self.scenario.name} --seed {seed} --duration "
            f"{self.duration_s:g}{extra}"
        )


def _run_schedules(run: _Run, first_seed: int, count: int, root: Path) -> int:
    """``count`` schedules of ``run``, seeds ``first_seed`` on, each on a fresh cluster in
    ``root/<seed>`` (its output in ``run.log`` there; the cluster's files removed once the
    schedule is valid, kept otherwise); a line per schedule, the totals at the end. The exit
    code of the worst schedule."""
    root.mkdir(parents=True, exist_ok=True)
    table = root / schedules_module.TABLE_FILE
    click.echo(
        f"chaos: {count} schedules of {run.scenario.name}, {run.duration_s:g} s of faults each, "
        f"seeds {first_seed}-{first_seed + count - 1}; table: {table}"
    )
    rows = []
    interrupted = _StopAfterThisSchedule()
    bar = contextlib.ExitStack()
    advance = bar.enter_context(progress(f"{run.scenario.name} schedules", count))
    for seed in range(first_seed, first_seed + count):
        advance(0, description=f"{run.scenario.name} seed {seed}")
        if interrupted.requested:
            click.echo(f"chaos: interrupted; {len(rows)} of {count} schedules ran")
            break
        out = root / str(seed)
        out.mkdir()
        started = time.monotonic()
        with open(out / "run.log", "a", encoding="utf-8") as run_log:
            outcome = run.once(seed, out, lambda line: print(line, file=run_log, flush=True))
        ops = history_module.load(outcome.files["history"])
        row = schedules_module.row_of(
            seed,
            outcome.result,
            ops,
            seconds=time.monotonic() - started,
            reproduce=run.reproduce(seed),
            out_dir=out,
        )
        schedules_module.append(table, row)
        rows.append(row)
        click.echo(schedules_module.format_row(row))
        advance()
        if row.verdict == "valid":
            shutil.rmtree(out / "cluster", ignore_errors=True)
        else:
            click.echo(f"  files: {out}\n  reproduce: {row.reproduce}")
    bar.close()
    interrupted.restore()
    click.echo(schedules_module.format_totals(schedules_module.totals(rows)))
    verdicts = {row.verdict for row in rows}
    return _exit_code(
        False if "invalid" in verdicts else "unknown" if "unknown" in verdicts else True
    )


@chaos.command("check")
@click.argument("history_path", type=click.Path(exists=True, dir_okay=False))
def chaos_check(history_path: str) -> None:
    """Check a saved history.jsonl again and print its report."""
    result = check(history_module.load(Path(history_path)))
    click.echo(format_report(result, history=history_path))
    sys.exit(_exit_code(result.valid))


class _StopAfterThisSchedule:
    """SIGINT (Ctrl-C) during many schedules: the first lets the running schedule finish
    (its cluster stopped, disks unmounted, namespaces removed, its row written) and starts no
    other; a second one interrupts at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            self.restore()
            raise KeyboardInterrupt
        self.requested = True
        click.echo(
            "chaos: stopping after the running schedule (Ctrl-C again to stop at once)",
            err=True,
        )

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self._previous)


def _pick_seed(seed: int | None) -> int:
    return seed if seed is not None else random.SystemRandom().randrange(DEFAULT_SEED_RANGE)


def _exit_code(valid: bool | str) -> int:
    """0 valid, 1 invalid (an illegal anomaly), 2 unknown."""
    if valid is True:
        return 0
    return 1 if valid is False else 2
