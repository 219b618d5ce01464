"""``check_records``: the column check of alike records must accept exactly what decoding
accepts, with the same errors, and must be the path that alike batches take."""

from __future__ import annotations

import pytest
from flux.protocol.compression import Compression
from flux.protocol.errors import CorruptRecordError
from flux.protocol.record_check import (
    MIN_RUN,
    check_records,
    records_walk_valid,
    runs_proven_alike,
)
from flux.protocol.records import BATCH_HEADER_SIZE, build_batch, decode_record_fields
from hypothesis import given, settings
from hypothesis import strategies as st


def _decoded_problem(batch: bytes) -> str | None:
    """What decoding record by record says of ``batch`` (the reference)."""
    try:
        fields = decode_record_fields(batch, verify_crc=False)
    except CorruptRecordError as error:
        return str(error)
    base = int.from_bytes(batch[:8], "big")
    for position, record in enumerate(fields):
        if record[0] != base + position:
            return f"record {position} has offset delta {record[0] - base}"
    return None


def _checked_problem(batch: bytes) -> str | None:
    try:
        check_records(batch)
    except CorruptRecordError as error:
        return str(error)
    return None


def _alike(count: int, key: bytes | None, value: bytes | None) -> bytes:
    return build_batch([(key, value, ()) for _ in range(count)], base_timestamp_ms=1_000)


@pytest.mark.parametrize("count", [MIN_RUN, 17, 63, 64, 65, 200, 1000])
@pytest.mark.parametrize(
    ("key", "value"),
    [(None, b"v" * 100), (b"k" * 36, b"v" * 100), (b"", None), (None, b"x" * 300)],
)
def test_alike_records_are_proven_by_columns(
    count: int, key: bytes | None, value: bytes | None
) -> None:
    batch = _alike(count, key, value)
    assert runs_proven_alike(batch[BATCH_HEADER_SIZE:], count)
    assert check_records(batch).records_count == count


def test_records_past_a_one_byte_timestamp_delta_are_proven_by_runs() -> None:
    # Timestamp deltas of 0 and 200 ms: two runs of one layout each (the second has a two-byte
    # delta, which the column check leaves to decoding, so the batch is decoded whole).
    records = [(None, b"v" * 50, (), 1_000 + (0 if i < 40 else 200)) for i in range(80)]
    batch = build_batch(records, base_timestamp_ms=1_000)
    assert not runs_proven_alike(batch[BATCH_HEADER_SIZE:], 80)
    assert _checked_problem(batch) is None


def test_records_with_headers_or_varying_lengths_are_walked() -> None:
    with_headers = build_batch([(None, b"v", (("h", b"1"), ("n", None))) for _ in range(20)])
    varying = build_batch([(b"k" * (i % 3), b"v" * (i % 5), ()) for i in range(20)])
    for batch in (with_headers, varying):
        assert not runs_proven_alike(batch[BATCH_HEADER_SIZE:], 20)
        assert records_walk_valid(batch[BATCH_HEADER_SIZE:], 20)
        assert _checked_problem(batch) is None


def test_a_compressed_batch_is_checked_after_decompression() -> None:
    batch = build_batch([(None, b"v" * 100, ()) for _ in range(50)], compression=Compression.GZIP)
    assert check_records(batch).records_count == 50


def test_an_offset_delta_out_of_sequence_in_an_alike_run_is_refused() -> None:
    batch = bytearray(_alike(20, None, b"v" * 10))
    stride = len(batch[BATCH_HEADER_SIZE:]) // 20
    # Record 12's offset delta (after its length, attributes and timestamp bytes) says 13.
    batch[BATCH_HEADER_SIZE + 12 * stride + 3] = 2 * 13
    assert _checked_problem(bytes(batch)) == "record 12 has offset delta 13"


@settings(max_examples=500, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=150),
    key_size=st.one_of(st.none(), st.integers(min_value=0, max_value=70)),
    value_size=st.one_of(st.none(), st.integers(min_value=0, max_value=200)),
    varying=st.booleans(),
    headers=st.lists(
        st.tuples(st.sampled_from(["h", "flux-msg-id", "é"]), st.one_of(st.none(), st.binary())),
        max_size=2,
    ),
    flips=st.lists(
        st.tuples(st.integers(min_value=0, max_value=1 << 20), st.integers(0, 255)), max_size=3
    ),
)
def test_the_fast_checks_agree_with_decoding(
    count: int,
    key_size: int | None,
    value_size: int | None,
    varying: bool,
    headers: list[tuple[str, bytes | None]],
    flips: list[tuple[int, int]],
) -> None:
    records = []
    for i in range(count):
        key = None if key_size is None else b"k" * key_size
        value = None if value_size is None else b"v" * (value_size + (i % 3 if varying else 0))
        records.append((key, value, tuple(headers) if i % 2 else ()))
    batch = bytearray(build_batch(records, base_timestamp_ms=5_000))
    body = len(batch) - BATCH_HEADER_SIZE
    for where, byte in flips:
        batch[BATCH_HEADER_SIZE + where % body] = byte
    data = bytes(batch)
    expected = _decoded_problem(data)
    assert _checked_problem(data) == expected
    # Neither fast path ever accepts what decoding refuses.
    if runs_proven_alike(data[BATCH_HEADER_SIZE:], count):
        assert expected is None
    if records_walk_valid(data[BATCH_HEADER_SIZE:], count):
        assert expected is None
    elif not flips:
        pytest.fail("the walk refused a batch as built")
