"""The binary replication fetch response: round trips, and garbage never crashes the decoder."""

from __future__ import annotations

import pytest
from flux.cluster.replication.wire import (
    PartitionData,
    ReplicationWireError,
    decode_fetch_response,
    encode_fetch_response,
)
from hypothesis import given
from hypothesis import strategies as st

partition_data = st.builds(
    PartitionData,
    topic=st.text(min_size=1, max_size=20),
    partition=st.integers(0, 2**31 - 1),
    error_code=st.integers(-1, 200),
    high_watermark=st.integers(-1, 2**62),
    log_start_offset=st.integers(-1, 2**62),
    leader_epoch=st.integers(-1, 2**31 - 1),
    diverging_epoch=st.integers(-1, 2**31 - 1),
    diverging_end_offset=st.integers(-1, 2**62),
    records=st.binary(max_size=300),
)


@given(st.lists(partition_data, max_size=5))
def test_round_trip(partitions: list[PartitionData]) -> None:
    body = b"".join(bytes(chunk) for chunk in encode_fetch_response(partitions))
    assert decode_fetch_response(body) == partitions


@given(st.binary(max_size=200))
def test_garbage_raises_only_our_error(data: bytes) -> None:
    try:
        decode_fetch_response(data)
    except ReplicationWireError:
        pass


def test_truncated_response_is_rejected() -> None:
    body = b"".join(
        bytes(c) for c in encode_fetch_response([PartitionData("t", 0, 0, records=b"abc")])
    )
    with pytest.raises(ReplicationWireError):
        decode_fetch_response(body[:-1])
    with pytest.raises(ReplicationWireError):
        decode_fetch_response(body + b"x")
