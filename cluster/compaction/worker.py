"""The cleaner's worker process: cleans run here, not in the broker's process.

A clean is pure Python over whole segments (record keys decoded twice per record); on a
thread of the node it would hold the interpreter lock against the broker's event loop
(measured: produce throughput fell to a fifth while a clean ran). In a process of its own, at
a lower scheduling priority (``nice``), it takes only the CPU the broker leaves. A clean
reads segment files through its own descriptors and writes into the partition's
``.cleaning/``, so it needs nothing of the broker but a description of the log
(``LogView`` without the segment objects, which stay behind as tokens); the swap still runs on
the broker's event loop.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import multiprocessing
import os
import signal
from collections.abc import Collection

from flux.storage.compaction import CleanResult, LogCleaner
from flux.storage.compaction.planner import CleanPlan, LogView, SegmentView

from .codec import RECORD_CODEC

__all__ = ["CleanerProcess", "detach", "reattach"]

#: How much lower than the broker the worker runs (``nice`` increment).
WORKER_NICENESS = 10

_PR_SET_PDEATHSIG = 1

_cleaner: LogCleaner | None = None


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when the broker dies (a SIGKILLed broker must not
    leave a clean running on its files)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _start(dedupe_buffer_bytes: int, io_max_bytes_per_second: int) -> None:
    global _cleaner
    _die_with_parent()
    try:
        os.nice(WORKER_NICENESS)
    except OSError:
        pass
    _cleaner = LogCleaner(
        RECORD_CODEC,
        dedupe_buffer_bytes=dedupe_buffer_bytes,
        io_max_bytes_per_second=io_max_bytes_per_second,
    )


def _clean(view: LogView, plan: CleanPlan, keep: list[int]) -> CleanResult:
    assert _cleaner is not None, "the worker was not started"
    return _cleaner.clean(view, plan, keep)


def _without_token(segment: SegmentView) -> SegmentView:
    return dataclasses.replace(segment, token=None)


def detach(view: LogView, plan: CleanPlan) -> tuple[LogView, CleanPlan]:
    """``view`` and ``plan`` without the segment objects (which cannot leave the process)."""
    return (
        dataclasses.replace(view, segments=tuple(map(_without_token, view.segments))),
        dataclasses.replace(plan, cleanable=tuple(map(_without_token, plan.cleanable))),
    )


def reattach(result: CleanResult, view: LogView, plan: CleanPlan) -> CleanResult:
    """``result`` pointing at the segment objects of ``view`` again (by base offset)."""
    by_base = {segment.base_offset: segment for segment in view.segments}
    for group in result.groups:
        group.sources = tuple(by_base[source.base_offset] for source in group.sources)
    result.plan = plan
    return result


class CleanerProcess:
    """One worker process (spawned on first use, kept), cleaning one log at a time."""

    def __init__(self, *, dedupe_buffer_bytes: int, io_max_bytes_per_second: int) -> None:
        self._settings = (dedupe_buffer_bytes, io_max_bytes_per_second)
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1,
                # Never fork a process with an event loop and threads: spawn a clean one.
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=self._settings,
            )
        return self._pool

    def submit(
        self, view: LogView, plan: CleanPlan, keep: Collection[int]
    ) -> concurrent.futures.Future[CleanResult]:
        detached_view, detached_plan = detach(view, plan)
        return self._executor().submit(_clean, detached_view, detached_plan, list(keep))

    def restart(self) -> None:
        """Drop a broken worker (it died): the next clean spawns a new one."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        """Stop the worker at once, even mid-clean (its unfinished clean is dropped at the
        log's next open or clean)."""
        if self._pool is None:
            return
        processes = list(getattr(self._pool, "_processes", {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
        for process in processes:
            process.join(5)
        self._pool = None
