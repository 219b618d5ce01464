"""Hypothesis: random operation sequences against both logs agree with a list-of-batches model."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

import pytest
from flux.storage import LogConfig, MemoryLog, OffsetOutOfRangeError, PartitionLog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.storage_batches import build_batch, with_base_offset


@dataclass
class Model:
    """The log as a list of stored batches (offsets already assigned)."""

    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # (base, last, bytes)
    max_timestamps: dict[int, int] = field(default_factory=dict)  # base offset -> maxTimestamp
    empty_end: int = 0  # log end offset when no batch is held
    start: int = 0

    @property
    def end(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else self.empty_end

    def append(self, batch: bytes, records: int, max_timestamp: int) -> None:
        base = self.end
        self.batches.append((base, base + records - 1, with_base_offset(batch, base)))
        self.max_timestamps[base] = max_timestamp

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, bytes] | None:
        for base, last, data in self.batches:
            if last >= self.start and self.max_timestamps[base] >= timestamp:
                return base, data
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None) -> bytes | None:
        if offset < self.start or offset > self.end:
            return None  # OffsetOutOfRangeError
        limit = self.end if max_offset is None else min(max_offset, self.end)
        out: list[bytes] = []
        total = 0
        for _base, last, data in self.batches:
            if last < offset:
                continue
            if last >= limit:
                break
            if out and total + len(data) > max_bytes:
                break
            out.append(data)
            total += len(data)
            if total > max_bytes:
                break
        return b"".join(out)

    def truncate(self, offset: int) -> None:
        if offset >= self.end:
            return
        for i, (base, last, _data) in enumerate(self.batches):
            if last >= offset:
                if base < self.start:
                    self.batches = []
                    self.empty_end = self.start
                else:
                    del self.batches[i:]
                    self.empty_end = base
                return

    def delete_before(self, offset: int) -> None:
        self.start = max(self.start, offset)
        if self.start == self.end:  # every batch is gone (segments rolled and deleted)
            self.empty_end = self.end
            self.batches = []


fractions = st.floats(min_value=0.0, max_value=1.0)
appends = st.tuples(
    st.just("append"),
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 60)), min_size=1, max_size=4),
    st.integers(0, 90),
)
reads = st.tuples(st.just("read"), fractions, st.integers(0, 2500), st.one_of(st.none(), fractions))
operations = st.one_of(
    appends,
    appends,
    reads,
    reads,
    st.tuples(st.just("truncate"), fractions),
    st.tuples(st.just("delete_before"), fractions),
    st.tuples(st.just("roll")),
    st.tuples(st.just("reopen"), st.booleans()),
)


def pick(model: Model, fraction: float, low: int | None = None) -> int:
    low = model.start if low is None else low
    return low + int(fraction * (model.end + 1 - low) * 0.999999)


def check_reads(log, model: Model) -> None:
    """A sweep of reads across the whole log with budgets around batch sizes."""
    step = max(1, (model.end - model.start) // 12)
    middle = (model.start + model.end) // 2
    for offset in range(model.start, model.end + 1, step):
        for max_bytes in (0, 150, 400, 900, 1 << 20):
            for max_offset in (None, middle):
                expected = model.read(offset, max_bytes, max_offset)
                assert log.read(offset, max_bytes, max_offset=max_offset) == expected, (
                    offset,
                    max_bytes,
                    max_offset,
                )
    for timestamp in range(0, 70, 3):
        assert log.offset_for_timestamp(timestamp) == model.offset_for_timestamp(timestamp), (
            timestamp
        )


def run(kind: str, segment_bytes: int, index_interval_bytes: int, ops) -> None:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    with tempfile.TemporaryDirectory() as directory:
        log = PartitionLog.open(directory, config) if kind == "disk" else MemoryLog(config)
        model = Model()
        for op in ops:
            name = op[0]
            if name == "append":
                blob = [
                    build_batch(count, value_size=op[2], base_timestamp=stamp, timestamp_step=1)
                    for count, stamp in op[1]
                ]
                result = log.append(b"".join(blob))
                assert result.base_offset == model.end
                for batch, (count, stamp) in zip(blob, op[1], strict=True):
                    model.append(batch, count, stamp + count - 1)
            elif name == "read":
                offset = pick(model, op[1], low=max(model.start - 2, 0))
                max_offset = None if op[3] is None else pick(model, op[3])
                expected = model.read(offset, op[2], max_offset)
                if expected is None:
                    with pytest.raises(OffsetOutOfRangeError):
                        log.read(offset, op[2], max_offset=max_offset)
                else:
                    assert log.read(offset, op[2], max_offset=max_offset) == expected
            elif name == "truncate":
                offset = pick(model, op[1])
                log.truncate_to(offset)
                model.truncate(offset)
            elif name == "delete_before":
                offset = pick(model, op[1])
                assert log.delete_records_before(offset) == max(model.start, offset)
                model.delete_before(offset)
            elif name == "roll":
                log.roll()
            elif name == "reopen" and kind == "disk":
                if op[1]:
                    log.close()
                    log = PartitionLog.open(directory, config)
                else:
                    recovery_point = log.recovery_point
                    log._abandon()
                    log = PartitionLog.open(directory, config, recovery_point=recovery_point)
            assert (log.log_start_offset, log.log_end_offset) == (model.start, model.end), op
            if name != "read":
                check_reads(log, model)
        assert log.read(model.start, 1 << 30) == model.read(model.start, 1 << 30, None)
        log.close()


@pytest.mark.parametrize("kind", ["disk", "memory"])
@settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    segment_bytes=st.integers(100, 1200),
    index_interval_bytes=st.integers(0, 400),
    setup=st.lists(appends, min_size=1, max_size=8),
    ops=st.lists(operations, max_size=30),
)
def test_log_agrees_with_model(kind, segment_bytes, index_interval_bytes, setup, ops):
    run(kind, segment_bytes, index_interval_bytes, setup + ops)


def test_time_index_survives_truncation_roll_and_crash() -> None:
    """Found by the model test: a segment truncated, then rolled and crashed (below the
    recovery point, so loaded without a scan) lost its largest timestamp, and a time lookup
    skipped it."""
    run(
        "disk",
        100,
        1,
        [
            ("append", [(1, 0), (1, 1)], 0),
            ("reopen", False),
            ("truncate", 0.5),
            ("append", [(1, 0)], 0),
            ("reopen", False),
        ],
    )
