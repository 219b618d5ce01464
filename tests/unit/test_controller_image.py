"""MetadataImage replay rules, serialization (dict and pickle), deltas, and Hypothesis
properties of the replay and election rules."""

from __future__ import annotations

import json
import pickle
import random
from dataclasses import replace

import pytest
from flux.controller import handlers
from flux.controller.image import FrozenMap, MetadataDelta, MetadataImage, RoleChanges
from flux.controller.records import (
    ConfigChange,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    PartitionChange,
    PartitionReassignment,
    PartitionSpec,
    Record,
    RegisterBroker,
    UnfenceBroker,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def _register(broker_id: int, incarnation: str = "a", rack: str | None = None) -> RegisterBroker:
    return RegisterBroker(broker_id, incarnation, f"b{broker_id}", 9000, "h", 8000, rack)


def _cluster(*broker_ids: int) -> MetadataImage:
    records: list[Record] = []
    for broker_id in broker_ids:
        records += [_register(broker_id), UnfenceBroker(broker_id, "a")]
    return MetadataImage.EMPTY.replay_all(records, 1)


def _with_topic(image: MetadataImage, *replica_lists: tuple[int, ...]) -> MetadataImage:
    specs = tuple(PartitionSpec(r, r, r[0]) for r in replica_lists)
    return image.replay_all([CreateTopic("t", "tid", specs, ())], image.version + 1)


def test_empty_image() -> None:
    assert MetadataImage.EMPTY.version == 0
    assert MetadataImage.EMPTY.live_broker_ids() == []
    assert MetadataImage.EMPTY.topic_by_id("x") is None


def test_register_replaces_and_starts_fenced() -> None:
    image = _cluster(1)
    assert image.live_broker_ids() == [1]
    image = image.replay(_register(1, "b"))
    assert image.brokers[1].incarnation_id == "b" and image.brokers[1].fenced
    # A fence/unfence of the old incarnation does not apply.
    assert image.replay(UnfenceBroker(1, "a")) is image
    assert image.replay(UnfenceBroker(1, "b")).live_broker_ids() == [1]


def test_replay_keeps_version_and_replay_all_sets_it() -> None:
    image = _cluster(1)
    assert image.replay(_register(2)).version == image.version
    assert image.replay_all([], 7).version == 7


def test_create_topic_ignored_if_name_or_id_exists() -> None:
    image = _with_topic(_cluster(1), (1,))
    spec = (PartitionSpec((1,), (1,), 1),)
    assert image.replay(CreateTopic("t", "other", spec, ())) is image
    assert image.replay(CreateTopic("u", "tid", spec, ())) is image
    # Specs that break the invariants are ignored too.
    bad = (PartitionSpec((1,), (2,), 1),)
    assert image.replay(CreateTopic("u", "uid", bad, ())) is image


def test_partition_change_rules() -> None:
    image = _with_topic(_cluster(1, 2, 3), (1, 2, 3))
    good = PartitionChange("tid", 0, 2, 1, (2, 3), 1)
    changed = image.replay(good)
    state = changed.topics["t"].partitions[0]
    assert (state.leader, state.leader_epoch, state.isr, state.partition_epoch) == (2, 1, (2, 3), 1)
    assert state.preferred_leader == 1
    ignored = [
        PartitionChange("tid", 0, 2, 1, (2, 3), 2),  # skips a partition epoch
        PartitionChange("tid", 0, 2, 1, (2, 3), 0),  # stale partition epoch
        PartitionChange("tid", 0, 4, 1, (4,), 1),  # leader not a replica
        PartitionChange("tid", 0, 2, 1, (1, 3), 1),  # leader not in the ISR
        PartitionChange("tid", 0, 1, 0, (1, 1), 1),  # duplicate ISR member
        PartitionChange("tid", 1, 1, 0, (1,), 1),  # no such partition
        PartitionChange("nope", 0, 1, 0, (1,), 1),  # no such topic
    ]
    for change in ignored:
        assert image.replay(change) is image, change
    lower_epoch = changed.replay(PartitionChange("tid", 0, 2, 0, (2,), 2))
    assert lower_epoch is changed
    offline = image.replay(PartitionChange("tid", 0, -1, 1, (1,), 1))
    assert offline.topics["t"].partitions[0].offline


def test_create_partitions_delete_and_configs() -> None:
    image = _with_topic(_cluster(1, 2), (1, 2))
    image = image.replay(CreatePartitions("tid", (PartitionSpec((2, 1), (2, 1), 2),)))
    assert len(image.topics["t"].partitions) == 2
    image = image.replay(ConfigChange("topic", "t", "retention.ms", "5"))
    image = image.replay(ConfigChange("topic", "t", "cleanup.policy", "delete"))
    assert image.topics["t"].config == (("cleanup.policy", "delete"), ("retention.ms", "5"))
    image = image.replay(ConfigChange("topic", "t", "retention.ms", None))
    assert image.topics["t"].config_dict() == {"cleanup.policy": "delete"}
    image = image.replay(ConfigChange("broker", "1", "x", "y"))
    assert image.broker_configs["1"] == (("x", "y"),)
    assert "1" not in image.replay(ConfigChange("broker", "1", "x", None)).broker_configs
    assert image.replay(ConfigChange("topic", "nope", "x", "y")) is image
    assert image.replay(ConfigChange("group", "g", "x", "y")) is image
    deleted = image.replay(DeleteTopic("tid"))
    assert "t" not in deleted.topics
    assert deleted.replay(DeleteTopic("tid")) is deleted


def test_replay_does_not_mutate() -> None:
    image = _with_topic(_cluster(1, 2), (1, 2))
    before = image.to_dict()
    image.replay(FenceBroker(1, "a"))
    image.replay(PartitionChange("tid", 0, 2, 1, (2,), 1))
    image.replay(DeleteTopic("tid"))
    assert image.to_dict() == before


def test_serialization_round_trips() -> None:
    image = _with_topic(_cluster(1, 2), (1, 2), (2, 1))
    image = image.replay_all(
        [ConfigChange("broker", "", "a", "b"), ConfigChange("topic", "t", "retention.ms", "1")], 9
    )
    data = json.loads(json.dumps(image.to_dict()))
    assert MetadataImage.from_dict(data) == image
    assert MetadataImage.from_dict(data).to_dict() == image.to_dict()
    copy = pickle.loads(pickle.dumps(image))
    assert copy == image and hash(copy) == hash(image)
    assert isinstance(copy.brokers, FrozenMap)
    with pytest.raises(TypeError):
        copy.brokers[3] = copy.brokers[1]  # type: ignore[index]


def test_delta_roles() -> None:
    old = _with_topic(_cluster(1, 2, 3), (1, 2), (2, 3), (3, 1))
    fence = handlers.fence_broker(old, 1)
    new = old.replay_all(fence, old.version + 1)
    delta = MetadataDelta.between(old, new)
    assert delta.changed_topics == ("t",) and delta.changed_brokers == (1,)
    roles = delta.partition_roles(2)
    assert [(i, s.leader) for _, i, s in roles.leader] == [(0, 2)]
    assert roles.follower == [] and roles.removed == []
    # Broker 3 keeps leading partition 2 and only lost an ISR member: nothing to do.
    assert delta.partition_roles(3) == handlers_roles_empty()
    # A broker seeing the image for the first time gets all its partitions.
    first = MetadataDelta.between(MetadataImage.EMPTY, new).partition_roles(3)
    assert [i for _, i, _ in first.leader] == [2] and [i for _, i, _ in first.follower] == [1]
    # Deletion removes every replica it hosted.
    gone = new.replay_all([DeleteTopic("tid")], new.version + 1)
    removed = MetadataDelta.between(new, gone).partition_roles(3).removed
    assert removed == [("t", "tid", 1), ("t", "tid", 2)]
    assert MetadataDelta.between(new, gone).deleted_topics == ("t",)


def handlers_roles_empty() -> RoleChanges:
    return RoleChanges(leader=[], follower=[], removed=[])


def test_delta_follower_on_leader_change_and_removed_on_move() -> None:
    old = _with_topic(_cluster(1, 2, 3), (1, 2, 3))
    new = old.replay(PartitionChange("tid", 0, 2, 1, (2, 3), 1))
    roles = MetadataDelta.between(old, new).partition_roles(3)
    assert [i for _, i, _ in roles.follower] == [0]
    # An ISR-only change is no role change for anyone.
    isr_only = new.replay(PartitionChange("tid", 0, 2, 1, (2,), 2))
    for broker_id in (1, 2, 3):
        assert MetadataDelta.between(new, isr_only).partition_roles(broker_id) == (
            handlers_roles_empty()
        )


# -- properties ---------------------------------------------------------------------------

BROKERS = (1, 2, 3, 4)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Record], MetadataImage]:
    """A registered, unfenced cluster of four brokers with two random topics."""
    records: list[Record] = []
    image = MetadataImage.EMPTY
    for broker_id in BROKERS:
        result = handlers.register_broker(
            image,
            broker_id=broker_id,
            incarnation_id="i0",
            kafka_host="h",
            kafka_port=1,
            http_host="h",
            http_port=2,
            rack=None,
        )
        records += result.records
        image = image.replay_all(result.records, image.version + 1)
        beat = handlers.broker_heartbeat(image, broker_id=broker_id, incarnation_id="i0")
        records += beat.records
        image = image.replay_all(beat.records, image.version + 1)
    for name in ("a", "b"):
        result = handlers.create_topic(
            image,
            name=name,
            num_partitions=draw(st.integers(1, 6)),
            replication_factor=draw(st.integers(1, 4)),
            assignments=None,
            configs={"unclean.leader.election.enable": draw(st.sampled_from(["true", "false"]))},
            topic_id=f"id-{name}",
            default_partitions=1,
            default_replication_factor=1,
            rng=random.Random(draw(st.integers(0, 1000))),
        )
        records += result.records
        image = image.replay_all(result.records, image.version + 1)
    return records, image


operations = st.lists(
    st.tuples(
        st.sampled_from(["fence", "heartbeat", "reregister", "expand", "preferred", "unclean"]),
        st.sampled_from(BROKERS),
    ),
    max_size=30,
)


def _step(image: MetadataImage, op: str, broker_id: int, step: int) -> list[Record]:
    if op == "fence":
        return handlers.fence_broker(image, broker_id)
    registration = image.brokers[broker_id]
    if op == "heartbeat":
        return handlers.broker_heartbeat(
            image, broker_id=broker_id, incarnation_id=registration.incarnation_id
        ).records
    if op == "reregister":
        return handlers.register_broker(
            image,
            broker_id=broker_id,
            incarnation_id=f"i{step}",
            kafka_host="h",
            kafka_port=1,
            http_host="h",
            http_port=2,
            rack=None,
        ).records
    if op == "expand":
        # Every partition led by broker_id takes all live replicas into its ISR.
        records: list[Record] = []
        for topic in image.topics.values():
            for index, state in enumerate(topic.partitions):
                if state.leader != broker_id:
                    continue
                isr = [r for r in state.replicas if r in state.isr or image.is_live(r)]
                result = handlers.alter_partition(
                    image,
                    broker_id=broker_id,
                    incarnation_id=registration.incarnation_id,
                    topic_id=topic.topic_id,
                    partition=index,
                    leader_epoch=state.leader_epoch,
                    partition_epoch=state.partition_epoch,
                    isr=isr,
                )
                assert result.ok, result.response
                records += result.records
        return records
    return handlers.elect_leaders(image, partitions=None, election_type=op).records


def _check(old: MetadataImage, new: MetadataImage) -> None:
    for name, topic in new.topics.items():
        before = old.topics[name]
        for index, state in enumerate(topic.partitions):
            previous = before.partitions[index]
            assert set(state.isr) <= set(state.replicas)
            assert state.leader_epoch >= previous.leader_epoch
            assert state.partition_epoch >= previous.partition_epoch
            if state.leader != -1:
                assert state.leader in state.isr, (name, index, state)
                assert new.is_live(state.leader), (name, index, state)
            else:
                assert state.isr, "an offline partition keeps its last ISR member"


@settings(max_examples=150, deadline=None)
@given(clusters(), operations)
def test_random_fencing_keeps_invariants_and_replays_deterministically(
    cluster: tuple[list[Record], MetadataImage], ops: list[tuple[str, int]]
) -> None:
    log, image = cluster
    batches: list[list[Record]] = [log]
    for step, (op, broker_id) in enumerate(ops):
        records = _step(image, op, broker_id, step)
        new = image.replay_all(records, image.version + 1)
        _check(image, new)
        batches.append(records)
        image = new
    # Determinism: replaying the same log again gives an equal image.
    again = MetadataImage.EMPTY
    for records in batches:
        again = again.replay_all(records, again.version + 1)
    assert (
        again.to_dict()
        == MetadataImage.EMPTY.replay_all(
            [r for batch in batches for r in batch], again.version
        ).to_dict()
    )
    assert again.replay_all([], image.version) == image
    # Serialization round trips.
    assert MetadataImage.from_dict(json.loads(json.dumps(image.to_dict()))) == image
    assert pickle.loads(pickle.dumps(image)) == image


record_strategy = st.one_of(
    st.builds(_register, st.sampled_from(BROKERS), st.sampled_from(["a", "b"])),
    st.builds(FenceBroker, st.sampled_from(BROKERS), st.sampled_from(["a", "b"])),
    st.builds(UnfenceBroker, st.sampled_from(BROKERS), st.sampled_from(["a", "b"])),
    st.builds(
        CreateTopic,
        st.sampled_from(["x", "y"]),
        st.sampled_from(["id-x", "id-y"]),
        st.lists(
            st.permutations(BROKERS).map(lambda p: PartitionSpec(tuple(p[:2]), tuple(p[:2]), p[0])),
            min_size=1,
            max_size=3,
        ).map(tuple),
        st.just(()),
    ),
    st.builds(DeleteTopic, st.sampled_from(["id-x", "id-y"])),
    st.builds(
        PartitionChange,
        st.sampled_from(["id-x", "id-y"]),
        st.integers(0, 2),
        st.sampled_from([-1, *BROKERS]),
        st.integers(0, 3),
        st.lists(st.sampled_from(BROKERS), max_size=3, unique=True).map(tuple),
        st.integers(0, 3),
    ),
    st.builds(
        ConfigChange,
        st.sampled_from(["topic", "broker"]),
        st.sampled_from(["x", "1"]),
        st.sampled_from(["k1", "k2"]),
        st.none() | st.just("v"),
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(record_strategy, max_size=40))
def test_arbitrary_record_sequences_replay_deterministically(records: list[Record]) -> None:
    first = MetadataImage.EMPTY.replay_all(records, 1)
    second = MetadataImage.EMPTY.replay_all(list(records), 1)
    assert first == second
    assert MetadataImage.from_dict(json.loads(json.dumps(first.to_dict()))) == first
    assert pickle.loads(pickle.dumps(first)) == first
    for topic in first.topics.values():
        for state in topic.partitions:
            assert set(state.isr) <= set(state.replicas)
            assert state.leader == -1 or state.leader in state.isr


_reassignments = st.builds(
    PartitionReassignment,
    st.sampled_from(["id-x", "id-y"]),
    st.integers(0, 2),
    st.lists(st.sampled_from(BROKERS), min_size=1, max_size=3, unique=True).map(tuple),
    st.lists(st.sampled_from(BROKERS), max_size=1).map(tuple),
    st.lists(st.sampled_from(BROKERS), max_size=1).map(tuple),
    st.sampled_from([-1, *BROKERS]),
    st.integers(0, 3),
    st.lists(st.sampled_from(BROKERS), max_size=3, unique=True).map(tuple),
    st.integers(0, 3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(record_strategy | _reassignments, max_size=60))
def test_replay_all_equals_replaying_one_record_at_a_time(records: list[Record]) -> None:
    # replay_all applies runs of PartitionChange records in one pass per touched topic; the
    # image must be exactly the one record-by-record replay gives (ignored records included).
    one_by_one = MetadataImage.EMPTY
    for record in records:
        one_by_one = one_by_one.replay(record)
    assert MetadataImage.EMPTY.replay_all(records, 7) == replace(one_by_one, version=7)


def test_a_run_of_partition_changes_copies_each_topic_once() -> None:
    # 2,000 leader moves in a 10,000-partition topic: the run is applied in one pass (it
    # used to copy the whole topic per record: 20 million element copies).
    specs = tuple(PartitionSpec((1, 2, 3), (1, 2, 3), 1) for _ in range(10_000))
    image = _cluster(1, 2, 3).replay_all([CreateTopic("big", "big-id", specs, ())], 2)
    changes = [PartitionChange("big-id", p, 2, 1, (2, 3), 1) for p in range(0, 10_000, 5)]
    changes.append(PartitionChange("big-id", 0, 3, 2, (3,), 2))  # a second change of one
    changes.append(PartitionChange("big-id", 1, 3, 2, (3,), 2))  # a stale one: ignored
    after = image.replay_all(changes, 3)
    partitions = after.topics["big"].partitions
    assert partitions[0].leader == 3 and partitions[0].partition_epoch == 2
    assert partitions[5].leader == 2 and partitions[5].isr == (2, 3)
    assert partitions[1] == image.topics["big"].partitions[1]
    assert sum(1 for s in partitions if s.leader == 2) == 1_999
