"""The disk log's in-memory tail of recent appends (``PartitionLog._read_tail``): what it
answers is byte for byte what the segments return (same max_bytes and high-watermark rules),
it is forgotten on truncation, and offsets older than it are read from the file."""

from __future__ import annotations

from flux.storage import LogConfig, OffsetOutOfRangeError, PartitionLog
from flux.storage.limits import TAIL_CACHE_APPENDS, TAIL_CACHE_BYTES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.storage_batches import build_batch, header, split_batches

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def _append(log: PartitionLog, batches: int, records: int, value_size: int = 8) -> None:
    log.append(b"".join(build_batch(records, value_size=value_size) for _ in range(batches)))


def _from_segments(log: PartitionLog, offset: int, max_bytes: int, max_offset=None) -> bytes:
    saved = log._tail_cache_bytes
    log._tail_cache_bytes = 0
    cached, log._tail = log._tail, type(log._tail)()
    try:
        return log.read(offset, max_bytes, max_offset=max_offset)
    finally:
        log._tail, log._tail_cache_bytes = cached, saved


def bases(data: bytes) -> list[int]:
    return [header(b)["base_offset"] for b in split_batches(data)]


def test_a_read_at_the_log_end_comes_from_memory_and_matches_the_file(tmp_path):
    log = PartitionLog.open(tmp_path, CONFIG)
    _append(log, 1, 3)
    end = log.log_end_offset
    _append(log, 2, 2)
    _append(log, 1, 1)
    cached = log._read_tail(end, 1 << 20, log.log_end_offset)
    assert cached is not None
    assert cached == _from_segments(log, end, 1 << 20)
    assert log.read(end, 1 << 20) == cached
    assert [header(b)["base_offset"] for b in split_batches(cached)] == [3, 5, 7]


def test_the_segments_rules_apply_to_reads_from_memory(tmp_path):
    log = PartitionLog.open(tmp_path, CONFIG)
    _append(log, 1, 4)  # offsets 0..3 in one batch
    _append(log, 3, 1)  # one append of three batches, offsets 4..6
    end = log.log_end_offset
    for offset, max_bytes, limit in [(2, 1 << 20, end), (4, 10, end), (4, 1 << 20, 6), (0, 1, 3)]:
        cached = log._read_tail(offset, max_bytes, limit)
        assert cached is not None
        assert cached == _from_segments(log, offset, max_bytes, limit), (offset, max_bytes, limit)
    assert bases(log._read_tail(2, 1 << 20, end)) == [0, 4, 5, 6]  # the batch holding offset 2
    assert bases(log._read_tail(4, 10, end)) == [4]  # the first batch whole, beyond max_bytes
    assert bases(log._read_tail(4, 1 << 20, 6)) == [4, 5]  # below the high watermark only
    assert log._read_tail(0, 1, 3) == b""  # the first batch passes the high watermark


def test_offsets_older_than_the_tail_are_read_from_the_file(tmp_path):
    log = PartitionLog.open(tmp_path, CONFIG)
    for _ in range(TAIL_CACHE_APPENDS + 5):
        _append(log, 1, 1)
    assert len(log._tail) == TAIL_CACHE_APPENDS
    assert log._read_tail(0, 1 << 20, log.log_end_offset) is None
    assert bases(log.read(0, 1 << 20)) == list(range(TAIL_CACHE_APPENDS + 5))


def test_truncation_forgets_the_tail(tmp_path):
    log = PartitionLog.open(tmp_path, CONFIG)
    for _ in range(4):
        _append(log, 1, 2)
    log.truncate_to(4)
    assert log._read_tail(4, 1 << 20, 10) is None
    _append(log, 1, 3, value_size=20)  # offsets 4..6 again, different bytes
    assert log.read(4, 1 << 20) == _from_segments(log, 4, 1 << 20)
    log.truncate_fully_and_start_at(100)
    assert not log._tail
    _append(log, 1, 1)
    assert bases(log.read(100, 1 << 20)) == [100]


def test_big_appends_are_not_held(tmp_path):
    log = PartitionLog.open(tmp_path, LogConfig())
    _append(log, 1, 1, value_size=TAIL_CACHE_BYTES)
    assert not log._tail
    _append(log, 1, 1)
    assert len(log._tail) == 1
    assert log._tail_bytes <= TAIL_CACHE_BYTES


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3), st.integers(1, 4), st.integers(1, 400)),
        st.tuples(st.just("read"), st.integers(0, 60), st.integers(0, 3000), st.integers(0, 60)),
        st.tuples(st.just("truncate"), st.integers(0, 60)),
        st.tuples(st.just("delete_before"), st.integers(0, 60)),
    ),
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_reads_match_the_segments_answer(tmp_path_factory, ops):
    log = PartitionLog.open(tmp_path_factory.mktemp("log"), CONFIG)
    try:
        for op in ops:
            if op[0] == "append":
                _append(log, op[1], op[2], value_size=op[3])
            elif op[0] == "truncate" and log.log_start_offset <= op[1]:
                log.truncate_to(op[1])
            elif op[0] == "delete_before" and op[1] <= log.log_end_offset:
                log.delete_records_before(op[1])
            elif op[0] == "read":
                _, offset, max_bytes, max_offset = op
                try:
                    expected = _from_segments(log, offset, max_bytes, max_offset)
                except OffsetOutOfRangeError:
                    continue
                assert log.read(offset, max_bytes, max_offset=max_offset) == expected
    finally:
        log.close()
