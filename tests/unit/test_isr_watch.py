"""The ISR manager's pass visits only partitions that changed or are unsettled: an idle
cluster's pass costs nothing per partition, an append or a quiet follower brings exactly the
affected partitions back, and lagging followers are still proposed out.

Real ``Partition`` objects and a real ``FetchSession`` (from ``test_fetch_session``); the
replica manager is a small stand-in exposing the five things the ISR manager asks of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from flux.cluster.replication import session as session_module
from flux.cluster.replication.isr import IsrManager
from flux.cluster.replication.partition import Partition
from flux.cluster.replication.session import FetchSession
from flux.controller.image import FrozenMap, MetadataImage, PartitionState

from tests.unit.test_fetch_session import FOLLOWER, LEADER, _Pair

LAG_MS = 10_000


class _Replicas:
    """What ``IsrManager`` reads from the ``ReplicaManager``."""

    def __init__(self, pair: _Pair) -> None:
        self.image = pair.image
        self._pair = pair
        self.due: set[Partition] = set()
        for partition in pair.leaders.values():
            partition.on_change = self._changed
            self.due.add(partition)

    def _changed(self, partition: Partition) -> None:
        self.due.add(partition)

    def take_isr_due(self) -> set[Partition]:
        due, self.due = self.due, set()
        return due

    def fetch_sessions(self) -> list[FetchSession]:
        return [self._pair.session]

    def partitions(self) -> list[Partition]:
        return list(self._pair.leaders.values())

    def partition(self, topic: str, index: int) -> Partition | None:
        return self._pair.leaders.get(index) if topic == "t" else None


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    now = [1_000_000]
    monkeypatch.setattr(session_module, "monotonic_ms", lambda: now[0])
    return now


def _setup(tmp_path: Path, clock: list[int], count: int) -> tuple[_Pair, _Replicas, IsrManager]:
    pair = _Pair(tmp_path, count)
    for partition in pair.leaders.values():
        partition.clock_ms = lambda: clock[0]
        partition.followers[FOLLOWER].last_caught_up_ms = clock[0]
    replicas = _Replicas(pair)
    manager = IsrManager(
        replicas,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  (pass_proposals never writes)
        broker_id=LEADER,
        incarnation_id="inc-1",
        lag_time_max_ms=LAG_MS,
        clock_ms=lambda: clock[0],
    )
    # The follower's session names every partition once: all caught up, all held.
    asyncio.run(pair.session.serve(pair.request(list(range(count)))))
    return pair, replicas, manager


def test_an_idle_cluster_settles_and_its_passes_visit_nothing(tmp_path, clock) -> None:
    pair, replicas, manager = _setup(tmp_path, clock, 200)
    assert manager.pass_proposals() == []
    assert manager._watch == set()  # every partition settled
    for _ in range(3):
        clock[0] += LAG_MS  # long idle periods: the session keeps fetching, nothing changes
        pair.session.last_fetch_ms = clock[0]
        assert manager.pass_proposals() == []
        assert manager._watch == set() and replicas.due == set()


def test_an_append_watches_that_partition_until_the_follower_confirms_it(tmp_path, clock):
    pair, _, manager = _setup(tmp_path, clock, 50)
    manager.pass_proposals()
    pair.append(7)
    assert manager.pass_proposals() == []
    assert manager._watch == {pair.leaders[7]}
    # The follower fetches the batch and confirms its new position: settled again.
    pair.session.last_fetch_ms = clock[0]
    answers = asyncio.run(pair.session.serve(pair.request([])))
    moved = pair.follow(answers)
    asyncio.run(pair.session.serve(pair.request(moved)))
    assert pair.leaders[7].high_watermark == 1
    assert manager.pass_proposals() == []
    assert manager._watch == set()


def test_a_follower_behind_for_the_lag_time_is_proposed_out(tmp_path, clock) -> None:
    pair, _, manager = _setup(tmp_path, clock, 50)
    manager.pass_proposals()
    pair.append(3)
    manager.pass_proposals()
    clock[0] += LAG_MS + 1
    pair.session.last_fetch_ms = clock[0]  # it fetches, but never confirms the batch
    assert manager.pass_proposals() == [(pair.leaders[3], (LEADER,))]
    assert manager.pass_proposals() == []  # the proposal in flight is not repeated


def test_a_quiet_session_brings_back_its_partitions(tmp_path, clock) -> None:
    """A follower that stops fetching without closing its connection (SIGSTOP, a cut link)
    is proposed out of every ISR it held once the lag time passes."""
    pair, _, manager = _setup(tmp_path, clock, 20)
    manager.pass_proposals()
    clock[0] += LAG_MS // 2 + 1
    assert manager.pass_proposals() == []  # quiet, but not for the whole lag time yet
    clock[0] += LAG_MS // 2
    proposals = manager.pass_proposals()
    assert sorted(p.index for p, isr in proposals) == list(range(20))
    assert {isr for _, isr in proposals} == {(LEADER,)}


def test_a_replica_back_at_the_offset_the_leader_last_saw_rejoins(tmp_path, clock) -> None:
    """A follower restarted with nothing produced meanwhile names its partitions at the very
    offsets the leader recorded before: still news for a replica outside the ISR."""
    pair, replicas, manager = _setup(tmp_path, clock, 5)
    manager.pass_proposals()
    live_image = replicas.image
    registration = live_image.brokers[FOLLOWER]
    # The follower died: fenced, and out of the ISR.
    replicas.image = MetadataImage(
        2, brokers=FrozenMap({FOLLOWER: dataclasses.replace(registration, fenced=True)})
    )
    leader = pair.leaders[2]
    leader.update_state(PartitionState((LEADER, FOLLOWER), (LEADER,), LEADER, 0, 1))
    assert manager.pass_proposals() == []
    assert leader not in manager._watch  # settled outside the ISR
    restarted = pair.open("inc-2")
    pair.session = restarted
    asyncio.run(restarted.serve(pair.request([2])))
    assert manager.pass_proposals() == []  # fetching, but not registered again yet
    replicas.image = live_image  # registered: an image change that names no partition
    assert manager.pass_proposals() == [(leader, (LEADER, FOLLOWER))]
