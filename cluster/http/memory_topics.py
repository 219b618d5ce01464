"""Cleanup of memory topics (``storage=memory``): every ``message.cleanup_time`` the leader of
each memory-topic partition removes the messages that are both past ``message.ttl.ms`` and
committed past by every group and push subscription that has a position on the partition.

The removal moves the log start offset (``delete_records_before``), which followers adopt from
the leader's fetch answers, so the replicas shrink with the leader. Segments are rolled at each
cleanup so the memory of removed messages is released segment by segment; after a cleanup that
freed memory, glibc is asked to give freed heap back to the system (``malloc_trim``), so the
process's resident size follows the data it holds.

Positions come from every broker (``OffsetsClient.gather_committed``). When some
``__consumer_offsets`` partition did not answer, a group's position is unknown and nothing is
removed in that round. A push subscription on the topic that has not committed on a partition
yet starts at the log start, so it holds the whole partition.

``cutoff(...)`` is the pure rule; ``MemoryTopicCleaner`` runs it.

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Iterable

from flux.storage import MemoryLog

from ..groups.offsets_client import OffsetsClient, push_group
from ..replication.partition import Partition
from ..replication.replica_manager import ReplicaManager
from .metrics import BrokerMetrics

__all__ = ["MemoryTopicCleaner", "cutoff"]

log = logging.getLogger("flux.cluster.memory_topics")


def cutoff(
    *,
    log_start_offset: int,
    high_watermark: int,
    first_unexpired_offset: int | None,
    positions: Iterable[int],
) -> int:
    """The offset below which messages may be removed: not past the first message still
    within its TTL (``None``: every message expired), not past any position (committed
    offset), never past the high watermark, never before the log start."""
    limit = high_watermark if first_unexpired_offset is None else first_unexpired_offset
    for position in positions:
        limit = min(limit, position)
    return max(log_start_offset, min(limit, high_watermark))


class MemoryTopicCleaner:
    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        offsets: OffsetsClient,
        metrics: BrokerMetrics,
        interval_ms: int,
    ) -> None:
        self._replicas = replicas
        self._offsets = offsets
        self._metrics = metrics
        self._interval_s = interval_ms / 1000
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.clean_once()
            except Exception:
                log.exception("memory-topic cleanup failed")

    async def clean_once(self, now_ms: int | None = None) -> int:
        """One cleanup round; returns how many messages it removed."""
        partitions = [
            p for p in self._replicas.partitions() if p.is_leader and isinstance(p.log, MemoryLog)
        ]
        if not partitions:
            return 0
        committed, complete = await self._offsets.gather_committed()
        if not complete:
            log.info("memory-topic cleanup skipped: some group positions are unknown")
            return 0
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        removed = 0
        for partition in partitions:
            if not partition.is_leader:
                continue  # leadership moved while we gathered
            removed += self._clean_partition(partition, committed, now_ms)
        if removed:
            _release_freed_memory()
        return removed

    def _clean_partition(
        self, partition: Partition, committed: dict[tuple[str, str, int], int], now_ms: int
    ) -> int:
        ttl_ms = partition.config.get("message.ttl.ms")
        if ttl_ms < 0:
            return 0  # messages never expire
        memory_log = partition.log
        key = (partition.topic, partition.index)
        positions = [
            offset for (_, topic, index), offset in committed.items() if (topic, index) == key
        ]
        committed_groups = {group for (group, topic, index) in committed if (topic, index) == key}
        for subscription in self._replicas.image.subscriptions.values():
            if partition.topic in subscription.topics:
                if push_group(subscription.subscription_id) not in committed_groups:
                    positions.append(memory_log.log_start_offset)
        found = memory_log.offset_for_timestamp(now_ms - ttl_ms + 1)
        first_unexpired = None if found is None else found[0]
        target = cutoff(
            log_start_offset=memory_log.log_start_offset,
            high_watermark=partition.high_watermark,
            first_unexpired_offset=first_unexpired,
            positions=positions,
        )
        # Roll so that what arrives from now on forms a segment of its own, removable whole.
        if memory_log.log_end_offset > memory_log.segment_base_offsets()[-1]:
            memory_log.roll()
        before = memory_log.log_start_offset
        if target <= before:
            return 0
        memory_log.delete_records_before(target)
        partition.epochs.truncate_from_start(memory_log.log_start_offset)
        partition.producers.truncate_before(memory_log.log_start_offset)
        partition.notify_sessions(urgent=False)  # followers adopt the new log start
        removed = memory_log.log_start_offset - before
        self._metrics.memory_cleanup_removed.labels(partition.topic).inc(removed)
        log.info(
            "memory topic %s-%d: removed %d messages (log start %d -> %d)",
            partition.topic,
            partition.index,
            removed,
            before,
            memory_log.log_start_offset,
        )
        return removed


def _release_freed_memory() -> None:
    """glibc keeps freed heap for reuse; hand it back so RSS reflects what the broker holds."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to ask
