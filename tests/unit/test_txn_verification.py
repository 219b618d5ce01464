"""KIP-890 part 1 at the coordinator: ``verify_here`` answers whether partitions are in a
producer's running transaction, and the produce path maps what it cannot verify to the error
a client acts on (retry, fenced, or not in the transaction)."""

from __future__ import annotations

from flux.cluster.kafka.produce import _unverified
from flux.cluster.transactions.coordinator import TransactionCoordinator
from flux.cluster.transactions.state import TxnMetadata, TxnState
from flux.protocol.errors import ErrorCode

from tests.unit.txn_fakes import lone_coordinator


def _coordinator(*ids: TxnMetadata) -> TransactionCoordinator:
    coordinator = lone_coordinator(None)
    coordinator._txns = {m.transactional_id: m for m in ids}
    return coordinator


def _txn(name: str, state: TxnState, partitions: tuple[tuple[str, int], ...] = ()) -> TxnMetadata:
    return TxnMetadata(name, 7, 3, 60_000, state, partitions=partitions, update_ms=1)


def test_only_partitions_of_the_running_transaction_are_verified() -> None:
    coordinator = _coordinator(
        _txn("running", TxnState.ONGOING, (("out", 0), ("out", 2))),
        _txn("done", TxnState.COMPLETE_COMMIT),
        _txn("ending", TxnState.PREPARE_COMMIT, (("out", 0),)),
    )
    asked = [("out", 0), ("out", 1)]
    assert coordinator.verify_here("running", 7, 3, asked) == {
        ("out", 0): ErrorCode.NONE,
        ("out", 1): ErrorCode.INVALID_TXN_STATE,
    }
    # Ended: a late batch opens nothing.
    assert coordinator.verify_here("done", 7, 3, [("out", 0)]) == {
        ("out", 0): ErrorCode.INVALID_TXN_STATE
    }
    assert coordinator.verify_here("ending", 7, 3, asked) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert coordinator.verify_here("running", 7, 2, asked) == ErrorCode.PRODUCER_FENCED
    assert coordinator.verify_here("running", 8, 3, asked) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.verify_here("nobody", 7, 3, asked) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_what_cannot_be_verified_maps_to_what_a_client_acts_on() -> None:
    for retriable in (
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    ):
        code, message = _unverified(retriable, "out", 1, 7)
        assert code == ErrorCode.NOT_ENOUGH_REPLICAS and retriable.name in message
    assert _unverified(ErrorCode.PRODUCER_FENCED, "out", 1, 7)[0] == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    code, message = _unverified(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "out", 1, 7)
    assert code == ErrorCode.INVALID_TXN_STATE
    assert "out-1" in message and "AddPartitionsToTxn" in message
