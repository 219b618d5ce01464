"""The one boundary between the synchronous wrappers and asyncio: an event loop on a thread.

Each sync ``Producer``, ``Consumer`` and ``Admin`` owns a ``LoopThread`` and runs every call of
its async twin on it with ``run`` (blocking until the coroutine is done) or ``submit``
(returning a ``concurrent.futures.Future``). The async object lives on that loop alone, so it
needs no locks; the calling thread only waits.

Thread-safety: ``run`` and ``submit`` may be called from any thread but the loop's own;
``close`` once, from the owner.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .errors import ConfigurationError

__all__ = ["LoopThread", "SyncProxy"]

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running on a daemon thread until ``close``."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coroutine.close()
            raise ConfigurationError("the client is closed")
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a sync Flux client was called from its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result (or exception)."""
        future = self.submit(coroutine)
        try:
            return future.result(timeout_s)
        except BaseException:
            future.cancel()
            raise

    def call_soon(self, callback: Any, *args: Any) -> None:
        """Schedule a plain callback on the loop (from any thread)."""
        if not self._closed:
            self.loop.call_soon_threadsafe(callback, *args)

    def close(self, timeout_s: float = 10.0) -> None:
        """Cancel what still runs, stop the loop and join the thread."""
        if self._closed:
            return
        self._closed = True

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout_s)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.loop.close()


class SyncProxy:
    """A blocking view of an async object (a ``ClusterClient``, say) living on ``loop``: its
    coroutine methods run on the loop and are waited for; other attributes pass through.

    For tools and tests that poke at the transport under a sync wrapper, e.g.
    ``admin.client.leader_for("orders", 0)``.
    """

    def __init__(self, target: Any, loop: LoopThread) -> None:
        self._target = target
        self._loop = loop

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._target, name, value)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run(attribute(*args, **kwargs))

        return call
