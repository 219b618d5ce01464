"""Replica placement for new partitions, after Kafka's ``AdminUtils.assignReplicasToBrokers``.

Leaders (first replicas) go round-robin over the brokers from a start index; each follower is
placed at an increasing shift from its leader, and the shift grows by one every
``len(brokers)`` partitions, so both leaders and followers spread evenly. When every broker
declares a rack, the broker list is first arranged so racks alternate, and followers skip
brokers on racks that already hold a replica of the partition until every rack has one.

Pure: randomness comes only from the ``rng`` argument.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from flux.controller.errors import InvalidReplicationFactorError

__all__ = ["place_replicas", "rack_alternated"]


def place_replicas(
    brokers: Sequence[tuple[int, str | None]],
    partitions: int,
    replication_factor: int,
    *,
    rng: random.Random,
    start_partition: int = 0,
    start_index: int | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists (leader first) for ``partitions`` partitions numbered from
    ``start_partition``.

    ``brokers`` are ``(broker_id, rack)`` pairs. ``start_index`` fixes the index (into the
    broker list sorted by id, or the rack-alternated list) of the first partition's leader;
    by default it is drawn from ``rng``, as is the follower shift.
    """
    if partitions < 0:
        raise ValueError(f"partitions must be >= 0, got {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be at least 1, got {replication_factor}"
        )
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} available brokers"
        )
    if len({broker_id for broker_id, _ in brokers}) != len(brokers):
        raise ValueError("broker ids must be unique")
    ordered = sorted(brokers)
    rack_aware = all(rack is not None for _, rack in ordered) and ordered
    if rack_aware:
        return _place_rack_aware(
            ordered, partitions, replication_factor, rng, start_partition, start_index
        )
    return _place_rack_unaware(
        [broker_id for broker_id, _ in ordered],
        partitions,
        replication_factor,
        rng,
        start_partition,
        start_index,
    )


def _replica_index(first_index: int, shift: int, replica: int, broker_count: int) -> int:
    offset = 1 + (shift + replica) % (broker_count - 1)
    return (first_index + offset) % broker_count


def _place_rack_unaware(
    broker_ids: list[int],
    partitions: int,
    replication_factor: int,
    rng: random.Random,
    start_partition: int,
    start_index: int | None,
) -> list[tuple[int, ...]]:
    count = len(broker_ids)
    start = rng.randrange(count) if start_index is None else start_index % count
    shift = rng.randrange(count)
    partition = max(0, start_partition)
    result: list[tuple[int, ...]] = []
    for _ in range(partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [broker_ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(broker_ids[_replica_index(first, shift, j, count)])
        result.append(tuple(replicas))
        partition += 1
    return result


def rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[int]:
    """Broker ids ordered so that racks alternate: a1, b1, c1, a2, b2, c2, a3, ...

    Racks are taken in name order and brokers within a rack in id order (Kafka's
    ``getRackAlternatedBrokerList``).
    """
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in sorted(brokers):
        by_rack.setdefault(str(rack), []).append(broker_id)
    racks = [by_rack[rack] for rack in sorted(by_rack)]
    result: list[int] = []
    for i in range(max(len(ids) for ids in racks)):
        result.extend(ids[i] for ids in racks if i < len(ids))
    return result


def _place_rack_aware(
    brokers: list[tuple[int, str | None]],
    partitions: int,
    replication_factor: int,
    rng: random.Random,
    start_partition: int,
    start_index: int | None,
) -> list[tuple[int, ...]]:
    rack_of = dict(brokers)
    arranged = rack_alternated(brokers)
    count = len(arranged)
    rack_count = len(set(rack_of.values()))
    start = rng.randrange(count) if start_index is None else start_index % count
    shift = rng.randrange(count)
    partition = max(0, start_partition)
    result: list[tuple[int, ...]] = []
    for _ in range(partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            # Bounded: within ``count`` steps every broker index is visited, and a broker on an
            # unused rack (or, once all racks are used, any unused broker) is accepted.
            for _attempt in range(count * count + 1):
                broker = arranged[_replica_index(first, shift * rack_count, k, count)]
                rack = rack_of[broker]
                k += 1
                rack_ok = rack not in racks_used or len(racks_used) == rack_count
                broker_ok = broker not in brokers_used
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
            else:  # pragma: no cover - unreachable by the argument above
                raise AssertionError("rack-aware placement found no broker")
        result.append(tuple(replicas))
        partition += 1
    return result
