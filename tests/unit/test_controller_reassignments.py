"""Partition reassignments in the controller (``handlers.alter_partition_reassignments``, the
completion in ``alter_partition``, ``PartitionReassignment`` records): pure, no processes."""

from __future__ import annotations

from flux.controller import handlers
from flux.controller.image import MetadataImage
from flux.controller.records import PartitionReassignment, record_from_dict, record_to_dict
from flux.protocol.errors import ErrorCode

from tests.unit.test_controller_handlers import _apply, _cluster, _create


def _topic(count: int = 4) -> MetadataImage:
    image = _cluster(count)
    return _apply(image, _create(image, assignments={0: [1, 2, 3]}).records)


def _isr(image: MetadataImage, isr: list[int]) -> MetadataImage:
    state = image.topics["t"].partitions[0]
    result = handlers.alter_partition(
        image, broker_id=state.leader, incarnation_id="a", topic_id="tid", partition=0,
        leader_epoch=state.leader_epoch, partition_epoch=state.partition_epoch, isr=isr,
    )  # fmt: skip
    assert result.ok, result.response
    return _apply(image, result.records)


def test_a_reassignment_adds_then_completes_when_the_new_replica_is_in_sync() -> None:
    image = _topic()
    result = handlers.alter_partition_reassignments(image, requests=[("t", 0, [2, 3, 4])])
    assert result.response["partitions"] == [
        {"topic": "t", "partition": 0, "error_code": 0, "error_message": None}
    ]
    [record] = result.records
    assert json_round_trip(record) == record
    image = _apply(image, result.records)
    state = image.topics["t"].partitions[0]
    # Target first, then the leaving replica; broker 4 catches up outside the ISR.
    assert (state.replicas, state.adding, state.removing) == ((2, 3, 4, 1), (4,), (1,))
    assert state.isr == (1, 2, 3) and state.leader == 1
    assert handlers.list_partition_reassignments(image) == [
        {"topic": "t", "partition": 0, "replicas": [2, 3, 4, 1], "adding": [4], "removing": [1]}
    ]
    # An ISR change that does not take in broker 4 keeps the reassignment running.
    image = _isr(image, [1, 2])
    assert image.topics["t"].partitions[0].adding == (4,)
    image = _isr(image, [1, 2, 4])  # broker 4 caught up: the reassignment completes
    done = image.topics["t"].partitions[0]
    assert (done.replicas, done.adding, done.removing) == ((2, 3, 4), (), ())
    # The leaving leader handed over to the first target replica in the ISR, a new epoch.
    assert done.isr == (2, 4) and done.leader == 2 and done.leader_epoch == 1
    assert handlers.list_partition_reassignments(image) == []


def test_cancel_returns_to_the_original_replicas() -> None:
    image = _topic()
    image = _apply(image, handlers.alter_partition_reassignments(
        image, requests=[("t", 0, [2, 3, 4])]).records)  # fmt: skip
    result = handlers.alter_partition_reassignments(image, requests=[("t", 0, None)])
    image = _apply(image, result.records)
    state = image.topics["t"].partitions[0]
    # Kafka's revert: the replicas minus the adding ones, in the running order (the original
    # order is not kept: the preferred replica may change).
    assert (state.replicas, state.adding, state.removing, state.leader) == ((2, 3, 1), (), (), 1)
    again = handlers.alter_partition_reassignments(image, requests=[("t", 0, None)])
    assert again.response["partitions"][0]["error_code"] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_refusals_and_no_ops() -> None:
    image = _topic()
    result = handlers.alter_partition_reassignments(
        image,
        requests=[("t", 0, [1, 1]), ("t", 0, [1, 9]), ("nope", 0, [1]), ("t", 0, [1, 2, 3])],
    )
    codes = [p["error_code"] for p in result.response["partitions"]]
    assert codes == [
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NONE,  # already there: nothing to do
    ]
    assert result.records == []
    # Removing a replica only (nothing to catch up) completes at once.
    shrink = handlers.alter_partition_reassignments(image, requests=[("t", 0, [1, 2])])
    image = _apply(image, shrink.records)
    state = image.topics["t"].partitions[0]
    assert (state.replicas, state.isr, state.reassigning) == ((1, 2), (1, 2), False)


def test_isr_changes_keep_a_running_reassignment() -> None:
    image = _topic()
    image = _apply(image, handlers.alter_partition_reassignments(
        image, requests=[("t", 0, [2, 3, 4])]).records)  # fmt: skip
    # A leader election (broker 1 fenced) is a PartitionChange: it keeps adding/removing.
    image = _apply(image, handlers.fence_broker(image, 1))
    state = image.topics["t"].partitions[0]
    assert state.leader in (2, 3) and (state.adding, state.removing) == ((4,), (1,))


def json_round_trip(record: PartitionReassignment) -> PartitionReassignment:
    return record_from_dict(record_to_dict(record))
