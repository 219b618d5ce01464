"""Coordinator fencing at a partition: every transaction marker carries the epoch of the
coordinator that wrote it, the partition remembers the newest per producer (in its producer
state, snapshots and a replay of the log included), and its leader refuses a marker from an
older coordinator with ``TRANSACTION_COORDINATOR_FENCED`` (Kafka's check in
``appendEndTxnMarker``). A coordinator that lost an id's ``__transaction_state`` partition
but has not learned it yet cannot then end a transaction the newer one decided."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flux.cluster.replication.partition import ProducerRejectedError
from flux.controller.image import PartitionState
from flux.protocol.control import ABORT, COMMIT, ControlMarker, control_marker, control_type
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.storage.producer_state import CONTROL_COMMIT, ProducerStateManager

from tests.unit.test_fetch_session import _partition

PID = 11
WHOLE = PartitionState((1, 2, 3), (1, 2, 3), 1, 0, 0)


def test_a_marker_says_its_type_and_its_coordinators_epoch() -> None:
    from flux.protocol.control import end_txn_marker_batch

    commit = end_txn_marker_batch(PID, 2, commit=True, coordinator_epoch=9)
    abort = end_txn_marker_batch(PID, 2, commit=False, coordinator_epoch=0)
    assert control_marker(commit) == ControlMarker(COMMIT, 9)
    assert control_marker(abort) == ControlMarker(ABORT, 0)
    assert control_type(commit) == COMMIT


def _marker(state: ProducerStateManager, offset: int, coordinator_epoch: int) -> None:
    state.record_batch_header(
        PID,
        0,
        -1,
        1,
        offset,
        0,
        1000,
        is_control=True,
        is_transactional=True,
        control_type=CONTROL_COMMIT,
        coordinator_epoch=coordinator_epoch,
    )


def test_the_producer_state_keeps_the_newest_coordinator_epoch() -> None:
    state = ProducerStateManager()
    assert state.coordinator_epoch_of(PID) == -1
    state.record_batch_header(PID, 0, 0, 1, 0, 0, 1000, is_transactional=True)
    _marker(state, 1, 4)
    assert state.coordinator_epoch_of(PID) == 4
    assert state.producers()[PID].coordinator_epoch == 4
    # It survives a snapshot, and a replay of the same log gives the same state.
    loaded = ProducerStateManager.from_snapshot(json.loads(json.dumps(state.snapshot())))
    assert loaded.coordinator_epoch_of(PID) == 4
    replayed = ProducerStateManager()
    replayed.rebuild_from(
        [
            (PID, 0, 0, 1, 0, 0, 1000, False, True, None, -1),
            (PID, 0, -1, 1, 1, 0, 1000, True, True, CONTROL_COMMIT, 4),
        ]
    )
    assert replayed.snapshot() == state.snapshot()
    # A snapshot written before the epoch was kept loads with none known.
    old = state.snapshot()
    del old["producers"][0]["coordinator_epoch"]
    assert ProducerStateManager.from_snapshot(old).coordinator_epoch_of(PID) == -1


def test_the_leader_refuses_a_marker_from_an_older_coordinator(tmp_path: Path) -> None:
    partition = _partition(tmp_path, 1, 0)
    partition.become_leader(WHOLE)
    partition.append_as_leader(
        build_batch(
            [(None, b"a", ())],
            producer_id=PID,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    )
    partition.write_txn_marker(PID, 0, commit=True, coordinator_epoch=5)
    assert partition.producers.coordinator_epoch_of(PID) == 5
    end = partition.log_end_offset
    with pytest.raises(ProducerRejectedError) as refused:
        partition.write_txn_marker(PID, 0, commit=False, coordinator_epoch=4)
    assert refused.value.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert partition.log_end_offset == end  # nothing appended
    # The same or a newer coordinator writes on.
    partition.write_txn_marker(PID, 0, commit=True, coordinator_epoch=5)
    partition.write_txn_marker(PID, 0, commit=False, coordinator_epoch=6)
    assert partition.producers.coordinator_epoch_of(PID) == 6
    assert partition.log_end_offset == end + 2
