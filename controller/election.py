"""Leader-election rules: the records that fence or unfence a broker and move partition
leadership accordingly (Kafka KRaft's ``ReplicationControlManager`` and
``PartitionChangeBuilder``).

Pure functions of a ``MetadataImage``; they never mutate it. Each returns records in a
deterministic order (topics by name, partitions by number) that the image replays in order.

Rules:

- Fencing a broker removes it from every ISR, except that the last member of an ISR stays
  (so it is the only clean choice when it returns). A partition it led gets as leader the
  first replica, in replica order, that is in the remaining ISR and live. With no such
  replica the partition goes offline (leader ``-1``), unless the topic sets
  ``unclean.leader.election.enable=true``: then the first live replica leads with ISR = [it].
- A leader change bumps ``leader_epoch`` and ``partition_epoch``; an ISR-only change bumps
  ``partition_epoch``.
- Unfencing a broker makes it leader of every offline partition whose ISR contains it (or,
  for topics with unclean election enabled, of offline partitions it merely replicates). It
  never re-adds itself to an ISR: that is the partition leader's job (``alter_partition``).
"""

from __future__ import annotations

from collections.abc import Iterator

from flux.controller.image import MetadataImage, PartitionState, TopicImage
from flux.controller.records import FenceBroker, PartitionChange, Record, UnfenceBroker

__all__ = [
    "UNCLEAN_ELECTION_KEY",
    "fence_broker",
    "fencing_changes",
    "first_live_replica",
    "leader_change",
    "preferred_leader_imbalance",
    "unclean_enabled",
    "unfence_broker",
]

UNCLEAN_ELECTION_KEY = "unclean.leader.election.enable"


def unclean_enabled(topic: TopicImage) -> bool:
    return topic.config_dict().get(UNCLEAN_ELECTION_KEY) == "true"


def _partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionState]]:
    for topic in image.topics.values():
        for index, state in enumerate(topic.partitions):
            yield topic, index, state


def leader_change(
    topic: TopicImage, partition: int, state: PartitionState, *, leader: int, isr: tuple[int, ...]
) -> PartitionChange:
    """A PartitionChange to ``leader``/``isr``: epochs follow the rules of the module docstring."""
    leader_moved = leader != state.leader
    return PartitionChange(
        topic_id=topic.topic_id,
        partition=partition,
        leader=leader,
        leader_epoch=state.leader_epoch + 1 if leader_moved else state.leader_epoch,
        isr=isr,
        partition_epoch=state.partition_epoch + 1,
    )


def first_live_replica(
    image: MetadataImage, state: PartitionState, *, among: tuple[int, ...] | None, exclude: int
) -> int | None:
    """The first replica (replica order) that is live, not ``exclude`` and, if given, in
    ``among``."""
    for replica in state.replicas:
        if replica == exclude or not image.is_live(replica):
            continue
        if among is None or replica in among:
            return replica
    return None


def _fence_partition(
    image: MetadataImage, topic: TopicImage, partition: int, state: PartitionState, broker_id: int
) -> PartitionChange | None:
    if state.leader == -1:
        # Offline: keep the ISR as it is so its members stay the clean choices.
        return None
    remaining = tuple(r for r in state.isr if r != broker_id)
    if state.leader != broker_id:
        if remaining == state.isr:
            return None
        return leader_change(topic, partition, state, leader=state.leader, isr=remaining)
    clean = first_live_replica(image, state, among=remaining, exclude=broker_id)
    if clean is not None:
        return leader_change(topic, partition, state, leader=clean, isr=remaining)
    if unclean_enabled(topic):
        unclean = first_live_replica(image, state, among=None, exclude=broker_id)
        if unclean is not None:
            return leader_change(topic, partition, state, leader=unclean, isr=(unclean,))
    # Offline. The ISR keeps its last member (Kafka's rule) so it can lead again cleanly.
    return leader_change(topic, partition, state, leader=-1, isr=remaining or (broker_id,))


def fencing_changes(image: MetadataImage, broker_id: int) -> list[Record]:
    """The PartitionChanges that fencing ``broker_id`` implies (without the FenceBroker)."""
    changes: list[Record] = []
    for topic, partition, state in _partitions(image):
        if state.leader == broker_id or broker_id in state.isr:
            change = _fence_partition(image, topic, partition, state, broker_id)
            if change is not None:
                changes.append(change)
    return changes


def fence_broker(image: MetadataImage, broker_id: int) -> list[Record]:
    """``[FenceBroker, PartitionChange...]``; ``[]`` if the broker is unknown or fenced."""
    registration = image.brokers.get(broker_id)
    if registration is None or registration.fenced:
        return []
    fence: Record = FenceBroker(broker_id=broker_id, incarnation_id=registration.incarnation_id)
    # Fencing is replayed first so the elections below already see the broker as fenced.
    return [fence, *fencing_changes(image, broker_id)]


def unfence_broker(image: MetadataImage, broker_id: int) -> list[Record]:
    """``[UnfenceBroker, PartitionChange...]``; ``[]`` if the broker is unknown or unfenced."""
    registration = image.brokers.get(broker_id)
    if registration is None or not registration.fenced:
        return []
    records: list[Record] = [
        UnfenceBroker(broker_id=broker_id, incarnation_id=registration.incarnation_id)
    ]
    for topic, partition, state in _partitions(image):
        if state.leader != -1 or broker_id not in state.replicas:
            continue
        if broker_id in state.isr:
            records.append(leader_change(topic, partition, state, leader=broker_id, isr=state.isr))
        elif unclean_enabled(topic) and not any(image.is_live(r) for r in state.isr):
            records.append(
                leader_change(topic, partition, state, leader=broker_id, isr=(broker_id,))
            )
    return records


def preferred_leader_imbalance(image: MetadataImage) -> list[tuple[str, int]]:
    """Partitions whose preferred replica is live, in the ISR and not the leader."""
    return [
        (topic.name, partition)
        for topic, partition, state in _partitions(image)
        if state.leader != state.preferred_leader
        and state.preferred_leader in state.isr
        and image.is_live(state.preferred_leader)
    ]
