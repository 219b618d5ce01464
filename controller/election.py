"""Leader-election rules: the records that fence, unfence or re-register a broker and move
partition leadership accordingly (Kafka KRaft's ``ReplicationControlManager`` and
``PartitionChangeBuilder``, with KIP-966's eligible leader replicas).

Pure functions of a ``MetadataImage``; they never mutate it. Each returns records in a
deterministic order (topics by name, partitions by number) that the image replays in order.

Words: a broker is *live* when registered and unfenced, and *alive* when, in addition, the
active controller has heard from it since it took over (``MetadataImage.is_alive``). A
partition's *eligible* replicas are its ISR and its ELR: each holds every record acknowledged
with ``acks=all``. ``min_isr`` is the topic's ``min.insync.replicas``.

Rules:

- **Only alive brokers are elected.** A broker that died together with the previous active
  controller stays live until its session ends, but it is never made leader.
- **A departing broker** (fenced, or re-registered by a new process) loses its leaderships
  and leaves the ISR of every partition that keeps a leader. It joins the partition's ELR
  when, after the change, the partition cannot acknowledge ``acks=all`` writes without it
  (the ISR is smaller than ``min_isr``): nothing acknowledged can then be missing from it.
- **A partition left without an alive ISR member** is led by its first alive ELR member (its
  ISR becomes that member; the former ISR members join the ELR, since each of them holds every
  acknowledged record). With none, it goes offline (leader ``-1``) and its ISR keeps every
  member, departing ones included: an offline partition acknowledges nothing, so they remain
  the clean choices. With ``unclean.leader.election.enable=true`` the first alive replica
  leads instead, with ISR = [it] and no ELR (records may be lost).
- **A broker whose log is gone** (it registers with a new log directory id) leaves the ISR and
  the ELR everywhere, even as the last member: it holds nothing.
- **A broker that becomes alive** (unfenced, or heard from by a new active controller) leads
  every offline partition where it is eligible, preferring alive ISR members; the ISR then
  shrinks to its alive members and the others join the ELR while the ISR is smaller than
  ``min_isr``.
- **The ELR is emptied** whenever the partition has a leader and at least ``min_isr`` ISR
  members (writes are acknowledged without its members from then on); a replica that joins
  the ISR leaves the ELR.
- A leader change bumps ``leader_epoch`` and ``partition_epoch``; any other change bumps
  ``partition_epoch`` only.

Durability assumption, written in ``docs/operations.md``: a broker that comes back with the
same log directory holds what it held when it stopped. True after a process crash (the page
cache survives ``kill -9``); after a power loss only for data that was fsynced
(``log.flush.interval.messages``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

from flux.controller.image import MetadataImage, PartitionState, TopicImage
from flux.controller.records import FenceBroker, PartitionChange, Record, UnfenceBroker

__all__ = [
    "MIN_ISR_KEY",
    "UNCLEAN_ELECTION_KEY",
    "departure_changes",
    "elect_without_isr",
    "fence_broker",
    "fence_brokers",
    "first_alive_replica",
    "leader_change",
    "min_insync_replicas",
    "preferred_leader_imbalance",
    "settled_change",
    "unclean_enabled",
    "unfence_broker",
]

UNCLEAN_ELECTION_KEY = "unclean.leader.election.enable"
MIN_ISR_KEY = "min.insync.replicas"


def unclean_enabled(topic: TopicImage) -> bool:
    return topic.config_dict().get(UNCLEAN_ELECTION_KEY) == "true"


def min_insync_replicas(topic: TopicImage, default: int) -> int:
    """The topic's ``min.insync.replicas`` (its override, else the cluster default)."""
    value = topic.config_dict().get(MIN_ISR_KEY)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:  # validated at create/alter time; never trust it to crash elections
        return default


def _partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionState]]:
    for topic in image.topics.values():
        for index, state in enumerate(topic.partitions):
            yield topic, index, state


def settled_change(
    topic: TopicImage,
    partition: int,
    state: PartitionState,
    *,
    leader: int,
    isr: Sequence[int],
    elr: Collection[int],
    min_isr: int,
) -> PartitionChange | None:
    """The PartitionChange to ``leader``/``isr``/``elr`` after the ELR rules (kept in replica
    order, outside the ISR, emptied once the partition has a leader and ``min_isr`` ISR
    members); None if that is the current state."""
    isr = tuple(dict.fromkeys(isr))
    if leader != -1 and len(isr) >= min_isr:
        new_elr: tuple[int, ...] = ()
    else:
        new_elr = tuple(r for r in state.replicas if r in elr and r not in isr)
    if (leader, isr, new_elr) == (state.leader, state.isr, state.elr):
        return None
    return PartitionChange(
        topic_id=topic.topic_id,
        partition=partition,
        leader=leader,
        leader_epoch=state.leader_epoch + 1 if leader != state.leader else state.leader_epoch,
        isr=isr,
        partition_epoch=state.partition_epoch + 1,
        elr=new_elr,
    )


def leader_change(
    topic: TopicImage,
    partition: int,
    state: PartitionState,
    *,
    leader: int,
    isr: tuple[int, ...],
    min_isr: int,
) -> PartitionChange:
    """The PartitionChange that moves leadership to ``leader`` (a new one) with ``isr``,
    keeping the ELR rules of ``settled_change``."""
    assert leader != state.leader, "a leader change must change the leader"
    change = settled_change(
        topic, partition, state, leader=leader, isr=isr, elr=state.elr, min_isr=min_isr
    )
    assert change is not None
    return change


def first_alive_replica(
    image: MetadataImage,
    state: PartitionState,
    *,
    among: Collection[int] | None,
    exclude: Collection[int] = (),
) -> int | None:
    """The first replica (replica order) that is alive, not in ``exclude`` and, if given, in
    ``among``."""
    for replica in state.replicas:
        if replica in exclude or not image.is_alive(replica):
            continue
        if among is None or replica in among:
            return replica
    return None


def elect_without_isr(
    image: MetadataImage,
    topic: TopicImage,
    partition: int,
    state: PartitionState,
    *,
    isr: tuple[int, ...],
    elr: tuple[int, ...],
    gone: Collection[int] = (),
    min_isr: int,
    unclean: bool,
) -> PartitionChange | None:
    """``state`` needs a leader and none of ``isr`` is alive: its first alive ELR member leads
    (ISR = [it]; the former ISR members join the ELR, each holding every acknowledged record);
    with none and ``unclean``, the first alive replica leads with ISR = [it] and no ELR. None
    if neither is possible. ``gone``: brokers leaving now, never chosen."""
    eligible = first_alive_replica(image, state, among=elr, exclude=gone)
    if eligible is not None:
        return settled_change(
            topic,
            partition,
            state,
            leader=eligible,
            isr=(eligible,),
            elr=set(elr) | set(isr),
            min_isr=min_isr,
        )
    if unclean:
        chosen = first_alive_replica(image, state, among=None, exclude=gone)
        if chosen is not None:
            return settled_change(
                topic, partition, state, leader=chosen, isr=(chosen,), elr=(), min_isr=min_isr
            )
    return None


def _leaderless(
    image: MetadataImage,
    topic: TopicImage,
    partition: int,
    state: PartitionState,
    *,
    isr: tuple[int, ...],
    elr: tuple[int, ...],
    gone: Collection[int],
    min_isr: int,
) -> PartitionChange | None:
    """``state`` needs a leader and none of ``isr`` is alive: an ELR member, an unclean
    choice where the topic allows it, or offline with ``isr`` kept whole."""
    elected = elect_without_isr(
        image,
        topic,
        partition,
        state,
        isr=isr,
        elr=elr,
        gone=gone,
        min_isr=min_isr,
        unclean=unclean_enabled(topic),
    )
    if elected is not None:
        return elected
    return settled_change(topic, partition, state, leader=-1, isr=isr, elr=elr, min_isr=min_isr)


def _depart(
    image: MetadataImage,
    topic: TopicImage,
    partition: int,
    state: PartitionState,
    *,
    departed: Collection[int],
    lost: Collection[int],
    min_isr: int,
) -> PartitionChange | None:
    isr = tuple(r for r in state.isr if r not in lost)
    elr = tuple(r for r in state.elr if r not in lost)
    gone = set(departed) | set(lost)
    remaining = tuple(r for r in isr if r not in departed)
    leaving = tuple(r for r in isr if r in departed)
    if state.leader != -1 and state.leader not in gone:
        leader = state.leader
    else:
        candidate = first_alive_replica(image, state, among=remaining, exclude=gone)
        if candidate is None:
            return _leaderless(
                image, topic, partition, state, isr=isr, elr=elr, gone=gone, min_isr=min_isr
            )
        leader = candidate
    # The partition keeps (or gets) a leader: the departed leave its ISR, and stay eligible
    # only while it cannot acknowledge acks=all writes without them.
    joins_elr = leaving if len(remaining) < min_isr else ()
    return settled_change(
        topic,
        partition,
        state,
        leader=leader,
        isr=remaining,
        elr=set(elr) | set(joins_elr),
        min_isr=min_isr,
    )


def departure_changes(
    image: MetadataImage,
    departed: Collection[int],
    *,
    lost: Collection[int] = (),
    default_min_isr: int = 1,
) -> list[Record]:
    """The PartitionChanges for brokers that stop serving at once: ``departed`` (fenced or
    re-registered, their logs intact) and ``lost`` (re-registered with a new log directory:
    they hold nothing). Computed on the image before they left."""
    involved = set(departed) | set(lost)
    changes: list[Record] = []
    for topic, partition, state in _partitions(image):
        if not (
            state.leader in involved or involved & set(state.isr) or set(lost) & set(state.elr)
        ):
            continue
        change = _depart(
            image,
            topic,
            partition,
            state,
            departed=departed,
            lost=lost,
            min_isr=min_insync_replicas(topic, default_min_isr),
        )
        if change is not None:
            changes.append(change)
    return changes


def fence_brokers(
    image: MetadataImage, broker_ids: Collection[int], *, default_min_isr: int = 1
) -> list[Record]:
    """``[FenceBroker..., PartitionChange...]`` for the live ones of ``broker_ids``, decided
    together: brokers whose sessions ended at the same moment (every node of a crashed
    cluster) leave as one event, so none of them is mistaken for a leader that still
    acknowledges writes while the others leave its ISR."""
    fences: list[Record] = []
    departing = []
    for broker_id in sorted(set(broker_ids)):
        registration = image.brokers.get(broker_id)
        if registration is None or registration.fenced:
            continue
        fences.append(FenceBroker(broker_id=broker_id, incarnation_id=registration.incarnation_id))
        departing.append(broker_id)
    if not fences:
        return []
    # Fencing is replayed first so the elections below already see the brokers as fenced.
    changes = departure_changes(image, departing, default_min_isr=default_min_isr)
    return [*fences, *changes]


def fence_broker(image: MetadataImage, broker_id: int, *, default_min_isr: int = 1) -> list[Record]:
    """``[FenceBroker, PartitionChange...]``; ``[]`` if the broker is unknown or fenced."""
    return fence_brokers(image, (broker_id,), default_min_isr=default_min_isr)


def _arrive(
    image: MetadataImage,
    topic: TopicImage,
    partition: int,
    state: PartitionState,
    broker_id: int,
    min_isr: int,
) -> PartitionChange | None:
    alive_isr = tuple(r for r in state.isr if image.is_alive(r))
    if alive_isr:
        leader = next(r for r in state.replicas if r in alive_isr)
        leaving = tuple(r for r in state.isr if r not in alive_isr)
        joins_elr = leaving if len(alive_isr) < min_isr else ()
        return settled_change(
            topic,
            partition,
            state,
            leader=leader,
            isr=alive_isr,
            elr=set(state.elr) | set(joins_elr),
            min_isr=min_isr,
        )
    if broker_id in state.elr or unclean_enabled(topic):
        return _leaderless(
            image,
            topic,
            partition,
            state,
            isr=state.isr,
            elr=state.elr,
            gone=(),
            min_isr=min_isr,
        )
    return None


def unfence_broker(
    image: MetadataImage, broker_id: int, *, default_min_isr: int = 1
) -> list[Record]:
    """``[UnfenceBroker, PartitionChange...]`` for a fenced broker, or a live one the active
    controller hears from for the first time; ``[]`` if unknown, or already alive."""
    registration = image.brokers.get(broker_id)
    if registration is None or (not registration.fenced and registration.alive):
        return []
    unfence = UnfenceBroker(broker_id=broker_id, incarnation_id=registration.incarnation_id)
    after = image.replay(unfence)
    records: list[Record] = [unfence]
    for topic, partition, state in _partitions(after):
        if state.leader != -1 or broker_id not in state.replicas:
            continue
        change = _arrive(
            after, topic, partition, state, broker_id, min_insync_replicas(topic, default_min_isr)
        )
        if change is not None:
            records.append(change)
    return records


def preferred_leader_imbalance(image: MetadataImage) -> list[tuple[str, int]]:
    """Partitions whose preferred replica is alive, in the ISR and not the leader."""
    return [
        (topic.name, partition)
        for topic, partition, state in _partitions(image)
        if state.leader != state.preferred_leader
        and state.preferred_leader in state.isr
        and image.is_alive(state.preferred_leader)
    ]
