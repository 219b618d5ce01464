"""A group metadata write that fails answers every caller held back behind it.

Found by the V1 runtime consumer through a coordinator's SIGKILL: the SyncGroup whose assignment
could not be written (the offsets partition's ISR was short) was never answered, so the member
waited forever. Kafka answers it with the write's error; so does Flux now."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from flux.cluster.groups.coordinator import GroupCoordinator
from flux.cluster.groups.state import Group, Persist, Respond
from flux.protocol.errors import ErrorCode


class _Replicas:
    def add_image_listener(self, listener: Any) -> None:
        pass


def _coordinator(write_error: ErrorCode) -> tuple[GroupCoordinator, list[str]]:
    async def create_offsets_topic() -> None:
        pass

    coordinator = GroupCoordinator(
        _Replicas(),  # type: ignore[arg-type]
        initial_rebalance_delay_ms=0,
        create_offsets_topic=create_offsets_topic,
    )
    written: list[str] = []

    async def write(group_id: str, records: Any) -> ErrorCode:
        written.append(group_id)
        return write_error

    coordinator._write = write  # type: ignore[method-assign]  # the storage below it fails
    return coordinator, written


@pytest.mark.parametrize(
    ("write_error", "answered"),
    [
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR),
    ],
)
def test_callers_behind_a_failed_persist_get_its_error(
    write_error: ErrorCode, answered: ErrorCode
) -> None:
    async def run() -> None:
        coordinator, written = _coordinator(write_error)
        loop = asyncio.get_running_loop()
        sync_waiter: asyncio.Future[dict[str, Any]] = loop.create_future()
        join_waiter: asyncio.Future[dict[str, Any]] = loop.create_future()
        coordinator._pending.update({"sync": sync_waiter, "join": join_waiter})
        await coordinator._execute(
            "billing",
            [
                Persist(Group("billing").to_record()),
                Respond("sync", {"error_code": 0, "assignment": b"planned"}),
                Respond("join", {"error_code": 0, "member_id": "m-1", "generation_id": 3}),
            ],
        )
        assert written == ["billing"]
        sync = await asyncio.wait_for(sync_waiter, 1)
        join = await asyncio.wait_for(join_waiter, 1)
        assert sync["error_code"] == answered and sync["assignment"] == b""
        assert join["error_code"] == answered and join["member_id"] == "m-1"
        assert not coordinator._pending

    asyncio.run(run())


def test_a_persist_that_succeeds_releases_the_answers_unchanged() -> None:
    async def run() -> None:
        coordinator, _ = _coordinator(ErrorCode.NONE)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        coordinator._pending["sync"] = waiter
        answer = {"error_code": 0, "assignment": b"planned"}
        await coordinator._execute(
            "billing", [Persist(Group("billing").to_record()), Respond("sync", answer)]
        )
        assert await asyncio.wait_for(waiter, 1) is answer

    asyncio.run(run())


@pytest.mark.parametrize(
    ("code", "answered"),
    [
        (ErrorCode.NONE, ErrorCode.NONE),
        # The ISR fell short of min.insync.replicas: still the coordinator, not available now.
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        # Leadership or the log directory lost: the partition moves, so does the coordinator.
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR),
    ],
)
def test_a_replicated_write_answers_as_kafkas_group_coordinator_does(
    code: ErrorCode, answered: ErrorCode
) -> None:
    async def run() -> ErrorCode:
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        future.set_result(code)
        return await GroupCoordinator._await_write(future)

    assert asyncio.run(run()) == answered
