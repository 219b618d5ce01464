"""Group commit: concurrent submits for one key become one write, each caller gets its own
results, failures reach every caller, and a cancelled caller does not cancel the group."""

from __future__ import annotations

import asyncio

import pytest
from flux.cluster.http.group_commit import GroupCommit


class _Writer:
    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail
        self.release = asyncio.Event()

    async def write(self, records: list[str]) -> list[str]:
        self.calls.append(list(records))
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return [f"{record}@{position}" for position, record in enumerate(records)]


def test_concurrent_submits_share_one_write_and_get_their_own_results() -> None:
    async def run() -> None:
        commit = GroupCommit()
        writer = _Writer()
        tasks = [
            asyncio.ensure_future(commit.submit("p0", [f"r{i}a", f"r{i}b"], writer.write))
            for i in range(5)
        ]
        other = asyncio.ensure_future(commit.submit("p1", ["x"], writer.write))
        await asyncio.sleep(0)  # every submit joins before the groups start
        await asyncio.sleep(0)
        writer.release.set()
        results = await asyncio.gather(*tasks)
        assert writer.calls[0] == [f"r{i}{s}" for i in range(5) for s in "ab"]
        assert results[3] == ["r3a@6", "r3b@7"]
        assert await other == ["x@0"]
        assert len(writer.calls) == 2  # one write per key
        # A lone submit later is written at once, in a group of its own.
        alone = await commit.submit("p0", ["late"], writer.write)
        assert alone == ["late@0"] and writer.calls[-1] == ["late"]

    asyncio.run(run())


def test_a_failed_write_fails_every_caller_of_its_group() -> None:
    async def run() -> None:
        commit = GroupCommit()
        writer = _Writer(fail=RuntimeError("no leader"))
        tasks = [asyncio.ensure_future(commit.submit("p", [i], writer.write)) for i in range(3)]
        await asyncio.sleep(0)
        writer.release.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert [str(outcome) for outcome in outcomes] == ["no leader"] * 3

    asyncio.run(run())


def test_a_cancelled_caller_does_not_cancel_the_others() -> None:
    async def run() -> None:
        commit = GroupCommit()
        writer = _Writer()
        leaving = asyncio.ensure_future(commit.submit("p", ["a"], writer.write))
        staying = asyncio.ensure_future(commit.submit("p", ["b"], writer.write))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        leaving.cancel()
        writer.release.set()
        assert await staying == ["b@1"]
        with pytest.raises(asyncio.CancelledError):
            await leaving

    asyncio.run(run())


def test_groups_are_bounded() -> None:
    async def run() -> None:
        commit = GroupCommit(max_records=4)
        writer = _Writer()
        writer.release.set()
        results = await asyncio.gather(
            *(commit.submit("p", [i, i], writer.write) for i in range(5))
        )
        assert [len(call) for call in writer.calls] == [4, 4, 2]
        assert [len(result) for result in results] == [2] * 5

    asyncio.run(run())
