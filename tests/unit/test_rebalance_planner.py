"""The rebalance planner (``flux.controller.rebalance``): pure, on hand-made images and plain
data: replica counts, preferred leaders, racks and bytes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from flux.controller import handlers
from flux.controller.image import MetadataImage
from flux.controller.rebalance import Move, bytes_to_copy, plan_moves, plan_rebalance
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_controller_handlers import _apply, _cluster, _create

Layout = dict[tuple[str, int], tuple[int, ...]]


def _image(
    brokers: int, assignments: dict[int, list[int]], racks: list[str] | None = None
) -> MetadataImage:
    image = _cluster(brokers, racks)
    return _apply(image, _create(image, assignments=assignments).records)


def _after(image: MetadataImage, moves) -> dict[int, tuple[int, ...]]:
    replicas = {i: s.replicas for i, s in enumerate(image.topics["t"].partitions)}
    for move in moves:
        replicas[move.partition] = move.target
    return replicas


def test_a_new_broker_gets_its_share_of_replicas_and_leaders() -> None:
    # Six partitions, replication factor 2, all on brokers 1 and 2; broker 3 just joined.
    image = _image(3, {i: [1 + i % 2, 2 - i % 2] for i in range(6)})
    moves = plan_rebalance(image)
    after = _after(image, moves)
    replicas = Counter(r for rs in after.values() for r in rs)
    assert replicas == {1: 4, 2: 4, 3: 4}
    leaders = Counter(rs[0] for rs in after.values())
    assert leaders == {1: 2, 2: 2, 3: 2}
    assert all(len(set(rs)) == 2 for rs in after.values())  # still two distinct replicas
    assert plan_rebalance(image) == moves  # deterministic
    # Executing the plan leaves nothing to do.
    result = handlers.alter_partition_reassignments(
        image, requests=[(m.topic, m.partition, list(m.target)) for m in moves]
    )
    assert all(p["error_code"] == 0 for p in result.response["partitions"])


def test_draining_a_broker_moves_every_replica_off_it() -> None:
    pairs = [[1, 2], [2, 3], [3, 1]]
    image = _image(3, {i: pairs[i % 3] for i in range(6)})
    moves = plan_rebalance(image, exclude=[3])
    after = _after(image, moves)
    assert all(sorted(rs) == [1, 2] for rs in after.values())
    assert Counter(rs[0] for rs in after.values()) == {1: 3, 2: 3}
    # A replica with nowhere to go (replication factor 3, two brokers left) stays.
    full = _image(3, {0: [1, 2, 3]})
    assert plan_rebalance(full, exclude=[3]) == []


def test_a_balanced_cluster_needs_no_move() -> None:
    image = _image(3, {0: [1, 2], 1: [2, 3], 2: [3, 1]})
    assert plan_rebalance(image) == []


def _applied(current: Layout, moves: Iterable[Move]) -> Layout:
    after = dict(current)
    for move in moves:
        assert after[(move.topic, move.partition)] == move.replicas
        after[(move.topic, move.partition)] = move.target
    return after


def _counts(layout: Layout, brokers: Iterable[int]) -> dict[int, int]:
    return {b: sum(b in replicas for replicas in layout.values()) for b in brokers}


def _bytes(layout: Layout, brokers: Iterable[int], sizes: Mapping[tuple[str, int], int]):
    return {b: sum(sizes[k] for k, replicas in layout.items() if b in replicas) for b in brokers}


def _spread(totals: dict[int, int]) -> int:
    return max(totals.values()) - min(totals.values())


def test_moves_never_put_two_replicas_in_one_rack_when_another_rack_could_take_it() -> None:
    # Racks a, b, c hold brokers 1, 2, 3; the three new brokers 4-6 are all in rack a.
    racks = ["a", "b", "c", "a", "a", "a"]
    rack_of = dict(enumerate(racks, start=1))
    image = _image(6, {p: [1, 2, 3] for p in range(6)}, racks)
    moves = plan_rebalance(image)
    after = _after(image, moves)
    assert all(len({rack_of[r] for r in rs}) == 3 for rs in after.values())
    # Only rack a's replicas may spread over its four brokers; racks b and c keep theirs.
    counts = Counter(r for rs in after.values() for r in rs)
    assert counts[2] == counts[3] == 6
    assert sorted(counts[b] for b in (1, 4, 5, 6)) == [1, 1, 2, 2]
    assert plan_rebalance(image) == moves  # deterministic
    # Blind to racks, the same plan would put two replicas of a partition in rack a.
    start: Layout = {("t", p): (1, 2, 3) for p in range(6)}
    blind = _applied(start, plan_moves(start, range(1, 7)))
    assert any(len({rack_of[r] for r in rs}) < 3 for rs in blind.values())


def test_a_partition_crowded_in_one_rack_moves_a_replica_to_a_free_rack() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    current: Layout = {("t", 0): (1, 2), ("t", 1): (3, 4), ("t", 2): (1, 3), ("t", 3): (2, 4)}
    after = _applied(current, plan_moves(current, racks, racks=racks))
    assert all({racks[r] for r in rs} == {"a", "b"} for rs in after.values())
    assert set(_counts(after, racks).values()) == {2}
    # With a single rack there is no better place: nothing moves.
    one_rack = dict.fromkeys(racks, "a")
    assert plan_moves(current, racks, racks=one_rack) == []
    # A drain prefers a broker in a rack the partition lacks, over a less loaded one.
    drain = plan_moves(
        {("t", 0): (1, 3), ("t", 1): (2, 4)},
        [1, 2, 3, 4, 5],
        exclude=[3],
        drain_only=True,
        racks={**racks, 5: "a"},
    )
    assert [m.target for m in drain] == [(1, 4)]


def test_bytes_even_out_while_counts_stay_even() -> None:
    brokers = [1, 2, 3]
    current: Layout = {("t", p): (1 + p // 2,) for p in range(6)}  # two partitions each
    sizes = {("t", 0): 100, ("t", 1): 90, ("t", 2): 10, ("t", 3): 5, ("t", 4): 50, ("t", 5): 45}
    assert plan_moves(current, brokers) == []  # replica counts are even already
    moves = plan_moves(current, brokers, sizes=sizes)
    after = _applied(current, moves)
    assert _spread(_bytes(after, brokers, sizes)) < _spread(_bytes(current, brokers, sizes))
    assert _bytes(after, brokers, sizes) == {1: 100, 2: 105, 3: 95}
    assert _counts(after, brokers) == {1: 2, 2: 2, 3: 2}
    assert plan_moves(current, brokers, sizes=sizes) == moves  # deterministic
    assert sum(bytes_to_copy(m, sizes) for m in moves) == 100 + 10  # t-0 and t-2 swap places


def test_counts_go_first_then_the_replica_that_best_evens_bytes_moves() -> None:
    # Broker 1 holds four replicas, broker 2 none: two move, and they are the two that leave
    # the brokers closest in bytes (70 + 30 against 60 + 40).
    current: Layout = {("t", p): (1,) for p in range(4)}
    sizes = {("t", 0): 70, ("t", 1): 60, ("t", 2): 40, ("t", 3): 30}
    after = _applied(current, plan_moves(current, [1, 2], sizes=sizes))
    assert _counts(after, [1, 2]) == {1: 2, 2: 2}
    assert _bytes(after, [1, 2], sizes) == {1: 100, 2: 100}


def test_racks_and_sizes_left_out_leave_the_plan_of_counts_alone() -> None:
    current: Layout = {("t", p): (1 + p % 2, 2 - p % 2) for p in range(6)}
    plan = plan_moves(current, [1, 2, 3])
    assert plan
    assert plan_moves(current, [1, 2, 3], racks=dict.fromkeys([1, 2, 3])) == plan
    # Equal sizes change nothing either: bytes follow the counts.
    assert plan_moves(current, [1, 2, 3], sizes=dict.fromkeys(current, 7)) == plan


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    broker_count=st.integers(2, 6),
    partition_count=st.integers(1, 16),
    with_racks=st.booleans(),
)
def test_plans_keep_rack_spread_counts_and_determinism(
    data: st.DataObject, broker_count: int, partition_count: int, with_racks: bool
) -> None:
    brokers = list(range(1, broker_count + 1))
    current: Layout = {}
    for p in range(partition_count):
        factor = data.draw(st.integers(1, min(3, broker_count)))
        current[("t", p)] = tuple(data.draw(st.permutations(brokers))[:factor])
    sizes = {key: data.draw(st.integers(0, 10**6)) for key in current}
    racks = {b: data.draw(st.sampled_from("ab")) for b in brokers} if with_racks else {}
    moves = plan_moves(current, brokers, racks=racks, sizes=sizes)
    assert plan_moves(current, brokers, racks=racks, sizes=sizes) == moves
    after = _applied(current, moves)

    def rack_count(replicas: tuple[int, ...]) -> int:
        return len({racks.get(b, str(b)) for b in replicas})

    for key, replicas in after.items():
        assert len(set(replicas)) == len(replicas) == len(current[key])
        assert rack_count(replicas) >= rack_count(current[key])
    if not with_racks:
        assert _spread(_counts(after, brokers)) <= 1
        counts_only = _applied(current, plan_moves(current, brokers))
        assert _spread(_bytes(after, brokers, sizes)) <= _spread(
            _bytes(counts_only, brokers, sizes)
        )
