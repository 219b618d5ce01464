"""``LogCleanerService``: the node's log cleaner (Kafka's ``LogCleaner``, one worker).

Every ``backoff_ms`` (sooner when the last pass cleaned something) it looks at the partitions
of compacted topics this broker hosts, leader or follower alike (replicas compact
independently, as in Kafka), plans a clean of each (``flux.storage.compaction.plan_clean``:
only below the replica's high watermark) and cleans the one that needs it most (a forced
clean first, then the largest dirty ratio). The map and rewrite run in a worker process at a
lower priority (``worker.py``: a thread would fight the event loop for the interpreter lock);
the swap runs on the event loop, which owns the log, and is refused if the log changed meanwhile
(retention, truncation, deletion). An error in one clean is logged and counted and the
cleaner goes on with the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from flux.storage import PartitionLog
from flux.storage.compaction import plan_clean
from flux.storage.compaction.planner import CleanPlan, LogView

from ..replication.partition import Partition
from ..replication.replica_manager import ReplicaManager
from .worker import CleanerProcess, reattach

__all__ = ["LogCleanerService"]

log = logging.getLogger("flux.cluster.cleaner")


class LogCleanerService:
    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        dedupe_buffer_bytes: int,
        io_max_bytes_per_second: int,
        backoff_ms: int,
        metrics: Any = None,
    ) -> None:
        self._replicas = replicas
        self._backoff_s = backoff_ms / 1000
        self._metrics = metrics
        self._process = CleanerProcess(
            dedupe_buffer_bytes=dedupe_buffer_bytes,
            io_max_bytes_per_second=io_max_bytes_per_second,
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.to_thread(self._process.close)

    async def _run_forever(self) -> None:
        while True:
            try:
                cleaned = await self.clean_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner pass failed")
                cleaned = False
            if not cleaned:
                await asyncio.sleep(self._backoff_s)

    def _candidates(self, now_ms: int) -> list[tuple[Partition, LogView, CleanPlan]]:
        found = []
        for partition in self._replicas.partitions():
            if not partition.config.compacted or not isinstance(partition.log, PartitionLog):
                continue
            if partition.log.closed or partition.offline:
                continue  # an offline replica's disk failed: nothing is read or written there
            view = partition.log.cleaner_view()
            # Below the last stable offset only: every transaction cleaned has ended.
            plan = plan_clean(view, partition.last_stable_offset, now_ms)
            if plan is not None:
                found.append((partition, view, plan))
        found.sort(key=lambda item: (not item[2].forced, -item[2].dirty_ratio))
        return found

    async def clean_once(self) -> bool:
        """Clean the log that needs it most; False when none does."""
        now_ms = time.time_ns() // 1_000_000
        candidates = self._candidates(now_ms)
        if not candidates:
            return False
        partition, view, plan = candidates[0]
        name = f"{partition.topic}-{partition.index}"
        keep = partition.producers.last_batch_offsets()
        started = time.monotonic()
        try:
            cleaned = await asyncio.wrap_future(self._process.submit(view, plan, keep))
            result = reattach(cleaned, view, plan)
            installed = partition.log.install_cleaned(result)
        except BrokenProcessPool as error:
            log.error(
                "cleaning %s failed: the cleaner process died (%s); restarting it", name, error
            )
            self._process.restart()
            self._count("errors", 1)
            return False
        except Exception as error:  # noqa: BLE001 - one log's failure must not stop the rest
            log.error("cleaning %s failed: %s", name, error)
            self._count("errors", 1)
            return False
        if not installed:
            log.info("cleaning %s: the log changed meanwhile; will retry", name)
            return False  # after the backoff: a log that keeps changing is not cleaned in a loop
        seconds = time.monotonic() - started
        partition.notify_sessions(urgent=False)
        self._count("cleans", 1)
        self._count("bytes_read", result.bytes_read)
        self._count("bytes_written", result.bytes_written)
        self._count("records_removed", result.records_removed)
        if self._metrics is not None:
            self._metrics.cleaner_seconds.observe(seconds)
        log.info(
            "cleaned %s up to offset %d in %.2f s: read %d bytes, wrote %d, removed %d records",
            name,
            result.cleaned_through,
            seconds,
            result.bytes_read,
            result.bytes_written,
            result.records_removed,
        )
        return True

    def _count(self, what: str, amount: int) -> None:
        if self._metrics is not None and amount:
            getattr(self._metrics, f"cleaner_{what}").inc(amount)
