"""Transactional ids expire (Kafka's ``transactional.id.expiration.ms``): an id with no
transaction running or ending and no change for the expiration time is removed with a
tombstone in ``__transaction_state``; a running or ending transaction, or an id changed
recently, is kept; an expired id's producer is told ``INVALID_PRODUCER_ID_MAPPING``."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from flux.cluster.transactions.coordinator import TransactionCoordinator, _Refused
from flux.cluster.transactions.state import TxnMetadata, TxnState, decode_record
from flux.protocol.errors import ErrorCode
from flux.protocol.records import decode_records

from tests.unit.txn_fakes import lone_coordinator

EXPIRATION_MS = 10_000
NOW = 1_000_000_000


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
    return lone_coordinator(partition, expiration_ms=EXPIRATION_MS)


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


def test_the_periodic_check_acts_on_what_is_due_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check each interval looks at the ids whose time came: a transaction past its
    timeout is aborted, an idle id expires, and an id changed since its entry was scheduled
    is left alone; superseded entries do not pile up."""
    from flux.cluster.transactions import coordinator as coordinator_module

    monkeypatch.setattr(coordinator_module, "ABORT_CHECK_INTERVAL_S", 0.01)
    now = coordinator_module._now_ms()

    async def run() -> None:
        partition = _Partition()
        coordinator = _coordinator(partition)

        async def write_markers(metadata: TxnMetadata, commit: bool) -> None:
            pass

        coordinator._write_markers = write_markers  # type: ignore[method-assign]
        coordinator._loaded = {0: 1}
        coordinator._set(_id("idle", TxnState.COMPLETE_COMMIT, now - EXPIRATION_MS))
        coordinator._set(_id("recent", TxnState.EMPTY, now))
        late = _id("late", TxnState.ONGOING, now - 70_000)
        coordinator._set(replace(late, start_ms=now - 70_000))  # 60 s timeout: past it
        busy = _id("busy", TxnState.COMPLETE_COMMIT, now - EXPIRATION_MS)
        coordinator._set(busy)
        # Used again before its entry came due: a new state, a new due time.
        coordinator._set(replace(busy, state=TxnState.ONGOING, start_ms=now, update_ms=now))
        for _ in range(200):
            coordinator._set(replace(busy, state=TxnState.ONGOING, start_ms=now, update_ms=now))
        assert len(coordinator._due) < 2 * len(coordinator._due_at) + 70
        task = asyncio.create_task(coordinator._abort_timed_out())
        for _ in range(500):
            await asyncio.sleep(0.01)
            state = coordinator._txns["late"].state
            if "idle" not in coordinator._txns and state is TxnState.COMPLETE_ABORT:
                break
        coordinator._stopped = True
        await task
        assert "idle" not in coordinator._txns
        assert coordinator._txns["late"].state is TxnState.COMPLETE_ABORT
        assert coordinator._txns["late"].producer_epoch == 1  # fenced: epoch bumped
        assert coordinator._txns["recent"].state is TxnState.EMPTY
        assert coordinator._txns["busy"].state is TxnState.ONGOING
        assert ("idle", None) in [decode_record(k, v) for k, v in partition.records if k]

    asyncio.run(run())
