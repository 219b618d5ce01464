"""The node's garbage-collector policy: long-lived state out of the collector's way.

CPython's cyclic collector walks every tracked object of the oldest generation on each full
collection. A broker holding 10,000 partition replicas keeps over half a million long-lived
objects (partitions, logs, segments, caches, metadata images), so each full collection stopped
the node's event loop for 200-370 ms (measured with ``gc.callbacks`` on the 2-core machine,
``benchmarks/replicated_produce.py --partitions 10000``), several times a minute under load:
the acks=all latency tail, growing with the number of partitions, not with the work.

``HeapPolicy`` freezes what exists (``gc.freeze``: later collections skip those objects) once
the node is up and after every metadata image that opened many replicas, so full
collections only walk objects made since. Objects that die later are still freed by reference
counting; what a frozen object cycle holds is freed only after ``gc.unfreeze``, which the policy
does (with one full collection) after an image removed many replicas, before freezing again.
It also raises the collector's thresholds (``THRESHOLDS``: a young collection per 50,000
net new container objects instead of 700), so collections of every generation come about 70
times less often; a young collection then walks at most 50,000 objects (a few milliseconds).
Full collections that still take long are logged and counted (``flux_gc_pause_seconds``).

Thread-safety: the gc module is process-wide; one node per process.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["FREEZE_AFTER_OPENED", "THRESHOLDS", "HeapPolicy"]

log = logging.getLogger("flux.cluster.heap")

#: An image that opened (or removed) at least this many replicas re-freezes (or first
#: collects) the heap.
FREEZE_AFTER_OPENED = 100
#: A full collection longer than this is logged.
SLOW_COLLECTION_S = 0.5
#: ``gc.set_threshold`` of a node (CPython's defaults are 700, 10, 10).
THRESHOLDS = (50_000, 20, 20)


class HeapPolicy:
    def __init__(self, observe: Callable[[float], None] | None = None) -> None:
        self._observe = observe
        self._started = 0.0
        self.frozen = 0
        self._thresholds = gc.get_threshold()
        gc.set_threshold(*THRESHOLDS)
        gc.callbacks.append(self._timed)

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        if self._observe is not None:
            self._observe(took)
        if took > SLOW_COLLECTION_S:
            log.warning(
                "a full garbage collection took %.2f s (%d objects frozen)", took, self.frozen
            )

    def settle(self) -> None:
        """Freeze every object alive now: later full collections skip them."""
        gc.freeze()
        self.frozen = gc.get_freeze_count()

    def after_image(self, opened: int, removed: int) -> None:
        """After a metadata image: collect what removed replicas left (their cycles may be
        frozen), then freeze what new replicas made."""
        if removed >= FREEZE_AFTER_OPENED:
            gc.unfreeze()
            gc.collect()
            self.settle()
        elif opened >= FREEZE_AFTER_OPENED:
            self.settle()

    def close(self) -> None:
        if self._timed in gc.callbacks:
            gc.callbacks.remove(self._timed)
            gc.set_threshold(*self._thresholds)
