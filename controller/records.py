"""Metadata records: the only way cluster metadata changes (Kafka KRaft's metadata records).

Every record is a frozen, slotted dataclass. ``MetadataImage.replay`` (``image.py``) is the one
place that applies them. Records cross Raft and HTTP as JSON-able dicts made by
``record_to_dict`` and read back, strictly validated, by ``record_from_dict``.

Wire form: ``{"type": "<class name>", "v": RECORD_FORMAT_VERSION, <field>: <value>, ...}`` where
tuples become lists, ``PartitionSpec`` becomes a dict and config pairs become ``[key, value]``
lists. A reader accepts any ``v`` up to its own and rejects anything else it cannot type-check.

Pure; thread-safe (records are immutable).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from flux.controller.errors import InvalidRecordError

__all__ = [
    "MAX_SUBSCRIPTION_IN_FLIGHT",
    "RECORD_FORMAT_VERSION",
    "AllocateProducerIds",
    "RECORD_TYPES",
    "ConfigChange",
    "ControllerActivated",
    "CreatePartitions",
    "CreateTopic",
    "DeleteSubscription",
    "DeleteTopic",
    "FenceBroker",
    "PartitionChange",
    "PartitionReassignment",
    "PartitionSpec",
    "QuorumVoters",
    "Record",
    "RegisterBroker",
    "RegisterSubscription",
    "SubscriptionStateChange",
    "SubscriptionWindowChange",
    "UnfenceBroker",
    "UnregisterBroker",
    "UserScramCredential",
    "RemoveUserScramCredential",
    "CreateAcl",
    "DeleteAcl",
    "record_from_dict",
    "record_to_dict",
]

RECORD_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A broker process (re)registers; it starts fenced. Replaces any registration of the id."""

    broker_id: int
    incarnation_id: str
    kafka_host: str
    kafka_port: int
    http_host: str
    http_port: int
    rack: str | None = None
    # Every Kafka listener as advertised, ``(name, host, port)``, primary first (Kafka's
    # listener names: a client is told the brokers' addresses on the listener it connected
    # to). Empty for a broker with one listener: ``kafka_host:kafka_port`` is then its only one.
    listeners: tuple[tuple[str, str, int], ...] = ()
    # The id of the broker's log directory (Kafka's ``directory.id``, KIP-858): made when the
    # directory is first created, so a new id means the broker's data is gone (a replaced or
    # wiped disk) and its replicas no longer hold what they acknowledged. "" = not reported.
    log_dir_id: str = ""


@dataclass(frozen=True, slots=True)
class ControllerActivated:
    """Controller ``node_id`` became the active controller (committed as its first command).

    From here on a broker counts as alive only once it has registered or heartbeated with this
    controller: every registration is marked not alive until then (``UnfenceBroker``), so no
    leader is elected onto a broker that died with the previous controller."""

    node_id: int


@dataclass(frozen=True, slots=True)
class QuorumVoters:
    """The controller quorum's voters, ``(node_id, raft_address, http_address)`` sorted by id,
    as of a membership change (``flux.controller.membership``): the whole set, so replaying
    it twice is harmless. Committed before the Raft membership change it announces."""

    voters: tuple[tuple[int, str, str], ...]


@dataclass(frozen=True, slots=True)
class FenceBroker:
    """Fence the registration ``(broker_id, incarnation_id)``; ignored for another incarnation."""

    broker_id: int
    incarnation_id: str


@dataclass(frozen=True, slots=True)
class UnfenceBroker:
    """Unfence the registration ``(broker_id, incarnation_id)`` and count it alive for the
    active controller (it heartbeated); ignored for another incarnation."""

    broker_id: int
    incarnation_id: str


@dataclass(frozen=True, slots=True)
class UnregisterBroker:
    """Remove the registration ``(broker_id, incarnation_id)`` (Kafka's UnregisterBroker, the
    last step of removing a broker); ignored for another incarnation. The handler commits it
    only for a fenced broker that holds no replica (``handlers.unregister_broker``), so no
    partition refers to the id afterwards; the broker's config overrides stay (as in Kafka)."""

    broker_id: int
    incarnation_id: str


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """The initial state of a new partition (its epochs start at 0)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    topic_id: str
    partitions: tuple[PartitionSpec, ...]
    config: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    """Partitions appended after the existing ones of ``topic_id``."""

    topic_id: str
    partitions: tuple[PartitionSpec, ...]


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    topic_id: str


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """The complete new leader/ISR/ELR state of one partition.

    Applies only when ``partition_epoch`` is exactly one more than the current one, so two
    changes computed from the same image cannot both apply. ``elr``: the eligible leader
    replicas (KIP-966), replicas outside the ISR known to hold every acknowledged record.
    """

    topic_id: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """The replicas of one partition change (Kafka's reassignment, KIP-455): the complete new
    state, applied like ``PartitionChange`` (``partition_epoch`` exactly one more).

    While a reassignment runs, ``replicas`` holds the target replicas then the ones leaving;
    ``adding`` are the target replicas still catching up (not yet in the ISR) and ``removing``
    those that leave once every adding replica joined the ISR. Both are empty otherwise."""

    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """Set (or, with ``value=None``, delete) one config override of a topic or broker.

    ``resource_type`` is ``"topic"`` (``resource_name`` is the topic name) or ``"broker"``
    (``resource_name`` is the broker id as a string, ``""`` for the cluster-wide default).
    """

    resource_type: str
    resource_name: str
    key: str
    value: str | None


@dataclass(frozen=True, slots=True)
class AllocateProducerIds:
    """Broker ``broker_id`` takes the producer ids ``[first_producer_id, first + count)``.

    Applies only when ``first_producer_id`` is the image's next unallocated id, so ids are
    never handed out twice."""

    broker_id: int
    first_producer_id: int
    count: int


@dataclass(frozen=True, slots=True)
class RegisterSubscription:
    """A push subscription: deliver every message of ``topics`` to ``address`` (an http(s)
    webhook or a ws(s) WebSocket endpoint). It starts active. ``read_old``: start from the
    oldest retained message instead of the end. ``max_in_flight``: how many messages of one
    partition may be sent and not yet acknowledged (1..``MAX_SUBSCRIPTION_IN_FLIGHT``; records
    written before it existed lack it and mean 1). Replaces nothing: an existing id is ignored.
    """

    subscription_id: str
    address: str
    topics: tuple[str, ...]
    read_old: bool
    created_ms: int
    max_in_flight: int = 1
    #: Key of the HMAC signatures on its deliveries ("" = unsigned; ``flux.auth.signing``).
    signing_secret: str = ""


@dataclass(frozen=True, slots=True)
class SubscriptionStateChange:
    """Mark a subscription active (delivery runs) or inactive (delivery stopped, its offsets
    kept) as of ``changed_ms`` (wall clock); ignored for an unknown id."""

    subscription_id: str
    active: bool
    changed_ms: int


@dataclass(frozen=True, slots=True)
class SubscriptionWindowChange:
    """Set a subscription's ``max_in_flight`` (see ``RegisterSubscription``); ignored for an
    unknown id. Its state and ``changed_ms`` stay as they are."""

    subscription_id: str
    max_in_flight: int


@dataclass(frozen=True, slots=True)
class DeleteSubscription:
    subscription_id: str


@dataclass(frozen=True, slots=True)
class UserScramCredential:
    """Set user ``name``'s SCRAM credential for ``mechanism`` (``SCRAM-SHA-256`` or
    ``SCRAM-SHA-512``; Kafka's UserScramCredentialRecord). ``salt``, ``stored_key`` and
    ``server_key`` are base64: what RFC 5802 lets a server keep, never the password."""

    name: str
    mechanism: str
    salt: str
    stored_key: str
    server_key: str
    iterations: int


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredential:
    """Remove user ``name``'s credential for ``mechanism``; ignored if there is none."""

    name: str
    mechanism: str


@dataclass(frozen=True, slots=True)
class CreateAcl:
    """Add one ACL binding (``flux.auth.acl.AclBinding`` as its wire codes); ignored if the
    same binding exists."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True, slots=True)
class DeleteAcl:
    """Remove one ACL binding (the same fields as ``CreateAcl``); ignored if absent."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


Record = (
    PartitionReassignment
    | ControllerActivated
    | QuorumVoters
    | RegisterBroker
    | FenceBroker
    | UnfenceBroker
    | UnregisterBroker
    | CreateTopic
    | CreatePartitions
    | DeleteTopic
    | PartitionChange
    | ConfigChange
    | AllocateProducerIds
    | RegisterSubscription
    | SubscriptionStateChange
    | SubscriptionWindowChange
    | DeleteSubscription
    | UserScramCredential
    | RemoveUserScramCredential
    | CreateAcl
    | DeleteAcl
)

RECORD_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        ControllerActivated,
        QuorumVoters,
        RegisterBroker,
        FenceBroker,
        UnfenceBroker,
        UnregisterBroker,
        CreateTopic,
        CreatePartitions,
        DeleteTopic,
        PartitionChange,
        PartitionReassignment,
        ConfigChange,
        AllocateProducerIds,
        RegisterSubscription,
        SubscriptionStateChange,
        SubscriptionWindowChange,
        DeleteSubscription,
        UserScramCredential,
        RemoveUserScramCredential,
        CreateAcl,
        DeleteAcl,
    )
}

# Bounds on what a record may carry, checked when reading one.
MAX_STRING_LENGTH = 4096
MAX_LIST_LENGTH = 100_000
#: A push subscription's window: messages of one partition sent and not yet acknowledged.
MAX_SUBSCRIPTION_IN_FLIGHT = 1000


# -- encoding -----------------------------------------------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, PartitionSpec):
        return {"replicas": list(value.replicas), "isr": list(value.isr), "leader": value.leader}
    if isinstance(value, tuple):
        return [_encode(item) for item in value]
    return value


def record_to_dict(record: Record) -> dict[str, Any]:
    """The JSON-able form of ``record`` (see the module docstring)."""
    if type(record).__name__ not in RECORD_TYPES:
        raise TypeError(f"not a metadata record: {record!r}")
    data: dict[str, Any] = {"type": type(record).__name__, "v": RECORD_FORMAT_VERSION}
    for field in fields(record):
        data[field.name] = _encode(getattr(record, field.name))
    return data


# -- decoding -----------------------------------------------------------------------------


def _int(value: Any, where: str) -> int:
    if type(value) is not int:
        raise InvalidRecordError(f"{where}: expected an integer, got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidRecordError(f"{where}: expected a string, got {value!r}")
    if len(value) > MAX_STRING_LENGTH:
        raise InvalidRecordError(f"{where}: string longer than {MAX_STRING_LENGTH} characters")
    return value


def _bool(value: Any, where: str) -> bool:
    if type(value) is not bool:
        raise InvalidRecordError(f"{where}: expected true or false, got {value!r}")
    return value


def _str_tuple(value: Any, where: str) -> tuple[str, ...]:
    return tuple(_str(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where)))


def _optional_str(value: Any, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _in_flight(value: Any, where: str) -> int:
    if not 1 <= _int(value, where) <= MAX_SUBSCRIPTION_IN_FLIGHT:
        raise InvalidRecordError(f"{where}: expected 1..{MAX_SUBSCRIPTION_IN_FLIGHT}, got {value}")
    return int(value)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise InvalidRecordError(f"{where}: expected a list, got {value!r}")
    if len(value) > MAX_LIST_LENGTH:
        raise InvalidRecordError(f"{where}: list longer than {MAX_LIST_LENGTH} items")
    return list(value)


def _int_tuple(value: Any, where: str) -> tuple[int, ...]:
    return tuple(_int(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where)))


def _partition_spec(value: Any, where: str) -> PartitionSpec:
    if not isinstance(value, Mapping):
        raise InvalidRecordError(f"{where}: expected an object, got {value!r}")
    extra = set(value) - {"replicas", "isr", "leader"}
    if extra:
        raise InvalidRecordError(f"{where}: unexpected fields {sorted(map(str, extra))}")
    try:
        return PartitionSpec(
            replicas=_int_tuple(value["replicas"], f"{where}.replicas"),
            isr=_int_tuple(value["isr"], f"{where}.isr"),
            leader=_int(value["leader"], f"{where}.leader"),
        )
    except KeyError as missing:
        raise InvalidRecordError(f"{where}: missing field {missing}") from None


def _specs(value: Any, where: str) -> tuple[PartitionSpec, ...]:
    return tuple(
        _partition_spec(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where))
    )


def _pairs(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for i, item in enumerate(_list(value, where)):
        pair = _list(item, f"{where}[{i}]")
        if len(pair) != 2:
            raise InvalidRecordError(f"{where}[{i}]: expected a [key, value] pair, got {item!r}")
        pairs.append((_str(pair[0], f"{where}[{i}][0]"), _str(pair[1], f"{where}[{i}][1]")))
    return tuple(pairs)


def _endpoints(value: Any, where: str) -> tuple[tuple[str, str, int], ...]:
    endpoints = []
    for i, item in enumerate(_list(value, where)):
        triple = _list(item, f"{where}[{i}]")
        if len(triple) != 3:
            raise InvalidRecordError(f"{where}[{i}]: expected [name, host, port], got {item!r}")
        endpoints.append(
            (
                _str(triple[0], f"{where}[{i}][0]"),
                _str(triple[1], f"{where}[{i}][1]"),
                _int(triple[2], f"{where}[{i}][2]"),
            )
        )
    return tuple(endpoints)


def _voters(value: Any, where: str) -> tuple[tuple[int, str, str], ...]:
    voters = []
    for i, item in enumerate(_list(value, where)):
        triple = _list(item, f"{where}[{i}]")
        if len(triple) != 3:
            raise InvalidRecordError(f"{where}[{i}]: expected [id, raft, http], got {item!r}")
        voters.append(
            (
                _int(triple[0], f"{where}[{i}][0]"),
                _str(triple[1], f"{where}[{i}][1]"),
                _str(triple[2], f"{where}[{i}][2]"),
            )
        )
    return tuple(voters)


_Parser = Callable[[Any, str], Any]

_SCHEMAS: dict[str, dict[str, _Parser]] = {
    "ControllerActivated": {"node_id": _int},
    "QuorumVoters": {"voters": _voters},
    "RegisterBroker": {
        "broker_id": _int,
        "incarnation_id": _str,
        "kafka_host": _str,
        "kafka_port": _int,
        "http_host": _str,
        "http_port": _int,
        "rack": _optional_str,
        "listeners": _endpoints,
        "log_dir_id": _str,
    },
    "FenceBroker": {"broker_id": _int, "incarnation_id": _str},
    "UnfenceBroker": {"broker_id": _int, "incarnation_id": _str},
    "UnregisterBroker": {"broker_id": _int, "incarnation_id": _str},
    "CreateTopic": {"name": _str, "topic_id": _str, "partitions": _specs, "config": _pairs},
    "CreatePartitions": {"topic_id": _str, "partitions": _specs},
    "DeleteTopic": {"topic_id": _str},
    "PartitionChange": {
        "topic_id": _str,
        "partition": _int,
        "leader": _int,
        "leader_epoch": _int,
        "isr": _int_tuple,
        "partition_epoch": _int,
        "elr": _int_tuple,
    },
    "PartitionReassignment": {
        "topic_id": _str,
        "partition": _int,
        "replicas": _int_tuple,
        "adding": _int_tuple,
        "removing": _int_tuple,
        "leader": _int,
        "leader_epoch": _int,
        "isr": _int_tuple,
        "partition_epoch": _int,
        "elr": _int_tuple,
    },
    "AllocateProducerIds": {"broker_id": _int, "first_producer_id": _int, "count": _int},
    "RegisterSubscription": {
        "subscription_id": _str,
        "address": _str,
        "topics": _str_tuple,
        "read_old": _bool,
        "created_ms": _int,
        "max_in_flight": _in_flight,
        "signing_secret": _str,
    },
    "SubscriptionStateChange": {"subscription_id": _str, "active": _bool, "changed_ms": _int},
    "SubscriptionWindowChange": {"subscription_id": _str, "max_in_flight": _in_flight},
    "DeleteSubscription": {"subscription_id": _str},
    "UserScramCredential": {
        "name": _str,
        "mechanism": _str,
        "salt": _str,
        "stored_key": _str,
        "server_key": _str,
        "iterations": _int,
    },
    "RemoveUserScramCredential": {"name": _str, "mechanism": _str},
    "CreateAcl": {
        "resource_type": _int,
        "resource_name": _str,
        "pattern_type": _int,
        "principal": _str,
        "host": _str,
        "operation": _int,
        "permission": _int,
    },
    "DeleteAcl": {
        "resource_type": _int,
        "resource_name": _str,
        "pattern_type": _int,
        "principal": _str,
        "host": _str,
        "operation": _int,
        "permission": _int,
    },
    "ConfigChange": {
        "resource_type": _str,
        "resource_name": _str,
        "key": _str,
        "value": _optional_str,
    },
}

# Fields added after RECORD_FORMAT_VERSION 1 was first written: older records lack them.
_OPTIONAL_FIELDS = {
    ("RegisterBroker", "rack"),
    ("RegisterBroker", "listeners"),
    ("RegisterBroker", "log_dir_id"),
    ("PartitionChange", "elr"),
    ("RegisterSubscription", "max_in_flight"),
    ("RegisterSubscription", "signing_secret"),
}


def record_from_dict(data: Mapping[str, Any]) -> Record:
    """Read a record written by ``record_to_dict``; raise ``InvalidRecordError`` if malformed."""
    if not isinstance(data, Mapping):
        raise InvalidRecordError(f"a record must be an object, got {type(data).__name__}")
    type_name = data.get("type")
    if not isinstance(type_name, str) or type_name not in _SCHEMAS:
        raise InvalidRecordError(f"unknown record type {type_name!r}")
    version = data.get("v", RECORD_FORMAT_VERSION)
    if type(version) is not int or not 1 <= version <= RECORD_FORMAT_VERSION:
        raise InvalidRecordError(f"{type_name}: unsupported record format version {version!r}")
    schema = _SCHEMAS[type_name]
    extra = set(data) - set(schema) - {"type", "v"}
    if extra:
        raise InvalidRecordError(f"{type_name}: unexpected fields {sorted(map(str, extra))}")
    values: dict[str, Any] = {}
    for name, parse in schema.items():
        if name not in data:
            if (type_name, name) in _OPTIONAL_FIELDS:
                continue
            raise InvalidRecordError(f"{type_name}: missing field {name!r}")
        values[name] = parse(data[name], f"{type_name}.{name}")
    record: Record = RECORD_TYPES[type_name](**values)
    return record
