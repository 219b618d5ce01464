"""RequestBytesBudget: the node-wide bound on Kafka request bytes held at once (Kafka's
queued.max.request.bytes)."""

from __future__ import annotations

import asyncio

import pytest
from flux.cluster.kafka.server import RequestBytesBudget


def _run(coro) -> None:
    asyncio.run(coro)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_requests_that_fit_are_let_in_at_once_and_others_wait_in_order() -> None:
    async def test() -> None:
        budget = RequestBytesBudget(100)
        await budget.acquire(60)
        await budget.acquire(40)
        assert budget.in_use_bytes == 100
        order: list[str] = []

        async def take(name: str, size: int) -> None:
            await budget.acquire(size)
            order.append(name)

        large = asyncio.create_task(take("large", 90))
        await _settle()
        small = asyncio.create_task(take("small", 5))  # fits, but waits behind the large one
        await _settle()
        assert order == [] and budget.waiting == 2
        budget.release(40)
        await _settle()
        assert order == []  # 60 + 90 does not fit: the large one keeps its turn
        budget.release(60)
        await _settle()
        assert order == ["large", "small"] and budget.in_use_bytes == 95
        await asyncio.gather(large, small)

    _run(test())


def test_a_request_larger_than_the_budget_is_let_in_alone() -> None:
    async def test() -> None:
        budget = RequestBytesBudget(100)
        await budget.acquire(10)
        huge = asyncio.create_task(budget.acquire(500))
        await _settle()
        assert not huge.done()
        budget.release(10)
        await _settle()
        assert huge.done() and budget.in_use_bytes == 500
        blocked = asyncio.create_task(budget.acquire(1))
        await _settle()
        assert not blocked.done()
        budget.release(500)
        await _settle()
        assert blocked.done() and budget.in_use_bytes == 1

    _run(test())


def test_a_cancelled_waiter_takes_nothing_and_lets_the_next_in() -> None:
    async def test() -> None:
        budget = RequestBytesBudget(100)
        await budget.acquire(100)
        first = asyncio.create_task(budget.acquire(80))
        second = asyncio.create_task(budget.acquire(20))
        await _settle()
        first.cancel()
        await _settle()
        budget.release(50)
        await _settle()
        assert second.done() and budget.in_use_bytes == 70
        with pytest.raises(asyncio.CancelledError):
            await first

    _run(test())


def test_releasing_more_than_was_taken_is_a_bug() -> None:
    budget = RequestBytesBudget(10)
    with pytest.raises(AssertionError):
        budget.release(1)
    with pytest.raises(ValueError):
        RequestBytesBudget(0)
