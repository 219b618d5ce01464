"""One conformance suite run against both logs (trio's check_two_way_stream style):
``PartitionLog`` on disk and ``MemoryLog`` must behave identically."""

from __future__ import annotations

import pytest
from flux.storage import (
    CorruptBatchError,
    LogClosedError,
    LogConfig,
    MemoryLog,
    OffsetMismatchError,
    OffsetOutOfRangeError,
    PartitionLog,
)

from tests.unit.storage_batches import build_batch, crc_ok, header, split_batches

DAY_MS = 24 * 3600 * 1000


class Clock:
    def __init__(self, now_ms: int = 10 * DAY_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture(params=["disk", "memory"])
def make_log(request, tmp_path):
    """make_log(config=None, clock=None) -> a fresh, empty log of the parametrized kind."""
    logs = []

    def make(config: LogConfig | None = None, clock: Clock | None = None):
        config = config or LogConfig()
        clock = clock or Clock()
        if request.param == "disk":
            log = PartitionLog.open(tmp_path / f"topic-{len(logs)}", config, clock_ms=clock)
        else:
            log = MemoryLog(config, clock_ms=clock)
        logs.append(log)
        return log

    yield make
    for log in logs:
        log.close()


def bases(data: bytes) -> list[int]:
    return [header(batch)["base_offset"] for batch in split_batches(data)]


def fill(log, counts, **batch_args):
    """Append one batch per count (separate appends); returns the AppendResults."""
    return [log.append(build_batch(count, **batch_args)) for count in counts]


# -- append ------------------------------------------------------------------------


def test_append_assigns_consecutive_offsets_across_batches(make_log):
    log = make_log()
    result = log.append(build_batch(3) + build_batch(2) + build_batch(1))
    assert (result.base_offset, result.last_offset) == (0, 5)
    assert (result.batch_count, result.record_count) == (3, 6)
    assert result.log_append_time_ms == -1
    assert log.log_end_offset == 6
    second = log.append(build_batch(4, base_offset=999))
    assert (second.base_offset, second.last_offset) == (6, 9)
    stored = split_batches(log.read(0, 1 << 20))
    assert [header(batch)["base_offset"] for batch in stored] == [0, 3, 5, 6]
    assert all(crc_ok(batch) for batch in stored)


def test_append_writes_leader_epoch(make_log):
    log = make_log()
    log.append(build_batch(2), leader_epoch=7)
    log.append(build_batch(2))
    stored = split_batches(log.read(0, 1 << 20))
    assert [header(batch)["partition_leader_epoch"] for batch in stored] == [7, -1]


def test_follower_append_keeps_offsets_and_requires_continuity(make_log):
    log = make_log()
    log.append(build_batch(3, base_offset=0, partition_leader_epoch=4), assign_offsets=False)
    log.append(build_batch(2, base_offset=3) + build_batch(1, base_offset=5), assign_offsets=False)
    assert log.log_end_offset == 6
    with pytest.raises(OffsetMismatchError) as caught:
        log.append(build_batch(1, base_offset=7), assign_offsets=False)
    assert (caught.value.expected_offset, caught.value.actual_offset) == (6, 7)
    with pytest.raises(OffsetMismatchError):
        log.append(
            build_batch(1, base_offset=6) + build_batch(1, base_offset=8), assign_offsets=False
        )
    assert log.log_end_offset == 6
    assert bases(log.read(0, 1 << 20)) == [0, 3, 5]
    assert header(log.read(0, 1))["partition_leader_epoch"] == 4


@pytest.mark.parametrize(
    "damage",
    [
        "flip_record_byte",
        "flip_crc",
        "bad_magic",
        "truncated",
        "trailing_bytes",
        "bad_length",
        "empty",
    ],
)
def test_corrupt_input_is_rejected_and_nothing_is_written(make_log, damage):
    log = make_log()
    log.append(build_batch(2))
    good = build_batch(3)
    bad = bytearray(build_batch(3))
    if damage == "flip_record_byte":
        bad[-2] ^= 0xFF
    elif damage == "flip_crc":
        bad[18] ^= 0x01
    elif damage == "bad_magic":
        bad[16] = 1
    elif damage == "truncated":
        bad = bad[:-5]
    elif damage == "trailing_bytes":
        bad += b"\x00" * 20
    elif damage == "bad_length":
        bad[8:12] = (10).to_bytes(4, "big")
    elif damage == "empty":
        good = b""
        bad = bytearray()
    size_before = log.size_bytes
    with pytest.raises(CorruptBatchError):
        log.append(good + bytes(bad))
    assert log.log_end_offset == 2
    assert log.size_bytes == size_before
    assert bases(log.read(0, 1 << 20)) == [0]
    assert log.append(build_batch(1)).base_offset == 2


def test_log_append_time_rewrites_timestamp_and_keeps_crc_valid(make_log):
    clock = Clock(123_456_789)
    log = make_log(LogConfig(log_append_time=True), clock)
    result = log.append(build_batch(3, base_timestamp=5) + build_batch(2, base_timestamp=6))
    assert result.log_append_time_ms == 123_456_789
    assert result.max_timestamp == 123_456_789
    stored = split_batches(log.read(0, 1 << 20))
    for batch in stored:
        fields = header(batch)
        assert fields["max_timestamp"] == 123_456_789
        assert fields["attributes"] & 0x08
        assert crc_ok(batch)
    assert log.offset_for_timestamp(123_456_789)[0] == 0


# -- read ---------------------------------------------------------------------------


def test_read_from_any_offset_returns_the_containing_batch_first(make_log):
    log = make_log(LogConfig(segment_bytes=400, index_interval_bytes=150))
    fill(log, [3, 1, 4, 1, 5, 9, 2, 6])
    assert log.segment_count > 1
    for offset in range(log.log_end_offset):
        first = header(log.read(offset, 1 << 20))
        assert first["base_offset"] <= offset <= first["base_offset"] + first["last_offset_delta"]


def test_max_bytes_stops_before_exceeding_and_first_batch_is_always_returned(make_log):
    log = make_log()
    fill(log, [2, 2, 2, 2])
    size = len(build_batch(2))
    assert bases(log.read(0, 2 * size)) == [0, 2]
    assert bases(log.read(0, 2 * size - 1)) == [0]
    assert bases(log.read(1, 3 * size)) == [0, 2, 4]
    assert bases(log.read(2, 1)) == [2]
    assert bases(log.read(2, 0)) == [2]


def test_max_bytes_applies_across_segments(make_log):
    size = len(build_batch(2))
    log = make_log(LogConfig(segment_bytes=2 * size))
    fill(log, [2] * 6)
    assert log.segment_count == 3
    assert bases(log.read(0, 2 * size + size // 2)) == [0, 2]
    assert bases(log.read(2, 2 * size)) == [2, 4]
    assert bases(log.read(2, 3 * size)) == [2, 4, 6]
    assert bases(log.read(0, 6 * size)) == [0, 2, 4, 6, 8, 10]
    assert bases(log.read(0, 6 * size, max_offset=7)) == [0, 2, 4]


def test_max_offset_only_returns_batches_below_it(make_log):
    log = make_log()
    fill(log, [2, 2, 2, 2])  # batches 0-1, 2-3, 4-5, 6-7
    assert bases(log.read(0, 1 << 20, max_offset=4)) == [0, 2]
    assert bases(log.read(0, 1 << 20, max_offset=5)) == [0, 2]
    assert bases(log.read(0, 1 << 20, max_offset=6)) == [0, 2, 4]
    assert log.read(4, 1 << 20, max_offset=4) == b""
    assert log.read(4, 1 << 20, max_offset=5) == b""  # the batch straddles max_offset
    assert log.read(0, 1, max_offset=1) == b""
    assert bases(log.read(0, 1, max_offset=2)) == [0]
    assert bases(log.read(0, 1 << 20, max_offset=100)) == [0, 2, 4, 6]


def test_read_at_end_is_empty_and_outside_the_log_raises(make_log):
    log = make_log()
    assert log.read(0, 100) == b""
    fill(log, [2, 2])
    assert log.read(4, 100) == b""
    with pytest.raises(OffsetOutOfRangeError) as caught:
        log.read(5, 100)
    assert (caught.value.offset, caught.value.log_start_offset, caught.value.log_end_offset) == (
        5,
        0,
        4,
    )
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert bases(log.read(2, 100)) == [2]


def test_reads_span_segments(make_log):
    log = make_log(LogConfig(segment_bytes=300, index_interval_bytes=0))
    appended = b"".join(log.read(r.base_offset, 1) for r in fill(log, [1] * 12))
    assert log.segment_count >= 4
    assert log.read(0, 1 << 20) == appended
    assert log.read(5, 1 << 20) == appended[5 * len(build_batch(1)) :]


# -- truncation and deletion ------------------------------------------------------


def test_truncate_to(make_log):
    log = make_log(LogConfig(segment_bytes=300))
    fill(log, [2] * 10)  # batches at 0, 2, ..., 18
    segments_before = log.segment_count
    log.truncate_to(25)
    assert log.log_end_offset == 20  # no-op at or beyond the end
    log.truncate_to(12)  # a batch boundary
    assert log.log_end_offset == 12
    assert bases(log.read(0, 1 << 20)) == [0, 2, 4, 6, 8, 10]
    assert log.segment_count < segments_before
    log.truncate_to(9)  # inside batch 8-9: the whole batch goes
    assert log.log_end_offset == 8
    assert log.last_batch_info().last_offset == 7
    assert log.append(build_batch(3)).base_offset == 8
    assert bases(log.read(6, 1 << 20)) == [6, 8]
    log.delete_records_before(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(3)
    log.truncate_to(4)
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    assert log.read(4, 100) == b""
    assert log.append(build_batch(1)).base_offset == 4


def test_truncate_below_a_straddled_log_start_empties_the_log(make_log):
    log = make_log()
    fill(log, [5, 5])
    log.delete_records_before(7)
    log.truncate_to(8)  # batch 5-9 starts below the log start
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    assert log.append(build_batch(2)).base_offset == 7


def test_truncate_fully_and_start_at(make_log):
    log = make_log()
    fill(log, [3, 3])
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (100, 100, 1)
    assert log.append(build_batch(2)).base_offset == 100


def test_delete_records_before(make_log):
    log = make_log(LogConfig(segment_bytes=300))
    fill(log, [2] * 10)
    segments = log.segment_count
    assert log.delete_records_before(5) == 5
    assert log.log_start_offset == 5
    assert bases(log.read(5, 1 << 20))[0] == 4  # the containing batch starts below
    assert log.delete_records_before(3) == 5  # never moves down
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(21)
    assert log.segment_count <= segments
    assert log.delete_records_before(20) == 20
    assert log.segment_count == 1
    assert log.size_bytes == 0
    assert log.read(20, 100) == b""
    assert log.append(build_batch(1)).base_offset == 20


def test_delete_records_before_deletes_only_whole_segments(make_log):
    log = make_log(LogConfig(segment_bytes=2 * len(build_batch(2))))
    fill(log, [2] * 6)  # segments [0,4) [4,8) [8,12)
    assert log.segment_count == 3
    log.delete_records_before(5)
    assert log.segment_count == 2
    assert bases(log.read(5, 1 << 20)) == [4, 6, 8, 10]


# -- roll and retention ------------------------------------------------------------


def test_roll_by_segment_bytes(make_log):
    size = len(build_batch(2))
    log = make_log(LogConfig(segment_bytes=3 * size))
    fill(log, [2] * 7)
    assert log.segment_count == 3
    assert log.size_bytes == 7 * size
    big = build_batch(2) * 5  # larger than segment_bytes: goes into one fresh segment
    log.append(big)
    assert log.segment_count == 4
    assert log.log_end_offset == 24


def test_roll_by_segment_ms(make_log):
    clock = Clock()
    log = make_log(LogConfig(segment_ms=1000), clock)
    log.append(build_batch(1))
    clock.now_ms += 1000
    log.append(build_batch(1))
    assert log.segment_count == 1
    clock.now_ms += 1
    log.append(build_batch(1))
    assert log.segment_count == 2
    clock.now_ms += 500
    log.append(build_batch(1))
    assert log.segment_count == 2
    assert bases(log.read(0, 1 << 20)) == [0, 1, 2, 3]


def test_roll_on_request(make_log):
    log = make_log()
    assert not log.roll()
    log.append(build_batch(1))
    assert log.roll()
    assert not log.roll()
    assert log.segment_count == 2


def test_retention_by_age_deletes_whole_expired_segments(make_log):
    clock = Clock()
    log = make_log(LogConfig(retention_ms=DAY_MS, segment_bytes=2 * len(build_batch(1))), clock)
    now = clock.now_ms
    for day in (5, 5, 3, 3, 1, 0):  # timestamps: days before now
        log.append(build_batch(1, base_timestamp=now - day * DAY_MS - 1))
    assert log.segment_count == 3
    assert log.enforce_retention() == 2
    assert (log.log_start_offset, log.segment_count) == (4, 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    # Everything expired: the active segment is rolled, then deleted.
    clock.now_ms += 2 * DAY_MS
    assert log.enforce_retention() == 1
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (6, 6, 0)
    assert log.append(build_batch(1, base_timestamp=clock.now_ms)).base_offset == 6
    assert log.enforce_retention() == 0


def test_retention_never_deletes_above_the_high_watermark(make_log):
    clock = Clock()
    size = len(build_batch(1))
    log = make_log(LogConfig(retention_ms=DAY_MS, segment_bytes=2 * size), clock)
    fill(log, [1] * 6, base_timestamp=0)  # all expired; segments [0,2) [2,4) [4,6)
    assert log.enforce_retention(high_watermark=3) == 1
    assert log.log_start_offset == 2
    assert log.enforce_retention(high_watermark=6) == 2  # the active one is rolled, then deleted
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (6, 6, 1)


def test_retention_unlimited_keeps_everything(make_log):
    clock = Clock()
    log = make_log(LogConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=100), clock)
    fill(log, [1] * 5, base_timestamp=0)
    assert log.enforce_retention(now_ms=10**15) == 0
    assert log.log_start_offset == 0


def test_retention_by_size_keeps_at_least_retention_bytes(make_log):
    size = len(build_batch(1))
    log = make_log(LogConfig(retention_ms=-1, retention_bytes=3 * size, segment_bytes=2 * size))
    fill(log, [1] * 9)  # segments of 2,2,2,2,1 batches
    assert log.segment_count == 5
    assert log.enforce_retention() == 3  # 9 -> 3 batches: 2 + 1 remain
    assert log.size_bytes == 3 * size
    assert log.log_start_offset == 6
    assert bases(log.read(6, 1 << 20)) == [6, 7, 8]
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=0, segment_bytes=2 * size))
    assert log.enforce_retention() == 1  # never the active segment
    assert log.segment_count == 1


# -- timestamps ---------------------------------------------------------------------


def test_offset_for_timestamp(make_log):
    log = make_log(LogConfig(segment_bytes=500, index_interval_bytes=100))
    stamps = [1000, 2000, 1500, 3000, 3000, 2500, 4000, 5000, 4500, 6000, 7000, 8000]
    for stamp in stamps:
        log.append(build_batch(2, base_timestamp=stamp - 1, timestamp_step=1))
    assert log.segment_count > 2

    def expected(target):
        for i, stamp in enumerate(stamps):
            if stamp >= target:
                return 2 * i
        return None

    for target in [0, 999, 1000, 1001, 1600, 2000, 2999, 3000, 3001, 4100, 4600, 7999, 8000, 8001]:
        found = log.offset_for_timestamp(target)
        if expected(target) is None:
            assert found is None
        else:
            offset, batch = found
            assert offset == expected(target)
            assert header(batch)["base_offset"] == offset
            assert len(split_batches(batch)) == 1
    log.delete_records_before(7)  # batches 0..5 lie below; 6-7 straddles
    assert log.offset_for_timestamp(0)[0] == 6


# -- helpers and lifecycle -----------------------------------------------------------


def test_batch_infos_and_last_batch_info(make_log):
    log = make_log(LogConfig(segment_bytes=300))
    assert log.last_batch_info() is None
    fill(log, [2, 3, 1, 4], producer_id=42, producer_epoch=1, base_sequence=0)
    infos = list(log.batch_infos())
    assert [(i.base_offset, i.last_offset, i.record_count) for i in infos] == [
        (0, 1, 2),
        (2, 4, 3),
        (5, 5, 1),
        (6, 9, 4),
    ]
    assert all(info.producer_id == 42 for info in infos)
    assert [i.base_offset for i in log.batch_infos(4)] == [2, 5, 6]
    assert log.last_batch_info().base_offset == 6


def test_flush_moves_the_recovery_point(make_log):
    log = make_log()
    fill(log, [2, 2])
    log.flush()
    assert log.recovery_point == 4
    assert not log.maybe_flush()


def test_closed_log_raises(make_log):
    log = make_log()
    log.append(build_batch(1))
    log.close()
    log.close()
    for call in (
        lambda: log.append(build_batch(1)),
        lambda: log.read(0, 100),
        lambda: log.truncate_to(0),
        lambda: log.flush(),
    ):
        with pytest.raises(LogClosedError):
            call()
