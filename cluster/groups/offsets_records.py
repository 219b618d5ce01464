"""Records of the internal topic ``__consumer_offsets``: committed offsets and group metadata.

Each record is a Kafka record (key, value) that only Flux reads, so the layout is our own,
compact and versioned. Every key and value starts with a 2-byte big-endian version/type,
followed by UTF-8 JSON::

    key   = b"\\x00\\x01" + json {"g": group, "p": partition, "t": topic}   offset commit
    key   = b"\\x00\\x02" + json {"g": group}                               group metadata
    value = b"\\x00\\x01" + json {"commit_ms": int, "leader_epoch": int,
                                 "metadata": str | null, "offset": int}    offset commit
    value = b"\\x00\\x01" + json Group.to_record()                         group metadata
    value = None (a tombstone)                                         deletes the key

Keys are canonical JSON (sorted keys, no spaces, non-ASCII kept as UTF-8), so one logical key
is always the same bytes: log compaction keeps only the newest record per key, and a
tombstone must match the key it deletes byte for byte. ``parse_record`` rejects keys that are
not canonical. The key types 1 and 2 echo Kafka's (offset keys v0/v1, group key v2).

The coordinator of group ``g`` leads partition ``partition_for_group(g, N)``, Kafka's
``Utils.abs(g.hashCode) % N`` (``GroupMetadataManager.partitionFor``), so a group lands on the
same partition number as in Kafka.

``OffsetsState`` replays parsed records in log order into the committed offsets and group
records of every group of a partition, as a new coordinator does when it loads a partition.

Everything here is pure and stateless except ``OffsetsState`` (owned by one task, no locks).
Malformed input makes ``parse_record`` raise ``OffsetsRecordError`` (a ``ValueError``) and
nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeAlias

from .state import GroupRecordError, validate_group_record

__all__ = [
    "GROUP_METADATA_KEY_TYPE",
    "OFFSET_COMMIT_KEY_TYPE",
    "PUSH_GROUP_PREFIX",
    "VALUE_VERSION",
    "CommittedOffset",
    "GroupMetadataEntry",
    "OffsetCommitEntry",
    "OffsetsEntry",
    "OffsetsRecordError",
    "OffsetsState",
    "group_metadata_record",
    "java_string_hashcode",
    "offset_commit_record",
    "parse_record",
    "partition_for_group",
    "tombstone_for_group",
    "tombstone_for_offset",
]

OFFSET_COMMIT_KEY_TYPE = 1
GROUP_METADATA_KEY_TYPE = 2
VALUE_VERSION = 1
#: Push subscription ``<id>`` keeps its positions as the group ``__flux_push.<id>``.
PUSH_GROUP_PREFIX = "__flux_push."

_OFFSET_KEY_PREFIX = OFFSET_COMMIT_KEY_TYPE.to_bytes(2, "big")
_GROUP_KEY_PREFIX = GROUP_METADATA_KEY_TYPE.to_bytes(2, "big")
_VALUE_PREFIX = VALUE_VERSION.to_bytes(2, "big")

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class OffsetsRecordError(ValueError):
    """A ``__consumer_offsets`` record whose key or value is malformed."""


@dataclass(frozen=True)
class CommittedOffset:
    """One committed offset (OffsetCommit's fields, plus when the coordinator stored it)."""

    offset: int
    leader_epoch: int  # -1 when the client did not send one
    metadata: str | None
    commit_ms: int


@dataclass(frozen=True)
class OffsetCommitEntry:
    """A parsed offset-commit record; ``committed`` is None for a tombstone (deleted offset)."""

    group: str
    topic: str
    partition: int
    committed: CommittedOffset | None


@dataclass(frozen=True)
class GroupMetadataEntry:
    """A parsed group-metadata record; ``record`` is None for a tombstone (deleted group)."""

    group: str
    record: dict[str, Any] | None


OffsetsEntry: TypeAlias = OffsetCommitEntry | GroupMetadataEntry


# ------------------------------------------------------------------------------ encoding


def _canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _offset_key(group: str, topic: str, partition: int) -> bytes:
    return _OFFSET_KEY_PREFIX + _canonical_json({"g": group, "t": topic, "p": partition})


def _group_key(group: str) -> bytes:
    return _GROUP_KEY_PREFIX + _canonical_json({"g": group})


def offset_commit_record(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    leader_epoch: int,
    metadata: str | None,
    commit_ms: int,
) -> tuple[bytes, bytes]:
    """The (key, value) of a committed offset."""
    _check_offset_key_fields(group, topic, partition)
    committed = CommittedOffset(offset, leader_epoch, metadata, commit_ms)
    _check_committed(committed)
    value = {
        "offset": offset,
        "leader_epoch": leader_epoch,
        "metadata": metadata,
        "commit_ms": commit_ms,
    }
    return _offset_key(group, topic, partition), _VALUE_PREFIX + _canonical_json(value)


def group_metadata_record(group: str, record_dict: dict[str, Any]) -> tuple[bytes, bytes]:
    """The (key, value) of a group's metadata (``record_dict`` from ``Group.to_record()``)."""
    if not isinstance(group, str):
        raise OffsetsRecordError("group id must be a string")
    try:
        validate_group_record(record_dict)
    except GroupRecordError as exc:
        raise OffsetsRecordError(f"invalid group record: {exc}") from exc
    return _group_key(group), _VALUE_PREFIX + _canonical_json(record_dict)


def tombstone_for_offset(group: str, topic: str, partition: int) -> tuple[bytes, None]:
    """The (key, None) that deletes a committed offset."""
    _check_offset_key_fields(group, topic, partition)
    return _offset_key(group, topic, partition), None


def tombstone_for_group(group: str) -> tuple[bytes, None]:
    """The (key, None) that deletes a group's metadata."""
    if not isinstance(group, str):
        raise OffsetsRecordError("group id must be a string")
    return _group_key(group), None


# ------------------------------------------------------------------------------- parsing


def parse_record(key: bytes | None, value: bytes | None) -> OffsetsEntry:
    """Parse one record of ``__consumer_offsets``; raises only ``OffsetsRecordError``."""
    if not isinstance(key, bytes | bytearray | memoryview):
        raise OffsetsRecordError("a __consumer_offsets record needs a key")
    key = bytes(key)
    if value is not None and not isinstance(value, bytes | bytearray | memoryview):
        raise OffsetsRecordError("the value must be bytes or None")
    prefix, body = key[:2], key[2:]
    if prefix == _OFFSET_KEY_PREFIX:
        return _parse_offset_commit(body, value)
    if prefix == _GROUP_KEY_PREFIX:
        return _parse_group_metadata(body, value)
    raise OffsetsRecordError(f"unknown key type {prefix.hex() or '(empty key)'}")


def _parse_offset_commit(key_body: bytes, value: bytes | None) -> OffsetCommitEntry:
    fields = _load_canonical_object(key_body, "offset key")
    if set(fields) != {"g", "t", "p"}:
        raise OffsetsRecordError(f"offset key has fields {sorted(fields)}")
    group, topic, partition = fields["g"], fields["t"], fields["p"]
    _check_offset_key_fields(group, topic, partition)
    if value is None:
        return OffsetCommitEntry(group, topic, partition, None)
    obj = _load_value(value, "offset value")
    if set(obj) != {"offset", "leader_epoch", "metadata", "commit_ms"}:
        raise OffsetsRecordError(f"offset value has fields {sorted(obj)}")
    committed = CommittedOffset(
        offset=obj["offset"],
        leader_epoch=obj["leader_epoch"],
        metadata=obj["metadata"],
        commit_ms=obj["commit_ms"],
    )
    _check_committed(committed)
    return OffsetCommitEntry(group, topic, partition, committed)


def _parse_group_metadata(key_body: bytes, value: bytes | None) -> GroupMetadataEntry:
    fields = _load_canonical_object(key_body, "group key")
    if set(fields) != {"g"} or not isinstance(fields["g"], str):
        raise OffsetsRecordError('group key must be {"g": group id}')
    if value is None:
        return GroupMetadataEntry(fields["g"], None)
    record = _load_value(value, "group value")
    try:
        validate_group_record(record)
    except GroupRecordError as exc:
        raise OffsetsRecordError(f"invalid group record: {exc}") from exc
    return GroupMetadataEntry(fields["g"], record)


def _reject_constant(name: str) -> Any:
    raise OffsetsRecordError(f"JSON constant {name} is not allowed")


def _load_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(bytes(data).decode("utf-8"), parse_constant=_reject_constant)
    except OffsetsRecordError:
        raise
    except (ValueError, RecursionError) as exc:
        # UnicodeDecodeError and JSONDecodeError are ValueErrors; deep nesting recurses.
        raise OffsetsRecordError(f"{what} is not valid UTF-8 JSON") from exc


def _load_canonical_object(data: bytes, what: str) -> dict[str, Any]:
    obj = _load_json(data, what)
    if not isinstance(obj, dict):
        raise OffsetsRecordError(f"{what} is not a JSON object")
    if _canonical_json(obj) != data:
        raise OffsetsRecordError(f"{what} is not canonical JSON")
    return obj


def _load_value(value: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    value = bytes(value)
    if value[:2] != _VALUE_PREFIX:
        raise OffsetsRecordError(f"unknown {what} version {value[:2].hex() or '(empty)'}")
    obj = _load_json(value[2:], what)
    if not isinstance(obj, dict):
        raise OffsetsRecordError(f"{what} is not a JSON object")
    return obj


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_offset_key_fields(group: Any, topic: Any, partition: Any) -> None:
    if not isinstance(group, str):
        raise OffsetsRecordError("group id must be a string")
    if not isinstance(topic, str) or not topic:
        raise OffsetsRecordError("topic must be a non-empty string")
    if not _is_int(partition, 0, _INT32_MAX):
        raise OffsetsRecordError("partition must be an int32 >= 0")


def _check_committed(committed: CommittedOffset) -> None:
    if not _is_int(committed.offset, _INT64_MIN, _INT64_MAX):
        raise OffsetsRecordError("offset must be an int64")
    if not _is_int(committed.leader_epoch, _INT32_MIN, _INT32_MAX):
        raise OffsetsRecordError("leader_epoch must be an int32")
    if committed.metadata is not None and not isinstance(committed.metadata, str):
        raise OffsetsRecordError("metadata must be a string or null")
    if not _is_int(committed.commit_ms, _INT64_MIN, _INT64_MAX):
        raise OffsetsRecordError("commit_ms must be an int64")


# ---------------------------------------------------------------------------------- state


class OffsetsState:
    """Committed offsets and group records rebuilt by replaying a partition's records in order.

    Invariant: a later record for a key replaces the earlier one; a tombstone removes it, so
    replaying a compacted log gives the same state as replaying the full log.
    Thread-safety: none; owned by one task.
    """

    def __init__(self) -> None:
        self._offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self._groups: dict[str, dict[str, Any]] = {}

    def apply(self, entry: OffsetsEntry) -> None:
        if isinstance(entry, OffsetCommitEntry):
            key = (entry.topic, entry.partition)
            if entry.committed is None:
                group_offsets = self._offsets.get(entry.group)
                if group_offsets is not None:
                    group_offsets.pop(key, None)
                    if not group_offsets:
                        del self._offsets[entry.group]
            else:
                self._offsets.setdefault(entry.group, {})[key] = entry.committed
        elif entry.record is None:
            self._groups.pop(entry.group, None)
        else:
            self._groups[entry.group] = entry.record

    def replay(self, key: bytes, value: bytes | None) -> OffsetsEntry:
        """Parse and apply one record; returns the entry. Raises ``OffsetsRecordError``."""
        entry = parse_record(key, value)
        self.apply(entry)
        return entry

    def groups(self) -> list[str]:
        """Every group with committed offsets or a group record, sorted."""
        return sorted(set(self._offsets) | set(self._groups))

    def offsets(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        """The group's committed offsets by (topic, partition); a copy."""
        return dict(self._offsets.get(group, {}))

    def group_record(self, group: str) -> dict[str, Any] | None:
        return self._groups.get(group)


# ---------------------------------------------------------------------------- partitioning


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    in 32-bit two's complement arithmetic."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for index in range(0, len(units), 2):
        h = (31 * h + (units[index] << 8 | units[index + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's
    ``Utils.abs(groupId.hashCode) % partitions``, where ``Utils.abs(Integer.MIN_VALUE)`` is 0."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, not {partitions}")
    h = java_string_hashcode(group_id)
    return (0 if h == -(2**31) else abs(h)) % partitions
