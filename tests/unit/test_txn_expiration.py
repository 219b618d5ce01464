"""Transactional ids expire (Kafka's ``transactional.id.expiration.ms``): an id with no
transaction running or ending and no change for the expiration time is removed with a
tombstone in ``__transaction_state``; a running or ending transaction, or an id changed
recently, is kept; an expired id's producer is told ``INVALID_PRODUCER_ID_MAPPING``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from flux.cluster.transactions.coordinator import TransactionCoordinator, _Refused
from flux.cluster.transactions.state import TxnMetadata, TxnState, decode_record
from flux.protocol.errors import ErrorCode
from flux.protocol.records import decode_records

EXPIRATION_MS = 10_000
NOW = 1_000_000_000


class _Replicas:
    def add_image_listener(self, listener: Any) -> None:
        pass


class _Partition:
    """``__transaction_state``'s partition: keeps each record written, every write acked."""

    index = 0

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []

    def append_as_leader(self, batch: bytes) -> Any:
        for record in decode_records(batch):
            self.records.append((record.key, record.value))
        return SimpleNamespace(last_offset=len(self.records) - 1)

    def add_delayed_produce(self, offset: int) -> asyncio.Future[ErrorCode]:
        waiter = asyncio.get_running_loop().create_future()
        waiter.set_result(ErrorCode.NONE)
        return waiter


def _coordinator(partition: _Partition) -> TransactionCoordinator:
    async def create_topic() -> None:
        pass

    coordinator = TransactionCoordinator(
        _Replicas(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        peers=lambda: None,  # type: ignore[arg-type,return-value]
        create_topic=create_topic,
        expiration_ms=EXPIRATION_MS,
    )
    coordinator._owner = lambda transactional_id: (partition, 1)  # type: ignore[method-assign,assignment,return-value]
    return coordinator


def _id(name: str, state: TxnState, update_ms: int) -> TxnMetadata:
    partitions = (("out", 0),) if state is TxnState.ONGOING else ()
    return TxnMetadata(name, 7, 0, 60_000, state, partitions=partitions, update_ms=update_ms)


def test_idle_ids_expire_with_a_tombstone_and_busy_or_recent_ones_stay() -> None:
    old, recent = NOW - EXPIRATION_MS, NOW - EXPIRATION_MS + 1
    ids = [
        _id("idle-empty", TxnState.EMPTY, old),
        _id("idle-committed", TxnState.COMPLETE_COMMIT, old - 5),
        _id("idle-aborted", TxnState.COMPLETE_ABORT, old),
        _id("recent", TxnState.COMPLETE_COMMIT, recent),
        _id("running", TxnState.ONGOING, old),
        _id("ending", TxnState.PREPARE_COMMIT, old),
    ]

    async def run() -> None:
        partition = _Partition()
        coordinator = _coordinator(partition)
        coordinator._txns = {m.transactional_id: m for m in ids}
        expirable = [m.transactional_id for m in ids if coordinator.expirable(m, NOW)]
        assert expirable == ["idle-empty", "idle-committed", "idle-aborted"]
        for name in [m.transactional_id for m in ids]:
            await coordinator._remove_expired(name, NOW)
        assert sorted(coordinator._txns) == ["ending", "recent", "running"]
        assert coordinator._locks == {}  # no lock is kept for an id nobody uses
        assert [decode_record(key, value) for key, value in partition.records] == [
            ("idle-empty", None),
            ("idle-committed", None),
            ("idle-aborted", None),
        ]
        # The expired id's producer is refused as unknown, as Kafka answers it.
        with pytest.raises(_Refused) as refused:
            coordinator._checked("idle-empty", 7, 0)
        assert refused.value.error == ErrorCode.INVALID_PRODUCER_ID_MAPPING

    asyncio.run(run())


def test_an_ids_lock_serializes_its_users_and_is_dropped_after_the_last() -> None:
    async def run() -> None:
        coordinator = _coordinator(_Partition())
        order: list[str] = []

        async def use(name: str, release: asyncio.Event | None) -> None:
            async with coordinator._lock("app"):
                order.append(f"{name} in")
                if release is not None:
                    await release.wait()
                order.append(f"{name} out")

        release = asyncio.Event()
        first = asyncio.create_task(use("first", release))
        await asyncio.sleep(0)
        second = asyncio.create_task(use("second", None))
        third = asyncio.create_task(use("third", None))
        await asyncio.sleep(0)
        assert coordinator._locks["app"][1] == 3  # one holds, two wait
        third.cancel()  # a waiter that gives up counts no more
        await asyncio.gather(third, return_exceptions=True)
        release.set()
        await asyncio.gather(first, second)
        assert order == ["first in", "first out", "second in", "second out"]
        assert coordinator._locks == {}

    asyncio.run(run())
