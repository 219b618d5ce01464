"""Offsets retention and OffsetDelete, the pure parts: Kafka's expiration rules
(``plan_expiration``), OffsetDelete's group checks, the subscription parser the broker uses to
know a group's topics, the OffsetDelete codec, and the new ``[broker]`` keys."""

from __future__ import annotations

import pytest
from flux.cluster.config import ConfigError, parse_config
from flux.cluster.groups.coordinator import (
    COMPACTED_INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SPARK_SINK_MARKER_TOPIC,
    OffsetsRetention,
)
from flux.cluster.groups.expiration import plan_expiration
from flux.cluster.groups.offsets_records import CommittedOffset
from flux.cluster.groups.state import Group, GroupState, subscription_topics
from flux.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from flux.protocol.errors import ErrorCode
from flux.sdk.consumer_protocol import Subscription, encode_subscription
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_group_state import Harness

RETENTION_MS = 60_000
MINIMAL_CONFIG = {"controller": {"secret": "s"}}


def _committed(commit_ms: int, offset: int = 5) -> CommittedOffset:
    return CommittedOffset(offset=offset, leader_epoch=-1, metadata=None, commit_ms=commit_ms)


def _subscription(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=list(topics)))


def _stable(*subscriptions: bytes, protocol_type: str = "consumer") -> Group:
    """A STABLE generation-1 group whose members subscribe with these metadata, at time 0."""
    h = Harness(initial_rebalance_delay_ms=3000)
    tokens = [
        h.join(now=0, protocols=[("range", metadata)], protocol_type=protocol_type)
        for metadata in subscriptions
    ]
    h.tick(3000)
    if h.group.state is GroupState.PREPARING_REBALANCE:
        h.tick(6000)  # members 2.. arrived during the first delay window
    ids = [h.responses[t]["member_id"] for t in tokens]
    leader = h.group.leader_id
    assert leader is not None
    for member_id in sorted(ids, key=lambda m: m == leader):  # the leader's SyncGroup last
        h.run(
            h.group.sync(
                token=member_id,
                member_id=member_id,
                generation_id=h.group.generation_id,
                group_instance_id=None,
                protocol_type=None,
                protocol_name=None,
                assignments=[(m, b"") for m in ids] if member_id == leader else [],
                now_ms=6000,
            )
        )
    assert h.group.state is GroupState.STABLE
    return h.group


def _emptied(at_ms: int) -> Group:
    """A consumer group whose only member left at ``at_ms``."""
    h = Harness()
    token = h.join(now=0, protocols=[("range", _subscription("work"))])
    member_id = h.responses[token]["member_id"]
    h.sync(member_id, now=0, assignments=[(member_id, b"")])
    h.leave((member_id, None), now=at_ms)
    h.tick(at_ms)
    assert h.group.state is GroupState.EMPTY and h.group.state_since_ms == at_ms
    return h.group


# ------------------------------------------------------------------------- expiration


def test_standalone_commits_expire_a_retention_after_their_commit() -> None:
    offsets = {("work", 0): _committed(1_000), ("work", 1): _committed(30_000)}
    plan = plan_expiration(offsets=offsets, group=None, now_ms=61_000, retention_ms=RETENTION_MS)
    assert plan.offsets == (("work", 0),) and not plan.delete_group
    plan = plan_expiration(offsets=offsets, group=None, now_ms=90_000, retention_ms=RETENTION_MS)
    assert plan.offsets == (("work", 0), ("work", 1))
    assert not plan.delete_group  # no Group: nothing but the offsets to delete


def test_empty_group_expires_a_retention_after_it_became_empty() -> None:
    group = _emptied(at_ms=50_000)
    offsets = {("work", 0): _committed(0), ("old", 0): _committed(0)}
    early = plan_expiration(offsets=offsets, group=group, now_ms=109_999, retention_ms=RETENTION_MS)
    assert early.offsets == ()
    plan = plan_expiration(offsets=offsets, group=group, now_ms=110_000, retention_ms=RETENTION_MS)
    assert plan.offsets == (("old", 0), ("work", 0))
    assert plan.delete_group  # nothing left: the group goes too (Kafka: Dead)


def test_commit_to_an_empty_group_is_kept_a_full_retention() -> None:
    """Flux's one deviation: an admin reset on a long-empty group is not gone at once."""
    group = _emptied(at_ms=0)
    offsets = {("work", 0): _committed(100_000), ("old", 0): _committed(0)}
    plan = plan_expiration(offsets=offsets, group=group, now_ms=120_000, retention_ms=RETENTION_MS)
    assert plan.offsets == (("old", 0),)
    assert not plan.delete_group  # one offset is left


def test_empty_group_without_offsets_is_deleted() -> None:
    plan = plan_expiration(offsets={}, group=_emptied(0), now_ms=1, retention_ms=RETENTION_MS)
    assert plan.offsets == () and plan.delete_group


def test_empty_group_with_a_pending_member_id_is_kept() -> None:
    h = Harness()
    token = h.join(now=0, require_known=True)
    assert h.error(token) is ErrorCode.MEMBER_ID_REQUIRED
    assert h.group.state is GroupState.EMPTY and h.group.pending_member_ids
    plan = plan_expiration(offsets={}, group=h.group, now_ms=1, retention_ms=RETENTION_MS)
    assert not plan.delete_group


def test_stable_group_keeps_subscribed_topics_and_expires_the_others() -> None:
    group = _stable(_subscription("work"), _subscription("work", "audit"))
    offsets = {
        ("work", 0): _committed(0),
        ("audit", 0): _committed(0),
        ("old", 0): _committed(0),
        ("old", 1): _committed(50_000),
    }
    plan = plan_expiration(offsets=offsets, group=group, now_ms=100_000, retention_ms=RETENTION_MS)
    assert plan.offsets == (("old", 0),)  # KIP-496; "old"/1 was committed 50 s ago
    assert not plan.delete_group


@pytest.mark.parametrize(
    ("metadata", "protocol_type"),
    [(b"\x00\x00", "consumer"), (_subscription("work"), "connect")],
    ids=["undecodable_subscription", "other_protocol_type"],
)
def test_groups_with_unknown_subscriptions_keep_everything(
    metadata: bytes, protocol_type: str
) -> None:
    group = _stable(metadata, protocol_type=protocol_type)
    offsets = {("old", 0): _committed(0)}
    plan = plan_expiration(offsets=offsets, group=group, now_ms=10**9, retention_ms=RETENTION_MS)
    assert plan.offsets == () and not plan.delete_group


def test_rebalancing_group_keeps_everything() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    h.join(now=0, protocols=[("range", _subscription("work"))])
    assert h.group.state is GroupState.PREPARING_REBALANCE
    offsets = {("old", 0): _committed(0)}
    plan = plan_expiration(offsets=offsets, group=h.group, now_ms=10**9, retention_ms=1)
    assert plan.offsets == ()


def test_empty_group_rebuilt_from_its_record_keeps_when_it_became_empty() -> None:
    record = _emptied(at_ms=40_000).to_record()
    rebuilt = Group.from_record("g", record, now_ms=90_000)
    assert rebuilt.state is GroupState.EMPTY and rebuilt.state_since_ms == 40_000
    future = Group.from_record("g", {**record, "current_state_timestamp_ms": 10**12}, now_ms=90_000)
    assert future.state_since_ms == 90_000  # a clock that jumped back never postpones forever


# ----------------------------------------------------------------------- OffsetDelete


def test_offset_delete_checks() -> None:
    stable = _stable(_subscription("work"))
    assert stable.validate_offset_delete() is ErrorCode.NONE
    assert stable.is_subscribed_to_topic("work") and not stable.is_subscribed_to_topic("old")
    other = _stable(_subscription("work"), protocol_type="connect")
    assert other.validate_offset_delete() is ErrorCode.NON_EMPTY_GROUP
    unknown = _stable(b"\x00")
    assert unknown.validate_offset_delete() is ErrorCode.NONE
    assert unknown.is_subscribed_to_topic("anything")  # Kafka's safe answer
    empty = _emptied(0)
    assert empty.validate_offset_delete() is ErrorCode.NONE
    assert not empty.is_subscribed_to_topic("work")
    empty.mark_dead(now_ms=1)
    assert empty.validate_offset_delete() is ErrorCode.GROUP_ID_NOT_FOUND


def test_subscription_topics_reads_every_version_the_sdk_writes() -> None:
    for version in range(4):
        data = encode_subscription(Subscription(topics=["a", "bé"], version=version))
        assert subscription_topics(data) == frozenset({"a", "bé"})
    assert subscription_topics(_subscription()) == frozenset()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00",
        b"\xff\xff\x00\x00\x00\x00",  # negative version
        b"\x00\x00\xff\xff\xff\xff",  # negative count
        b"\x00\x00\x7f\xff\xff\xff",  # a count the bytes cannot hold
        b"\x00\x00\x00\x00\x00\x01\x00\x05ab",  # a name cut short
        b"\x00\x00\x00\x00\x00\x01\x00\x01\xff",  # not UTF-8
    ],
)
def test_subscription_topics_refuses_malformed_bytes(data: bytes) -> None:
    assert subscription_topics(data) is None


@given(st.binary(max_size=64))
def test_subscription_topics_never_raises(data: bytes) -> None:
    result = subscription_topics(data)
    assert result is None or all(isinstance(topic, str) for topic in result)


# ------------------------------------------------------------------------------ codec


def test_offset_delete_v0_round_trip() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_DELETE] == (0, 0)
    body = {"group_id": "g", "topics": [{"name": "work", "partitions": [{"partition_index": 3}]}]}
    frame = encode_request(ApiKey.OFFSET_DELETE, 0, 9, "c", body)
    # size, api key 47, version 0, correlation 9, client id "c", then the classic body
    assert frame[4:8] == b"\x00\x2f\x00\x00"
    assert frame.endswith(b"\x00\x01g\x00\x00\x00\x01\x00\x04work\x00\x00\x00\x01\x00\x00\x00\x03")
    header, decoded = decode_request(memoryview(frame)[4:])
    assert decoded == body and header.api_version == 0
    response = {
        "error_code": 0,
        "throttle_time_ms": 0,
        "topics": [{"name": "work", "partitions": [{"partition_index": 3, "error_code": 86}]}],
    }
    encoded = encode_response(RequestHeader(ApiKey.OFFSET_DELETE, 0, 9, "c"), response)
    # ErrorCode comes before ThrottleTimeMs in this response (Kafka's field order)
    assert encoded[8:14] == b"\x00\x00\x00\x00\x00\x00"
    assert decode_response(ApiKey.OFFSET_DELETE, 0, memoryview(encoded)[4:]) == (9, response)


# ------------------------------------------------------------------------ configuration


def test_offsets_keys_default_to_kafkas() -> None:
    broker = parse_config(MINIMAL_CONFIG, environ={}).broker
    assert broker.offsets_topic_segment_bytes == 104857600
    assert broker.offsets_retention_minutes == 10080
    assert broker.offsets_retention_check_interval_ms == 600000
    retention = OffsetsRetention.from_config(parse_config(MINIMAL_CONFIG, environ={}))
    assert retention == OffsetsRetention(retention_ms=10080 * 60_000, check_interval_ms=600000)


def test_offsets_retention_ms_overrides_minutes() -> None:
    config = parse_config(
        {
            **MINIMAL_CONFIG,
            "broker": {"offsets_retention_minutes": 1, "offsets_retention_ms": 1500},
        },
        environ={},
    )
    assert OffsetsRetention.from_config(config).retention_ms == 1500


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("offsets_topic_segment_bytes", 1023),
        ("offsets_retention_minutes", 0),
        ("offsets_retention_ms", -1),
        ("offsets_retention_check_interval_ms", 0),
    ],
)
def test_offsets_keys_refuse_out_of_range_values(key: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"broker.{key}"):
        parse_config({**MINIMAL_CONFIG, "broker": {key: value}}, environ={})


def test_internal_topic_names_match_their_owners() -> None:
    from flux.spark.limits import SINK_MARKER_TOPIC

    assert SPARK_SINK_MARKER_TOPIC == SINK_MARKER_TOPIC
    assert COMPACTED_INTERNAL_TOPICS == (OFFSETS_TOPIC, SINK_MARKER_TOPIC)
