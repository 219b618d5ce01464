"""Group commit for the HTTP front door: concurrent writes to one partition become one write.

``POST /publish`` carries one message. Written one by one, every message costs its own record
batch, its own append, its own wake-up of the followers' fetch sessions and its own wait for
the high watermark (or its own forwarded request to the partition's leader). ``GroupCommit``
merges the records that requests for the same partition submit within one turn of the event
loop: the first submitter opens a group and schedules its write with ``call_soon``, so every
request the loop is already handling joins it, and nobody waits for a timer (an idle broker
answers a lone request exactly as before). Under load the groups grow by themselves.

Each caller gets the results of its own records, in its order. A write that fails fails the
whole group with the same error (a partition-level problem: no leader, not enough replicas,
a full memory topic); bad input never gets this far (the handlers validate each request
first). A caller that is cancelled (its client went away) does not cancel the group.

Thread-safety: none; the broker's event loop owns it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

__all__ = ["MAX_GROUP_RECORDS", "GroupCommit"]

#: Records one group may hold; a request that would overflow it opens the next group.
MAX_GROUP_RECORDS = 2000

Write = Callable[[list[Any]], Awaitable[list[Any]]]


class _Group:
    __slots__ = ("records", "write", "future")

    def __init__(self, write: Write) -> None:
        self.records: list[Any] = []
        self.write = write
        self.future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        # Every caller may have gone: never warn about an exception nobody was left to read.
        self.future.add_done_callback(_consume_exception)


def _consume_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class GroupCommit:
    """Groups of records per key (a partition), each written by one call of ``write``."""

    def __init__(self, *, max_records: int = MAX_GROUP_RECORDS) -> None:
        self._max_records = max_records
        self._open: dict[Hashable, _Group] = {}

    async def submit(self, key: Hashable, records: list[Any], write: Write) -> list[Any]:
        """Write ``records`` with the others submitted for ``key`` in this turn of the loop;
        their results (``write`` returns one per record, in order). ``write`` must depend on
        ``key`` only: the group's first submitter's is the one called."""
        group = self._open.get(key)
        if group is None or len(group.records) + len(records) > self._max_records:
            group = _Group(write)
            self._open[key] = group
            asyncio.get_running_loop().call_soon(self._start, key, group)
        start = len(group.records)
        group.records.extend(records)
        results = await asyncio.shield(group.future)
        return results[start : start + len(records)]

    def _start(self, key: Hashable, group: _Group) -> None:
        if self._open.get(key) is group:
            del self._open[key]
        task = asyncio.ensure_future(group.write(group.records))
        task.add_done_callback(lambda done: _settle(group, done))


def _settle(group: _Group, done: asyncio.Future[list[Any]]) -> None:
    if group.future.done():
        return
    if done.cancelled():
        group.future.cancel()
    elif (error := done.exception()) is not None:
        group.future.set_exception(error)
    else:
        results = done.result()
        assert len(results) == len(group.records), "one result per record"
        group.future.set_result(results)
