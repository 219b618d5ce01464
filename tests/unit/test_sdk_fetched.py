"""How the SDK reads a Fetch answer of a compacted log: records by offset, and the end of the
batch spans (a compacted batch keeps its span when records leave it; an emptied one holds none)."""

from __future__ import annotations

from flux.protocol.records import build_batch, filter_batch, record_keys
from flux.sdk.messages import decode_fetched, fetched_end
from flux.storage.compaction.batches import empty_batch


def _compacted(base: int, count: int, keep: set[int]) -> bytes:
    batch = build_batch([(b"k%d" % i, b"v%d" % i) for i in range(count)], base_offset=base)
    header, data, records = record_keys(batch)
    return filter_batch(batch, header, data, [r for r in records if r[0] in keep])


def test_records_and_end_of_a_batch_whose_last_records_were_removed() -> None:
    data = _compacted(0, 10, {2, 5})
    assert [r.offset for r in decode_fetched(data, "t", 0, 0)] == [2, 5]
    # A reader at offset 6 has nothing to read in this batch and moves to its end.
    assert decode_fetched(data, "t", 0, 6) == []
    assert fetched_end(data) == 10


def test_end_of_an_empty_span_and_of_nothing() -> None:
    span = empty_batch(10, 99, leader_epoch=0, timestamp_ms=0)
    data = _compacted(0, 10, {9}) + span
    assert [r.offset for r in decode_fetched(data, "t", 0, 0)] == [9]
    assert fetched_end(data) == 100
    assert fetched_end(b"") == -1
    assert fetched_end(data + span[:30]) == 100  # a partial batch at the end is not counted
