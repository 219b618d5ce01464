"""The acks=all response path without tasks: ``Deferred.then`` chains by callbacks (result,
error and cancellation), and ``ProduceApis._replicated`` completes when every partition is
replicated, times out the ones still waiting, and stops their waits when abandoned."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from flux.cluster.kafka.produce import ProduceApis
from flux.cluster.kafka.server import Deferred
from flux.protocol.errors import ErrorCode


def _run(coroutine):
    return asyncio.run(coroutine)


def test_then_maps_the_result_and_forwards_errors() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        source = loop.create_future()
        derived = Deferred(source).then(lambda value: value * 2)
        source.set_result(21)
        assert await derived.task == 42

        failing = loop.create_future()
        chained = Deferred(failing).then(lambda value: value)
        failing.set_exception(ValueError("boom"))
        with pytest.raises(ValueError, match="boom"):
            await chained.task

        raising = Deferred(loop.create_future())
        mapped = raising.then(lambda _value: 1 / 0)
        raising.task.set_result(None)
        with pytest.raises(ZeroDivisionError):
            await mapped.task

    _run(scenario())


def test_cancelling_the_chained_response_cancels_the_source() -> None:
    async def scenario() -> None:
        source = asyncio.get_running_loop().create_future()
        derived = Deferred(source).then(lambda value: value)
        derived.task.cancel()
        await asyncio.sleep(0)
        assert source.cancelled()

    _run(scenario())


def _apis(timeout_ms: int = 30_000) -> SimpleNamespace:
    return SimpleNamespace(
        _config=SimpleNamespace(broker=SimpleNamespace(request_timeout_ms=timeout_ms))
    )


def _waiting(loop, count: int) -> list:
    return [
        ({"index": i, "error_code": ErrorCode.NONE}, loop.create_future()) for i in range(count)
    ]


def test_replicated_completes_when_every_partition_is_replicated() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        waiting = _waiting(loop, 2)
        response = {"responses": []}
        done = ProduceApis._replicated(_apis(), waiting, 30_000, response)
        waiting[0][1].set_result(ErrorCode.NONE)
        await asyncio.sleep(0)
        assert not done.done()
        waiting[1][1].set_result(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        assert await done is response
        assert waiting[0][0]["error_code"] == ErrorCode.NONE
        assert waiting[1][0]["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    _run(scenario())


def test_replicated_times_out_the_partitions_still_waiting() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        waiting = _waiting(loop, 2)
        waiting[0][1].set_result(ErrorCode.NONE)
        done = ProduceApis._replicated(_apis(), waiting, 20, {})
        await asyncio.wait_for(done, 5)
        assert waiting[0][0]["error_code"] == ErrorCode.NONE
        assert waiting[1][0]["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        assert waiting[1][1].cancelled()  # the partition no longer holds the wait

    _run(scenario())


def test_an_abandoned_response_stops_the_partition_waits() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        waiting = _waiting(loop, 2)
        done = ProduceApis._replicated(_apis(), waiting, 30_000, {})
        done.cancel()
        await asyncio.sleep(0)
        assert all(future.cancelled() for _, future in waiting)

    _run(scenario())
