"""A prepared transaction is completed even when the first ``Complete*`` write is refused.

Found by CI (test_exactly_once_across_a_broker_sigkill[coordinator]): the new coordinator
loaded a transaction in PrepareCommit right after the failover, wrote its markers, and its
``CompleteCommit`` write came back NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR of
``__transaction_state`` was still only the new leader). The completion took that for "no
longer the coordinator" and gave up, so the transaction stayed prepared and every later
InitProducerId of its id was answered CONCURRENT_TRANSACTIONS, for good. As in Kafka, a write
refused for a short ISR or a timeout now means the coordinator is briefly unavailable, and the
completion retries while this broker still coordinates the id."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from flux.cluster.transactions import coordinator as coordinator_module
from flux.cluster.transactions.coordinator import TransactionCoordinator, _Refused
from flux.cluster.transactions.state import TxnMetadata, TxnState
from flux.protocol.errors import ErrorCode

from tests.unit.txn_fakes import lone_coordinator


class _Partition:
    """``__transaction_state``'s partition: each acks=all write is answered by the next code."""

    index = 0

    def __init__(self, codes: list[ErrorCode]) -> None:
        self.codes = list(codes)
        self.appended = 0

    def append_as_leader(self, batch: bytes) -> Any:
        self.appended += 1
        return SimpleNamespace(last_offset=self.appended - 1)

    def add_delayed_produce(self, offset: int) -> asyncio.Future[ErrorCode]:
        waiter = asyncio.get_running_loop().create_future()
        waiter.set_result(self.codes.pop(0))
        return waiter


def _coordinator(partition: _Partition) -> TransactionCoordinator:
    coordinator = lone_coordinator(partition)

    async def write_markers(metadata: TxnMetadata, commit: bool) -> None:
        pass  # the markers are written (their retries are their own)

    coordinator._write_markers = write_markers  # type: ignore[method-assign]
    return coordinator


def _prepared() -> TxnMetadata:
    return TxnMetadata(
        "app-1", 7, 0, 60_000, TxnState.PREPARE_COMMIT, partitions=(("out", 0),), start_ms=1
    )


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator_module, "MARKER_RETRY_MIN_S", 0.001)


def test_a_complete_write_refused_for_a_short_isr_is_retried_until_it_lands() -> None:
    async def run() -> None:
        partition = _Partition(
            [
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.NONE,
            ]
        )
        coordinator = _coordinator(partition)
        metadata = _prepared()
        coordinator._txns[metadata.transactional_id] = metadata
        await coordinator._complete_later(metadata)
        assert partition.appended == 3
        done = coordinator._txns[metadata.transactional_id]
        assert done.state is TxnState.COMPLETE_COMMIT and done.partitions == ()

    asyncio.run(run())


def test_a_completion_stops_when_the_broker_no_longer_coordinates_the_id() -> None:
    async def run() -> None:
        partition = _Partition([ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND])
        coordinator = _coordinator(partition)
        metadata = _prepared()
        coordinator._txns[metadata.transactional_id] = metadata
        owners = iter([(partition, 1)])

        def owner(transactional_id: str) -> tuple[Any, int]:
            found = next(owners, None)
            if found is None:  # the leadership moved while the write waited
                raise _Refused(ErrorCode.NOT_COORDINATOR)
            return found

        coordinator._owner = owner  # type: ignore[method-assign,assignment]
        await asyncio.wait_for(coordinator._complete_later(metadata), 5)
        assert partition.appended == 1  # the next coordinator finishes it
        assert coordinator._txns[metadata.transactional_id].state is TxnState.PREPARE_COMMIT

    asyncio.run(run())


@pytest.mark.parametrize(
    ("write_error", "refused"),
    [
        (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
    ],
)
def test_a_refused_state_write_names_what_the_client_should_do(
    write_error: ErrorCode, refused: ErrorCode
) -> None:
    async def run() -> None:
        partition = _Partition([write_error])
        coordinator = _coordinator(partition)
        with pytest.raises(_Refused) as raised:
            await coordinator._persist(partition, _prepared())  # type: ignore[arg-type]
        assert raised.value.error is refused
        assert "app-1" not in coordinator._txns  # a refused write is not the id's state

    asyncio.run(run())
