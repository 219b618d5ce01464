"""The rebalance planner: which partitions to reassign so that replicas, preferred leaders and
bytes spread evenly over the brokers and each partition over as many racks as it can (a pure
function of the metadata image, or of plain data; no I/O).

``plan_rebalance(image)`` returns one ``Move`` per partition whose replicas should change; an
operator (or ``fluxctl``) executes them with AlterPartitionReassignments, whose rules keep
``acks=all`` guarantees while replicas move (``handlers.alter_partition_reassignments``).

The plan, greedy and deterministic (ties broken by broker id, then topic and partition):

1. **Replicas**: the brokers taking part are the registered, unfenced ones minus
   ``exclude`` (brokers to drain). Every replica on an excluded or gone broker moves first, to
   the taking-part broker that does not hold the partition yet with, in this order: a rack
   none of the partition's other replicas is in, the fewest replicas, the fewest bytes.
2. **Racks** (Kafka's rack-aware placement): a partition with two replicas in one rack while
   a taking-part rack holds none of its replicas moves one of them (from the most loaded
   broker) to the least loaded broker of such a rack. A broker without a rack counts as a rack
   of its own, so without racks this step never moves anything.
3. **Counts**: while some broker holds at least two replicas more than another, one of its
   replicas moves to the other (the most loaded broker first, to the least loaded that can
   take one): a partition the receiver does not hold, whose number of racks the move does not
   shrink; among those, the one whose size best evens the two brokers' bytes. With racks this
   greedy search may stop before counts are within one even where some layout would be.
4. **Bytes** (only with ``sizes``): while the heaviest broker holds more than
   ``BYTES_TOLERANCE`` of the mean bytes per broker more than the lightest, the exchange
   between the heaviest (or lightest) and another broker that best evens the pair moves: a
   partition one way and a smaller one the other way (a swap, which keeps the replica counts),
   or a single partition when the heavier broker also holds more replicas (counts stay within
   one). Neither may shrink a partition's number of racks; every exchange strictly narrows the
   pair's gap, so the pass ends.

A replica keeps its position in the list, so a moved first replica moves the preferred
leadership with it. Then:

5. **Preferred leaders**: while a broker is the first replica of at least two partitions more
   than another that holds a replica of one of them, the two swap places in that partition's
   list (no data moves for this).

Without racks and sizes, steps 2 and 4 move nothing and the plan is the one of replica counts
alone. Each step is bounded by ``MAX_MOVES``.

**Draining** one broker (``plan_drain``, what ``fluxctl cluster remove-node`` runs) is step 1 for
that broker alone: only the partitions it holds move, each of its replicas to the least loaded
live broker not holding the partition yet (in a rack the partition lacks, given ``racks``; a
replica on another broker that is down stays where it is: the drain does not wait for it), and
nothing else is evened out (run a rebalance afterwards for that). A drained first replica
hands the preferred leadership to its replacement, and the reassignment moves the leadership
off the broker when it completes.
``drain_refusals`` says beforehand why a drain could never complete: a topic whose
replication factor exceeds the live brokers left.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from flux.controller.image import MetadataImage

__all__ = [
    "Move",
    "bytes_to_copy",
    "drain_refusals",
    "plan_drain",
    "plan_moves",
    "plan_rebalance",
]

#: Moves of one plan at most, per step (a named bound: a plan is executed by an operator).
MAX_MOVES = 100_000
#: The bytes step stops once the heaviest broker holds at most this fraction of the mean bytes
#: per broker more than the lightest: moving whole logs for a smaller gain costs more traffic
#: than the imbalance does.
BYTES_TOLERANCE = 0.05

PartitionKey = tuple[str, int]
# A rack, or for a broker without one a rack of its own: ("", broker id).
_RackKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...]


def bytes_to_copy(move: Move, sizes: Mapping[PartitionKey, int]) -> int:
    """The bytes ``move`` copies: the partition's size for each replica it adds."""
    added = len(set(move.target) - set(move.replicas))
    return added * sizes.get((move.topic, move.partition), 0)


def plan_rebalance(
    image: MetadataImage,
    *,
    topics: Iterable[str] | None = None,
    exclude: Collection[int] = (),
    sizes: Mapping[PartitionKey, int] | None = None,
) -> list[Move]:
    """The moves that even out replicas, preferred leaders and (with ``sizes``, bytes of one
    replica per partition) bytes over the live brokers, racks as registered (see the module
    docstring); ``topics``: only these (default: all but internal ``__`` topics)."""
    live = [b for b, registration in image.brokers.items() if not registration.fenced]
    racks = {b: registration.rack for b, registration in image.brokers.items()}
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
    return plan_moves(current, live, exclude=exclude, racks=racks, sizes=sizes)


def plan_moves(
    current: Mapping[PartitionKey, tuple[int, ...]],
    live_brokers: Iterable[int],
    *,
    exclude: Collection[int] = (),
    drain_only: bool = False,
    racks: Mapping[int, str | None] | None = None,
    sizes: Mapping[PartitionKey, int] | None = None,
) -> list[Move]:
    """``plan_rebalance`` over plain data: each partition's replicas and the live brokers (for
    tools that read them with Metadata requests), each broker's rack (missing or ``None``: no
    rack) and each partition's size in bytes (one replica's; missing: 0). ``drain_only``: move
    the replicas of the ``exclude`` brokers and nothing else (step 1 for them only; see
    ``plan_drain``)."""
    brokers = sorted(b for b in set(live_brokers) if b not in exclude)
    if not brokers:
        return []
    plan = _Plan(current, brokers, racks or {}, sizes or {})
    plan.move_off_gone_brokers(only=exclude if drain_only else None)
    if not drain_only:
        plan.spread_over_racks()
        plan.even_counts()
        if sizes:
            plan.even_bytes()
        plan.even_leaders()
    return [
        Move(name, index, tuple(current[(name, index)]), tuple(replicas))
        for (name, index), replicas in sorted(plan.lists.items())
        if tuple(replicas) != tuple(current[(name, index)])
    ]


class _Plan:
    """The replica lists of one plan being built, with the per-broker totals derived from
    them. Used by one call of ``plan_moves`` only (not thread-safe). Invariant: ``load``,
    ``bytes_on`` and ``held`` always match ``lists`` for the taking-part brokers (``move`` is
    the only writer)."""

    def __init__(
        self,
        current: Mapping[PartitionKey, tuple[int, ...]],
        brokers: list[int],
        racks: Mapping[int, str | None],
        sizes: Mapping[PartitionKey, int],
    ) -> None:
        self.brokers = brokers
        self.racks = racks
        self.sizes = sizes
        self.lists = {key: list(replicas) for key, replicas in current.items()}
        self.load = {broker: 0 for broker in brokers}
        self.bytes_on = {broker: 0 for broker in brokers}
        self.held: dict[int, set[PartitionKey]] = {broker: set() for broker in brokers}
        for key, replicas in self.lists.items():
            for replica in replicas:
                if replica in self.load:
                    self._count(key, replica, +1)

    # -- state ------------------------------------------------------------------------------

    def size(self, key: PartitionKey) -> int:
        return self.sizes.get(key, 0)

    def rack_of(self, broker: int) -> _RackKey:
        rack = self.racks.get(broker)
        return (rack, -1) if rack else ("", broker)

    def _count(self, key: PartitionKey, broker: int, sign: int) -> None:
        self.load[broker] += sign
        self.bytes_on[broker] += sign * self.size(key)
        if sign > 0:
            self.held[broker].add(key)
        else:
            self.held[broker].discard(key)

    def move(self, key: PartitionKey, source: int, destination: int) -> None:
        """Replace ``source`` by ``destination`` in the partition's list, at its position."""
        replicas = self.lists[key]
        assert destination not in replicas, (key, replicas, destination)
        replicas[replicas.index(source)] = destination
        if source in self.load:
            self._count(key, source, -1)
        self._count(key, destination, +1)

    def keeps_rack_spread(self, key: PartitionKey, source: int, destination: int) -> bool:
        """Whether moving the replica on ``source`` to ``destination`` leaves the partition
        in at least as many racks as before."""
        replicas = self.lists[key]
        before = {self.rack_of(r) for r in replicas}
        after = {self.rack_of(r) for r in replicas if r != source} | {self.rack_of(destination)}
        return len(after) >= len(before)

    def _pair_gap(self, heavier: int, lighter: int, moved_bytes: int) -> int:
        return abs(self.bytes_on[heavier] - self.bytes_on[lighter] - 2 * moved_bytes)

    # -- steps ------------------------------------------------------------------------------

    def move_off_gone_brokers(self, *, only: Collection[int] | None) -> None:
        """Step 1: the replicas on brokers not taking part (``only`` these, if given)."""
        for key in sorted(self.lists):
            replicas = self.lists[key]
            for position, replica in enumerate(replicas):
                if replica in self.load or (only is not None and replica not in only):
                    continue
                others = {self.rack_of(r) for r in replicas if r != replica}
                candidates = [b for b in self.brokers if b not in replicas]
                if not candidates:
                    continue  # nowhere to go: the partition keeps it
                destination = min(
                    candidates,
                    key=lambda b: (self.rack_of(b) in others, self.load[b], self.bytes_on[b], b),
                )
                self.move(key, replicas[position], destination)

    def spread_over_racks(self) -> None:
        """Step 2: a partition with two replicas in one rack moves one to a rack it lacks."""
        for key in sorted(self.lists):
            for _ in range(len(self.lists[key])):
                replicas = self.lists[key]
                per_rack = Counter(self.rack_of(r) for r in replicas)
                crowded = [r for r in replicas if r in self.load and per_rack[self.rack_of(r)] > 1]
                free = [b for b in self.brokers if self.rack_of(b) not in per_rack]
                if not crowded or not free:
                    break
                source = max(crowded, key=lambda b: (self.load[b], self.bytes_on[b], -b))
                destination = min(free, key=lambda b: (self.load[b], self.bytes_on[b], b))
                self.move(key, source, destination)

    def even_counts(self) -> None:
        """Step 3: from the most to the least loaded brokers until counts differ by one."""
        for _ in range(MAX_MOVES):
            found = self._count_move()
            if found is None:
                return
            self.move(*found)

    def _count_move(self) -> tuple[PartitionKey, int, int] | None:
        descending = sorted(self.brokers, key=lambda b: (-self.load[b], b))
        ascending = sorted(self.brokers, key=lambda b: (self.load[b], b))
        for source in descending:
            for destination in ascending:
                if self.load[source] - self.load[destination] < 2:
                    break
                # The rack check is the costly part: made in order of preference, until one
                # passes.
                movable = sorted(
                    self.held[source] - self.held[destination],
                    key=lambda k: (self._pair_gap(source, destination, self.size(k)), k),
                )
                for key in movable:
                    if self.keeps_rack_spread(key, source, destination):
                        return key, source, destination
        return None

    def even_bytes(self) -> None:
        """Step 4: exchanges that narrow the bytes between two brokers, counts kept."""
        for _ in range(MAX_MOVES):
            if not self._bytes_unbalanced():
                return
            found = self._bytes_exchange()
            if found is None:
                return
            heavier, lighter, outgoing, incoming = found
            self.move(outgoing, heavier, lighter)
            if incoming is not None:
                self.move(incoming, lighter, heavier)

    def _bytes_unbalanced(self) -> bool:
        totals = self.bytes_on.values()
        spread = max(totals) - min(totals)
        return spread > BYTES_TOLERANCE * sum(totals) / len(self.brokers)

    def _bytes_exchange(self) -> tuple[int, int, PartitionKey, PartitionKey | None] | None:
        """The first pair (the heaviest with the lightest, then the heaviest with the others,
        then the lightest with the others) that has an exchange narrowing its gap: its best."""
        descending = sorted(self.brokers, key=lambda b: (-self.bytes_on[b], b))
        heaviest, lightest = descending[0], descending[-1]
        pairs = [(heaviest, b) for b in reversed(descending)]
        pairs += [(b, lightest) for b in descending]
        for heavier, lighter in dict.fromkeys(pairs):
            if self.bytes_on[heavier] > self.bytes_on[lighter]:
                found = self._best_exchange(heavier, lighter)
                if found is not None:
                    return heavier, lighter, *found
        return None

    def _best_exchange(
        self, heavier: int, lighter: int
    ) -> tuple[PartitionKey, PartitionKey | None] | None:
        """A partition from ``heavier`` to ``lighter`` and one (or, if ``heavier`` holds more
        replicas, none) back, whose difference in size ``d`` narrows the gap ``g`` the most:
        0 < d < g, closest to g / 2. The best return is found by bisection."""
        gap = self.bytes_on[heavier] - self.bytes_on[lighter]
        returns: list[tuple[int, PartitionKey | None]] = []
        if self.load[heavier] > self.load[lighter]:
            returns.append((0, None))  # a move without a return keeps the counts within one
        returns += sorted(
            (self.size(key), key)
            for key in self.held[lighter] - self.held[heavier]
            if self.keeps_rack_spread(key, lighter, heavier)
        )
        return_sizes = [size for size, _ in returns]
        best: tuple[int, PartitionKey, tuple[()] | PartitionKey] | None = None
        chosen: tuple[PartitionKey, PartitionKey | None] | None = None
        for outgoing in sorted(self.held[heavier] - self.held[lighter]):
            size = self.size(outgoing)
            if size <= 0 or not self.keeps_rack_spread(outgoing, heavier, lighter):
                continue
            index = bisect.bisect_left(return_sizes, size - gap / 2)
            for back_size, back in returns[max(0, index - 1) : index + 1]:
                difference = size - back_size
                if not 0 < difference < gap:
                    continue
                score = (abs(gap - 2 * difference), outgoing, back or ())
                if best is None or score < best:
                    best, chosen = score, (outgoing, back)
        return chosen

    def even_leaders(self) -> None:
        """Step 5: swap positions within a partition to even out the preferred leaders."""
        leading = {broker: 0 for broker in self.brokers}
        for replicas in self.lists.values():
            if replicas and replicas[0] in leading:
                leading[replicas[0]] += 1
        for _ in range(MAX_MOVES):
            swapped = False
            for key in sorted(self.lists):
                replicas = self.lists[key]
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
                return


def plan_drain(
    current: dict[tuple[str, int], tuple[int, ...]],
    live_brokers: Iterable[int],
    broker_id: int,
    *,
    racks: Mapping[int, str | None] | None = None,
) -> list[Move]:
    """The moves that take every replica off ``broker_id`` and nothing more (see the module
    docstring); ``current`` and ``racks`` as for ``plan_moves`` (a partition being reassigned
    counts with its target replicas)."""
    return plan_moves(current, live_brokers, exclude=(broker_id,), drain_only=True, racks=racks)


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
