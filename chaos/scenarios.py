"""The scenarios: a workload plus a schedule generator each, named as ``fluxctl chaos run``
and the pytest suite know them.

A generator is a pure function ``(rng, duration_s, nodes, can) -> [Step]`` of a seeded
``random.Random``, the fault window, the node count and what the backend can do besides kills
and pauses (``can``: a set of ``PARTITIONS``, cutting the network, and ``DISKS``, filling a
node's log directory; only the mixed scenario consults it). Every fault is followed by
``recover`` before the next (see ``flux.chaos.nemesis``): a hold of ``HOLD_S`` with the fault in
place, then a gap of ``GAP_S`` with the cluster whole.

A scenario also says how many nodes its cluster has (``nodes``: moving a replica of a topic
replicated three ways needs a fourth broker) and whether the run ends by comparing every
replica's log (``check_replicas``, see ``flux.chaos.replicas``), which backends it needs
(``needs_partitions``: one that cuts the network, the Docker or the netns backend;
``partition_shapes``: one-way and bridge partitions too, the netns backend only;
``needs_clock``: wall-clock jumps, the local process backend only), and the configs of its
topic and the settings of its nodes beyond the defaults.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .nemesis import Step
from .workloads import WorkloadSpec

__all__ = ["DISKS", "PARTITIONS", "SCENARIOS", "Scenario", "generate_schedule"]

#: Seconds a fault stays in place, and seconds of calm after it (uniform in the range).
HOLD_S = (2.0, 4.0)
GAP_S = (2.0, 4.0)
#: The first fault comes after this many seconds of undisturbed load.
WARM_UP_S = 2.0
#: After a whole-cluster crash: seconds between nodes coming back one at a time, and how long
#: a returned majority serves before the last node returns.
RETURN_GAP_S = (3.0, 6.0)
#: How the nodes return after a crash, chosen per crash.
RETURNS = ("all", "majority", "one-at-a-time")

#: What a backend can do beyond kills, pauses, restarts and damaged files (``Scenario.generate``'s
#: ``can``): cut the network, fill a node's log directory.
PARTITIONS = "partitions"
DISKS = "disks"

Generator = Callable[[random.Random, float, int, frozenset[str]], list[Step]]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    generate: Generator
    workload: WorkloadSpec
    #: The scenario cannot run without network partitions (a Docker backend).
    needs_partitions: bool = False
    #: Nodes of the scenario's cluster (the Docker backend runs 3 only).
    nodes: int = 3
    #: After the final read, compare the logs of every replica of the workload topic.
    check_replicas: bool = False
    #: Needs the partition shapes beyond cutting a node off (one-way, bridge): the netns
    #: process backend only.
    partition_shapes: bool = False
    #: Jumps wall clocks: the local process backend only, its nodes started with the shim.
    needs_clock: bool = False
    #: Configs of the workload topic besides ``min.insync.replicas``: (name, value).
    topic_configs: tuple[tuple[str, str], ...] = ()
    #: Node settings beyond the chaos cluster's: (section, key, value).
    node_settings: tuple[tuple[str, str, Any], ...] = ()

    def settings(self) -> dict[str, dict[str, Any]]:
        """``node_settings`` as sections of keys (``start_process_cluster(extra=...)``)."""
        sections: dict[str, dict[str, Any]] = {}
        for section, key, value in self.node_settings:
            sections.setdefault(section, {})[key] = value
        return sections


def _cycles(
    rng: random.Random, duration_s: float, pick: Callable[[random.Random], tuple[str, str]]
) -> list[Step]:
    """Fault, hold, recover, gap, ... until ``duration_s``; ``pick`` names each fault."""
    steps = []
    at_s = WARM_UP_S
    while at_s < duration_s:
        f, target = pick(rng)
        steps.append(Step(round(at_s, 2), f, target))
        at_s += rng.uniform(*HOLD_S)
        steps.append(Step(round(at_s, 2), "recover"))
        at_s += rng.uniform(*GAP_S)
    return steps


def _always(f: str, target: str) -> Generator:
    def generate(
        rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]
    ) -> list[Step]:
        return _cycles(rng, duration_s, lambda _: (f, target))

    return generate


def _corrupt_tail(
    rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]
) -> list[Step]:
    return _cycles(rng, duration_s, lambda r: (r.choice(("corrupt", "truncate")), "any"))


def _rolling_restart(
    rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]
) -> list[Step]:
    """Graceful restarts of node 1, 2, ... in turn (and around again). As an operator would,
    each restart is followed at once by ``recover``, which waits until every ISR is full
    again, and then a gap."""
    steps = []
    at_s = WARM_UP_S
    node = 0
    while at_s < duration_s:
        steps.append(Step(round(at_s, 2), "restart", f"node-{node % nodes + 1}"))
        steps.append(Step(round(at_s, 2), "recover"))
        node += 1
        at_s += rng.uniform(*GAP_S)
    return steps


def _crash_cycle(
    rng: random.Random, at_s: float, nodes: int, crashed: list[int]
) -> tuple[list[Step], float]:
    """One crash of the ``crashed`` nodes at ``at_s`` (every node: ``crash``; fewer: a SIGKILL
    of each at the same moment), the hold, their return in a random order (all together, a
    majority of the cluster first and the rest after a gap, or one at a time with gaps; a lone
    node waits for its quorum), ``recover`` (which brings back whoever is still down and waits
    for full ISRs) and the gap; the steps and when the next fault may come."""
    if len(crashed) == nodes:
        steps = [Step(round(at_s, 2), "crash")]
    else:
        steps = [Step(round(at_s, 2), "kill", f"node-{node}") for node in crashed]
    at_s += rng.uniform(*HOLD_S)
    order = rng.sample(crashed, len(crashed))
    how = rng.choice(RETURNS)
    # Nodes to start before the last gap: a majority of the cluster counts the ones still up.
    majority = max(0, nodes // 2 + 1 - (nodes - len(crashed)))
    first = {"all": 0, "majority": majority, "one-at-a-time": len(crashed) - 1}[how]
    for index, node in enumerate(order[:first]):
        steps.append(Step(round(at_s, 2), "start", f"node-{node}"))
        if how == "one-at-a-time" or index == first - 1:
            at_s += rng.uniform(*RETURN_GAP_S)
    steps.append(Step(round(at_s, 2), "recover"))
    return steps, at_s + rng.uniform(*GAP_S)


def _whole_cluster_crash(
    rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]
) -> list[Step]:
    """Every node SIGKILLed at once, then back in a random order (``_crash_cycle``)."""
    steps = []
    at_s = WARM_UP_S
    while at_s < duration_s:
        cycle, at_s = _crash_cycle(rng, at_s, nodes, list(range(1, nodes + 1)))
        steps.extend(cycle)
    return steps


MIXED_FAULTS = (
    ("kill", "leader"),
    ("kill", "follower"),
    ("kill", "controller"),
    ("kill", "coordinator"),
    ("pause", "leader"),
    ("pause", "follower"),
    ("restart", "any"),
    ("corrupt", "any"),
    ("truncate", "any"),
)


#: The mixed scenario's faults on a backend that can cut the network, and fill a log directory.
MIXED_PARTITION_FAULTS = (("partition", "leader"), ("partition", "any"))
MIXED_DISK_FAULTS = (("disk-full", "leader"), ("disk-full", "any"))
#: Share of the mixed scenario's cycles that crash several nodes at once (a majority or all of
#: them, see ``_crash_cycle``) instead of one fault.
MULTI_CRASH_SHARE = 0.15


def _mixed(rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]) -> list[Step]:
    """Cycles of one fault drawn from ``MIXED_FAULTS`` (and partitions and full disks where
    the backend ``can``), or, in ``MULTI_CRASH_SHARE`` of them, a crash of several nodes at
    once: a majority or every node, back in any order."""
    faults: tuple[tuple[str, str], ...] = MIXED_FAULTS
    faults += MIXED_PARTITION_FAULTS if PARTITIONS in can else ()
    faults += MIXED_DISK_FAULTS if DISKS in can else ()
    steps: list[Step] = []
    at_s = WARM_UP_S
    while at_s < duration_s:
        if rng.random() < MULTI_CRASH_SHARE:
            count = rng.choice((nodes // 2 + 1, nodes))
            crashed = sorted(rng.sample(range(1, nodes + 1), count))
            cycle, at_s = _crash_cycle(rng, at_s, nodes, crashed)
            steps.extend(cycle)
            continue
        f, target = rng.choice(faults)
        steps.append(Step(round(at_s, 2), f, target))
        at_s += rng.uniform(*HOLD_S)
        steps.append(Step(round(at_s, 2), "recover"))
        at_s += rng.uniform(*GAP_S)
    return steps


#: Partition shapes of the ``partition-shapes`` scenario, taken in a seeded order so that a
#: short run still meets different ones.
SHAPE_FAULTS = (
    ("partition", "leader"),
    ("isolate", "leader"),
    ("one-way-out", "leader"),
    ("one-way-in", "leader"),
    ("bridge", "follower"),
    ("partition", "controller"),
    ("one-way-out", "controller"),
)


def _partition_shapes(
    rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]
) -> list[Step]:
    order = rng.sample(SHAPE_FAULTS, len(SHAPE_FAULTS))
    cycle = iter(range(1_000_000))
    return _cycles(rng, duration_s, lambda _: order[next(cycle) % len(order)])


#: Whose clock jumps, and by how much (seconds, forward or backward): minutes to hours, below
#: every time-based limit a jump may legitimately trip (7-day retention, a producer id
#: expiring after a day), so nothing may change but timestamps.
CLOCK_TARGETS = ("leader", "controller", "any")
CLOCK_JUMPS_S = (300.0, 3600.0, 6 * 3600.0)


def _clock_jump(
    rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]
) -> list[Step]:
    """One node's wall clock jumps forward or backward (in turn, so that a short run has
    both), holds, and ``recover`` jumps it back to the true time."""
    steps = []
    at_s = WARM_UP_S
    sign = rng.choice((1, -1))
    while at_s < duration_s:
        offset_s = sign * rng.choice(CLOCK_JUMPS_S)
        sign = -sign
        steps.append(Step(round(at_s, 2), "clock", rng.choice(CLOCK_TARGETS), offset_s=offset_s))
        at_s += rng.uniform(*HOLD_S)
        steps.append(Step(round(at_s, 2), "recover"))
        at_s += rng.uniform(*GAP_S)
    return steps


#: The clock scenario's topic: small segments, rolled after an hour, kept 7 days, so a
#: retention pass that trusted a jumped clock would delete closed segments (and the final read
#: from offset 0 would miss them); its nodes check retention twice a second.
CLOCK_TOPIC_CONFIGS = (
    ("segment.bytes", str(16 * 1024)),
    ("segment.ms", str(3600 * 1000)),
    ("retention.ms", str(7 * 24 * 3600 * 1000)),
)
CLOCK_NODE_SETTINGS = (("broker", "retention_check_interval_ms", 500),)

_LOG = WorkloadSpec()
_LOG_AND_GROUP = WorkloadSpec(group_members=("confluent", "flux"))
#: Transactions in front, with a lighter log workload beside them (two cores run it all).
_TRANSACTIONS = WorkloadSpec(
    producers=(("confluent", True),), consumers=("confluent",), transactional_producers=2
)
TRANSACTION_FAULTS = (
    ("kill", "txn-coordinator"),
    ("kill", "leader"),
    ("kill", "controller"),
)


def _transactions(
    rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]
) -> list[Step]:
    return _cycles(rng, duration_s, lambda r: r.choice(TRANSACTION_FAULTS))


#: In a reassign cycle: seconds from a move to the kill that meets it in flight (in a short run
#: a new replica catches up and the move completes in well under a second), and from a kill
#: to the move that follows it (before and after the 2 s session timeout fences the dead
#: broker).
MOVE_TO_KILL_S = (0.0, 0.5)
KILL_TO_MOVE_S = (0.3, 3.0)
#: Seconds from the move to a cancel of a running reassignment, and how often one comes.
MOVE_TO_CANCEL_S = (0.1, 1.0)
CANCEL_SHARE = 0.3
#: The moves of a cycle and their weights: a random replica move, a planner rebalance, or a
#: rebalance planned while the replica move just submitted runs (an operator who did not wait).
MOVE_SETS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("reassign",), 5),
    (("rebalance",), 3),
    (("reassign", "rebalance"), 2),
)
#: Seconds between the two moves of a set.
MOVE_TO_MOVE_S = (0.05, 0.5)
#: Whom a kill hits while a move runs, and before a move (the move then goes to or away from
#: a dead broker, and a rebalance drains it).
KILLS_DURING_MOVE = ("leader", "controller", "adding", "removing", "follower")
KILLS_BEFORE_MOVE = ("leader", "controller", "any")


def _reassign(rng: random.Random, duration_s: float, nodes: int, can: frozenset[str]) -> list[Step]:
    """Cycles of moves (``MOVE_SETS``) and a SIGKILL, in either order and close together,
    sometimes a cancel of a running reassignment, then the hold, ``recover`` (which also waits
    until no reassignment runs) and a gap."""
    steps = []
    at_s = WARM_UP_S
    sets = [moves for moves, _ in MOVE_SETS]
    weights = [weight for _, weight in MOVE_SETS]
    while at_s < duration_s:
        moves = rng.choices(sets, weights)[0]
        kill_first = rng.random() < 0.5
        if kill_first:
            steps.append(Step(round(at_s, 2), "kill", rng.choice(KILLS_BEFORE_MOVE)))
            at_s += rng.uniform(*KILL_TO_MOVE_S)
        for index, move in enumerate(moves):
            if index:
                at_s += rng.uniform(*MOVE_TO_MOVE_S)
            steps.append(Step(round(at_s, 2), move))
        if not kill_first:
            at_s += rng.uniform(*MOVE_TO_KILL_S)
            steps.append(Step(round(at_s, 2), "kill", rng.choice(KILLS_DURING_MOVE)))
        if rng.random() < CANCEL_SHARE:
            at_s += rng.uniform(*MOVE_TO_CANCEL_S)
            steps.append(Step(round(at_s, 2), "cancel"))
        at_s += rng.uniform(*HOLD_S)
        steps.append(Step(round(at_s, 2), "recover"))
        at_s += rng.uniform(*GAP_S)
    return steps


SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        Scenario(
            "kill-leader",
            "SIGKILL the leader of a partition, restart it after a few seconds",
            _always("kill", "leader"),
            _LOG,
        ),
        Scenario(
            "kill-controller",
            "SIGKILL the active controller (Raft leader), restart it; a group runs too",
            _always("kill", "controller"),
            _LOG_AND_GROUP,
        ),
        Scenario(
            "pause-follower",
            "SIGSTOP a follower replica long enough to leave the ISR, then SIGCONT it",
            _always("pause", "follower"),
            _LOG,
        ),
        Scenario(
            "rolling-restart",
            "gracefully restart every node in turn while producers, consumers and a group run",
            _rolling_restart,
            _LOG_AND_GROUP,
        ),
        Scenario(
            "partition-leader",
            "cut a partition leader off the other nodes, heal (Docker or netns backend)",
            _always("partition", "leader"),
            _LOG,
            needs_partitions=True,
        ),
        Scenario(
            "partition-shapes",
            "partitions of every shape in turn: a node cut off from the others or from "
            "everyone, one-way (a node cannot send, or cannot receive), a bridge node between "
            "two halves (netns backend only)",
            _partition_shapes,
            _LOG,
            needs_partitions=True,
            partition_shapes=True,
        ),
        Scenario(
            "clock-jump",
            "jump the wall clock of a partition leader, the active controller or any node by "
            "minutes to hours, forward or back, then back to the true time (local processes)",
            _clock_jump,
            _LOG,
            needs_clock=True,
            topic_configs=CLOCK_TOPIC_CONFIGS,
            node_settings=CLOCK_NODE_SETTINGS,
        ),
        Scenario(
            "corrupt-tail",
            "SIGKILL a node, flip a byte in or cut the tail of its newest segments, restart it",
            _corrupt_tail,
            _LOG,
        ),
        Scenario(
            "whole-cluster-crash",
            "SIGKILL every node at once; bring them back all together, a majority first, or "
            "one at a time with gaps",
            _whole_cluster_crash,
            _LOG,
        ),
        Scenario(
            "transactions",
            "multi-partition transactions (a fifth aborted on purpose) read with read_committed "
            "while the transaction coordinator, partition leaders and the active controller "
            "are SIGKILLed mid-commit",
            _transactions,
            _TRANSACTIONS,
        ),
        Scenario(
            "reassign",
            "on 4 nodes, move replicas of the topic (random moves, planner rebalances, "
            "cancels) while SIGKILLing partition leaders, moving replicas and the active "
            "controller; then compare every replica's log",
            _reassign,
            _LOG,
            nodes=4,
            check_replicas=True,
        ),
        Scenario(
            "mixed",
            "a random mix of kills, pauses, restarts, corruptions, crashes of a majority or of "
            "every node at once (and partitions with --netns or Docker, full disks with "
            "--disks)",
            _mixed,
            _LOG_AND_GROUP,
        ),
    )
}


def generate_schedule(
    scenario: Scenario,
    *,
    seed: int,
    duration_s: float,
    nodes: int,
    partitions: bool,
    disks: bool = False,
) -> list[Step]:
    """The schedule of ``scenario`` for ``seed`` on a backend that can cut the network
    (``partitions``) and fill log directories (``disks``): the same arguments give the same
    steps."""
    can = frozenset(name for name, able in ((PARTITIONS, partitions), (DISKS, disks)) if able)
    return scenario.generate(random.Random(seed), duration_s, nodes, can)
