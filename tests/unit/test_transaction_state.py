"""The transaction state machine and the records of ``__transaction_state``
(``cluster.transactions.state``)."""

from __future__ import annotations

import pytest
from flux.cluster.transactions.state import (
    TxnMetadata,
    TxnState,
    decode_record,
    encode_record,
    partition_for_txn,
)


def _metadata(**changes: object) -> TxnMetadata:
    base = TxnMetadata("app-1", producer_id=42, producer_epoch=3, timeout_ms=60_000)
    return base.moved(base.state, **changes) if changes else base


def test_a_transaction_goes_through_kafkas_states() -> None:
    empty = _metadata()
    ongoing = empty.moved(TxnState.ONGOING, partitions=(("a", 0), ("b", 1)), start_ms=10)
    preparing = ongoing.moved(TxnState.PREPARE_COMMIT)
    done = preparing.moved(TxnState.COMPLETE_COMMIT, partitions=())
    again = done.moved(TxnState.ONGOING, partitions=(("a", 0),))
    assert again.moved(TxnState.PREPARE_ABORT).moved(TxnState.COMPLETE_ABORT).state is (
        TxnState.COMPLETE_ABORT
    )
    # A decision is final: a prepared transaction only completes, the way it was decided.
    for illegal in (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT):
        with pytest.raises(ValueError):
            preparing.moved(illegal)
    with pytest.raises(ValueError):
        empty.moved(TxnState.PREPARE_COMMIT)  # nothing to commit
    assert preparing.state.preparing and not ongoing.state.preparing


def test_records_round_trip_and_tombstones() -> None:
    metadata = _metadata().moved(
        TxnState.ONGOING,
        partitions=(("a", 0), ("b", 1)),
        last_producer_id=41,
        last_producer_epoch=9,
        start_ms=5,
        update_ms=6,
    )
    key, value = encode_record(metadata)
    assert decode_record(key, value) == ("app-1", metadata)
    assert decode_record(key, None) == ("app-1", None)
    with pytest.raises(ValueError):
        decode_record(b"\x00\x01app-1", value)  # not a transaction state key
    with pytest.raises(ValueError):
        decode_record(key, b'{"version": 7}')


def test_ids_spread_stably_over_the_partitions() -> None:
    spread = {partition_for_txn(f"app-{i}", 12) for i in range(200)}
    assert spread == set(range(12))
    assert partition_for_txn("app-1", 12) == partition_for_txn("app-1", 12)
