"""Kafka's "maximal ISR" (KIP-497): while a leader's proposal to add a replica to the ISR is in
flight, the high watermark waits for that replica too. The commit that adds it can also make
it leader (a reassignment completing), so every record acknowledged meanwhile must be on it:
the chaos suite's ``reassign`` scenario lost two acknowledged records without this."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from flux.cluster.metadata.controller_client import ControllerUnavailableError
from flux.cluster.replication.isr import IsrManager
from flux.controller.image import PartitionState
from flux.protocol.records import build_batch

from tests.unit.test_fetch_session import _partition

STATE = PartitionState((1, 2, 3), (1, 2), 1, 0, 0)


def _leader(tmp_path: Path):
    partition = _partition(tmp_path, 1, 0)
    partition.become_leader(STATE)
    for _ in range(3):
        partition.append_as_leader(build_batch([(None, b"v", ())]))
    partition.record_follower_fetch(2, 3)
    partition.record_follower_fetch(3, 1)  # caught up to an older high watermark
    assert partition.high_watermark == 3
    return partition


def test_a_replica_being_added_holds_the_high_watermark_back(tmp_path: Path) -> None:
    partition = _leader(tmp_path)
    partition.propose_isr((1, 2, 3))
    for _ in range(2):
        partition.append_as_leader(build_batch([(None, b"w", ())]))
    partition.record_follower_fetch(2, 5)
    assert partition.high_watermark == 3  # replica 3 has only 1..: nothing new acknowledged
    partition.record_follower_fetch(3, 5)
    assert partition.high_watermark == 5


def test_a_refused_proposal_lets_the_isr_alone_decide_again(tmp_path: Path) -> None:
    partition = _leader(tmp_path)
    partition.propose_isr((1, 2, 3))
    partition.append_as_leader(build_batch([(None, b"w", ())]))
    partition.record_follower_fetch(2, 4)
    assert partition.high_watermark == 3
    partition.proposal_failed(partition.state)
    assert partition.pending_isr == frozenset() and partition.high_watermark == 4


def test_the_controllers_decision_ends_the_proposal(tmp_path: Path) -> None:
    partition = _leader(tmp_path)
    partition.propose_isr((1, 2, 3))
    committed = dataclasses.replace(STATE, isr=(1, 2, 3), partition_epoch=1)
    partition.update_state(committed)
    assert partition.pending_isr == frozenset()
    # A proposal decided later (its answer arrives after the image) changes nothing.
    partition.proposal_failed(STATE)
    assert partition.state is committed


def test_an_undelivered_proposal_is_dropped(tmp_path: Path) -> None:
    partition = _leader(tmp_path)

    class _Down:
        async def write(self, *args, **kwargs):
            raise ControllerUnavailableError("no controller")

    manager = IsrManager(
        None,  # type: ignore[arg-type]  (only _propose runs)
        _Down(),  # type: ignore[arg-type]
        broker_id=1,
        incarnation_id="inc-1",
        lag_time_max_ms=10_000,
    )
    partition.append_as_leader(build_batch([(None, b"w", ())]))
    partition.record_follower_fetch(2, 4)

    async def propose() -> None:
        await manager._propose([(partition, (1, 2, 3))])

    asyncio.run(propose())
    assert partition.pending_isr == frozenset() and partition.high_watermark == 4


def test_committed_isr_changes_are_counted_as_shrinks_and_expansions(tmp_path: Path) -> None:
    partition = _leader(tmp_path)
    answers = iter([0, 0, 58])  # committed, committed, INVALID_UPDATE_VERSION

    class _Controller:
        async def write(self, *args, **kwargs):
            return {"error_code": 0, "partitions": [{"error_code": next(answers)}]}

    class _Counts:
        isr_shrinks = 0
        isr_expands = 0

    counts = _Counts()
    manager = IsrManager(
        counts,  # type: ignore[arg-type]  (only _propose runs: it counts on the replicas)
        _Controller(),  # type: ignore[arg-type]
        broker_id=1,
        incarnation_id="inc-1",
        lag_time_max_ms=10_000,
    )

    async def propose() -> None:
        await manager._propose([(partition, (1, 2, 3))])  # 3 joins
        await manager._propose([(partition, (1,))])  # 2 leaves (the state is still (1, 2))
        await manager._propose([(partition, (1, 3))])  # refused: not counted

    asyncio.run(propose())
    assert (counts.isr_expands, counts.isr_shrinks) == (1, 1)
