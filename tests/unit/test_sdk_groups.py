"""The consumer protocol codec (checked both ways against kafka-python's own classes) and the
range and round-robin assignors (Kafka's RangeAssignor and RoundRobinAssignor examples and
properties); ``flux.protocol.consumer`` holds them, ``flux.sdk.consumer_protocol`` offers them
with the SDK's error."""

from __future__ import annotations

import pytest
from flux.protocol import consumer as codec
from flux.protocol.api import ApiKey
from flux.protocol.consumer import round_robin_assign
from flux.sdk.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from flux.sdk.errors import FluxError
from flux.sdk.metadata import negotiate_version
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KafkaAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KafkaSubscription,
)
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0,
    ConsumerProtocolMemberMetadata_v0,
)

# -- subscription -----------------------------------------------------------------------------


def test_subscription_v0_matches_kafka_python_member_metadata() -> None:
    theirs = ConsumerProtocolMemberMetadata_v0(0, ["orders", "payments"], b"ud").encode()
    ours = encode_subscription(Subscription(["orders", "payments"], user_data=b"ud", version=0))
    assert ours == theirs
    decoded = decode_subscription(theirs)
    assert (decoded.version, decoded.topics, decoded.user_data) == (
        0,
        ["orders", "payments"],
        b"ud",
    )


def test_subscription_v1_with_owned_partitions_both_ways() -> None:
    theirs = KafkaSubscription(
        version=1,
        topics=["a", "bb"],
        user_data=None,
        owned_partitions=[KafkaSubscription.TopicPartition(topic="a", partitions=[0, 2])],
    ).encode()
    ours = Subscription(["a", "bb"], owned_partitions={"a": [0, 2]}, version=1)
    assert encode_subscription(ours) == theirs
    assert decode_subscription(theirs) == ours
    back = KafkaSubscription.decode(encode_subscription(ours))
    assert back.topics == ["a", "bb"] and back.user_data is None
    assert [(tp.topic, tp.partitions) for tp in back.owned_partitions] == [("a", [0, 2])]


def test_subscription_v3_generation_and_rack() -> None:
    theirs = KafkaSubscription(
        version=3, topics=["t"], user_data=b"x", owned_partitions=[], generation_id=5, rack_id="r1"
    ).encode()
    decoded = decode_subscription(theirs)
    assert decoded == Subscription(["t"], b"x", {}, generation_id=5, rack_id="r1", version=3)
    assert encode_subscription(decoded) == theirs


def test_newer_subscription_version_reads_known_fields_and_ignores_the_rest() -> None:
    v3 = encode_subscription(Subscription(["t"], version=3, generation_id=2))
    future = b"\x00\x07" + v3[2:] + b"new fields"
    decoded = decode_subscription(future)
    assert (decoded.version, decoded.topics, decoded.generation_id) == (7, ["t"], 2)


def test_v1_subscription_without_its_ignorable_fields_decodes() -> None:
    v0_body = encode_subscription(Subscription(["t"], version=0))[2:]
    decoded = decode_subscription(b"\x00\x01" + v0_body)
    assert decoded.topics == ["t"] and decoded.owned_partitions == {}


# -- assignment -------------------------------------------------------------------------------


def test_assignment_matches_kafka_python_both_ways() -> None:
    theirs_old = ConsumerProtocolMemberAssignment_v0(0, [("a", [0, 1]), ("b", [3])], b"").encode()
    theirs_new = KafkaAssignment(
        version=0,
        assigned_partitions=[
            KafkaAssignment.TopicPartition(topic="a", partitions=[0, 1]),
            KafkaAssignment.TopicPartition(topic="b", partitions=[3]),
        ],
        user_data=b"",
    ).encode()
    ours = Assignment({"a": [0, 1], "b": [3]}, user_data=b"")
    assert encode_assignment(ours) == theirs_old == theirs_new
    assert decode_assignment(theirs_old) == ours
    back = KafkaAssignment.decode(encode_assignment(Assignment({"x": [2]}, user_data=None)))
    assert back.partitions() == [("x", 2)] and back.user_data is None


def test_empty_assignment_bytes_mean_nothing_assigned() -> None:
    assert decode_assignment(b"") == Assignment({})


@pytest.mark.parametrize(
    "data",
    [b"\x00", b"\x00\x00\x00\x00\x00\x05", b"\x00\x00\x7f\xff\xff\xff", b"\xff\xff\x00\x00"],
)
def test_malformed_bytes_raise_the_protocol_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError) as caught:
        decode_subscription(data)
    assert isinstance(caught.value, FluxError)  # the SDK's, whatever the codec raised
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(data)
    with pytest.raises(codec.ConsumerProtocolError):  # the broker side's own
        codec.decode_subscription(data)


names = st.text(min_size=1, max_size=20)
topic_partitions = st.dictionaries(names, st.lists(st.integers(0, 2**31 - 1), max_size=5))


@given(
    topics=st.lists(names, max_size=5),
    user_data=st.none() | st.binary(max_size=30),
    owned=topic_partitions,
    generation=st.integers(-1, 2**31 - 1),
    rack=st.none() | names,
    version=st.integers(0, 3),
)
def test_subscription_round_trip(topics, user_data, owned, generation, rack, version) -> None:
    subscription = Subscription(
        topics,
        user_data,
        owned if version >= 1 else {},
        generation if version >= 2 else -1,
        rack if version >= 3 else None,
        version,
    )
    assert decode_subscription(encode_subscription(subscription)) == subscription


@given(assigned=topic_partitions, user_data=st.none() | st.binary(max_size=30))
def test_assignment_round_trip(assigned, user_data) -> None:
    assignment = Assignment(assigned, user_data)
    assert decode_assignment(encode_assignment(assignment)) == assignment


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_the_protocol_error(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except ConsumerProtocolError:
            pass


# -- range assignor ---------------------------------------------------------------------------


def _subs(**topics_by_member: list[str]) -> dict[str, Subscription]:
    return {member: Subscription(topics) for member, topics in topics_by_member.items()}


def test_range_assignor_kafka_documentation_example() -> None:
    # RangeAssignor javadoc: C0, C1 on t0, t1 with 3 partitions each.
    assert range_assign(_subs(C0=["t0", "t1"], C1=["t0", "t1"]), {"t0": 3, "t1": 3}) == {
        "C0": {"t0": [0, 1], "t1": [0, 1]},
        "C1": {"t0": [2], "t1": [2]},
    }


def test_range_assignor_per_topic_subscribers_and_unknown_topics() -> None:
    assignment = range_assign(_subs(b=["t", "only-b"], a=["t"], c=["gone"]), {"t": 4, "only-b": 2})
    assert assignment == {"a": {"t": [0, 1]}, "b": {"t": [2, 3], "only-b": [0, 1]}, "c": {}}


def test_range_assignor_more_members_than_partitions() -> None:
    assert range_assign(_subs(m1=["t"], m2=["t"], m3=["t"]), {"t": 2}) == {
        "m1": {"t": [0]},
        "m2": {"t": [1]},
        "m3": {},
    }


def test_range_assignor_agrees_with_kafka_python() -> None:
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    class Cluster:
        def partitions_for_topic(self, topic: str) -> set[int]:
            return set(range({"t0": 5, "t1": 3}[topic]))

    class Member:
        def __init__(self, member_id: str, topics: list[str]) -> None:
            self.member_id, self.group_instance_id = member_id, None
            self.metadata = KafkaSubscription(version=0, topics=topics, user_data=b"")

    members = [Member("m-b", ["t0", "t1"]), Member("m-a", ["t0"]), Member("m-c", ["t0", "t1"])]
    theirs = RangePartitionAssignor.assign(Cluster(), members)
    ours = range_assign(
        {m.member_id: Subscription(m.metadata.topics) for m in members}, {"t0": 5, "t1": 3}
    )
    for member in members:
        encoded = theirs[member.member_id].encode(version=0)
        assert decode_assignment(encoded).assigned == ours[member.member_id]


@given(
    members=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=8, unique=True),
    partitions=st.integers(0, 40),
)
def test_range_assignor_assigns_every_partition_once_and_balanced(members, partitions) -> None:
    assignment = range_assign({m: Subscription(["t"]) for m in members}, {"t": partitions})
    owned = [p for parts in assignment.values() for p in parts.get("t", [])]
    assert sorted(owned) == list(range(partitions))
    sizes = [len(parts.get("t", [])) for parts in assignment.values()]
    assert max(sizes) - min(sizes) <= 1


def test_the_client_implements_the_group_apis() -> None:
    broker = {key: (0, 10) for key in ApiKey}
    for api in (
        ApiKey.FIND_COORDINATOR,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.LIST_GROUPS,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.DELETE_GROUPS,
        ApiKey.INIT_PRODUCER_ID,
    ):
        assert negotiate_version(api, broker) >= 0


# -- round-robin assignor ---------------------------------------------------------------------


def test_round_robin_assignor_kafka_documentation_examples() -> None:
    # RoundRobinAssignor javadoc: C0, C1 on t0, t1 with 3 partitions each ...
    assert round_robin_assign(_subs(C0=["t0", "t1"], C1=["t0", "t1"]), {"t0": 3, "t1": 3}) == {
        "C0": {"t0": [0, 2], "t1": [1]},
        "C1": {"t0": [1], "t1": [0, 2]},
    }
    # ... and unequal subscriptions: t0 1 partition, t1 2, t2 3.
    subscriptions = _subs(C0=["t0"], C1=["t0", "t1"], C2=["t0", "t1", "t2"])
    assert round_robin_assign(subscriptions, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": {"t0": [0]},
        "C1": {"t1": [0]},
        "C2": {"t1": [1], "t2": [0, 1, 2]},
    }


@given(
    wanted=st.dictionaries(
        st.sampled_from(["m1", "m2", "m3", "m4"]),
        st.lists(st.sampled_from(["a", "b", "c", "gone"]), min_size=1, max_size=3),
        min_size=1,
    ),
    counts=st.fixed_dictionaries({"a": st.integers(0, 7), "b": st.integers(0, 7)}),
)
def test_round_robin_assignor_gives_every_partition_once_to_a_subscriber(wanted, counts) -> None:
    assignment = round_robin_assign(_subs(**wanted), counts)
    assert set(assignment) == set(wanted)
    dealt = [(t, p) for member in assignment.values() for t, ps in member.items() for p in ps]
    subscribed = {t for topics in wanted.values() for t in topics}
    assert sorted(dealt) == sorted(
        (t, p) for t, n in counts.items() if t in subscribed for p in range(n)
    )
    for member, topics in assignment.items():
        assert set(topics) <= set(wanted[member])
