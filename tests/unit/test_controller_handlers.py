"""Pure controller handlers and placement: literal cases the scenarios do not show, plus
Hypothesis properties of the placement."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from flux.controller import handlers
from flux.controller.errors import InvalidReplicationFactorError
from flux.controller.handlers import ControllerResult
from flux.controller.image import MetadataImage
from flux.controller.placement import place_replicas, rack_alternated
from flux.controller.records import Record
from flux.protocol.errors import ErrorCode
from hypothesis import given
from hypothesis import strategies as st


def _apply(image: MetadataImage, records: list[Record]) -> MetadataImage:
    return image.replay_all(records, image.version + 1)


def _cluster(count: int, racks: list[str] | None = None) -> MetadataImage:
    image = MetadataImage.EMPTY
    for broker_id in range(1, count + 1):
        result = handlers.register_broker(
            image,
            broker_id=broker_id,
            incarnation_id="a",
            kafka_host="k",
            kafka_port=9092,
            http_host="h",
            http_port=8080,
            rack=racks[broker_id - 1] if racks else None,
        )
        image = _apply(image, result.records)
        image = _apply(image, handlers.unfence_broker(image, broker_id))
    return image


def _create(image: MetadataImage, **overrides: object) -> ControllerResult:
    arguments: dict[str, object] = dict(
        name="t",
        num_partitions=-1,
        replication_factor=-1,
        assignments=None,
        configs={},
        topic_id="tid",
        default_partitions=3,
        default_replication_factor=2,
        rng=random.Random(0),
    )
    arguments.update(overrides)
    return handlers.create_topic(image, **arguments)  # type: ignore[arg-type]


def test_create_topic_response_and_defaults() -> None:
    image = _cluster(3)
    result = _create(image)
    assert result.ok and len(result.records) == 1
    response = json.loads(json.dumps(result.response))
    assert response["error_code"] == 0 and response["error_message"] is None
    assert response["topic_id"] == "tid"
    assert response["num_partitions"] == 3 and response["replication_factor"] == 2
    assert [len(p["replicas"]) for p in response["partitions"]] == [2, 2, 2]
    assert _create(image, validate_only=True).records == []
    assert _create(image, validate_only=True).response == result.response


def test_create_topic_rejects_non_contiguous_assignments() -> None:
    result = _create(_cluster(2), assignments={0: [1], 2: [2]})
    assert result.response["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "numbered 0 to 1" in result.response["error_message"]
    assert result.records == []


def test_create_topic_with_fenced_broker_in_placement_pool_is_not_used() -> None:
    image = _cluster(3)
    image = _apply(image, handlers.fence_broker(image, 3))
    result = _create(image, num_partitions=6, replication_factor=2)
    used = {b for p in result.response["partitions"] for b in p["replicas"]}
    assert used == {1, 2}


def test_handlers_never_mutate_the_image() -> None:
    image = _cluster(3)
    image = _apply(image, _create(image).records)
    before = image.to_dict()
    handlers.fence_broker(image, 1)
    handlers.elect_leaders(image, partitions=None, election_type="unclean")
    handlers.alter_configs(
        image, resource_type="topic", resource_name="t", changes={"retention.ms": "1"}
    )
    handlers.create_partitions(image, name="t", count=5, assignments=None, rng=random.Random(1))
    handlers.delete_topic(image, name="t")
    assert image.to_dict() == before


def test_alter_partition_response_carries_the_new_state() -> None:
    image = _cluster(3)
    image = _apply(
        image,
        _create(
            image, assignments={0: [1, 2, 3]}, num_partitions=-1, replication_factor=-1
        ).records,
    )
    topic = image.topics["t"]
    result = handlers.alter_partition(
        image,
        broker_id=1,
        incarnation_id="a",
        topic_id=topic.topic_id,
        partition=0,
        leader_epoch=0,
        partition_epoch=0,
        isr=[1, 3],
    )
    assert result.ok
    assert result.response["isr"] == [1, 3] and result.response["partition_epoch"] == 1
    assert result.response["leader"] == 1 and result.response["leader_epoch"] == 0
    rejected = handlers.alter_partition(
        image,
        broker_id=1,
        incarnation_id="a",
        topic_id=topic.topic_id,
        partition=0,
        leader_epoch=0,
        partition_epoch=5,
        isr=[1],
    )
    assert rejected.response["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    # The rejection tells the leader the current state.
    assert rejected.response["partition_epoch"] == 0 and rejected.records == []


def test_stale_partition_change_from_a_concurrent_handler_is_ignored() -> None:
    image = _cluster(3)
    image = _apply(
        image,
        _create(
            image, assignments={0: [1, 2, 3]}, num_partitions=-1, replication_factor=-1
        ).records,
    )
    shrink = handlers.alter_partition(
        image,
        broker_id=1,
        incarnation_id="a",
        topic_id="tid",
        partition=0,
        leader_epoch=0,
        partition_epoch=0,
        isr=[1, 2],
    ).records
    fence = handlers.fence_broker(image, 1)
    after = _apply(_apply(image, shrink), fence)
    state = after.topics["t"].partitions[0]
    # The fence's PartitionChange was computed on the old epoch: it did not apply.
    assert state.leader == 1 and state.partition_epoch == 1
    assert after.brokers[1].fenced  # ...but the broker is fenced; the service recomputes.


def test_register_broker_validates_input() -> None:
    result = handlers.register_broker(
        MetadataImage.EMPTY,
        broker_id=-1,
        incarnation_id="",
        kafka_host="",
        kafka_port=0,
        http_host="h",
        http_port=1,
        rack=None,
    )
    assert result.response["error_code"] == ErrorCode.INVALID_REQUEST


def test_registered_listeners_answer_per_listener_and_fall_back_to_the_primary() -> None:
    listeners = (("INTERNAL", "flux1", 9092), ("EXTERNAL", "127.0.0.1", 19092))
    result = handlers.register_broker(
        MetadataImage.EMPTY,
        broker_id=1,
        incarnation_id="i1",
        kafka_host="flux1",
        kafka_port=9092,
        http_host="flux1",
        http_port=8080,
        rack=None,
        listeners=listeners,
    )
    registration = _apply(MetadataImage.EMPTY, result.records).brokers[1]
    assert registration.endpoint("EXTERNAL") == ("127.0.0.1", 19092)
    assert registration.endpoint("INTERNAL") == ("flux1", 9092)
    assert registration.endpoint("PLAINTEXT") == ("flux1", 9092)  # unknown name: the primary
    assert type(registration).from_dict(registration.to_dict()) == registration


@pytest.mark.parametrize(
    "listeners",
    [
        (("A", "h", 1), ("A", "h", 2)),  # a name twice
        (("A", "h", 0),),  # no port
        (("", "h", 1),),  # no name
        (("A", "", 1),),  # no host
    ],
)
def test_register_broker_rejects_bad_listeners(listeners) -> None:
    result = handlers.register_broker(
        MetadataImage.EMPTY,
        broker_id=1,
        incarnation_id="i1",
        kafka_host="k",
        kafka_port=9092,
        http_host="h",
        http_port=8080,
        rack=None,
        listeners=listeners,
    )
    assert result.response["error_code"] == ErrorCode.INVALID_REQUEST


def test_elect_all_preferred_reports_only_changes() -> None:
    image = _cluster(2)
    image = _apply(
        image,
        _create(
            image, assignments={0: [1, 2], 1: [2, 1]}, num_partitions=-1, replication_factor=-1
        ).records,
    )
    result = handlers.elect_leaders(image, partitions=None)
    assert result.ok and result.records == [] and result.response["partitions"] == []


# -- placement ------------------------------------------------------------------------------


def test_placement_rejects_too_large_replication_factor() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2"):
        place_replicas([(1, None), (2, None)], 3, 3, rng=random.Random(0))


def test_rack_alternated_order() -> None:
    brokers = [(1, "a"), (2, "a"), (3, "b"), (4, "c"), (5, "c"), (6, "b")]
    assert rack_alternated(brokers) == [1, 3, 4, 2, 6, 5]


@given(
    broker_count=st.integers(1, 9),
    rounds=st.integers(1, 4),
    replication_factor=st.integers(1, 9),
    seed=st.integers(0, 10_000),
)
def test_placement_spreads_leaders_and_replicas_evenly(
    broker_count: int, rounds: int, replication_factor: int, seed: int
) -> None:
    replication_factor = min(replication_factor, broker_count)
    brokers = [(b, None) for b in range(10, 10 + broker_count)]
    placed = place_replicas(
        brokers, broker_count * rounds, replication_factor, rng=random.Random(seed)
    )
    assert all(len(set(r)) == replication_factor for r in placed)
    leaders = Counter(r[0] for r in placed)
    assert set(leaders.values()) == {rounds}
    replicas = Counter(b for r in placed for b in r)
    assert set(replicas.values()) == {rounds * replication_factor}


@given(
    racks=st.integers(2, 4),
    per_rack=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    replication_factor=st.integers(1, 4),
)
def test_rack_aware_placement_uses_distinct_racks(
    racks: int, per_rack: int, seed: int, replication_factor: int
) -> None:
    brokers = [(r * 10 + i, f"rack{r}") for r in range(racks) for i in range(per_rack)]
    replication_factor = min(replication_factor, len(brokers))
    rack_of = dict(brokers)
    placed = place_replicas(brokers, len(brokers) * 2, replication_factor, rng=random.Random(seed))
    for replicas in placed:
        assert len(set(replicas)) == replication_factor
        assert len({rack_of[b] for b in replicas}) == min(replication_factor, racks)
    assert set(Counter(r[0] for r in placed).values()) == {2}


def test_alter_partitions_changes_many_partitions_in_one_command() -> None:
    image = _cluster(3)
    image = _apply(
        image,
        _create(
            image,
            assignments={0: [1, 2, 3], 1: [1, 3, 2], 2: [2, 1, 3]},
            num_partitions=-1,
            replication_factor=-1,
        ).records,
    )
    topic_id = image.topics["t"].topic_id

    def item(partition: int, isr: list[int], partition_epoch: int = 0) -> dict[str, object]:
        return {
            "topic_id": topic_id,
            "partition": partition,
            "leader_epoch": 0,
            "partition_epoch": partition_epoch,
            "isr": isr,
        }

    result = handlers.alter_partitions(
        image,
        broker_id=1,
        incarnation_id="a",
        partitions=[
            item(0, [1, 2]),
            item(1, [1, 3]),
            item(0, [1]),  # listed twice: refused, the first stands
            item(1, [1], partition_epoch=7),  # never reached: a duplicate too
            item(2, [2, 1]),  # broker 1 does not lead partition 2
        ],
    )
    assert result.ok
    codes = [answer["error_code"] for answer in result.response["partitions"]]
    assert codes == [
        ErrorCode.NONE,
        ErrorCode.NONE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ]
    after = _apply(image, result.records)
    assert [p.isr for p in after.topics["t"].partitions] == [(1, 2), (1, 3), (2, 1, 3)]
    too_many = handlers.alter_partitions(
        image,
        broker_id=1,
        incarnation_id="a",
        partitions=[item(0, [1])] * (handlers.MAX_ALTER_PARTITIONS + 1),
    )
    assert not too_many.ok and not too_many.records


def test_the_internal_state_topics_cannot_be_deleted() -> None:
    image = _cluster(2)
    for name in ("__consumer_offsets", "__transaction_state", "plain"):
        image = _apply(image, _create(image, name=name, topic_id=f"id-{name}").records)
    for name in ("__consumer_offsets", "__transaction_state"):
        for result in (
            handlers.delete_topic(image, name=name),
            handlers.delete_topic(image, topic_id=f"id-{name}"),
        ):
            assert result.records == []
            assert result.response["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
            assert f"{name} is an internal topic" in result.response["error_message"]
    deleted = handlers.delete_topic(image, name="plain")
    assert deleted.ok and len(deleted.records) == 1
