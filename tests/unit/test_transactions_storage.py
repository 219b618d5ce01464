"""Transactions in storage: the aborted-transaction index (``storage.txn_index``) kept with a
partition log, and the open and completed transactions of the producer state
(``storage.producer_state``) that feed it and bound the last stable offset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flux.storage import LogConfig, MemoryLog, PartitionLog
from flux.storage.errors import StorageError
from flux.storage.producer_state import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CompletedTxn,
    ProducerStateManager,
    Verdict,
)
from flux.storage.txn_index import INDEX_FILE, AbortedTxn, AbortedTxnIndex

from tests.unit.storage_batches import build_batch

PID = 7


# -- the index ----------------------------------------------------------------------------


def test_index_collects_the_aborts_overlapping_a_fetch_range(tmp_path: Path) -> None:
    index = AbortedTxnIndex.open(tmp_path / INDEX_FILE)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.append(AbortedTxn(2, 5, 20, 21))
    index.append(AbortedTxn(3, 30, 40, 41))
    # Marker at or after the fetch offset, first offset below the upper bound.
    assert [t.producer_id for t in index.collect(0, 100)] == [1, 2, 3]
    assert [t.producer_id for t in index.collect(11, 100)] == [2, 3]
    assert [t.producer_id for t in index.collect(11, 30)] == [2]
    assert index.collect(41, 100) == []
    # Replaying an entry the index ends with is a no-op; one out of order is refused.
    index.append(AbortedTxn(3, 30, 40, 41))
    assert len(index) == 3
    with pytest.raises(StorageError):
        index.append(AbortedTxn(4, 35, 39, 41))
    index.close()


def test_index_survives_reopening_and_drops_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / INDEX_FILE
    index = AbortedTxnIndex.open(path)
    entries = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 12, 20, 21)]
    for entry in entries:
        index.append(entry)
    index.close()
    assert AbortedTxnIndex.open(path).entries == entries
    with path.open("ab") as file:
        file.write(b"\x00\x00\x01")  # a crash in the middle of the next entry
    reopened = AbortedTxnIndex.open(path)
    assert reopened.entries == entries
    assert path.stat().st_size == 2 * 34  # the torn bytes are gone from the file too
    reopened.truncate_to(20)
    reopened.close()
    assert AbortedTxnIndex.open(path).entries == entries[:1]


def test_the_log_keeps_its_index_in_step(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    for _ in range(30):
        log.append(build_batch(1))
    log.txn_index.append(AbortedTxn(1, 0, 5, 6))
    log.txn_index.append(AbortedTxn(2, 8, 12, 13))
    log.txn_index.append(AbortedTxn(3, 14, 25, 26))
    log.truncate_to(20)  # the marker at 25 is gone with its batch
    assert [t.producer_id for t in log.txn_index.entries] == [1, 2]
    log.delete_records_before(10)  # the abort marked at 5 is below the log start
    assert [t.producer_id for t in log.txn_index.entries] == [2]
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig())
    assert [t.producer_id for t in reopened.txn_index.entries] == [2]
    reopened.truncate_fully_and_start_at(40)
    assert reopened.txn_index.entries == []
    reopened.close()
    memory = MemoryLog(LogConfig())
    memory.txn_index.append(AbortedTxn(1, 0, 5, 6))
    assert len(memory.txn_index) == 1


# -- the producer state -------------------------------------------------------------------


def _data(state: ProducerStateManager, offset: int, epoch: int = 0, seq: int = 0, n: int = 1):
    return state.record_batch_header(PID, epoch, seq, n, offset, n - 1, 1000, is_transactional=True)


def _marker(state: ProducerStateManager, offset: int, kind: int, epoch: int = 0):
    return state.record_batch_header(
        PID, epoch, -1, 1, offset, 0, 1000, is_control=True, control_type=kind
    )


def test_a_transaction_is_open_from_its_first_batch_to_its_marker() -> None:
    state = ProducerStateManager()
    assert state.first_unstable_offset() is None
    assert _data(state, 0) is None
    assert _data(state, 1, seq=1, n=3) is None
    assert state.first_unstable_offset() == 0
    state.record_batch_header(-1, -1, -1, 1, 4, 0, 1000)  # someone else's plain record
    assert _marker(state, 5, CONTROL_ABORT) == CompletedTxn(PID, 0, 5, is_aborted=True)
    assert state.first_unstable_offset() is None
    _data(state, 6, seq=4)
    assert state.first_unstable_offset() == 6
    assert _marker(state, 7, CONTROL_COMMIT) == CompletedTxn(PID, 6, 7, is_aborted=False)
    # A marker for a transaction that wrote nothing here spans only itself.
    assert _marker(state, 8, CONTROL_ABORT) == CompletedTxn(PID, 8, 8, is_aborted=True)


def test_a_marker_with_a_newer_epoch_fences_the_old_one() -> None:
    state = ProducerStateManager()
    _data(state, 0, epoch=3)
    _marker(state, 1, CONTROL_ABORT, epoch=4)  # the coordinator bumped the epoch (timeout)
    assert state.check(PID, 3, 1, 1).verdict is Verdict.INVALID_EPOCH  # the zombie
    assert state.check(PID, 4, 0, 0).verdict is Verdict.APPEND  # the new epoch starts at 0
    assert state.check(PID, 4, 5, 5).verdict is Verdict.OUT_OF_ORDER
    # The fence survives a snapshot, and the expiry clock starts at the marker.
    loaded = ProducerStateManager.from_snapshot(json.loads(json.dumps(state.snapshot())))
    assert loaded.check(PID, 3, 1, 1).verdict is Verdict.INVALID_EPOCH
    assert loaded.expire(1000 + 1) == 0


def test_truncating_a_marker_reopens_its_transaction() -> None:
    state = ProducerStateManager()
    _data(state, 0)
    _marker(state, 1, CONTROL_COMMIT)
    _data(state, 2, seq=1)
    state.truncate_to(1)  # the marker and the next transaction's batch are gone
    assert state.ongoing_transactions() == {PID: 0}
    state.truncate_to(0)
    assert state.ongoing_transactions() == {}


def test_snapshot_and_replay_keep_transactions() -> None:
    state = ProducerStateManager()
    _data(state, 0)
    _marker(state, 1, CONTROL_ABORT)
    _data(state, 2, seq=1)
    loaded = ProducerStateManager.from_snapshot(json.loads(json.dumps(state.snapshot())))
    assert loaded.ongoing_transactions() == {PID: 2}
    loaded.truncate_to(1)
    assert loaded.ongoing_transactions() == {PID: 0}  # the completed ones were kept too
    # Replay with the transactional fields reports each completed transaction.
    replayed = ProducerStateManager()
    completed: list[CompletedTxn] = []
    replayed.rebuild_from(
        [
            (PID, 0, 0, 1, 0, 0, 1000, False, True, None),
            (PID, 0, -1, 1, 1, 0, 1000, True, True, CONTROL_ABORT),
            (PID, 0, 1, 1, 2, 0, 1000, False, True, None),
        ],
        completed.append,
    )
    assert completed == [CompletedTxn(PID, 0, 1, is_aborted=True)]
    assert replayed.ongoing_transactions() == {PID: 2}
    assert replayed.snapshot() == state.snapshot()
