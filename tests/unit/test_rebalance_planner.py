"""The rebalance planner (``flux.controller.rebalance``): pure, on hand-made images."""

from __future__ import annotations

from collections import Counter

from flux.controller import handlers
from flux.controller.image import MetadataImage
from flux.controller.rebalance import plan_rebalance

from tests.unit.test_controller_handlers import _apply, _cluster, _create


def _image(brokers: int, assignments: dict[int, list[int]]) -> MetadataImage:
    image = _cluster(brokers)
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
