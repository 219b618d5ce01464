"""The immutable metadata image and the delta between two images (Kafka's ``MetadataImage`` and
``MetadataDelta``).

``MetadataImage.replay(record)`` is the only state transition of the metadata. It is pure and
deterministic: a record that does not apply to the image (a stale ``PartitionChange``, a fence
of an old incarnation, a topic that already exists...) is ignored, logged at DEBUG, never
raised, so every replica of the log ends in the same state.

Thread-safety: images, deltas and their parts are immutable and may be shared between threads.
They pickle (pysyncobj snapshots the state machine with pickle) and convert to and from a
JSON-able dict exactly.

Invariants kept by ``replay`` (checked by tests): a partition's leader is ``-1`` or a member
of its ISR, the ISR and the ELR are disjoint subsets of the replicas, and its epochs never
decrease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar

from flux.controller.records import (
    AllocateProducerIds,
    ConfigChange,
    ControllerActivated,
    CreateAcl,
    CreatePartitions,
    CreateTopic,
    DeleteAcl,
    DeleteSubscription,
    DeleteTopic,
    FenceBroker,
    PartitionChange,
    PartitionReassignment,
    PartitionSpec,
    QuorumVoters,
    Record,
    RegisterBroker,
    RegisterSubscription,
    RemoveUserScramCredential,
    SubscriptionStateChange,
    SubscriptionWindowChange,
    UnfenceBroker,
    UnregisterBroker,
    UserScramCredential,
    record_from_dict,
    record_to_dict,
)

__all__ = [
    "BrokerRegistration",
    "FrozenMap",
    "MetadataDelta",
    "MetadataImage",
    "PartitionState",
    "RoleChanges",
    "SubscriptionImage",
    "TopicImage",
    "reassigned_state",
]

_log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V]):
    """An immutable, hashable, picklable mapping (``types.MappingProxyType`` does not pickle).

    Iterates in insertion order; equality is mapping equality.
    """

    __slots__ = ("_data", "_hash", "_memo")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._data: dict[K, V] = dict(items)
        self._hash: int | None = None
        self._memo: dict[str, Any] | None = None

    def memo(self, name: str, build: Callable[[FrozenMap[K, V]], Any]) -> Any:
        """``build(self)``, computed once per map (the map never changes): an index over the
        values, for example. Not part of equality, hashing or pickling."""
        if self._memo is None:
            self._memo = {}
        if name not in self._memo:
            self._memo[name] = build(self)
        return self._memo[name]

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (tuple(self._data.items()),))

    def set(self, key: K, value: V) -> FrozenMap[K, V]:
        """A copy with ``key`` set to ``value``."""
        data = dict(self._data)
        data[key] = value
        return FrozenMap(data)

    def remove(self, key: K) -> FrozenMap[K, V]:
        """A copy without ``key`` (the same map if it is absent)."""
        if key not in self._data:
            return self
        data = dict(self._data)
        del data[key]
        return FrozenMap(data)


def _setstate_with_defaults(instance: Any, state: Sequence[Any]) -> None:
    """Unpickle a frozen slotted dataclass whose pickle predates its trailing fields: those get
    their defaults (so a controller upgraded in place reads its old Raft snapshot)."""
    for index, item in enumerate(fields(instance)):
        if index < len(state):
            value = state[index]
        elif item.default_factory is not MISSING:
            value = item.default_factory()
        else:
            value = item.default
        object.__setattr__(instance, item.name, value)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One broker incarnation. ``fenced``: it may not lead or serve. ``alive``: the active
    controller has heard from this incarnation since it took over (a registration or a
    heartbeat); only alive, unfenced brokers are elected leaders. ``log_dir_id``: see
    ``RegisterBroker``."""

    broker_id: int
    incarnation_id: str
    kafka_host: str
    kafka_port: int
    http_host: str
    http_port: int
    rack: str | None
    fenced: bool
    listeners: tuple[tuple[str, str, int], ...] = ()
    alive: bool = True
    log_dir_id: str = ""

    def __setstate__(self, state: Sequence[Any]) -> None:
        _setstate_with_defaults(self, state)

    def endpoint(self, listener: str | None) -> tuple[str, int]:
        """The advertised ``(host, port)`` of ``listener``; the primary listener for None or a
        name this broker does not have (a client is never left without an address)."""
        for name, host, port in self.listeners:
            if name == listener:
                return host, port
        return self.kafka_host, self.kafka_port

    def to_dict(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "incarnation_id": self.incarnation_id,
            "kafka_host": self.kafka_host,
            "kafka_port": self.kafka_port,
            "http_host": self.http_host,
            "http_port": self.http_port,
            "rack": self.rack,
            "fenced": self.fenced,
            "listeners": [list(endpoint) for endpoint in self.listeners],
            "alive": self.alive,
            "log_dir_id": self.log_dir_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BrokerRegistration:
        return cls(
            broker_id=int(data["broker_id"]),
            incarnation_id=str(data["incarnation_id"]),
            kafka_host=str(data["kafka_host"]),
            kafka_port=int(data["kafka_port"]),
            http_host=str(data["http_host"]),
            http_port=int(data["http_port"]),
            rack=None if data.get("rack") is None else str(data["rack"]),
            fenced=bool(data["fenced"]),
            listeners=tuple(
                (str(name), str(host), int(port)) for name, host, port in data.get("listeners", ())
            ),
            alive=bool(data.get("alive", True)),
            log_dir_id=str(data.get("log_dir_id", "")),
        )


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leader, ISR and ELR of one partition. ``leader == -1`` means the partition is offline.

    ``elr``: eligible leader replicas (Kafka's KIP-966): replicas outside the ISR that hold
    every acknowledged record, so they may lead when no ISR member is alive (the rules are in
    ``election.py``)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] = ()
    #: A running reassignment (``PartitionReassignment``): target replicas still catching up,
    #: and replicas that leave when it completes.
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    def __setstate__(self, state: Sequence[Any]) -> None:
        _setstate_with_defaults(self, state)

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the running reassignment completes (the replicas if none)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the running reassignment (the replicas if none)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def offline(self) -> bool:
        return self.leader == -1

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "elr": list(self.elr),
            **(
                {"adding": list(self.adding), "removing": list(self.removing)}
                if self.reassigning
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionState:
        return cls(
            replicas=tuple(int(r) for r in data["replicas"]),
            isr=tuple(int(r) for r in data["isr"]),
            leader=int(data["leader"]),
            leader_epoch=int(data["leader_epoch"]),
            partition_epoch=int(data["partition_epoch"]),
            elr=tuple(int(r) for r in data.get("elr", ())),
            adding=tuple(int(r) for r in data.get("adding", ())),
            removing=tuple(int(r) for r in data.get("removing", ())),
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    """One topic: its partitions (index = partition number) and config overrides (sorted)."""

    name: str
    topic_id: str
    partitions: tuple[PartitionState, ...]
    config: tuple[tuple[str, str], ...]

    def config_dict(self) -> dict[str, str]:
        return dict(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": [p.to_dict() for p in self.partitions],
            "config": [[k, v] for k, v in self.config],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TopicImage:
        return cls(
            name=str(data["name"]),
            topic_id=str(data["topic_id"]),
            partitions=tuple(PartitionState.from_dict(p) for p in data["partitions"]),
            config=tuple((str(k), str(v)) for k, v in data["config"]),
        )


@dataclass(frozen=True, slots=True)
class SubscriptionImage:
    """One push subscription (see ``RegisterSubscription``). ``changed_ms``: when it was
    created or last changed state (wall clock, from the record). ``max_in_flight``: its
    window (``SubscriptionWindowChange``); 1 in snapshots written before it existed."""

    subscription_id: str
    address: str
    topics: tuple[str, ...]
    read_old: bool
    active: bool
    changed_ms: int
    max_in_flight: int = 1
    signing_secret: str = field(default="", repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "signing_secret": self.signing_secret,
            "subscription_id": self.subscription_id,
            "address": self.address,
            "topics": list(self.topics),
            "read_old": self.read_old,
            "active": self.active,
            "changed_ms": self.changed_ms,
            "max_in_flight": self.max_in_flight,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubscriptionImage:
        return cls(
            subscription_id=str(data["subscription_id"]),
            address=str(data["address"]),
            topics=tuple(str(t) for t in data["topics"]),
            read_old=bool(data["read_old"]),
            active=bool(data["active"]),
            changed_ms=int(data["changed_ms"]),
            max_in_flight=int(data.get("max_in_flight", 1)),
            signing_secret=str(data.get("signing_secret", "")),
        )


def _sorted_pairs(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(dict(pairs).items()))


def _spec_is_valid(spec: PartitionSpec) -> bool:
    return (
        len(spec.replicas) > 0
        and len(set(spec.replicas)) == len(spec.replicas)
        and len(set(spec.isr)) == len(spec.isr)
        and set(spec.isr) <= set(spec.replicas)
        and (spec.leader == -1 or spec.leader in spec.isr)
    )


def _initial_state(spec: PartitionSpec) -> PartitionState:
    return PartitionState(
        replicas=spec.replicas, isr=spec.isr, leader=spec.leader, leader_epoch=0, partition_epoch=0
    )


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The whole cluster metadata at ``version`` (the Raft index of the last applied command).

    ``brokers`` maps broker id to registration, ``topics`` maps topic name to topic and
    ``broker_configs`` maps a broker resource name (``"1"``, or ``""`` for the cluster default)
    to its sorted config pairs. ``scram_credentials`` maps ``(user, mechanism)`` to the record
    that set it (salted keys, never a password); ``acls`` holds each ACL binding as the
    ``CreateAcl`` record that added it, keyed by ``acl_key``. ``quorum_voters`` is the
    controller quorum's voters ``(node_id, raft_address, http_address)`` as of the last
    membership change (``QuorumVoters``); empty until one: the config files' voters apply.
    """

    EMPTY: ClassVar[MetadataImage]

    version: int
    brokers: FrozenMap[int, BrokerRegistration] = field(default_factory=FrozenMap)
    topics: FrozenMap[str, TopicImage] = field(default_factory=FrozenMap)
    broker_configs: FrozenMap[str, tuple[tuple[str, str], ...]] = field(default_factory=FrozenMap)
    next_producer_id: int = 0  # the first producer id not yet allocated to any broker
    subscriptions: FrozenMap[str, SubscriptionImage] = field(default_factory=FrozenMap)
    scram_credentials: FrozenMap[tuple[str, str], UserScramCredential] = field(
        default_factory=FrozenMap
    )
    acls: FrozenMap[tuple[Any, ...], CreateAcl] = field(default_factory=FrozenMap)
    quorum_voters: tuple[tuple[int, str, str], ...] = ()

    def __setstate__(self, state: Sequence[Any]) -> None:
        """Unpickle; snapshots written before a field existed get its default (so a controller
        upgraded in place reads its old Raft snapshot)."""
        values = dict(zip([f.name for f in fields(self)], state, strict=False))
        values.setdefault("subscriptions", FrozenMap())
        values.setdefault("scram_credentials", FrozenMap())
        values.setdefault("acls", FrozenMap())
        values.setdefault("quorum_voters", ())
        for name, value in values.items():
            object.__setattr__(self, name, value)

    # -- queries ------------------------------------------------------------------------

    def topic_by_id(self, topic_id: str) -> TopicImage | None:
        """The topic with ``topic_id``; an index built once per ``topics`` map, so a lookup
        does not cost the number of topics."""
        return self.topics.memo("by_id", _index_by_id).get(topic_id)

    def live_broker_ids(self) -> list[int]:
        """Registered, unfenced brokers, sorted."""
        return sorted(b.broker_id for b in self.brokers.values() if not b.fenced)

    def is_live(self, broker_id: int) -> bool:
        """Registered and unfenced: it serves clients (what brokers and clients go by)."""
        registration = self.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    def is_alive(self, broker_id: int) -> bool:
        """Live, and heard from by the active controller since it took over: what elections go
        by (a broker that died with the previous controller is live until its session ends,
        but never alive)."""
        registration = self.brokers.get(broker_id)
        return registration is not None and not registration.fenced and registration.alive

    def unconfirmed_broker_ids(self) -> list[int]:
        """Live brokers the active controller has not heard from yet (sorted)."""
        return sorted(b.broker_id for b in self.brokers.values() if not b.fenced and not b.alive)

    # -- replay -------------------------------------------------------------------------

    def replay_all(self, records: Sequence[Record], version: int) -> MetadataImage:
        """Apply ``records`` in order, then set ``version``.

        A run of consecutive ``PartitionChange`` / ``PartitionReassignment`` records (an ISR
        wave, a broker's departure, a rebalance) is applied in one pass that copies each touched topic's partitions once: replaying them
        one by one copied the whole topic per record, so 3,334 leader moves in a
        10,000-partition topic cost 33 million element copies (1.5 s on a broker's event
        loop). The result is the same image record-by-record replay gives."""
        image = self
        run: list[PartitionChange | PartitionReassignment] = []
        for record in records:
            if type(record) in _PARTITION_STATE_RECORDS:
                run.append(record)  # type: ignore[arg-type]
                continue
            if run:
                image = image._replay_partition_changes(run)
                run = []
            image = image.replay(record)
        if run:
            image = image._replay_partition_changes(run)
        return replace(image, version=version)

    def replay(self, record: Record) -> MetadataImage:
        """The image after ``record``; ``self`` if it does not apply. Keeps ``version``."""
        handler = _REPLAYERS.get(type(record))
        if handler is None:
            raise TypeError(f"not a metadata record: {record!r}")
        return handler(self, record)

    def _ignore(self, record: Record, reason: str) -> MetadataImage:
        _log.debug("ignoring %r: %s", record, reason)
        return self

    def _replay_quorum_voters(self, record: QuorumVoters) -> MetadataImage:
        if not record.voters:
            return self._ignore(record, "a quorum needs at least one voter")
        return replace(self, quorum_voters=tuple(sorted(record.voters)))

    def _replay_controller_activated(self, record: ControllerActivated) -> MetadataImage:
        brokers = FrozenMap((b_id, replace(b, alive=False)) for b_id, b in self.brokers.items())
        return replace(self, brokers=brokers)

    def _replay_register(self, record: RegisterBroker) -> MetadataImage:
        registration = BrokerRegistration(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            kafka_host=record.kafka_host,
            kafka_port=record.kafka_port,
            http_host=record.http_host,
            http_port=record.http_port,
            rack=record.rack,
            fenced=True,
            listeners=record.listeners,
            alive=True,
            log_dir_id=record.log_dir_id,
        )
        brokers = self.brokers.set(record.broker_id, registration)
        return replace(self, brokers=FrozenMap(sorted(brokers.items())))

    def _replay_fencing(self, record: FenceBroker | UnfenceBroker) -> MetadataImage:
        current = self.brokers.get(record.broker_id)
        if current is None or current.incarnation_id != record.incarnation_id:
            return self._ignore(record, "no such broker incarnation")
        fenced = isinstance(record, FenceBroker)
        # Unfencing also counts the broker alive (it heartbeated to the active controller).
        alive = current.alive if fenced else True
        if (current.fenced, current.alive) == (fenced, alive):
            return self
        changed = replace(current, fenced=fenced, alive=alive)
        return replace(self, brokers=self.brokers.set(record.broker_id, changed))

    def _replay_unregister(self, record: UnregisterBroker) -> MetadataImage:
        current = self.brokers.get(record.broker_id)
        if current is None or current.incarnation_id != record.incarnation_id:
            return self._ignore(record, "no such broker incarnation")
        return replace(self, brokers=self.brokers.remove(record.broker_id))

    def _with_topic(self, topic: TopicImage) -> MetadataImage:
        return replace(self, topics=FrozenMap(sorted(self.topics.set(topic.name, topic).items())))

    def _replay_create_topic(self, record: CreateTopic) -> MetadataImage:
        if record.name in self.topics or self.topic_by_id(record.topic_id) is not None:
            return self._ignore(record, "topic name or id exists")
        if not record.partitions or not all(_spec_is_valid(s) for s in record.partitions):
            return self._ignore(record, "invalid partition specs")
        topic = TopicImage(
            name=record.name,
            topic_id=record.topic_id,
            partitions=tuple(_initial_state(s) for s in record.partitions),
            config=_sorted_pairs(record.config),
        )
        return self._with_topic(topic)

    def _replay_create_partitions(self, record: CreatePartitions) -> MetadataImage:
        topic = self.topic_by_id(record.topic_id)
        if topic is None:
            return self._ignore(record, "unknown topic id")
        if not all(_spec_is_valid(s) for s in record.partitions):
            return self._ignore(record, "invalid partition specs")
        added = tuple(_initial_state(s) for s in record.partitions)
        return self._with_topic(replace(topic, partitions=topic.partitions + added))

    def _replay_delete_topic(self, record: DeleteTopic) -> MetadataImage:
        topic = self.topic_by_id(record.topic_id)
        if topic is None:
            return self._ignore(record, "unknown topic id")
        return replace(self, topics=self.topics.remove(topic.name))

    def _replay_partition_change(self, record: PartitionChange) -> MetadataImage:
        return self._replay_partition_changes((record,))

    def _replay_partition_changes(
        self, records: Sequence[PartitionChange | PartitionReassignment]
    ) -> MetadataImage:
        """Apply ``records`` in order, copying each touched topic's partitions once."""
        edited: dict[str, list[PartitionState]] = {}
        for record in records:
            topic = self.topic_by_id(record.topic_id)
            if topic is None:
                self._ignore(record, "unknown partition")
                continue
            if not 0 <= record.partition < len(topic.partitions):
                self._ignore(record, "unknown partition")
                continue
            partitions = edited.get(topic.name)
            current = (partitions or topic.partitions)[record.partition]
            changed = _PARTITION_STATE_RECORDS[type(record)](current, record)
            if isinstance(changed, str):
                self._ignore(record, changed)
                continue
            if partitions is None:
                partitions = edited[topic.name] = list(topic.partitions)
            partitions[record.partition] = changed
        if not edited:
            return self
        topics = dict(self.topics.items())
        for name, partitions in edited.items():
            topics[name] = replace(topics[name], partitions=tuple(partitions))
        return replace(self, topics=FrozenMap(sorted(topics.items())))

    def _replay_partition_reassignment(self, record: PartitionReassignment) -> MetadataImage:
        return self._replay_partition_changes((record,))

    def _replay_config_change(self, record: ConfigChange) -> MetadataImage:
        if record.resource_type == "topic":
            topic = self.topics.get(record.resource_name)
            if topic is None:
                return self._ignore(record, "unknown topic")
            config = _set_pair(topic.config, record.key, record.value)
            return self._with_topic(replace(topic, config=config))
        if record.resource_type == "broker":
            current = self.broker_configs.get(record.resource_name, ())
            config = _set_pair(current, record.key, record.value)
            if config:
                configs = self.broker_configs.set(record.resource_name, config)
            else:
                configs = self.broker_configs.remove(record.resource_name)
            return replace(self, broker_configs=FrozenMap(sorted(configs.items())))
        return self._ignore(record, "unknown resource type")

    def _replay_allocate_producer_ids(self, record: AllocateProducerIds) -> MetadataImage:
        if record.first_producer_id != self.next_producer_id or record.count <= 0:
            return self._ignore(record, "not the next block of producer ids")
        return replace(self, next_producer_id=record.first_producer_id + record.count)

    def _replay_register_subscription(self, record: RegisterSubscription) -> MetadataImage:
        if record.subscription_id in self.subscriptions:
            return self._ignore(record, "subscription exists")
        subscription = SubscriptionImage(
            subscription_id=record.subscription_id,
            address=record.address,
            topics=record.topics,
            read_old=record.read_old,
            active=True,
            changed_ms=record.created_ms,
            max_in_flight=record.max_in_flight,
            signing_secret=record.signing_secret,
        )
        subscriptions = self.subscriptions.set(record.subscription_id, subscription)
        return replace(self, subscriptions=FrozenMap(sorted(subscriptions.items())))

    def _replay_subscription_state(self, record: SubscriptionStateChange) -> MetadataImage:
        current = self.subscriptions.get(record.subscription_id)
        if current is None:
            return self._ignore(record, "unknown subscription")
        changed = replace(current, active=record.active, changed_ms=record.changed_ms)
        return replace(self, subscriptions=self.subscriptions.set(record.subscription_id, changed))

    def _replay_subscription_window(self, record: SubscriptionWindowChange) -> MetadataImage:
        current = self.subscriptions.get(record.subscription_id)
        if current is None:
            return self._ignore(record, "unknown subscription")
        changed = replace(current, max_in_flight=record.max_in_flight)
        return replace(self, subscriptions=self.subscriptions.set(record.subscription_id, changed))

    def _replay_delete_subscription(self, record: DeleteSubscription) -> MetadataImage:
        if record.subscription_id not in self.subscriptions:
            return self._ignore(record, "unknown subscription")
        return replace(self, subscriptions=self.subscriptions.remove(record.subscription_id))

    def _replay_scram_credential(self, record: UserScramCredential) -> MetadataImage:
        key = (record.name, record.mechanism)
        credentials = self.scram_credentials.set(key, record)
        return replace(self, scram_credentials=FrozenMap(sorted(credentials.items())))

    def _replay_remove_scram_credential(self, record: RemoveUserScramCredential) -> MetadataImage:
        key = (record.name, record.mechanism)
        if key not in self.scram_credentials:
            return self._ignore(record, "no such credential")
        return replace(self, scram_credentials=self.scram_credentials.remove(key))

    def _replay_create_acl(self, record: CreateAcl) -> MetadataImage:
        key = acl_key(record)
        if key in self.acls:
            return self._ignore(record, "ACL exists")
        return replace(self, acls=FrozenMap(sorted(self.acls.set(key, record).items())))

    def _replay_delete_acl(self, record: DeleteAcl) -> MetadataImage:
        key = acl_key(record)
        if key not in self.acls:
            return self._ignore(record, "no such ACL")
        return replace(self, acls=self.acls.remove(key))

    # -- serialization ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "next_producer_id": self.next_producer_id,
            "brokers": [b.to_dict() for b in self.brokers.values()],
            "topics": [t.to_dict() for t in self.topics.values()],
            "broker_configs": [
                {"name": name, "config": [[k, v] for k, v in pairs]}
                for name, pairs in self.broker_configs.items()
            ],
            "subscriptions": [s.to_dict() for s in self.subscriptions.values()],
            "scram_credentials": [record_to_dict(c) for c in self.scram_credentials.values()],
            "acls": [record_to_dict(a) for a in self.acls.values()],
            "quorum_voters": [list(voter) for voter in self.quorum_voters],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetadataImage:
        brokers = (BrokerRegistration.from_dict(b) for b in data["brokers"])
        credentials = [record_from_dict(c) for c in data.get("scram_credentials", ())]
        acls = [record_from_dict(a) for a in data.get("acls", ())]
        topics = (TopicImage.from_dict(t) for t in data["topics"])
        return cls(
            version=int(data["version"]),
            next_producer_id=int(data.get("next_producer_id", 0)),
            brokers=FrozenMap(sorted((b.broker_id, b) for b in brokers)),
            topics=FrozenMap(sorted(((t.name, t) for t in topics), key=lambda item: item[0])),
            broker_configs=FrozenMap(
                sorted(
                    (str(c["name"]), tuple((str(k), str(v)) for k, v in c["config"]))
                    for c in data["broker_configs"]
                )
            ),
            subscriptions=FrozenMap(
                sorted(
                    (s.subscription_id, s)
                    for s in (
                        SubscriptionImage.from_dict(item) for item in data.get("subscriptions", ())
                    )
                )
            ),
            scram_credentials=FrozenMap(
                sorted(((c.name, c.mechanism), c) for c in credentials)  # type: ignore[union-attr]
            ),
            acls=FrozenMap(sorted((acl_key(a), a) for a in acls)),  # type: ignore[arg-type]
            quorum_voters=tuple(
                (int(node_id), str(raft), str(http))
                for node_id, raft, http in data.get("quorum_voters", ())
            ),
        )


def acl_key(record: CreateAcl | DeleteAcl) -> tuple[Any, ...]:
    """An ACL binding's identity: all of its fields."""
    return (
        record.resource_type,
        record.resource_name,
        record.pattern_type,
        record.principal,
        record.host,
        record.operation,
        record.permission,
    )


def _set_pair(
    pairs: tuple[tuple[str, str], ...], key: str, value: str | None
) -> tuple[tuple[str, str], ...]:
    config = dict(pairs)
    if value is None:
        config.pop(key, None)
    else:
        config[key] = value
    return tuple(sorted(config.items()))


def _index_by_id(topics: FrozenMap[str, TopicImage]) -> dict[str, TopicImage]:
    return {topic.topic_id: topic for topic in topics.values()}


def _stale(current: PartitionState, record: PartitionChange | PartitionReassignment) -> str | None:
    """Why ``record`` cannot follow ``current`` (its epochs), or None if it can."""
    if record.partition_epoch != current.partition_epoch + 1:
        return f"partition epoch is {current.partition_epoch}"
    if record.leader_epoch < current.leader_epoch:
        return f"leader epoch is {current.leader_epoch}"
    return None


def _changed_partition(current: PartitionState, record: PartitionChange) -> PartitionState | str:
    """``current`` after ``record``, or why ``record`` does not apply to it."""
    stale = _stale(current, record)
    if stale is not None:
        return stale
    replicas = set(current.replicas)
    isr_valid = set(record.isr) <= replicas and len(set(record.isr)) == len(record.isr)
    elr_valid = (
        set(record.elr) <= replicas
        and len(set(record.elr)) == len(record.elr)
        and not set(record.elr) & set(record.isr)
    )
    leader_valid = record.leader == -1 or record.leader in record.isr
    if not (isr_valid and elr_valid and leader_valid):
        return f"leader/ISR/ELR not within replicas {current.replicas}"
    return replace(
        current,
        isr=record.isr,
        leader=record.leader,
        leader_epoch=record.leader_epoch,
        partition_epoch=record.partition_epoch,
        elr=record.elr,
    )


def _reassigned_partition(
    current: PartitionState, record: PartitionReassignment
) -> PartitionState | str:
    """The partition ``record`` describes (new replicas and all), or why it cannot follow
    ``current``."""
    stale = _stale(current, record)
    if stale is not None:
        return stale
    replicas = set(record.replicas)
    valid = (
        record.replicas
        and len(replicas) == len(record.replicas)
        and set(record.isr) <= replicas
        and len(set(record.isr)) == len(record.isr)
        and set(record.adding) <= replicas
        and set(record.removing) <= replicas
        and not set(record.adding) & set(record.removing)
        and set(record.elr) <= replicas
        and not set(record.elr) & set(record.isr)
        and (record.leader == -1 or record.leader in record.isr)
    )
    if not valid:
        return f"inconsistent replicas {record.replicas}"
    return reassigned_state(record)


def reassigned_state(record: PartitionReassignment) -> PartitionState:
    """The partition state ``record`` describes, replicas and all (not validated)."""
    return PartitionState(
        replicas=record.replicas,
        isr=record.isr,
        leader=record.leader,
        leader_epoch=record.leader_epoch,
        partition_epoch=record.partition_epoch,
        elr=record.elr,
        adding=record.adding,
        removing=record.removing,
    )


#: Records that set one partition's state, and how: replayed in runs (``replay_all``).
_PARTITION_STATE_RECORDS: dict[type[Any], Any] = {
    PartitionChange: _changed_partition,
    PartitionReassignment: _reassigned_partition,
}


_REPLAYERS: dict[type[Any], Any] = {
    ControllerActivated: MetadataImage._replay_controller_activated,
    QuorumVoters: MetadataImage._replay_quorum_voters,
    RegisterBroker: MetadataImage._replay_register,
    FenceBroker: MetadataImage._replay_fencing,
    UnfenceBroker: MetadataImage._replay_fencing,
    UnregisterBroker: MetadataImage._replay_unregister,
    CreateTopic: MetadataImage._replay_create_topic,
    CreatePartitions: MetadataImage._replay_create_partitions,
    DeleteTopic: MetadataImage._replay_delete_topic,
    PartitionChange: MetadataImage._replay_partition_change,
    PartitionReassignment: MetadataImage._replay_partition_reassignment,
    ConfigChange: MetadataImage._replay_config_change,
    AllocateProducerIds: MetadataImage._replay_allocate_producer_ids,
    RegisterSubscription: MetadataImage._replay_register_subscription,
    SubscriptionStateChange: MetadataImage._replay_subscription_state,
    SubscriptionWindowChange: MetadataImage._replay_subscription_window,
    DeleteSubscription: MetadataImage._replay_delete_subscription,
    UserScramCredential: MetadataImage._replay_scram_credential,
    RemoveUserScramCredential: MetadataImage._replay_remove_scram_credential,
    CreateAcl: MetadataImage._replay_create_acl,
    DeleteAcl: MetadataImage._replay_delete_acl,
}

MetadataImage.EMPTY = MetadataImage(version=0)


# -- deltas ---------------------------------------------------------------------------------

PartitionRole = tuple[TopicImage, int, PartitionState]


@dataclass(frozen=True, slots=True)
class RoleChanges:
    """What one broker must do after a metadata update.

    ``leader``: partitions it now leads and either did not lead or whose leader epoch changed.
    ``follower``: partitions it replicates without leading, that are new to it or whose leader
    or leader epoch changed. ``removed``: ``(topic name, topic id, partition)`` it no longer
    hosts (topic deleted or replica moved away).
    """

    leader: list[PartitionRole]
    follower: list[PartitionRole]
    removed: list[tuple[str, str, int]]


@dataclass(frozen=True, slots=True)
class MetadataDelta:
    """The difference between two images (``old`` → ``new``).

    ``changed_topics``: names of topics that are new or differ (a topic recreated under the
    same name with a new id is both deleted and changed). ``deleted_topics``: names whose old
    topic id is gone. ``changed_brokers``: ids registered, re-registered, fenced or unfenced;
    ``deleted_brokers``: ids no longer registered. ``changed_broker_configs``: broker resource
    names whose overrides changed.
    """

    old: MetadataImage
    new: MetadataImage
    changed_topics: tuple[str, ...]
    deleted_topics: tuple[str, ...]
    changed_brokers: tuple[int, ...]
    deleted_brokers: tuple[int, ...]
    changed_broker_configs: tuple[str, ...]
    #: SCRAM credentials changed (``scram_credentials`` is another object).
    credentials_changed: bool = False
    #: ACL bindings changed.
    acls_changed: bool = False

    @classmethod
    def between(cls, old: MetadataImage, new: MetadataImage) -> MetadataDelta:
        new_ids = {t.topic_id for t in new.topics.values()}
        deleted_topics = tuple(
            name for name, topic in old.topics.items() if topic.topic_id not in new_ids
        )
        changed_topics = tuple(
            name for name, topic in new.topics.items() if old.topics.get(name) != topic
        )
        changed_brokers = tuple(
            broker_id for broker_id, b in new.brokers.items() if old.brokers.get(broker_id) != b
        )
        deleted_brokers = tuple(
            broker_id for broker_id in old.brokers if broker_id not in new.brokers
        )
        config_names = sorted(set(old.broker_configs) | set(new.broker_configs))
        changed_configs = tuple(
            name
            for name in config_names
            if old.broker_configs.get(name) != new.broker_configs.get(name)
        )
        return cls(
            old=old,
            new=new,
            changed_topics=changed_topics,
            deleted_topics=deleted_topics,
            changed_brokers=changed_brokers,
            deleted_brokers=deleted_brokers,
            changed_broker_configs=changed_configs,
            credentials_changed=old.scram_credentials is not new.scram_credentials,
            acls_changed=old.acls is not new.acls,
        )

    def partition_roles(self, broker_id: int) -> RoleChanges:
        leader: list[PartitionRole] = []
        follower: list[PartitionRole] = []
        removed: list[tuple[str, str, int]] = []
        for name in self.changed_topics:
            topic = self.new.topics[name]
            old_topic = self.old.topic_by_id(topic.topic_id)
            old_partitions = old_topic.partitions if old_topic is not None else ()
            for index, state in enumerate(topic.partitions):
                old_state = old_partitions[index] if index < len(old_partitions) else None
                if old_state is state:
                    continue  # images share unchanged partitions: nothing moved here
                role = _role_change(broker_id, old_state, state)
                if role == "leader":
                    leader.append((topic, index, state))
                elif role == "follower":
                    follower.append((topic, index, state))
                elif role == "removed":
                    removed.append((topic.name, topic.topic_id, index))
        for name in self.deleted_topics:
            old_topic = self.old.topics[name]
            for index, state in enumerate(old_topic.partitions):
                if broker_id in state.replicas:
                    removed.append((old_topic.name, old_topic.topic_id, index))
        return RoleChanges(leader=leader, follower=follower, removed=removed)


def _role_change(broker_id: int, old: PartitionState | None, new: PartitionState) -> str | None:
    was_replica = old is not None and broker_id in old.replicas
    if broker_id not in new.replicas:
        return "removed" if was_replica else None
    assert old is None or new.leader_epoch >= old.leader_epoch, "leader epoch went backwards"
    leader_moved = old is None or old.leader != new.leader or old.leader_epoch != new.leader_epoch
    if new.leader == broker_id:
        return "leader" if leader_moved else None
    if not was_replica or leader_moved:
        return "follower"
    return None
