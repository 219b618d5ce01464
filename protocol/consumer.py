"""The consumer embedded protocol and its assignors (pure: no I/O), shared by the SDK's
consumer groups (``flux.sdk.consumer_protocol``) and the broker's V1 groups
(``flux.cluster.v1.groups``).

Members of a ``consumer`` group put a *subscription* in their JoinGroup ``protocols`` metadata
and the leader hands each member an *assignment* through SyncGroup; the broker never looks
inside either. The bytes are Kafka's ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment`` (``clients/src/main/resources/common/message/*.json``): an
int16 version followed by non-flexible fields, so Java, librdkafka and kafka-python members
can share a group with Flux members.

    Subscription  v0: topics [string], user_data nullable bytes
                  v1+: owned_partitions [topic string, partitions [int32]]
                  v2+: generation_id int32      v3+: rack_id nullable string
    Assignment    v0+: assigned [topic string, partitions [int32]], user_data nullable bytes

Decoding a version newer than this module knows reads the fields it knows and ignores the rest,
as Kafka does (new versions only append fields). Malformed bytes raise
``ConsumerProtocolError``, never ``struct.error`` or ``IndexError``.

``range_assign`` is Kafka's ``RangeAssignor``: per topic, partitions in order are split into
contiguous ranges over the subscribed members sorted by member id; the first
``partitions % members`` members get one extra partition. ``round_robin_assign`` is its
``RoundRobinAssignor``: every partition of every topic (topics by name) is dealt in turn to the
members sorted by id, skipping those not subscribed to its topic.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import ProtocolError

__all__ = [
    "ASSIGNMENT_VERSION_MAX",
    "RANGE_ASSIGNOR",
    "ROUND_ROBIN_ASSIGNOR",
    "SUBSCRIPTION_VERSION_MAX",
    "Assignment",
    "ConsumerProtocolError",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "range_assign",
    "round_robin_assign",
]

#: The highest versions this module writes (and reads field by field).
SUBSCRIPTION_VERSION_MAX = 3
ASSIGNMENT_VERSION_MAX = 3
#: The protocol name members advertise for ``range_assign`` in JoinGroup.
RANGE_ASSIGNOR = "range"
#: ... and for ``round_robin_assign``.
ROUND_ROBIN_ASSIGNOR = "roundrobin"

TopicPartitions = dict[str, list[int]]


class ConsumerProtocolError(ProtocolError):
    """Subscription or assignment bytes that do not decode (the SDK raises its own
    ``flux.sdk.consumer_protocol.ConsumerProtocolError``, a ``FluxError``, from it)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member asks for: topics, optional user data, and (v1+) what it owns now."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 1


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader gave a member: topic -> partitions, optional user data."""

    assigned: TopicPartitions
    user_data: bytes | None = None
    version: int = 0


# -- encoding ---------------------------------------------------------------------------------


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def _nullable_string(value: str | None) -> bytes:
    return struct.pack(">h", -1) if value is None else _string(value)


def _nullable_bytes(value: bytes | None) -> bytes:
    return struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value


def _topic_partitions(value: Mapping[str, list[int]]) -> bytes:
    parts = [struct.pack(">i", len(value))]
    for topic, partitions in value.items():
        parts.append(_string(topic))
        parts.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    return b"".join(parts)


def encode_subscription(subscription: Subscription) -> bytes:
    version = subscription.version
    if not 0 <= version <= SUBSCRIPTION_VERSION_MAX:
        raise ValueError(f"subscription version {version} is not in 0..{SUBSCRIPTION_VERSION_MAX}")
    parts = [struct.pack(">hi", version, len(subscription.topics))]
    parts += [_string(topic) for topic in subscription.topics]
    parts.append(_nullable_bytes(subscription.user_data))
    if version >= 1:
        parts.append(_topic_partitions(subscription.owned_partitions))
    if version >= 2:
        parts.append(struct.pack(">i", subscription.generation_id))
    if version >= 3:
        parts.append(_nullable_string(subscription.rack_id))
    return b"".join(parts)


def encode_assignment(assignment: Assignment) -> bytes:
    version = assignment.version
    if not 0 <= version <= ASSIGNMENT_VERSION_MAX:
        raise ValueError(f"assignment version {version} is not in 0..{ASSIGNMENT_VERSION_MAX}")
    return (
        struct.pack(">h", version)
        + _topic_partitions(assignment.assigned)
        + _nullable_bytes(assignment.user_data)
    )


# -- decoding ---------------------------------------------------------------------------------


class _Reader:
    """Reads big-endian Kafka primitives from ``data``; every read checks the bounds."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._offset = 0
        self._what = what

    def _take(self, size: int) -> bytes:
        if size < 0 or self._offset + size > len(self._data):
            raise ConsumerProtocolError(
                f"{self._what}: truncated at byte {self._offset} of {len(self._data)}"
            )
        chunk = self._data[self._offset : self._offset + size]
        self._offset += size
        return chunk

    @property
    def at_end(self) -> bool:
        return self._offset >= len(self._data)

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length == -1:
            return None
        try:
            return self._take(length).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConsumerProtocolError(f"{self._what}: a string is not UTF-8") from error

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ConsumerProtocolError(f"{self._what}: a topic name is null")
        return value

    def nullable_bytes(self) -> bytes | None:
        length = self.int32()
        return None if length == -1 else self._take(length)

    def count(self) -> int:
        """An array length; -1 (null) reads as empty. Each element takes at least one byte,
        so a length beyond the remaining bytes is corrupt (and cannot allocate much)."""
        length = self.int32()
        if length < -1 or length > len(self._data) - self._offset:
            raise ConsumerProtocolError(f"{self._what}: array length {length} is impossible")
        return max(length, 0)

    def topic_partitions(self) -> TopicPartitions:
        result: TopicPartitions = {}
        for _ in range(self.count()):
            topic = self.string()
            partitions = [self.int32() for _ in range(self.count())]
            result.setdefault(topic, []).extend(partitions)
        return result


def decode_subscription(data: bytes) -> Subscription:
    reader = _Reader(bytes(data), "consumer subscription")
    version = reader.int16()
    if version < 0:
        raise ConsumerProtocolError(f"consumer subscription: negative version {version}")
    topics = [reader.string() for _ in range(reader.count())]
    user_data = reader.nullable_bytes()
    owned: TopicPartitions = {}
    generation_id, rack_id = -1, None
    # Kafka's fields from v1 on are "ignorable": a v1+ member may end early.
    if version >= 1 and not reader.at_end:
        owned = reader.topic_partitions()
    if version >= 2 and not reader.at_end:
        generation_id = reader.int32()
    if version >= 3 and not reader.at_end:
        rack_id = reader.nullable_string()
    return Subscription(
        topics=topics,
        user_data=user_data,
        owned_partitions=owned,
        generation_id=generation_id,
        rack_id=rack_id,
        version=version,
    )


def decode_assignment(data: bytes) -> Assignment:
    """An empty byte string (a member the leader gave nothing, as some clients send) decodes
    to an empty assignment."""
    if not data:
        return Assignment(assigned={})
    reader = _Reader(bytes(data), "consumer assignment")
    version = reader.int16()
    if version < 0:
        raise ConsumerProtocolError(f"consumer assignment: negative version {version}")
    assigned = reader.topic_partitions()
    user_data = None if reader.at_end else reader.nullable_bytes()
    return Assignment(assigned=assigned, user_data=user_data, version=version)


# -- the range assignor -----------------------------------------------------------------------


def range_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> dict[str, TopicPartitions]:
    """Member id -> {topic: partitions} by Kafka's RangeAssignor.

    Topics missing from ``partition_counts`` (unknown to the cluster) are not assigned. Every
    member gets an entry, possibly empty; topics with no partitions for a member are left out.
    """
    members_by_topic: dict[str, list[str]] = {}
    for member_id, subscription in subscriptions.items():
        for topic in set(subscription.topics):
            members_by_topic.setdefault(topic, []).append(member_id)
    result: dict[str, TopicPartitions] = {member_id: {} for member_id in subscriptions}
    for topic in sorted(members_by_topic):
        count = partition_counts.get(topic)
        if count is None:
            continue
        members = sorted(members_by_topic[topic])
        per_member, extra = divmod(count, len(members))
        start = 0
        for index, member_id in enumerate(members):
            length = per_member + (1 if index < extra else 0)
            if length:
                result[member_id][topic] = list(range(start, start + length))
            start += length
        assert start == count, (topic, start, count)
    return result


def round_robin_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> dict[str, TopicPartitions]:
    """Member id -> {topic: partitions} by Kafka's RoundRobinAssignor (unknown topics are not
    assigned; every member gets an entry, possibly empty)."""
    wanted = {member_id: set(s.topics) for member_id, s in subscriptions.items()}
    result: dict[str, TopicPartitions] = {member_id: {} for member_id in subscriptions}
    members = sorted(wanted)
    topics = sorted({t for topics in wanted.values() for t in topics if t in partition_counts})
    turn = 0
    for topic in topics:
        for index in range(partition_counts[topic]):
            for _ in range(len(members)):
                member_id = members[turn % len(members)]
                turn += 1
                if topic in wanted[member_id]:
                    result[member_id].setdefault(topic, []).append(index)
                    break
    return result
