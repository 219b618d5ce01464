"""``__consumer_offsets`` records: round trips, tombstones, replay, strict parsing, partitioning."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flux.cluster.groups.offsets_records import (
    CommittedOffset,
    GroupMetadataEntry,
    OffsetCommitEntry,
    OffsetsRecordError,
    OffsetsState,
    group_metadata_record,
    java_string_hashcode,
    offset_commit_record,
    parse_record,
    partition_for_group,
    tombstone_for_group,
    tombstone_for_offset,
)
from flux.cluster.groups.state import Group
from hypothesis import given, settings
from hypothesis import strategies as st


def _stable_group_record() -> dict[str, Any]:
    group = Group("g", initial_rebalance_delay_ms=0, member_id_factory=lambda p: f"{p}-1")
    group.join(
        token=1,
        member_id="",
        group_instance_id="inst",
        client_id="c",
        client_host="/10.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        protocol_type="consumer",
        protocols=[("range", b"\x00\x01subscription")],
        now_ms=5,
        require_known_member_id=True,
    )
    group.sync(
        token=2,
        member_id="inst-1",
        generation_id=1,
        group_instance_id="inst",
        protocol_type="consumer",
        protocol_name="range",
        assignments=[("inst-1", b"\xff\x00assignment")],
        now_ms=6,
    )
    return group.to_record()


# ----------------------------------------------------------------------------- round trips


def test_offset_commit_round_trip() -> None:
    key, value = offset_commit_record("grp", "orders", 7, 1234, 5, "meta", 1_700_000_000_000)
    assert key.startswith(b"\x00\x01") and value.startswith(b"\x00\x01")
    assert json.loads(key[2:]) == {"g": "grp", "t": "orders", "p": 7}
    assert json.loads(value[2:]) == {
        "offset": 1234,
        "leader_epoch": 5,
        "metadata": "meta",
        "commit_ms": 1_700_000_000_000,
    }
    entry = parse_record(key, value)
    assert entry == OffsetCommitEntry(
        "grp", "orders", 7, CommittedOffset(1234, 5, "meta", 1_700_000_000_000)
    )


def test_offset_commit_with_null_metadata_and_unknown_epoch() -> None:
    key, value = offset_commit_record("", "t", 0, 0, -1, None, 0)
    assert parse_record(key, value) == OffsetCommitEntry(
        "", "t", 0, CommittedOffset(0, -1, None, 0)
    )


def test_group_metadata_round_trip() -> None:
    record = _stable_group_record()
    key, value = group_metadata_record("grp", record)
    assert key == b"\x00\x02" + b'{"g":"grp"}'
    entry = parse_record(key, value)
    assert entry == GroupMetadataEntry("grp", record)
    assert isinstance(entry, GroupMetadataEntry) and entry.record is not None
    rebuilt = Group.from_record("grp", entry.record, now_ms=0)
    member = rebuilt.members["inst-1"]
    assert member.assignment == b"\xff\x00assignment"
    assert member.metadata("range") == b"\x00\x01subscription"
    assert member.group_instance_id == "inst" and member.client_host == "/10.0.0.1"


def test_tombstones_share_the_key_of_what_they_delete() -> None:
    key, _ = offset_commit_record("grüße", "tópic", 3, 1, 0, None, 0)
    tombstone_key, tombstone_value = tombstone_for_offset("grüße", "tópic", 3)
    assert tombstone_key == key and tombstone_value is None
    assert parse_record(tombstone_key, None) == OffsetCommitEntry("grüße", "tópic", 3, None)
    group_key, _ = group_metadata_record("grüße", Group("grüße").to_record())
    assert tombstone_for_group("grüße") == (group_key, None)
    assert parse_record(group_key, None) == GroupMetadataEntry("grüße", None)


def test_keys_are_canonical_utf8() -> None:
    key, _ = offset_commit_record("g😀", "t", 1, 0, 0, None, 0)
    assert key == b"\x00\x01" + '{"g":"g😀","p":1,"t":"t"}'.encode()


def test_state_replay_overwrites_and_deletes() -> None:
    state = OffsetsState()
    records = [
        offset_commit_record("a", "t", 0, 10, 1, None, 100),
        offset_commit_record("a", "t", 1, 20, 1, "x", 100),
        offset_commit_record("a", "t", 0, 15, 2, None, 200),  # a later commit wins
        offset_commit_record("b", "u", 0, 5, 0, None, 300),
        group_metadata_record("a", _stable_group_record()),
        tombstone_for_offset("a", "t", 1),
        tombstone_for_offset("zzz", "t", 9),  # deleting nothing is fine
        offset_commit_record("c", "t", 0, 1, 0, None, 400),
        tombstone_for_offset("c", "t", 0),
        group_metadata_record("d", Group("d").to_record()),
        tombstone_for_group("d"),
    ]
    for key, value in records:
        state.replay(key, value)
    assert state.groups() == ["a", "b"]
    assert state.offsets("a") == {("t", 0): CommittedOffset(15, 2, None, 200)}
    assert state.offsets("b") == {("u", 0): CommittedOffset(5, 0, None, 300)}
    assert state.offsets("nobody") == {}
    assert state.group_record("a") == _stable_group_record()
    assert state.group_record("b") is None and state.group_record("d") is None


def test_replay_of_a_compacted_log_gives_the_same_state() -> None:
    log = [
        offset_commit_record("a", "t", 0, 1, 0, None, 1),
        offset_commit_record("a", "t", 0, 2, 0, None, 2),
        offset_commit_record("a", "t", 1, 3, 0, None, 3),
        tombstone_for_offset("a", "t", 1),
    ]
    compacted: dict[bytes, bytes | None] = {}
    for key, value in log:
        compacted.pop(key, None)
        compacted[key] = value
    full, small = OffsetsState(), OffsetsState()
    for key, value in log:
        full.replay(key, value)
    for key, value in compacted.items():
        small.replay(key, value)
    assert full.offsets("a") == small.offsets("a") and full.groups() == small.groups()


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"", None),
        (b"\x00", None),
        (b"\x00\x03{}", None),
        (b"\x00\x01", None),
        (b"\x00\x01[]", None),
        (b'\x00\x01{"g":"a","p":0}', None),
        (b'\x00\x01{"g":"a","p":-1,"t":"t"}', None),
        (b'\x00\x01{"g":"a","p":true,"t":"t"}', None),
        (b'\x00\x01{"g":"a","p":1.0,"t":"t"}', None),
        (b'\x00\x01{"g":"a","p":0,"t":""}', None),
        (b'\x00\x01{"g":1,"p":0,"t":"t"}', None),
        (b'\x00\x01{"t":"t","g":"a","p":0}', None),  # not canonical: keys unsorted
        (b'\x00\x01{"g": "a","p":0,"t":"t"}', None),  # not canonical: a space
        (b'\x00\x01{"g":"a","p":2147483648,"t":"t"}', None),
        (b'\x00\x01{"g":"\xff","p":0,"t":"t"}', None),  # not UTF-8
        (b'\x00\x01{"g":"a","p":0,"t":"t"}', b""),
        (b'\x00\x01{"g":"a","p":0,"t":"t"}', b"\x00\x02{}"),
        (b'\x00\x01{"g":"a","p":0,"t":"t"}', b"\x00\x01{}"),
        (b'\x00\x01{"g":"a","p":0,"t":"t"}', b"\x00\x01nope"),
        (
            b'\x00\x01{"g":"a","p":0,"t":"t"}',
            b'\x00\x01{"offset":NaN,"leader_epoch":0,"metadata":null,"commit_ms":0}',
        ),
        (
            b'\x00\x01{"g":"a","p":0,"t":"t"}',
            b'\x00\x01{"offset":1,"leader_epoch":2147483648,"metadata":null,"commit_ms":0}',
        ),
        (
            b'\x00\x01{"g":"a","p":0,"t":"t"}',
            b'\x00\x01{"offset":1,"leader_epoch":0,"metadata":7,"commit_ms":0}',
        ),
        (
            b'\x00\x01{"g":"a","p":0,"t":"t"}',
            b'\x00\x01{"offset":1,"leader_epoch":0,"metadata":null,"commit_ms":0,"x":1}',
        ),
        (b'\x00\x02{"g":"a"}', b"\x00\x01{}"),
        (b'\x00\x02{"g":"a"}', b"\x00\x01" + b"[" * 100_000),
        (b'\x00\x02{"g":7}', None),
    ],
)
def test_malformed_records_are_refused(key: bytes, value: bytes | None) -> None:
    with pytest.raises(OffsetsRecordError):
        parse_record(key, value)


def test_builders_refuse_bad_fields() -> None:
    with pytest.raises(OffsetsRecordError):
        offset_commit_record("g", "t", -1, 0, 0, None, 0)
    with pytest.raises(OffsetsRecordError):
        offset_commit_record("g", "t", 0, 2**63, 0, None, 0)
    with pytest.raises(OffsetsRecordError):
        group_metadata_record("g", {"generation": 1})


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["g", "t", "p", "offset", "leader_epoch", "metadata", "commit_ms", "x"]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(st.binary(max_size=64), st.none() | st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_offsets_record_error(key: bytes, value: bytes | None) -> None:
    try:
        parse_record(key, value)
    except OffsetsRecordError:
        pass


@settings(max_examples=300)
@given(
    st.sampled_from([b"\x00\x01", b"\x00\x02"]),
    _JSONISH,
    st.none() | _JSONISH,
    st.booleans(),
)
def test_structured_garbage_raises_only_offsets_record_error(
    prefix: bytes, key_obj: Any, value_obj: Any, canonical: bool
) -> None:
    separators = (",", ":") if canonical else (", ", ": ")
    key = prefix + json.dumps(key_obj, sort_keys=canonical, separators=separators).encode()
    value = None if value_obj is None else b"\x00\x01" + json.dumps(value_obj).encode()
    try:
        entry = parse_record(key, value)
    except OffsetsRecordError:
        return
    # Whatever parses must rebuild the very same key.
    if isinstance(entry, OffsetCommitEntry):
        assert tombstone_for_offset(entry.group, entry.topic, entry.partition)[0] == key
    else:
        assert tombstone_for_group(entry.group)[0] == key


@given(
    st.text(max_size=20),
    st.text(min_size=1, max_size=20),
    st.integers(0, 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.none() | st.text(max_size=30),
    st.integers(0, 2**63 - 1),
)
def test_offset_records_round_trip(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    epoch: int,
    metadata: str | None,
    commit_ms: int,
) -> None:
    key, value = offset_commit_record(group, topic, partition, offset, epoch, metadata, commit_ms)
    assert parse_record(key, value) == OffsetCommitEntry(
        group, topic, partition, CommittedOffset(offset, epoch, metadata, commit_ms)
    )


# ---------------------------------------------------------------------------- partitioning


def _reference_hashcode(text: str) -> int:
    """Java's String.hashCode written out: UTF-16 code units, then wrap to a signed int32."""
    units: list[int] = []
    for char in text:
        code_point = ord(char)
        if code_point >= 0x10000:
            code_point -= 0x10000
            units += [0xD800 + (code_point >> 10), 0xDC00 + (code_point & 0x3FF)]
        else:
            units.append(code_point)
    total = sum(unit * 31 ** (len(units) - 1 - i) for i, unit in enumerate(units))
    total %= 2**32
    return total - 2**32 if total >= 2**31 else total


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("ab", 97 * 31 + 98),
        ("hello", 99162322),
        ("Hello World", -862545276),  # overflows 32 bits
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        (
            "the quick brown fox jumps over the lazy dog",
            _reference_hashcode("the quick brown fox jumps over the lazy dog"),
        ),
        ("g😀", _reference_hashcode("g😀")),  # a surrogate pair counts as two units
    ],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


@given(st.text(max_size=50))
def test_java_string_hashcode_matches_the_reference(text: str) -> None:
    assert java_string_hashcode(text) == _reference_hashcode(text)


def test_partition_for_group() -> None:
    assert partition_for_group("my-group", 50) == 12  # as Kafka's partitionFor computes it
    assert partition_for_group("kafka-txn-0", 50) == 30
    assert partition_for_group("", 50) == 0
    assert partition_for_group("Hello World", 50) == 862545276 % 50
    assert partition_for_group("polygenelubricants", 7) == 0  # Utils.abs(MIN_VALUE) is 0
    with pytest.raises(ValueError):
        partition_for_group("g", 0)
