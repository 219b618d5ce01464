"""Disk-only behaviour of PartitionLog: reopen, crash recovery, corrupt tails, index rebuild,
persisted log start offset, fsync policy, stray files."""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import pytest
from flux.storage import LogConfig, OffsetOutOfRangeError, PartitionLog

from tests.unit.storage_batches import build_batch, header, split_batches

BATCH_SIZE = len(build_batch(2))
CONFIG = LogConfig(segment_bytes=4 * BATCH_SIZE, index_interval_bytes=BATCH_SIZE // 2)


class Clock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def filled_log(path, batches: int = 20, config: LogConfig = CONFIG, **open_args) -> PartitionLog:
    """A log of `batches` two-record batches (offsets 2i, 2i+1; timestamps 1000+10i)."""
    log = PartitionLog.open(path, config, **open_args)
    for i in range(batches):
        log.append(build_batch(2, base_timestamp=1000 + 10 * i, timestamp_step=1))
    return log


def segment_files(path, suffix=".log") -> list[str]:
    return sorted(name for name in os.listdir(path) if name.endswith(suffix))


def bases(data: bytes) -> list[int]:
    return [header(batch)["base_offset"] for batch in split_batches(data)]


def warnings_of(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "flux.storage" and r.levelno == logging.WARNING
    ]


def test_files_are_named_by_base_offset(tmp_path):
    log = filled_log(tmp_path, batches=10)
    assert segment_files(tmp_path) == [f"{base:020d}.log" for base in (0, 8, 16)]
    assert segment_files(tmp_path, ".index") == []  # index files appear at the first fsync
    log.flush()
    assert segment_files(tmp_path, ".index") == [f"{base:020d}.index" for base in (0, 8, 16)]
    assert segment_files(tmp_path, ".timeindex") == [
        f"{base:020d}.timeindex" for base in (0, 8, 16)
    ]
    log.close()


def test_reopen_after_close_serves_everything(tmp_path, caplog):
    log = filled_log(tmp_path)
    log.delete_records_before(3)
    everything = log.read(3, 1 << 20)
    stamps = {t: log.offset_for_timestamp(t) for t in (0, 1055, 1100, 1190, 1191, 5000)}
    log.close()
    assert (tmp_path / "clean-shutdown").exists()
    caplog.set_level(logging.INFO, logger="flux.storage")
    log = PartitionLog.open(tmp_path, CONFIG)
    assert not (tmp_path / "clean-shutdown").exists()
    assert not warnings_of(caplog)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (3, 40, 40)
    assert log.read(3, 1 << 20) == everything
    for offset in range(3, 40):
        first = header(log.read(offset, 1))
        assert first["base_offset"] <= offset <= first["base_offset"] + 1
    assert {t: log.offset_for_timestamp(t) for t in stamps} == stamps
    assert log.last_batch_info().base_offset == 38
    assert log.append(build_batch(1)).base_offset == 40
    log.close()


@pytest.mark.parametrize("flushed", [True, False])
def test_reopen_without_close_serves_everything_appended(tmp_path, caplog, flushed):
    log = filled_log(tmp_path)
    if flushed:
        log.flush()
    everything = log.read(0, 1 << 20)
    recovery_point = log.recovery_point
    log._abandon()  # a crash: no flush, no clean-shutdown marker
    log = PartitionLog.open(tmp_path, CONFIG, recovery_point=recovery_point)
    assert not warnings_of(caplog)
    assert log.log_end_offset == 40
    assert log.read(0, 1 << 20) == everything
    assert log.recovery_point == 40  # recovered bytes are fsynced before serving
    assert log.append(build_batch(1)).base_offset == 40
    log.close()


def test_torn_tail_is_truncated_to_the_last_good_batch(tmp_path, caplog):
    log = filled_log(tmp_path)
    log._abandon()
    last = tmp_path / segment_files(tmp_path)[-1]
    size = last.stat().st_size
    os.truncate(last, size - 10)
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_end_offset == 38
    assert last.stat().st_size == size - BATCH_SIZE
    messages = warnings_of(caplog)
    assert len(messages) == 1
    assert last.name in messages[0]
    assert f"dropping {BATCH_SIZE - 10} byte(s)" in messages[0]
    assert f"position {size - BATCH_SIZE}" in messages[0]
    assert log.append(build_batch(3)).base_offset == 38
    assert bases(log.read(36, 1 << 20)) == [36, 38]
    log.close()


def test_torn_header_and_garbage_tail_are_dropped(tmp_path, caplog):
    log = filled_log(tmp_path, batches=3)
    log._abandon()
    with open(tmp_path / segment_files(tmp_path)[-1], "ab") as file:
        file.write(b"\x00" * 30)
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_end_offset == 6
    assert len(warnings_of(caplog)) == 1
    log._abandon()
    with open(tmp_path / segment_files(tmp_path)[-1], "ab") as file:
        file.write(b"\xff" * 200)  # a "header" with a negative length
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_end_offset == 6
    log.close()


def test_flipped_byte_in_the_last_batch_is_truncated(tmp_path, caplog):
    log = filled_log(tmp_path)
    log._abandon()
    last = tmp_path / segment_files(tmp_path)[-1]
    data = bytearray(last.read_bytes())
    data[-3] ^= 0x40
    last.write_bytes(bytes(data))
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_end_offset == 38
    assert any("CRC32C mismatch" in message for message in warnings_of(caplog))
    assert log.append(build_batch(2)).base_offset == 38
    log.close()


def test_corruption_mid_segment_removes_later_segments(tmp_path, caplog):
    log = filled_log(tmp_path)  # segments at 0, 8, 16, 24, 32
    log._abandon()
    second = tmp_path / f"{8:020d}.log"
    data = bytearray(second.read_bytes())
    data[BATCH_SIZE + 70] ^= 0x01  # inside the records of the batch at offset 10
    second.write_bytes(bytes(data))
    log = PartitionLog.open(tmp_path, CONFIG, recovery_point=4)
    assert log.log_end_offset == 10
    assert segment_files(tmp_path) == [f"{0:020d}.log", f"{8:020d}.log"]
    assert segment_files(tmp_path, ".index") == [f"{0:020d}.index", f"{8:020d}.index"]
    assert any("after the truncated segment" in message for message in warnings_of(caplog))
    assert log.append(build_batch(2)).base_offset == 10
    log.close()


def test_offsets_that_do_not_follow_are_corruption(tmp_path, caplog):
    log = PartitionLog.open(tmp_path, CONFIG)
    log.append(build_batch(2) + build_batch(2))
    log._abandon()
    path = tmp_path / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    data[BATCH_SIZE : BATCH_SIZE + 8] = (7).to_bytes(8, "big")  # outside the CRC
    path.write_bytes(bytes(data))
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_end_offset == 2
    assert any("does not follow" in message for message in warnings_of(caplog))
    log.close()


def test_missing_segment_is_a_hole(tmp_path, caplog):
    log = filled_log(tmp_path)
    log._abandon()
    for suffix in (".log", ".index", ".timeindex"):
        (tmp_path / f"{16:020d}{suffix}").unlink(missing_ok=True)  # never flushed: no index
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_end_offset == 16
    assert segment_files(tmp_path) == [f"{0:020d}.log", f"{8:020d}.log"]
    assert warnings_of(caplog)
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_index_files_deleted_or_garbled_are_rebuilt(tmp_path, caplog, clean):
    log = filled_log(tmp_path)
    log.flush()  # index entries reach their files at fsync
    expected = {
        name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path) if "index" in name
    }
    everything = log.read(0, 1 << 20)
    if clean:
        log.close()
    else:
        log.flush()
        log._abandon()
    (tmp_path / f"{0:020d}.index").unlink()
    (tmp_path / f"{8:020d}.timeindex").write_bytes(b"\x01" * 13)  # not a multiple of 12
    garbled = bytearray(expected[f"{16:020d}.index"])
    garbled[0:8] = garbled[8:16]  # entries no longer increasing
    (tmp_path / f"{16:020d}.index").write_bytes(bytes(garbled))
    (tmp_path / f"{32:020d}.index").write_bytes(b"\x00\x00\x00\x05\x7f\xff\xff\xff")  # past the end
    log = PartitionLog.open(tmp_path, CONFIG, recovery_point=40)
    assert len(warnings_of(caplog)) >= 3
    assert log.read(0, 1 << 20) == everything
    for offset in range(0, 40, 3):
        assert header(log.read(offset, 1))["base_offset"] == offset - offset % 2
    assert log.offset_for_timestamp(1101)[0] == 20
    assert log.offset_for_timestamp(1102)[0] == 22
    log.close()
    rebuilt = {name: (tmp_path / name).read_bytes() for name in expected}
    assert rebuilt == expected


def test_delete_records_before_persists_across_reopen(tmp_path):
    log = filled_log(tmp_path)
    assert log.delete_records_before(13) == 13
    assert segment_files(tmp_path)[0] == f"{8:020d}.log"
    checkpoint = (tmp_path / "log-start-offset.checkpoint").read_text()
    assert checkpoint == "0\n13\n"
    log._abandon()
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_start_offset == 13
    with pytest.raises(OffsetOutOfRangeError):
        log.read(12, 100)
    log.close()
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_start_offset == 13
    log.close()


def test_truncate_fully_persists_the_new_start(tmp_path):
    log = filled_log(tmp_path, batches=5)
    log.truncate_fully_and_start_at(500)
    log._abandon()
    log = PartitionLog.open(tmp_path, CONFIG)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert segment_files(tmp_path) == [f"{500:020d}.log"]
    log.close()


def test_truncation_survives_a_crash(tmp_path):
    log = filled_log(tmp_path)
    log.flush()
    log.truncate_to(11)
    log.append(build_batch(5))
    log.flush()
    log._abandon()
    log = PartitionLog.open(tmp_path, CONFIG, recovery_point=15)
    assert log.log_end_offset == 15
    assert bases(log.read(6, 1 << 20)) == [6, 8, 10]
    log.close()


def test_flush_messages_policy_counts_records(tmp_path, monkeypatch):
    log = PartitionLog.open(tmp_path, LogConfig(flush_messages=3))
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    flushed_at = []
    for i in range(1, 10):
        before = len(calls)
        log.append(build_batch(1))
        if len(calls) > before:
            flushed_at.append(i)
            assert log.recovery_point == i
    assert flushed_at == [3, 6, 9]
    log.append(build_batch(5))  # 5 records at once: over the threshold
    assert log.recovery_point == 14
    monkeypatch.undo()
    log.close()


def test_flush_ms_policy(tmp_path, monkeypatch):
    clock = Clock()
    log = PartitionLog.open(tmp_path, LogConfig(flush_ms=1000), clock_ms=clock)
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    log.append(build_batch(1))
    assert not calls and log.recovery_point == 0
    assert not log.maybe_flush()
    clock.now_ms += 1000
    assert log.maybe_flush()
    assert calls and log.recovery_point == 1
    assert not log.maybe_flush()  # nothing new
    calls.clear()
    clock.now_ms += 999
    log.append(build_batch(1))
    assert not calls
    clock.now_ms += 1
    log.append(build_batch(1))  # checked on append too
    assert calls and log.recovery_point == 3
    monkeypatch.undo()
    log.close()


def test_no_flush_policy_never_fsyncs_on_append(tmp_path, monkeypatch):
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=BATCH_SIZE))
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    for _ in range(5):
        log.append(build_batch(2))
    assert calls == []
    log.flush()
    assert calls  # every segment written since the last flush
    monkeypatch.undo()
    log.close()


def test_stray_files_are_handled(tmp_path, caplog):
    log = filled_log(tmp_path, batches=10)
    log.close()
    (tmp_path / "log-start-offset.checkpoint.tmp").write_bytes(b"garbage")
    (tmp_path / f"{4:020d}.log.deleted").write_bytes(b"old")
    (tmp_path / f"{999:020d}.index").write_bytes(b"\x00" * 8)
    (tmp_path / f"{999:020d}.timeindex").write_bytes(b"")
    (tmp_path / f"{12:020d}.log").write_bytes(b"")  # zero-length, not the last segment
    (tmp_path / "notes.txt").write_text("operator notes")
    log = PartitionLog.open(tmp_path, CONFIG)
    assert log.log_end_offset == 20
    assert sorted(os.listdir(tmp_path)) == sorted(
        [f"{b:020d}{s}" for b in (0, 8, 16) for s in (".log", ".index", ".timeindex")]
        + ["notes.txt"]
    )
    assert log.read(0, 1 << 20)
    log.close()


def test_empty_directory_and_zero_length_last_segment(tmp_path):
    log = PartitionLog.open(tmp_path / "new", CONFIG)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (0, 0, 1)
    log._abandon()
    log = PartitionLog.open(tmp_path / "new", CONFIG)
    assert log.log_end_offset == 0
    assert log.append(build_batch(2)).base_offset == 0
    log.close()


def test_delete_removes_the_directory(tmp_path):
    log = filled_log(tmp_path / "topic-0", batches=3)
    log.delete()
    assert not (tmp_path / "topic-0").exists()


def test_large_batches_round_trip(tmp_path):
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=3 << 20))
    blob = build_batch(values=[os.urandom(256 << 10) for _ in range(4)])
    for _ in range(8):
        log.append(blob)
    assert log.segment_count == 4
    data = log.read(9, 5 << 20)
    assert bases(data) == [8, 12, 16, 20]
    assert header(log.read(0, 100))["base_offset"] == 0
    log._abandon()
    log = PartitionLog.open(tmp_path, LogConfig(segment_bytes=3 << 20))
    assert log.log_end_offset == 32
    assert log.read(9, 5 << 20) == data
    log.close()


def _open_files_under(path) -> int:
    prefix = str(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(prefix)
    return count


def test_a_segment_holds_one_file_descriptor_and_flush_writes_its_indexes(tmp_path, caplog):
    """Index entries wait in memory until fsync, so thousands of partitions do not need three
    descriptors each; after a flush the files hold every entry, and a reopen that trusts them
    (below the recovery point) finds every offset."""
    log = filled_log(tmp_path)
    segments = len(segment_files(tmp_path))
    assert segments == 5
    assert _open_files_under(tmp_path) == segments  # one .log each, no index file open
    assert not (tmp_path / f"{0:020d}.index").exists()  # not flushed yet
    log.flush()
    assert _open_files_under(tmp_path) == segments
    assert len((tmp_path / f"{0:020d}.index").read_bytes()) > 0
    assert len((tmp_path / f"{0:020d}.timeindex").read_bytes()) > 0
    everything = log.read(0, 1 << 20)
    log._abandon()  # a crash right after the flush
    reopened = PartitionLog.open(tmp_path, CONFIG, recovery_point=40)
    assert not warnings_of(caplog)  # the flushed index files were trusted, not rebuilt
    assert reopened.read(0, 1 << 20) == everything
    for offset in range(0, 40, 3):
        assert header(reopened.read(offset, 1))["base_offset"] == offset - offset % 2
    assert reopened.offset_for_timestamp(1101)[0] == 20
    reopened.close()
    assert _open_files_under(tmp_path) == 0


def test_flush_pending_follows_the_flush_ms_policy(tmp_path):
    """``flush_pending`` tells a caller that visits only changed logs to keep visiting one
    whose flush.ms is still counting."""
    never = filled_log(tmp_path / "never", batches=2)
    assert not never.flush_pending()  # no flush.ms: nothing is ever due
    never.close()
    log = filled_log(tmp_path / "timed", batches=2, config=replace(CONFIG, flush_ms=60_000))
    assert log.flush_pending()
    log.flush()
    assert not log.flush_pending()
    log.append(build_batch(1, base_timestamp=2000))
    assert log.flush_pending()
    log.close()
    assert not log.flush_pending()


def test_a_log_opened_as_new_is_an_ordinary_log(tmp_path):
    """``open(new=True)`` (a directory the caller just created) skips the scan and recovery
    but gives the same log: appends, reads, index files at the first flush, and a reopen."""
    directory = tmp_path / "p-0"
    directory.mkdir()
    log = PartitionLog.open(directory, CONFIG, new=True)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 0, 0)
    assert segment_files(directory) == ["00000000000000000000.log"]
    for i in range(6):
        log.append(build_batch(2, base_timestamp=1000 + 10 * i))
    log.flush()
    assert segment_files(directory, ".index")  # written by the first flush
    assert bases(log.read(0, 1 << 20)) == [0, 2, 4, 6, 8, 10]
    log.close()
    reopened = PartitionLog.open(directory, CONFIG)
    assert reopened.log_end_offset == 12
    assert bases(reopened.read(0, 1 << 20)) == [0, 2, 4, 6, 8, 10]
    reopened.close()
