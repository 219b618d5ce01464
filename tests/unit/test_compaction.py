"""The log cleaner on real partition logs (flux.storage.compaction with the protocol codec)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flux.cluster.compaction.codec import RECORD_CODEC
from flux.protocol.records import Compression, build_batch, decode_records, iter_batches
from flux.storage import LogConfig, PartitionLog
from flux.storage.compaction import LogCleaner, align_to, plan_clean
from flux.storage.compaction.planner import DedupeMap
from hypothesis import given, settings
from hypothesis import strategies as st

DAY_MS = 24 * 3600 * 1000


def compact_config(**overrides) -> LogConfig:
    values = {
        "segment_bytes": 2048,
        "cleanup_delete": False,
        "cleanup_compact": True,
        "min_cleanable_dirty_ratio": 0.0,
        "index_interval_bytes": 256,
    }
    values.update(overrides)
    return LogConfig(**values)


class Clock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def produce(log: PartitionLog, records, **batch_options) -> None:
    log.append(build_batch(records, base_timestamp_ms=1_700_000_000_000, **batch_options))


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for header, batch in iter_batches(data):
            out.extend(
                (r.offset, r.key, r.value) for r in decode_records(batch) if r.offset >= offset
            )
            offset = header.next_offset
    return out


def latest_per_key(records):
    latest = {}
    for offset, key, value in records:
        latest[key] = (offset, value)
    return latest


def clean(log: PartitionLog, clock: Clock, *, high_watermark=None, memory=1 << 20, hook=None):
    cleaner = LogCleaner(RECORD_CODEC, dedupe_buffer_bytes=memory, clock_ms=clock)
    view = log.cleaner_view()
    plan = plan_clean(
        view, log.log_end_offset if high_watermark is None else high_watermark, clock()
    )
    if plan is None:
        return None
    result = cleaner.clean(view, plan)
    assert log.install_cleaned(result, hook)
    return result


def fill(log: PartitionLog, updates: int, keys: int, *, per_batch: int = 1, value_bytes: int = 20):
    written = []
    for start in range(0, updates, per_batch):
        batch = []
        for i in range(start, min(updates, start + per_batch)):
            key = f"k{i % keys}".encode()
            value = f"v{i}".encode().ljust(value_bytes, b".")
            batch.append((key, value))
        base = log.log_end_offset
        produce(log, batch)
        written.extend((base + j, k, v) for j, (k, v) in enumerate(batch))
    log.roll()
    return written


@pytest.mark.parametrize("per_batch", [1, 7])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_clean_keeps_the_newest_record_per_key(tmp_path: Path, per_batch: int, codec) -> None:
    clock = Clock()
    log = PartitionLog.open(tmp_path / "t-0", compact_config(), clock_ms=clock)
    written = []
    for start in range(0, 400, per_batch):
        batch = [
            (f"k{i % 13}".encode(), f"v{i}".encode().ljust(20, b"."))
            for i in range(start, min(400, start + per_batch))
        ]
        base = log.log_end_offset
        produce(log, batch, compression=codec)
        written.extend((base + j, k, v) for j, (k, v) in enumerate(batch))
    log.roll()
    before_bytes = log.size_bytes
    end = log.log_end_offset
    result = clean(log, clock)
    assert result is not None and result.records_removed == 400 - 13
    records = read_all(log)
    assert {key: (o, v) for o, key, v in records} == latest_per_key(written)
    assert len(records) == 13
    assert log.log_end_offset == end  # offsets are never renumbered
    assert log.size_bytes < before_bytes / 3
    # Reopening (a restart) reads the same: the cleaned segments are ordinary segments.
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", compact_config(), clock_ms=clock)
    assert read_all(reopened) == records
    assert reopened.cleaned_through == end
    reopened.close()


def test_reads_from_any_offset_land_on_the_next_kept_record(tmp_path: Path) -> None:
    clock = Clock()
    log = PartitionLog.open(tmp_path / "t-0", compact_config(), clock_ms=clock)
    written = fill(log, 200, 5)
    clean(log, clock)
    kept = [o for o, _k, _v in read_all(log)]
    for offset in range(0, 200, 7):
        data = log.read(offset, 1 << 20)
        first = next(
            r.offset
            for _h, batch in iter_batches(data)
            for r in decode_records(batch)
            if r.offset >= offset
        )
        assert first == min(o for o in kept if o >= offset)
    assert len(written) == 200


def test_active_segment_and_records_above_the_high_watermark_are_not_cleaned(
    tmp_path: Path,
) -> None:
    clock = Clock()
    log = PartitionLog.open(tmp_path / "t-0", compact_config(), clock_ms=clock)
    fill(log, 100, 3)  # closed segments
    for i in range(20):  # the active segment: never cleaned
        produce(log, [(f"k{i % 3}".encode(), b"active")])
    clean(log, clock, high_watermark=50)
    records = read_all(log)
    # Everything from offset 50 on is still there: not committed, or in the active segment.
    assert [o for o, _k, _v in records if o >= 50] == list(range(50, 120))
    assert all(o < 50 for o, _k, _v in records[:-70])


def test_tombstones_stay_for_delete_retention_after_the_clean_then_go(tmp_path: Path) -> None:
    clock = Clock()
    config = compact_config(delete_retention_ms=DAY_MS)
    log = PartitionLog.open(tmp_path / "t-0", config, clock_ms=clock)
    produce(log, [(b"a", b"1"), (b"b", b"1")])
    produce(log, [(b"a", None)])  # delete a
    log.roll()
    clean(log, clock)
    assert [(k, v) for _o, k, v in read_all(log)] == [(b"b", b"1"), (b"a", None)]
    # A later clean within delete.retention.ms keeps the tombstone...
    produce(log, [(b"b", b"2")])
    log.roll()
    clock.now_ms += DAY_MS // 2
    clean(log, clock)
    assert (b"a", None) in [(k, v) for _o, k, v in read_all(log)]
    # ...one after it drops it.
    produce(log, [(b"c", b"1")])
    log.roll()
    clock.now_ms += DAY_MS
    clean(log, clock)
    assert [(k, v) for _o, k, v in read_all(log)] == [(b"b", b"2"), (b"c", b"1")]


def test_dirty_ratio_and_compaction_lags_decide_when_to_clean(tmp_path: Path) -> None:
    clock = Clock()
    log = PartitionLog.open(
        tmp_path / "t-0", compact_config(min_cleanable_dirty_ratio=0.5), clock_ms=clock
    )
    fill(log, 100, 100)  # unique keys: cleaning removes nothing
    assert clean(log, clock) is not None  # all dirty: ratio 1.0
    fill(log, 10, 100)  # a little dirt on a big clean part
    assert plan_clean(log.cleaner_view(), log.log_end_offset, clock()) is None
    # max.compaction.lag.ms forces a clean of old dirt whatever the ratio.
    forced = LogConfig(
        **{
            **compact_config().__dict__,
            "max_compaction_lag_ms": 1000,
            "min_cleanable_dirty_ratio": 0.9,
        }
    )
    log.update_config(forced)
    clock.now_ms += 10_000
    assert plan_clean(log.cleaner_view(), log.log_end_offset, clock()).forced
    # min.compaction.lag.ms keeps young records out of reach.
    young = LogConfig(**{**compact_config().__dict__, "min_compaction_lag_ms": 10 * DAY_MS})
    log.update_config(young)
    fill(log, 50, 1)
    assert plan_clean(log.cleaner_view(), log.log_end_offset, clock()) is None
    # A delete-only topic is never cleaned.
    log.update_config(LogConfig(segment_bytes=2048))
    assert plan_clean(log.cleaner_view(), log.log_end_offset, clock()) is None


def test_a_small_key_map_cleans_in_several_passes(tmp_path: Path) -> None:
    clock = Clock()
    log = PartitionLog.open(tmp_path / "t-0", compact_config(), clock_ms=clock)
    written = fill(log, 600, 200)
    memory = 120 * DedupeMap.ENTRY_BYTES  # room for 120 keys: 200 exist
    for _ in range(10):
        if clean(log, clock, memory=memory) is None:
            break
    records = read_all(log)
    assert {k: (o, v) for o, k, v in records} == latest_per_key(written)
    assert len(records) == 200


def test_idempotent_producer_keeps_its_last_batch_header(tmp_path: Path) -> None:
    clock = Clock()
    log = PartitionLog.open(tmp_path / "t-0", compact_config(), clock_ms=clock)
    for seq in range(5):
        produce(
            log, [(b"k", f"v{seq}".encode())], producer_id=7, producer_epoch=0, base_sequence=seq
        )
    produce(log, [(b"k", b"plain")])  # supersedes every idempotent record
    log.roll()
    clean(log, clock)
    headers = [h for h, _b in iter_batches(log.read(0, 1 << 20))]
    kept = [h for h in headers if h.producer_id == 7]
    # The producer's last batch stays (empty) so its sequence number survives a restart.
    assert [(h.base_sequence, h.records_count) for h in kept] == [(4, 0)]
    assert [(k, v) for _o, k, v in read_all(log)] == [(b"k", b"plain")]


def test_removed_batches_merge_into_one_empty_span_and_followers_can_start_inside_it(
    tmp_path: Path,
) -> None:
    clock = Clock()
    log = PartitionLog.open(tmp_path / "t-0", compact_config(segment_bytes=1 << 20), clock_ms=clock)
    fill(log, 300, 1)
    clean(log, clock)
    headers = [h for h, _b in iter_batches(log.read(0, 1 << 20))]
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [
        (0, 298, 0),
        (299, 299, 1),
    ]
    aligned = align_to(log.read(120, 1 << 20), 120)
    first = next(iter_batches(aligned))[0]
    assert (first.base_offset, first.last_offset, first.records_count) == (120, 298, 0)


def test_changed_config_does_not_confuse_delete_only_retention(tmp_path: Path) -> None:
    clock = Clock()
    config = compact_config(retention_ms=1, retention_bytes=1)
    log = PartitionLog.open(tmp_path / "t-0", config, clock_ms=clock)
    fill(log, 100, 100)
    clock.now_ms += DAY_MS
    assert log.enforce_retention() == 0  # compact only: retention deletes nothing
    log.update_config(LogConfig(**{**config.__dict__, "cleanup_delete": True}))
    assert log.enforce_retention() > 0


def test_a_clean_of_segments_that_changed_meanwhile_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    log = PartitionLog.open(tmp_path / "t-0", compact_config(), clock_ms=clock)
    fill(log, 200, 5)
    view = log.cleaner_view()
    result = LogCleaner(RECORD_CODEC, clock_ms=clock).clean(view, plan_clean(view, 200, clock()))
    log.delete_records_before(100)
    before = read_all(log)
    assert not log.install_cleaned(result)
    assert read_all(log) == before
    assert not list(log.directory.glob(".cleaning*"))
    assert os.listdir(log.directory)


_CRASHING_CLEAN = """
import os, signal, sys
sys.path.insert(0, {root!r})
from flux.cluster.compaction.codec import RECORD_CODEC
from flux.storage import LogConfig, PartitionLog
from flux.storage.compaction import LogCleaner, plan_clean

step = sys.argv[2]
def hook(at):
    if at == step:
        os.kill(os.getpid(), signal.SIGKILL)
config = LogConfig(segment_bytes=2048, cleanup_delete=False, cleanup_compact=True,
                   min_cleanable_dirty_ratio=0.0, index_interval_bytes=256)
log = PartitionLog.open(sys.argv[1], config)
view = log.cleaner_view()
result = LogCleaner(RECORD_CODEC, crash_hook=hook).clean(view, plan_clean(view, log.log_end_offset, 0))
assert log.install_cleaned(result, hook)
print("not killed")
"""


@pytest.mark.parametrize("step", ["cleaning", "swapped", "deleted", "installed", "checkpointed"])
def test_kill_9_at_each_step_of_a_clean_leaves_old_or_new_never_a_mix(
    tmp_path: Path, step: str
) -> None:
    import subprocess
    import sys

    directory = tmp_path / "t-0"
    clock = Clock()
    log = PartitionLog.open(directory, compact_config(), clock_ms=clock)
    written = fill(log, 500, 17, per_batch=3)
    end = log.log_end_offset
    log.close()
    script = tmp_path / "crash.py"
    script.write_text(_CRASHING_CLEAN.format(root=str(Path(__file__).resolve().parents[2])))
    done = subprocess.run(
        [sys.executable, str(script), str(directory), step], capture_output=True, timeout=60
    )
    assert done.returncode == -9, done.stderr.decode()
    reopened = PartitionLog.open(directory, compact_config(), clock_ms=clock)
    records = read_all(reopened)
    # Every key's newest record is there, at its offset; nothing else was invented or lost.
    assert {k: (o, v) for o, k, v in records if (o, k, v) in written} == latest_per_key(written)
    assert {(o, k, v) for o, k, v in records} <= set(written)
    assert reopened.log_end_offset == end
    assert not [
        n
        for n in os.listdir(directory)
        if n.endswith((".swap", ".cleaned")) or n.startswith(".cleaning")
    ]
    # And the log cleans fully afterwards.
    clean(reopened, clock)
    assert {k: (o, v) for o, k, v in read_all(reopened)} == latest_per_key(written)
    assert len(read_all(reopened)) == 17


# Short and long keys and values (one-, two- and three-byte length varints).
_KEY_OR_VALUE = st.one_of(
    st.none(),
    st.binary(max_size=80),
    st.integers(60, 9000).map(lambda n: bytes(i % 251 for i in range(n))),
)


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(st.tuples(_KEY_OR_VALUE, _KEY_OR_VALUE), min_size=1, max_size=20),
    base=st.integers(0, 2**40),
    codec=st.sampled_from([Compression.NONE, Compression.GZIP]),
)
def test_record_keys_agree_with_the_full_decoder(records, base, codec) -> None:
    from flux.protocol.records import filter_batch, record_keys

    batch = build_batch(records, base_offset=base, compression=codec)
    header, data, keyed = record_keys(batch)
    decoded = decode_records(batch)
    assert [(o, k, t) for o, k, t, _s, _e in keyed] == [
        (r.offset, r.key, r.value is None) for r in decoded
    ]
    # Filtering keeps exactly the chosen records, byte for byte, and the batch's span.
    kept = keyed[::2]
    filtered = filter_batch(batch, header, data, kept)
    assert [(r.offset, r.key, r.value) for r in decode_records(filtered)] == [
        (r.offset, r.key, r.value) for r in decoded[::2]
    ]
    ((filtered_header, _view),) = iter_batches(filtered)
    assert (filtered_header.base_offset, filtered_header.last_offset) == (
        base,
        base + len(records) - 1,
    )


def test_producer_state_rebuilds_across_an_empty_span_merged_after_its_snapshot(
    tmp_path: Path,
) -> None:
    """A snapshot taken at offset 150, then a clean that merges removed batches into one empty
    span [0, 298]: rebuilding from the snapshot must step over the span (found when a broker
    SIGKILLed with a compacted __consumer_offsets could not reopen it)."""
    from flux.storage import ProducerStateManager

    clock = Clock()
    log = PartitionLog.open(tmp_path / "t-0", compact_config(segment_bytes=1 << 20), clock_ms=clock)
    fill(log, 150, 1)
    snapshot_at = log.log_end_offset
    fill(log, 150, 1)
    clean(log, clock)
    state = ProducerStateManager(last_offset=snapshot_at)
    state.rebuild_from(
        (
            b.producer_id,
            b.producer_epoch,
            b.base_sequence,
            b.record_count,
            b.base_offset,
            b.last_offset - b.base_offset,
            b.max_timestamp,
            b.is_control,
        )
        for b in log.batch_infos(snapshot_at)
    )
    assert state.last_offset == log.log_end_offset


def test_compact_and_delete_both_apply(tmp_path: Path) -> None:
    """cleanup.policy=compact,delete: the cleaner keeps the newest record per key, and
    retention still deletes segments past retention.ms (newest records included)."""
    clock = Clock()
    config = compact_config(cleanup_delete=True, retention_ms=DAY_MS)
    log = PartitionLog.open(tmp_path / "t-0", config, clock_ms=clock)
    old = fill(log, 200, 5)  # timestamps of build_batch: 1_700_000_000_000
    clean(log, clock)
    assert {k: (o, v) for o, k, v in read_all(log)} == latest_per_key(old)
    clock.now_ms = 1_700_000_000_000 + 2 * DAY_MS
    log.append(build_batch([(b"new", b"1")], base_timestamp_ms=clock.now_ms))
    assert log.enforce_retention() > 0
    assert [(k, v) for _o, k, v in read_all(log)] == [(b"new", b"1")]


def _batches(log: PartitionLog) -> list[tuple[int, bool, int, bytes | None, bytes | None]]:
    """(offset, is control, producer id, key, value) of every stored record."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        for header, batch in iter_batches(log.read(offset, 1 << 20)):
            out.extend(
                (r.offset, header.is_control, header.producer_id, r.key, r.value)
                for r in decode_records(batch)
            )
            offset = header.next_offset
    return out


def test_transactions_are_compacted_by_kafkas_rules(tmp_path: Path) -> None:
    """Aborted transactions' records go at once and never count as a key's newest value;
    committed ones compact like any record; a marker stays while its transaction has records
    left, and goes after delete.retention.ms once it has none (an abort marker's index entry
    with it)."""
    from flux.protocol.control import end_txn_marker_batch
    from flux.storage.txn_index import AbortedTxn

    clock = Clock()
    log = PartitionLog.open(
        tmp_path / "t-0", compact_config(delete_retention_ms=DAY_MS), clock_ms=clock
    )

    def txn(producer_id: int, records, *, commit: bool) -> int:
        first = log.log_end_offset
        produce(log, records, producer_id=producer_id, producer_epoch=0, base_sequence=0,
                is_transactional=True)  # fmt: skip
        marker = log.log_end_offset
        log.append(end_txn_marker_batch(producer_id, 0, commit=commit, coordinator_epoch=0))
        if not commit:
            log.txn_index.append(AbortedTxn(producer_id, first, marker, marker + 1))
        return marker

    produce(log, [(b"a", b"old")])  # 0
    committed_marker = txn(7, [(b"a", b"committed"), (b"b", b"1")], commit=True)  # 1-2, 3
    abort_marker = txn(8, [(b"a", b"aborted")], commit=False)  # 4, 5
    superseded_marker = txn(9, [(b"c", b"txn")], commit=True)  # 6, 7
    produce(log, [(b"c", b"plain")])  # 8: supersedes the transactional c
    log.roll()
    result = clean(log, clock)
    data = [(o, k, v) for o, control, _p, k, v in _batches(log) if not control]
    markers = [o for o, control, _p, _k, _v in _batches(log) if control]
    # The aborted a is gone and did not hide the committed one; the old a and the
    # transactional c are superseded.
    assert data == [(1, b"a", b"committed"), (2, b"b", b"1"), (8, b"c", b"plain")]
    assert markers == [committed_marker, abort_marker, superseded_marker]  # young: all stay
    assert result.removed_abort_markers == []
    # Two days later (delete.retention.ms is one): the markers of transactions without
    # records left go, the abort marker's index entry with it; the commit marker of the
    # transaction whose records remain stays.
    produce(log, [(b"d", b"1")])
    log.roll()
    clock.now_ms += 2 * DAY_MS
    result = clean(log, clock)
    markers = [o for o, control, _p, _k, _v in _batches(log) if control]
    assert markers == [committed_marker]
    assert result.removed_abort_markers == [abort_marker]
    assert log.txn_index.entries == []
    assert [(k, v) for _o, control, _p, k, v in _batches(log) if not control] == [
        (b"a", b"committed"), (b"b", b"1"), (b"c", b"plain"), (b"d", b"1"),
    ]  # fmt: skip
    log.close()
