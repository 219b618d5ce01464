"""``committed_records``: the local read shared by the REST API and the V1 commands, on a memory
log holding data batches around a transaction marker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from flux.cluster.replication.reads import committed_records
from flux.protocol.control import end_txn_marker_batch
from flux.protocol.records import build_batch
from flux.storage import MemoryLog

READ_MAX_BYTES = 1 << 20


@pytest.fixture
def partition() -> Any:
    """Offsets 0-2 (``a0``..``a2``), a commit marker at 3, then 4-5 (``b4``, ``b5``)."""
    log = MemoryLog()
    log.append(build_batch([(None, b"a0"), (None, b"a1"), (None, b"a2")], base_timestamp_ms=1))
    log.append(end_txn_marker_batch(7, 0, commit=True, coordinator_epoch=0, timestamp_ms=1))
    log.append(build_batch([(None, b"b4"), (None, b"b5")], base_timestamp_ms=1))
    assert log.log_end_offset == 6
    # The helper needs only the partition's log.
    return SimpleNamespace(log=log)


def read(partition: Any, offset: int, limit: int, upto: int) -> tuple[list[Any], int]:
    records, next_offset = committed_records(
        partition, offset, limit, upto=upto, read_max_bytes=READ_MAX_BYTES
    )
    return [(record.offset, record.value) for record in records], next_offset


def test_reads_every_data_record_below_upto_and_skips_the_marker(partition: Any) -> None:
    assert read(partition, 0, 100, 6) == (
        [(0, b"a0"), (1, b"a1"), (2, b"a2"), (4, b"b4"), (5, b"b5")],
        6,
    )


def test_stops_at_the_limit_inside_a_batch(partition: Any) -> None:
    assert read(partition, 0, 2, 6) == ([(0, b"a0"), (1, b"a1")], 2)
    assert read(partition, 1, 3, 6) == ([(1, b"a1"), (2, b"a2"), (4, b"b4")], 5)


def test_a_batch_crossing_upto_is_not_read(partition: Any) -> None:
    # The log returns only batches ending below upto: 4-5 waits for the high watermark to pass 5.
    assert read(partition, 0, 100, 5) == ([(0, b"a0"), (1, b"a1"), (2, b"a2")], 4)


def test_a_marker_alone_moves_the_next_offset_past_it(partition: Any) -> None:
    assert read(partition, 3, 100, 4) == ([], 4)


@pytest.mark.parametrize(("offset", "limit", "upto"), [(6, 100, 6), (2, 0, 6), (0, 5, 0)])
def test_nothing_to_read_answers_the_offset_itself(
    partition: Any, offset: int, limit: int, upto: int
) -> None:
    assert read(partition, offset, limit, upto) == ([], offset)
