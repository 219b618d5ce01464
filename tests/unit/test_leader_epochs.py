"""The leader-epoch cache: OffsetForLeaderEpoch answers and truncation."""

from __future__ import annotations

from flux.storage.leader_epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache
from hypothesis import given
from hypothesis import strategies as st


def test_end_offsets_per_epoch() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 10), (5, 25)])
    assert cache.end_offset_for(0, 40) == (0, 10)
    assert cache.end_offset_for(1, 40) == (0, 10)  # epoch 1 never wrote: answer for epoch 0
    assert cache.end_offset_for(2, 40) == (2, 25)
    assert cache.end_offset_for(4, 40) == (2, 25)
    assert cache.end_offset_for(5, 40) == (5, 40)
    assert cache.end_offset_for(9, 40) == (5, 40)
    assert LeaderEpochCache([(3, 0)]).end_offset_for(1, 5) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_assign_ignores_older_epochs_and_replaces_empty_ones() -> None:
    changes: list[list[tuple[int, int]]] = []
    cache = LeaderEpochCache(on_change=changes.append)
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)
    assert not cache.assign(0, 7)
    assert cache.assign(3, 0)  # epoch 1 wrote nothing before epoch 3 started at the same offset
    assert cache.entries == [(3, 0)]
    assert changes[-1] == [(3, 0)]


def test_truncation_from_both_ends() -> None:
    cache = LeaderEpochCache([(0, 0), (2, 10), (5, 25)])
    cache.truncate_from_end(25)
    assert cache.entries == [(0, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    cache.truncate_from_end(12)
    assert cache.entries == []


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 50)), max_size=30))
def test_invariants_hold_for_any_assignment_sequence(steps) -> None:
    cache = LeaderEpochCache()
    for epoch_step, offset_step in steps:
        latest = cache.entries[-1] if cache.entries else (-1, 0)
        cache.assign(latest[0] + epoch_step, latest[1] + offset_step)
        entries = cache.entries
        assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(entries, entries[1:], strict=False))
