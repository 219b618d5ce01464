"""The leader-epoch cache of one partition replica (Kafka's ``LeaderEpochFileCache``).

An ordered list of ``(leader_epoch, start_offset)``: the first offset written in each leader
epoch. It answers OffsetForLeaderEpoch ("where does epoch E end in this log?"), which is how
a follower finds the point where its log diverged from its leader's.

Invariants (asserted): epochs strictly increase; start offsets never decrease.

Thread-safety: none; one owner (the broker's event loop). Persistence is the caller's: after
every change ``entries`` is handed to ``on_change`` (the broker writes it to LMDB). When
``on_append`` is given, a change that only appended an epoch (the first batch of a new epoch,
a new leader's epoch) goes to it instead: such an entry can be rebuilt from the batch headers
of the log (``assign`` each batch's epoch at its base offset), so the caller may persist it
lazily, as Kafka does since KAFKA-15046, as long as it is durable before any checkpoint says
the log is durable past its start offset. Removals (truncations) always go to ``on_change``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_OFFSET", "LeaderEpochCache"]

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(
        self,
        entries: Iterable[Sequence[int]] = (),
        *,
        on_change: Callable[[list[tuple[int, int]]], None] | None = None,
        on_append: Callable[[list[tuple[int, int]]], None] | None = None,
    ) -> None:
        self._entries: list[tuple[int, int]] = []
        for epoch, start_offset in entries:
            self._append(int(epoch), int(start_offset))
        self._on_change = on_change
        self._on_append = on_append

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def _append(self, epoch: int, start_offset: int) -> None:
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            assert epoch > last_epoch, f"epoch {epoch} after {last_epoch}"
            assert start_offset >= last_start, f"start {start_offset} before {last_start}"
        self._entries.append((epoch, start_offset))

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` unless an epoch at least as new is
        already known. Returns True if the cache changed."""
        if epoch < 0 or (self._entries and epoch <= self._entries[-1][0]):
            return False
        # An older epoch that starts at or after this offset wrote nothing that survives.
        removed = False
        while self._entries and self._entries[-1][1] >= start_offset:
            self._entries.pop()
            removed = True
        self._append(epoch, start_offset)
        if not removed and self._on_append is not None:
            self._on_append(self.entries)
        else:
            self._changed()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: the largest known epoch <= ``epoch`` and the offset where it
        ends (the start of the next epoch, or the log end for the latest one).
        ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)`` when every known epoch is newer."""
        found = UNDEFINED_EPOCH
        end = UNDEFINED_OFFSET
        for index, (known, _start) in enumerate(self._entries):
            if known > epoch:
                break
            found = known
            end = self._entries[index + 1][1] if index + 1 < len(self._entries) else log_end_offset
        return found, end

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget epochs that start at or after it."""
        before = len(self._entries)
        while self._entries and self._entries[-1][1] >= end_offset:
            self._entries.pop()
        if len(self._entries) != before:
            self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: epochs wholly before it collapse into the
        one that covers it, which now starts there."""
        changed = False
        while len(self._entries) > 1 and self._entries[1][1] <= start_offset:
            self._entries.pop(0)
            changed = True
        if self._entries and self._entries[0][1] < start_offset:
            self._entries[0] = (self._entries[0][0], start_offset)
            changed = True
        if changed:
            self._changed()

    def clear(self) -> None:
        if self._entries:
            self._entries.clear()
            self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.entries)
