"""Nemeses: faults on a schedule generated from a seed, executed through one control interface.

Two halves, as in Jepsen's ``nemesis.clj`` / ``generator.clj``:

* A **schedule** is a list of ``Step(at_s, f, target)`` made by a scenario's generator from a
  seed alone (``random.Random(seed)``), so the same seed prints the same schedule. A target is
  a *role* (``leader``, ``follower``, ``controller``, ``coordinator`` (of the workload's group),
  ``txn-coordinator`` (of its first transactional id), ``any``), resolved to a
  node only when the step runs, since which node leads depends on the run; the resolution draws
  from a second seeded stream and is written into the history.
* The **executor** (``Nemesis``) runs the steps against a ``ClusterControl``: the hook a
  backend implements. ``ProcessCluster`` (``flux.cli.chaos``) drives local node processes; a
  Docker backend implements the same methods plus ``partition`` / ``heal`` (see
  ``flux.chaos.runner.docker_backend_factory``). Backends that cannot do an operation raise
  ``NemesisUnsupportedError``.

Faults are one at a time by design: each fault step is followed by a ``recover`` step that
restarts killed nodes, resumes paused ones and heals partitions before the next fault, so a
3-node cluster with ``min.insync.replicas=2`` stays available between faults and the run
measures failover, not a cluster kept down. The exception is a crash of several nodes:
``crash`` SIGKILLs every node at once (a power cut), ``kill`` steps at the same moment a few
of them, after which ``start`` steps bring nodes back one by one, without waiting for them to
be ready (alone, a node waits for its quorum), and ``recover`` starts the rest.

``disk-full`` fills the target's log directory (``ClusterControl.fill_disk``: a file system of
its own, the controller's Raft files elsewhere), so its next write fails with ENOSPC and the
node takes the directory offline (KAFKA_STORAGE_ERROR, leadership moves away; docs/operations.md);
``recover`` frees the space and restarts the node, which is how Flux recovers from a disk fault.

Network partitions come in the shapes of ``flux.chaos.partitions``: ``partition`` cuts the
target off from the other nodes (``ClusterControl.partition``), ``isolate`` from the clients
too, ``one-way-out`` drops what the target sends to the other nodes, ``one-way-in`` what they
send to it, and ``bridge`` makes the target the only link between two halves of the others;
all but ``partition`` go through ``ClusterControl.cut``. A ``clock`` step jumps the target's
wall clock by the step's ``offset_s`` from the true time (``ClusterControl.jump_clock``);
``recover`` sets every jumped clock back.

Besides faults, a step may *move data* the way an operator does, and a fault may come while it
runs: ``reassign`` (AlterPartitionReassignments through ``flux.sdk.Admin``: one replica of one
or two random partitions of the topic replaced by a broker that does not hold it, the
replication factor kept; the new broker may be down), ``rebalance`` (``fluxctl cluster
rebalance --json`` in a child process: the planner of ``flux.controller.rebalance``, run as an
operator runs it; ``flux.chaos`` does not import the controller) and ``cancel`` (one running
reassignment, back to its original replicas). After any of them, ``recover`` also waits until
no reassignment runs.

Thread-safety: a ``Nemesis`` runs on one thread (the runner's nemesis thread); it only appends
to the thread-safe ``History``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk import Admin, FluxError
from flux.sdk.wire import KafkaConnection

from . import limits
from .history import History
from .partitions import Shape, bridge, isolate, one_way

__all__ = [
    "FAULTS",
    "MOVES",
    "TARGETS",
    "ClusterControl",
    "Nemesis",
    "NemesisUnsupportedError",
    "PARTITION_FAULTS",
    "Step",
    "format_schedule",
    "wait_full_isr",
    "wait_reassignments_done",
]

NEMESIS_PROCESS = "nemesis"
#: Fault operations a step may name, and the recovery step that undoes them all.
FAULTS = (
    "kill",
    "pause",
    "restart",
    "corrupt",
    "truncate",
    "partition",
    "crash",
    "start",
    "recover",
    "reassign",
    "rebalance",
    "cancel",
    "isolate",
    "one-way-out",
    "one-way-in",
    "bridge",
    "clock",
    "disk-full",
)
#: The faults that cut the network (``partition`` and the shapes ``cut`` installs).
PARTITION_FAULTS = ("partition", "isolate", "one-way-out", "one-way-in", "bridge")
#: The steps that move replicas (see the module docstring); they take no target.
MOVES = ("reassign", "rebalance", "cancel")
TARGETS = (
    "leader",
    "follower",
    "controller",
    "coordinator",
    "txn-coordinator",
    "adding",
    "removing",
    "any",
)
#: Kafka's internal topic of group offsets, whose ISRs the recovery also waits for.
OFFSETS_TOPIC = "__consumer_offsets"
#: A reassignment replaces the first replica (the preferred leader) at least this often, and
#: also reorders the new replicas (moving the preferred leader) this often.
REPLACE_FIRST_SHARE = 0.5
REORDER_SHARE = 0.25
#: A failed ``fluxctl cluster rebalance`` is reported with the end of its stderr, this long.
REBALANCE_ERROR_CHARS = 400
#: A corrupted tail gets one flipped byte within this many bytes of the segment end, a
#: truncated tail loses between 1 and this many bytes: the last batch or two.
TAIL_DAMAGE_BYTES_MAX = 64


def wait_full_isr(
    bootstrap: str,
    topics: Sequence[str],
    timeout_s: float = limits.STABILIZE_TIMEOUT_S,
    *,
    client_config: Mapping[str, str] | None = None,
    every_broker: bool = False,
) -> bool:
    """Wait until every partition of ``topics`` has a leader and every replica in its ISR;
    False if that did not happen within ``timeout_s``. ``client_config``: the cluster's client
    security settings (Kafka's names), if it is secured.

    ``every_broker``: and until every broker of ``bootstrap`` says so itself, with the same
    leaders (Metadata asked of each address; on a cluster without security). A broker cut off
    by a partition may still see itself as a leader with the old ISR for a moment after the
    heal; a client that asked it would read its stale high watermark as the end of the log."""
    deadline = time.monotonic() + timeout_s
    with Admin(bootstrap, timeout_s=limits.OP_TIMEOUT_S, security=client_config or None) as admin:
        while time.monotonic() < deadline:
            try:
                partitions = [p for topic in topics for p in admin.describe_topic(topic).partitions]
            except FluxError:
                partitions = []
            if (
                partitions
                and all(p.leader >= 0 and set(p.isr) == set(p.replicas) for p in partitions)
                and (not every_broker or client_config or _brokers_agree(bootstrap, topics))
            ):
                return True
            time.sleep(0.1)  # polling cluster state: there is nothing to wait on
    return False


def _brokers_agree(bootstrap: str, topics: Sequence[str]) -> bool:
    """Every broker of ``bootstrap`` answers Metadata with a leader and a full ISR for every
    partition of ``topics``, and all name the same leaders."""
    views = []
    for address in bootstrap.split(","):
        try:
            with KafkaConnection.from_bootstrap(address, timeout_s=limits.OP_TIMEOUT_S) as conn:
                answer = conn.request(
                    ApiKey.METADATA, 1, {"topics": [{"name": topic} for topic in topics]}
                )
        except OSError:
            return False
        view = {}
        for topic in answer["topics"]:
            for partition in topic["partitions"]:
                leader, isr = partition["leader_id"], partition["isr_nodes"]
                if partition["error_code"] or leader < 0:
                    return False
                if set(isr) != set(partition["replica_nodes"]):
                    return False
                view[(topic["name"], partition["partition_index"])] = leader
        if not view:
            return False
        views.append(view)
    return all(view == views[0] for view in views)


def wait_reassignments_done(
    bootstrap: str,
    timeout_s: float = limits.STABILIZE_TIMEOUT_S,
    *,
    client_config: Mapping[str, str] | None = None,
) -> dict[tuple[str, int], dict[str, list[int]]]:
    """Wait until no partition reassignment runs; the ones still running when ``timeout_s``
    ran out (empty: none runs). A controller that does not answer counts as still running."""
    deadline = time.monotonic() + timeout_s
    running: dict[tuple[str, int], dict[str, list[int]]] = {}
    with Admin(bootstrap, timeout_s=limits.OP_TIMEOUT_S, security=client_config or None) as admin:
        while True:
            try:
                running = admin.list_partition_reassignments()
            except FluxError:
                running = running or {("?", -1): {"replicas": [], "adding": [], "removing": []}}
            else:
                if not running:
                    return {}
            if time.monotonic() >= deadline:
                return running
            time.sleep(0.2)  # polling cluster state: there is nothing to wait on


class NemesisUnsupportedError(RuntimeError):
    """The backend cannot perform this fault (e.g. a network partition without Docker)."""


@runtime_checkable
class ClusterControl(Protocol):
    """What a chaos backend implements: the cluster under test and its fault switches.

    Node ids are the cluster's broker/controller ids. Every method returns once the effect is
    in place (``restart`` once the node is ready again) and raises on failure.
    """

    backend: str
    #: ``fill_disk`` works: every node's log directory is a file system of its own.
    disks: bool

    def nodes(self) -> list[int]:
        """Every node id of the cluster, running or not."""
        ...

    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every node, for clients (a down node is skipped by them)."""
        ...

    def client_config(self) -> dict[str, str]:
        """The settings every client needs besides the bootstrap servers, as Kafka's dotted
        names (``security.protocol``, ``sasl.username``, ``sasl.password``,
        ``ssl.ca.location``, ...); empty for a cluster without security."""
        ...

    def is_running(self, node: int) -> bool:
        """The node's process (or container) exists and is not known to be dead."""
        ...

    def active_controller(self) -> int | None:
        """The node id of the active controller (the Raft leader), if one answers."""
        ...

    def kill(self, node: int) -> None:
        """SIGKILL (a crash); the node stays down until ``restart``."""
        ...

    def pause(self, node: int) -> None:
        """SIGSTOP (a stalled process; its sockets stay open)."""
        ...

    def resume(self, node: int) -> None:
        """SIGCONT after ``pause``."""
        ...

    def restart(self, node: int, *, wait: bool = True) -> dict[str, Any] | None:
        """Stop the node gracefully if it runs, start it with its data and (``wait``) wait
        until it is ready. May return details for the history (e.g. ``{"graceful": False}``:
        the stop timed out and the node was killed). Without ``wait`` it returns once the
        node runs: a node whose quorum is down is not ready until enough others return."""
        ...

    def wait_ready(self, node: int) -> None:
        """Wait until a started node is ready (registered and serving); raise if it died or
        did not get there in time."""
        ...

    def data_dir(self, node: int) -> Path:
        """The node's data directory on this machine (the node must be stopped to touch it);
        ``NemesisUnsupportedError`` where it is not reachable."""
        ...

    def partition(self, nodes: Sequence[int]) -> None:
        """Cut ``nodes`` off from the other nodes, both ways (one node: isolate it; a
        minority: split majority/minority). ``NemesisUnsupportedError`` without a network
        the backend controls."""
        ...

    def heal(self) -> None:
        """Undo every ``partition`` and ``cut``."""
        ...

    def cut(self, shape: Shape) -> None:
        """Install ``shape`` (``flux.chaos.partitions``) as the network's partition, replacing
        any earlier one. ``NemesisUnsupportedError`` for a shape the backend cannot make."""
        ...

    def jump_clock(self, node: int, offset_s: float) -> None:
        """Set the node's wall clock ``offset_s`` seconds off the true time (0: true again);
        its monotonic clock is untouched. ``NemesisUnsupportedError`` where the backend cannot
        (only the local process backend can)."""
        ...

    def fill_disk(self, node: int) -> dict[str, Any]:
        """Fill the file system of the node's log directory (not its Raft files) until writes
        fail with ENOSPC; details for the history. ``NemesisUnsupportedError`` where the
        backend gave its nodes no disks of their own."""
        ...

    def free_disk(self, node: int) -> None:
        """Undo ``fill_disk`` (the node stays as it is: a restart brings its log directory
        back online)."""
        ...


@dataclass(frozen=True, slots=True)
class Step:
    """At ``at_s`` seconds after the faults start, do ``f`` to ``target``: a role (see
    ``TARGETS``), one node (``node-<id>``), or None for ``recover``, ``crash`` and the
    ``MOVES``. ``offset_s``: a ``clock`` step's jump, from the true time."""

    at_s: float
    f: str
    target: str | None = None
    offset_s: float | None = None

    def __post_init__(self) -> None:
        assert self.f in FAULTS, self.f
        assert (self.offset_s is not None) == (self.f == "clock"), self
        assert self.target is None or self.target in TARGETS or _node_target(self.target), (
            self.target
        )


def _node_target(target: str) -> int | None:
    """``node-3`` -> 3 (a step aimed at one node, as a rolling restart's are); else None."""
    prefix, _, number = target.partition("-")
    return int(number) if prefix == "node" and number.isdigit() else None


def format_schedule(steps: Sequence[Step]) -> str:
    """One line per step, as printed before a run."""
    return "\n".join(
        f"  +{step.at_s:6.2f}s  {step.f}{' ' + step.target if step.target else ''}"
        f"{f' {step.offset_s:+g}s' if step.offset_s is not None else ''}"
        for step in steps
    )


class Nemesis:
    """Executes a schedule against ``control``, recording each step as an op of process
    ``nemesis``: invoke ``{"target": role}``, then ``ok`` with the node(s) it hit, or ``info``
    with the error (a step that could not resolve its target does nothing and says so)."""

    def __init__(
        self,
        control: ClusterControl,
        history: History,
        *,
        seed: int,
        topic: str,
        group: str | None = None,
        transactional_id: str | None = None,
        replication_factor: int = 3,
        log: Callable[[str], None] = print,
    ) -> None:
        self.control = control
        self.replication_factor = replication_factor
        self.history = history
        self.topic = topic
        self.group = group
        self.transactional_id = transactional_id
        self._rng = random.Random(f"{seed}-targets")
        self._log = log
        self._down: set[int] = set()
        self._starting: set[int] = set()
        self._paused: set[int] = set()
        self._partitioned = False
        self._clocks: dict[int, float] = {}  # node -> wall-clock offset set by a clock step
        self._filled: set[int] = set()  # nodes whose log directory a disk-full step filled
        # A reassign, rebalance or cancel ran: recoveries then wait for reassignments too.
        self._moved = False

    def run(self, steps: Sequence[Step], stop: threading.Event) -> None:
        """Run ``steps`` until done or ``stop`` is set; then recover everything.

        Each step starts its planned distance (``at_s`` difference) after the previous step
        *finished*: a slow restart or recovery stretches the run rather than eating the calm
        gap before the next fault."""
        previous_at_s = 0.0
        try:
            for step in steps:
                if stop.wait(max(0.0, step.at_s - previous_at_s)):
                    break
                previous_at_s = step.at_s
                self.execute(step)
        finally:
            self.execute(Step(0.0, "recover"))

    def execute(self, step: Step) -> None:
        """Run one step. A step that fails is recorded as ``info`` and the schedule goes on
        (a fault that did not happen only makes the run gentler), except an unsupported one,
        which is re-raised: the scenario cannot run on this backend at all."""
        value: dict[str, Any] = {"target": step.target}
        if step.offset_s is not None:
            value["offset_s"] = step.offset_s
        invocation = self.history.invoke(NEMESIS_PROCESS, step.f, value)
        try:
            result = self._apply(step)
        except (NemesisUnsupportedError, FluxError, OSError, RuntimeError) as error:
            self.history.complete(invocation, "info", {"target": step.target, "error": str(error)})
            self._log(f"nemesis: {step.f} {step.target or ''}: {error}")
            if isinstance(error, NemesisUnsupportedError):
                raise
            return
        self.history.complete(invocation, "ok", {"target": step.target, **result})
        self._log(f"nemesis: {step.f} {step.target or ''} -> {result}")

    # -- steps ----------------------------------------------------------------------------

    def _apply(self, step: Step) -> dict[str, Any]:
        if step.f == "recover":
            return self._recover()
        if step.f == "crash":
            return self._crash()
        if step.f == "start":
            return self._start(step.target)
        if step.f in MOVES:
            self._moved = True
            moves = {"reassign": self._reassign, "rebalance": self._rebalance}
            return moves.get(step.f, self._cancel)()
        node = self._resolve(step.target or "any")
        if node is None:
            raise RuntimeError(f"no node to {step.f} as {step.target} right now")
        if step.f == "kill":
            # Whether the kill met a move in flight is the point of a reassign scenario.
            moving = self._running_reassignments() if self._moved else None
            self.control.kill(node)
            self._down.add(node)
            if moving is not None:
                return {"node": node, "reassigning": moving}
        elif step.f == "pause":
            self.control.pause(node)
            self._paused.add(node)
        elif step.f == "restart":
            return {"node": node, **(self.control.restart(node) or {})}
        elif step.f in ("corrupt", "truncate"):
            self.control.kill(node)
            self._down.add(node)
            return {"node": node, "damaged": self._damage_tails(node, step.f)}
        elif step.f == "partition":
            self.control.partition([node])
            self._partitioned = True
        elif step.f in PARTITION_FAULTS:
            shape = self._shape(step.f, node)
            try:
                self.control.cut(shape)
            except NemesisUnsupportedError:
                raise
            except BaseException:
                self._partitioned = True  # a cut that failed half-way is healed too
                raise
            self._partitioned = True
            return {"node": node, **shape.describe()}
        elif step.f == "clock":
            assert step.offset_s is not None
            self._clocks[node] = step.offset_s
            self.control.jump_clock(node, step.offset_s)
            return {"node": node, "offset_s": step.offset_s}
        elif step.f == "disk-full":
            self._filled.add(node)
            return {"node": node, **self.control.fill_disk(node)}
        return {"node": node}

    def _shape(self, f: str, node: int) -> Shape:
        nodes = self.control.nodes()
        others = [n for n in nodes if n != node]
        if f == "isolate":
            return isolate(node, nodes)
        if f == "one-way-out":
            return one_way([node], others)
        if f == "one-way-in":
            return one_way(others, [node])
        assert f == "bridge", f
        return bridge(node, nodes)

    def _recover(self) -> dict[str, Any]:
        """Heal partitions, resume paused nodes, restart killed ones, then wait until every
        replica is back in the ISR: the next fault then meets a cluster with full redundancy,
        so "one fault at a time" holds for the data too, not only for the processes (a node
        restarted but still catching up is as good as down)."""
        # The moves still waiting when the fault is undone: they ran through the whole fault.
        moving = {"reassigning": self._running_reassignments()} if self._moved else {}
        healed = self._partitioned
        if self._partitioned:
            self.control.heal()
            self._partitioned = False
        clocks = sorted(self._clocks)
        for node in clocks:
            self.control.jump_clock(node, 0.0)
            del self._clocks[node]
        resumed = sorted(self._paused)
        for node in resumed:
            self.control.resume(node)
        self._paused.clear()
        # A full disk gets its space back, and its node a restart (which takes the log
        # directory online again after recovering it by CRC).
        freed = sorted(self._filled)
        for node in freed:
            self.control.free_disk(node)
        self._filled.clear()
        restarted = sorted(self._down | set(freed))
        # Start every down node before waiting for any: after a crash, none is ready until a
        # majority of the controllers runs.
        for node in restarted:
            self.control.restart(node, wait=False)
        for node in sorted(set(restarted) | self._starting):
            self.control.wait_ready(node)
            self._down.discard(node)
        self._starting.clear()
        started = time.monotonic()
        if self._moved:
            # A reassignment completes once its new replicas caught up; until then the ISR of
            # the partition (old and new replicas) is not what the next fault should meet.
            left = wait_reassignments_done(
                self.control.bootstrap_servers(), client_config=self.control.client_config()
            )
            moving["reassignments_left"] = sorted(f"{t}-{p}" for t, p in left)
        topics = [self.topic] + ([OFFSETS_TOPIC] if self.group is not None else [])
        full = wait_full_isr(
            self.control.bootstrap_servers(),
            topics,
            client_config=self.control.client_config(),
            every_broker=True,
        )
        return {
            "healed": healed,
            **({"clocks_reset": clocks} if clocks else {}),
            "resumed": resumed,
            **({"disks_freed": freed} if freed else {}),
            "restarted": restarted,
            **moving,
            "full_isr": full,
            "isr_wait_s": round(time.monotonic() - started, 2),
        }

    # -- moves ----------------------------------------------------------------------------

    def _reassign(self) -> dict[str, Any]:
        """Replace one replica of one or two random partitions with a broker that does not
        hold the partition (any node, down or not: a move to a dead broker waits for it);
        sometimes also reorder the replicas, which moves the preferred leadership. A partition
        already being reassigned gets a new target, as Kafka allows."""
        with self._admin() as admin:
            targets = self._target_replicas(admin)
            if not targets:
                raise RuntimeError("the topic's replicas are not known right now")
            count = min(len(targets), self._rng.choice((1, 1, 2)))
            chosen = sorted(self._rng.sample(sorted(targets), count))
            plan = {(self.topic, p): self._replace_one(targets[p]) for p in chosen}
            answer = admin.alter_partition_reassignments(plan)
        errors = {f"{t}-{p}": str(error) for (t, p), error in answer.items() if error is not None}
        if plan and len(errors) == len(plan):
            raise RuntimeError(f"every reassignment was refused: {errors}")
        return {
            "moves": [[p, list(targets[p]), list(plan[(self.topic, p)])] for p in chosen],
            "errors": errors,
        }

    def _replace_one(self, replicas: Sequence[int]) -> list[int]:
        outside = [node for node in self.control.nodes() if node not in replicas]
        target = list(replicas)
        if outside:
            # The first replica is the preferred (and usually the current) leader: replacing it
            # moves leadership to the new broker as the move completes, the riskiest moment.
            first = self._rng.random() < REPLACE_FIRST_SHARE
            position = 0 if first else self._rng.randrange(len(target))
            target[position] = self._rng.choice(outside)
        if not outside or self._rng.random() < REORDER_SHARE:
            self._rng.shuffle(target)
        return target

    def _target_replicas(self, admin: Admin) -> dict[int, list[int]]:
        """Each partition's replicas once its running reassignment (if any) completes. The
        replicas come from a broker's metadata and the running reassignments from the
        controller: a partition on which the two disagree (a broker a step behind) is left out
        rather than given a target of the wrong size."""
        running = admin.list_partition_reassignments()
        description = admin.describe_topic(self.topic)
        targets = {}
        for partition in description.partitions:
            state = running.get((self.topic, partition.partition))
            leaving = set(state["removing"]) if state else set()
            target = [r for r in partition.replicas if r not in leaving]
            if len(target) == self.replication_factor:
                targets[partition.partition] = target
        return targets

    def _rebalance(self) -> dict[str, Any]:
        """``fluxctl cluster rebalance --json`` against the cluster: the plan it made (as
        ``[partition, replicas, target]``) and the partitions it could not submit."""
        with tempfile.TemporaryDirectory(prefix="flux-chaos-") as scratch:
            command = [
                sys.executable,
                "-m",
                "flux.cli.main",
                "cluster",
                "rebalance",
                "--json",
                "--bootstrap",
                self.control.bootstrap_servers(),
                "--timeout",
                str(limits.OP_TIMEOUT_S),
            ]
            client_config = self.control.client_config()
            if client_config:
                properties = Path(scratch) / "client.properties"
                properties.write_text("".join(f"{k}={v}\n" for k, v in client_config.items()))
                os.chmod(properties, 0o600)
                command += ["--client-config", str(properties)]
            try:
                done = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=limits.NEMESIS_STEP_TIMEOUT_S,
                    stdin=subprocess.DEVNULL,
                    check=False,
                )
            except subprocess.TimeoutExpired as error:
                raise RuntimeError(f"fluxctl cluster rebalance timed out: {error}") from None
        try:
            plan = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            raise RuntimeError(
                f"fluxctl cluster rebalance exited {done.returncode}: "
                f"{done.stderr.strip()[-REBALANCE_ERROR_CHARS:]}"
            ) from None
        moves = [
            [m["partition"], m["replicas"], m["target"]]
            for m in plan["moves"]
            if m["topic"] == self.topic
        ]
        others = [m for m in plan["moves"] if m["topic"] != self.topic]
        if plan["errors"] and len(plan["errors"]) == len(plan["moves"]):
            raise RuntimeError(f"every move was refused: {plan['errors']}; moves {moves}")
        return {"moves": moves, "other_moves": others, "errors": plan["errors"]}

    def _running_reassignments(self) -> list[str] | str:
        """``topic-partition`` of each running reassignment (or the error asking for them)."""
        try:
            with self._admin() as admin:
                running = admin.list_partition_reassignments()
        except FluxError as error:
            return f"unknown: {type(error).__name__}: {error}"
        return sorted(f"{t}-{p}" for t, p in running)

    def _cancel(self) -> dict[str, Any]:
        """Cancel one running reassignment of the topic (chosen at random)."""
        with self._admin() as admin:
            running = sorted(p for t, p in admin.list_partition_reassignments() if t == self.topic)
            if not running:
                raise RuntimeError("no reassignment of the topic runs: nothing to cancel")
            partition = self._rng.choice(running)
            answer = admin.alter_partition_reassignments({(self.topic, partition): None})
        error = answer.get((self.topic, partition))
        if error is not None:
            raise RuntimeError(f"cancelling {self.topic}-{partition} was refused: {error}")
        return {"partition": partition}

    def _crash(self) -> dict[str, Any]:
        """SIGKILL every node that runs (paused ones too): a power cut or host reboot."""
        crashed = []
        for node in self.control.nodes():
            if self.control.is_running(node):
                self.control.kill(node)
                crashed.append(node)
            self._down.add(node)
        self._paused.clear()
        self._starting.clear()
        return {"nodes": crashed}

    def _start(self, target: str | None) -> dict[str, Any]:
        """Start one crashed node without waiting for it (``recover`` waits)."""
        node = _node_target(target or "")
        if node is None or node not in self._down:
            raise RuntimeError(f"{target} is not a crashed node")
        self.control.restart(node, wait=False)
        self._down.discard(node)
        self._starting.add(node)
        return {"node": node}

    def _damage_tails(self, node: int, how: str) -> list[dict[str, Any]]:
        """Flip one byte near the end of (``corrupt``) or cut the end off (``truncate``) the
        newest segment of each of the workload topic's partitions on the stopped ``node``.
        Segment layout: ``<data_dir>/<topic>-<partition>/<base offset>.log`` (DESIGN.md §4)."""
        damaged = []
        for partition_dir in sorted(self.control.data_dir(node).glob(f"{self.topic}-*")):
            segments = sorted(partition_dir.glob("*.log"))
            if not segments or segments[-1].stat().st_size == 0:
                continue
            segment = segments[-1]
            data = bytearray(segment.read_bytes())
            reach = min(TAIL_DAMAGE_BYTES_MAX, len(data))
            if how == "corrupt":
                position = len(data) - self._rng.randint(1, reach)
                data[position] ^= 0xFF
                damaged.append(
                    {
                        "segment": segment.name,
                        "dir": partition_dir.name,
                        "flipped_at": position,
                        "size": len(data),
                    }
                )
            else:
                cut = self._rng.randint(1, reach)
                del data[len(data) - cut :]
                damaged.append(
                    {
                        "segment": segment.name,
                        "dir": partition_dir.name,
                        "cut_bytes": cut,
                        "size": len(data) + cut,
                    }
                )
            segment.write_bytes(bytes(data))
        return damaged

    # -- targets --------------------------------------------------------------------------

    def _healthy(self) -> list[int]:
        return [
            node
            for node in self.control.nodes()
            if node not in self._down
            and node not in self._paused
            and node not in self._starting
            and self.control.is_running(node)
        ]

    def _resolve(self, target: str) -> int | None:
        """The node ``target`` names now, among the healthy ones; None if none qualifies."""
        healthy = self._healthy()
        if not healthy:
            return None
        if target == "any":
            return self._rng.choice(healthy)
        named = _node_target(target)
        if named is not None:
            return named if named in healthy else None
        if target == "controller":
            node = self.control.active_controller()
            return node if node in healthy else None
        if target == "coordinator":
            return self._coordinator(healthy)
        if target == "txn-coordinator":
            return self._coordinator(healthy, key=self.transactional_id, key_type=1)
        if target in ("adding", "removing"):
            with self._admin() as admin:
                running = admin.list_partition_reassignments()
            moving = sorted(
                {n for (t, _), s in running.items() if t == self.topic for n in s[target]}
            )
            candidates = [node for node in moving if node in healthy]
            if candidates:
                return self._rng.choice(candidates)
            target = "leader"  # nothing moves (any more): the fault still meets the cluster
        leaders, replicas = self._topic_layout()
        if not leaders:
            return None
        partition = self._rng.choice(sorted(leaders))
        leader = leaders[partition]
        if target == "leader":
            return leader if leader in healthy else None
        followers = [n for n in replicas[partition] if n != leader and n in healthy]
        return self._rng.choice(followers) if followers else None

    def _admin(self, bootstrap: str | None = None) -> Admin:
        return Admin(
            bootstrap or self.control.bootstrap_servers(),
            timeout_s=limits.OP_TIMEOUT_S,
            security=self.control.client_config() or None,
        )

    def _topic_layout(self) -> tuple[dict[int, int], dict[int, list[int]]]:
        with self._admin() as admin:
            description = admin.describe_topic(self.topic)
        leaders = {p.partition: p.leader for p in description.partitions if p.leader >= 0}
        replicas = {p.partition: list(p.replicas) for p in description.partitions}
        return leaders, replicas

    def _coordinator(
        self, healthy: list[int], *, key: str | None = None, key_type: int = 0
    ) -> int | None:
        """FindCoordinator (v1, over the SDK's one-request ``KafkaConnection``) of the group
        (or of ``key`` of ``key_type``: 1 is a transactional id) asked of each address in turn
        until one answers without an error."""
        key = self.group if key_type == 0 else key
        if key is None:
            return None
        if self.control.client_config() and key_type == 0:
            return self._secured_coordinator(healthy)
        for address in self.control.bootstrap_servers().split(","):
            try:
                with KafkaConnection.from_bootstrap(address, timeout_s=limits.OP_TIMEOUT_S) as conn:
                    answer = conn.request(
                        ApiKey.FIND_COORDINATOR, 1, {"key": key, "key_type": key_type}
                    )
            except OSError:
                continue
            if answer["error_code"] == ErrorCode.NONE:
                node = int(answer["node_id"])
                return node if node in healthy else None
        return None

    def _secured_coordinator(self, healthy: list[int]) -> int | None:
        """``_coordinator`` on a secured cluster, where a connection must log in first: the
        SDK's FindCoordinator through an ``Admin`` bootstrapped from each address in turn."""
        assert self.group is not None
        for address in self.control.bootstrap_servers().split(","):
            try:
                with self._admin(address) as admin:
                    node = int(admin.client.coordinator_for(self.group))
            except FluxError:
                continue
            return node if node in healthy else None
        return None
