"""The node's garbage-collector policy (``cluster.heap``): long-lived objects are frozen out
of full collections after start-up and after images that open many replicas, unfrozen and
collected after images that remove many, and full collections are timed."""

from __future__ import annotations

import gc
import weakref

from flux.cluster.heap import FREEZE_AFTER_OPENED, THRESHOLDS, HeapPolicy


class _Node:
    """A reference cycle, as a removed replica's objects may form."""

    def __init__(self) -> None:
        self.me = self


def test_freeze_and_release_follow_the_images() -> None:
    pauses: list[float] = []
    defaults = gc.get_threshold()
    policy = HeapPolicy(pauses.append)
    try:
        assert gc.get_threshold() == THRESHOLDS
        gc.unfreeze()
        policy.settle()
        assert gc.get_freeze_count() > 0 and policy.frozen > 0

        kept = [_Node() for _ in range(1000)]
        watched = weakref.ref(kept[0])
        before = gc.get_freeze_count()
        policy.after_image(opened=FREEZE_AFTER_OPENED - 1, removed=0)
        # A small image freezes nothing: a freeze would add at least the 1,000 new objects,
        # while frozen objects that die meanwhile (another thread's) only lower the count.
        assert gc.get_freeze_count() <= before
        policy.after_image(opened=FREEZE_AFTER_OPENED, removed=0)
        assert gc.get_freeze_count() >= before + 1000  # the new objects are frozen too

        # A frozen cycle is never collected ... until an image removes many replicas.
        del kept
        gc.collect()
        assert watched() is not None
        collections = len(pauses)
        policy.after_image(opened=0, removed=FREEZE_AFTER_OPENED)
        assert watched() is None
        assert len(pauses) > collections  # the full collection was timed
        assert gc.get_freeze_count() > 0  # and what is left is frozen again
    finally:
        policy.close()
        gc.unfreeze()
    assert policy._timed not in gc.callbacks
    assert gc.get_threshold() == defaults
