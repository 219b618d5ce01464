"""The rebalance planner: which partitions to reassign so that replicas and preferred leaders
spread evenly over the brokers (a pure function of the metadata image; no I/O).

``plan_rebalance(image)`` returns one ``Move`` per partition whose replicas should change; an
operator (or ``fluxctl``) executes them with AlterPartitionReassignments, whose rules keep
``acks=all`` guarantees while replicas move (``handlers.alter_partition_reassignments``).

The plan, greedy and deterministic (ties broken by broker id, then topic and partition):

1. **Replicas**: the brokers taking part are the registered, unfenced ones minus
   ``exclude`` (brokers to drain). Every replica on an excluded or gone broker moves first, to
   the taking-part broker with the fewest replicas that does not hold the partition yet. Then,
   while the most loaded broker holds at least two replicas more than the least loaded, one
   of its replicas moves to the least loaded (a partition the latter does not hold). A replica
   keeps its position in the list, so a moved first replica moves the preferred leadership with
   it.
2. **Preferred leaders**: while a broker is the first replica of at least two partitions more
   than another that holds a replica of one of them, the two swap places in that partition's
   list (no data moves for this).

Bytes per broker and racks are not weighed yet: every replica counts the same.

**Draining** one broker (``plan_drain``, what ``fluxctl cluster remove-node`` runs) is step 1 for
that broker alone: only the partitions it holds move, each of its replicas to the least loaded
live broker not holding the partition yet (a replica on another broker that is down stays
where it is: the drain does not wait for it), and nothing else is evened out (run a rebalance
afterwards for that). A drained first replica hands the preferred leadership to its
replacement, and the reassignment moves the leadership off the broker when it completes.
``drain_refusals`` says beforehand why a drain could never complete: a topic whose
replication factor exceeds the live brokers left.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from flux.controller.image import MetadataImage

__all__ = ["Move", "drain_refusals", "plan_drain", "plan_moves", "plan_rebalance"]

#: Moves of one plan at most (a named bound: a plan is executed by an operator).
MAX_MOVES = 100_000


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...]


def plan_rebalance(
    image: MetadataImage,
    *,
    topics: Iterable[str] | None = None,
    exclude: Collection[int] = (),
) -> list[Move]:
    """The moves that even out replicas and preferred leaders over the live brokers (see the
    module docstring); ``topics``: only these (default: all but internal ``__`` topics)."""
    live = [b for b, registration in image.brokers.items() if not registration.fenced]
    if topics is None:
        names = sorted(name for name in image.topics if not name.startswith("__"))
    else:
        names = sorted(topics)
    current = {
        (name, index): state.target_replicas
        for name in names
        if name in image.topics
        for index, state in enumerate(image.topics[name].partitions)
    }
    return plan_moves(current, live, exclude=exclude)


def plan_moves(
    current: dict[tuple[str, int], tuple[int, ...]],
    live_brokers: Iterable[int],
    *,
    exclude: Collection[int] = (),
    drain_only: bool = False,
) -> list[Move]:
    """``plan_rebalance`` over plain data: each partition's replicas and the live brokers (for
    tools that read them with Metadata requests). ``drain_only``: move the replicas of the
    ``exclude`` brokers and nothing else (step 1a for them only; see ``plan_drain``)."""
    brokers = sorted(b for b in set(live_brokers) if b not in exclude)
    if not brokers:
        return []
    lists = {key: list(replicas) for key, replicas in current.items()}
    load = {broker: 0 for broker in brokers}
    for replicas in lists.values():
        for replica in replicas:
            if replica in load:
                load[replica] += 1

    def least_loaded(excluding: Collection[int]) -> int | None:
        candidates = [b for b in brokers if b not in excluding]
        return min(candidates, key=lambda b: (load[b], b)) if candidates else None

    # 1a. Replicas on excluded or gone brokers move to the least loaded broker.
    for key in sorted(lists):
        replicas = lists[key]
        for position, replica in enumerate(replicas):
            if replica in load or (drain_only and replica not in exclude):
                continue
            destination = least_loaded(replicas)
            if destination is None:
                continue  # nowhere to go: the partition keeps it
            replicas[position] = destination
            load[destination] += 1
    # 1b. Even out the load.
    for _ in range(0 if drain_only else MAX_MOVES):
        busiest = max(brokers, key=lambda b: (load[b], -b))
        idlest = min(brokers, key=lambda b: (load[b], b))
        if load[busiest] - load[idlest] < 2:
            break
        movable = [
            key for key in sorted(lists) if busiest in lists[key] and idlest not in lists[key]
        ]
        if not movable:
            break
        replicas = lists[movable[0]]
        replicas[replicas.index(busiest)] = idlest
        load[busiest] -= 1
        load[idlest] += 1
    # 2. Even out the preferred leaders by swapping positions within a partition.
    leading = {broker: 0 for broker in brokers}
    for replicas in lists.values():
        if replicas and replicas[0] in leading:
            leading[replicas[0]] += 1
    for _ in range(0 if drain_only else MAX_MOVES):
        swapped = False
        for key in sorted(lists):
            replicas = lists[key]
            first = replicas[0] if replicas else None
            if first not in leading:
                continue
            others = [r for r in replicas[1:] if r in leading]
            if not others:
                continue
            other = min(others, key=lambda b: (leading[b], b))
            if leading[first] - leading[other] >= 2:
                position = replicas.index(other)
                replicas[0], replicas[position] = other, first
                leading[first] -= 1
                leading[other] += 1
                swapped = True
        if not swapped:
            break
    return [
        Move(name, index, tuple(current[(name, index)]), tuple(replicas))
        for (name, index), replicas in sorted(lists.items())
        if tuple(replicas) != tuple(current[(name, index)])
    ]


def plan_drain(
    current: dict[tuple[str, int], tuple[int, ...]],
    live_brokers: Iterable[int],
    broker_id: int,
) -> list[Move]:
    """The moves that take every replica off ``broker_id`` and nothing more (see the module
    docstring); ``current`` as for ``plan_moves`` (a partition being reassigned counts with
    its target replicas)."""
    return plan_moves(current, live_brokers, exclude=(broker_id,), drain_only=True)


def drain_refusals(
    current: dict[tuple[str, int], tuple[int, ...]],
    live_brokers: Iterable[int],
    broker_id: int,
) -> list[str]:
    """Why draining ``broker_id`` could not complete, one sentence per topic (empty: it can):
    a topic whose replication factor (its largest partition) exceeds the live brokers other
    than ``broker_id`` would be left with a replica nowhere to go."""
    remaining = sorted(set(live_brokers) - {broker_id})
    factors: dict[str, int] = {}
    for (topic, _partition), replicas in current.items():
        factors[topic] = max(factors.get(topic, 0), len(replicas))
    return [
        f"topic {topic!r} has replication factor {factor}, but only {len(remaining)} live "
        f"broker(s) would be left ({', '.join(map(str, remaining)) or 'none'})"
        for topic, factor in sorted(factors.items())
        if factor > len(remaining)
    ]
