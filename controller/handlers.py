"""Pure controller request handlers: ``(image, request) -> ControllerResult(records, response)``.

A handler validates a request against a ``MetadataImage`` and returns the records that carry
it out (to be proposed through Raft) and a JSON-able response. It never mutates the image,
does no I/O, reads no clock and uses no global randomness (``rng`` arguments). A rejected
request yields no records and a response with a Kafka ``error_code`` and an
``error_message`` naming the problem; an accepted one has ``error_code`` 0 and
``error_message`` None.

Records are computed from the image the handler saw. If another proposal commits first, the
stale ``PartitionChange`` records are ignored at replay (their ``partition_epoch`` no longer
follows), so the service may simply re-run the handler on the new image.

Election and fencing rules live in ``election.py`` and are re-exported here.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flux.controller.election import (
    departure_changes,
    elect_without_isr,
    fence_broker,
    fence_brokers,
    first_alive_replica,
    leader_change,
    min_insync_replicas,
    preferred_leader_imbalance,
    settled_change,
    unfence_broker,
)
from flux.controller.errors import InvalidReplicationFactorError
from flux.controller.image import MetadataImage, PartitionState, TopicImage, reassigned_state
from flux.controller.placement import place_replicas
from flux.controller.records import (
    MAX_SUBSCRIPTION_IN_FLIGHT,
    AllocateProducerIds,
    ConfigChange,
    CreatePartitions,
    CreateTopic,
    DeleteSubscription,
    DeleteTopic,
    PartitionChange,
    PartitionReassignment,
    PartitionSpec,
    Record,
    RegisterBroker,
    RegisterSubscription,
    SubscriptionStateChange,
    SubscriptionWindowChange,
    UnregisterBroker,
)
from flux.controller.topic_rules import (
    TOPIC_CONFIG_KEYS,
    UNDELETABLE_TOPICS,
    InvalidConfigError,
    InvalidTopicError,
    validate_topic_config,
    validate_topic_configs,
    validate_topic_name,
)
from flux.protocol.errors import ErrorCode

__all__ = [
    "MAX_CONFIG_CHANGES",
    "MAX_INCARNATION_ID_LENGTH",
    "MAX_PARTITIONS_PER_TOPIC",
    "MAX_REPLICATION_FACTOR",
    "ControllerResult",
    "alter_configs",
    "alter_partition",
    "alter_partition_reassignments",
    "alter_partitions",
    "list_partition_reassignments",
    "broker_heartbeat",
    "create_partitions",
    "create_topic",
    "delete_subscription",
    "delete_topic",
    "elect_leaders",
    "fence_broker",
    "fence_brokers",
    "preferred_leader_imbalance",
    "register_broker",
    "register_subscription",
    "set_subscription_state",
    "unfence_broker",
    "unregister_broker",
]

# Limits checked by the handlers.
MAX_PARTITIONS_PER_TOPIC = 10_000
MAX_REPLICATION_FACTOR = 32
MAX_INCARNATION_ID_LENGTH = 128
MAX_HOST_LENGTH = 255
MAX_RACK_LENGTH = 255
MAX_CONFIG_CHANGES = 1_000
MAX_CONFIG_VALUE_LENGTH = 4_096
#: Partitions one AlterPartition request may change at once.
MAX_ALTER_PARTITIONS = 10_000
_BROKER_CONFIG_KEY = re.compile(r"^[a-z0-9._]+$")
_BROKER_RESOURCE_NAME = re.compile(r"^[0-9]*$")


@dataclass(frozen=True, slots=True)
class ControllerResult:
    """Records to propose (possibly none) and the JSON-able response to send back."""

    records: list[Record] = field(default_factory=list)
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.response.get("error_code", 0) == ErrorCode.NONE)


class _Rejected(Exception):
    """Internal: a validation failure carrying the Kafka error code and message."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _ok(records: Sequence[Record] = (), **fields: Any) -> ControllerResult:
    response = {"error_code": int(ErrorCode.NONE), "error_message": None, **fields}
    return ControllerResult(records=list(records), response=response)


def _error(error_code: ErrorCode, message: str, **fields: Any) -> ControllerResult:
    response = {"error_code": int(error_code), "error_message": message, **fields}
    return ControllerResult(records=[], response=response)


def _state_fields(state: PartitionState) -> dict[str, Any]:
    return {
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
        "partition_epoch": state.partition_epoch,
        "replicas": list(state.replicas),
        "elr": list(state.elr),
    }


def _check_int(value: Any, name: str) -> int:
    if type(value) is not int:
        raise _Rejected(ErrorCode.INVALID_REQUEST, f"{name} must be an integer, got {value!r}")
    return value


# -- brokers ------------------------------------------------------------------------------


def _validate_registration(
    broker_id: int,
    incarnation_id: str,
    endpoints: Sequence[tuple[str, Any, Any]],
    rack: str | None,
) -> None:
    if type(broker_id) is not int or broker_id < 0:
        raise _Rejected(ErrorCode.INVALID_REQUEST, f"broker id must be >= 0, got {broker_id!r}")
    if (
        not isinstance(incarnation_id, str)
        or not 0 < len(incarnation_id) <= MAX_INCARNATION_ID_LENGTH
    ):
        raise _Rejected(
            ErrorCode.INVALID_REQUEST,
            f"incarnation id must be a string of 1 to {MAX_INCARNATION_ID_LENGTH} characters",
        )
    for name, host, port in endpoints:
        if not isinstance(host, str) or not 0 < len(host) <= MAX_HOST_LENGTH:
            raise _Rejected(ErrorCode.INVALID_REQUEST, f"{name} host {host!r} is not valid")
        if type(port) is not int or not 0 < port < 65536:
            raise _Rejected(ErrorCode.INVALID_REQUEST, f"{name} port {port!r} is not valid")
    if rack is not None and (not isinstance(rack, str) or not 0 < len(rack) <= MAX_RACK_LENGTH):
        raise _Rejected(ErrorCode.INVALID_REQUEST, f"rack {rack!r} is not valid")


def _validate_listener_names(
    listeners: Sequence[tuple[str, str, int]],
) -> tuple[tuple[str, str, int], ...]:
    names = [name for name, _, _ in listeners]
    for name in names:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_HOST_LENGTH:
            raise _Rejected(ErrorCode.INVALID_REQUEST, f"listener name {name!r} is not valid")
    if len(set(names)) != len(names):
        raise _Rejected(ErrorCode.INVALID_REQUEST, f"listener names repeat: {names}")
    return tuple((name, host, port) for name, host, port in listeners)


def register_broker(
    image: MetadataImage,
    *,
    broker_id: int,
    incarnation_id: str,
    kafka_host: str,
    kafka_port: int,
    http_host: str,
    http_port: int,
    rack: str | None,
    listeners: Sequence[tuple[str, str, int]] = (),
    log_dir_id: str = "",
    default_min_isr: int = 1,
) -> ControllerResult:
    """Register a broker process. The newest incarnation wins: an older, unfenced one departs
    (its leaderships move as for ``fence_broker``; it stays eligible where the election rules
    say so). A registration with a log directory id other than the registered one means the
    broker's data is gone: it leaves every ISR and ELR. Re-sending the registration of the
    current incarnation with the same endpoints is an idempotent no-op."""
    try:
        _validate_registration(
            broker_id,
            incarnation_id,
            [
                ("kafka", kafka_host, kafka_port),
                ("http", http_host, http_port),
                *((f"listener {name!r}", host, port) for name, host, port in listeners),
            ],
            rack,
        )
        listeners = _validate_listener_names(listeners)
        if not isinstance(log_dir_id, str) or len(log_dir_id) > MAX_INCARNATION_ID_LENGTH:
            raise _Rejected(ErrorCode.INVALID_REQUEST, f"log dir id {log_dir_id!r} is not valid")
    except _Rejected as rejected:
        return _error(rejected.error_code, rejected.message, broker_id=broker_id)
    record = RegisterBroker(
        broker_id=broker_id,
        incarnation_id=incarnation_id,
        kafka_host=kafka_host,
        kafka_port=kafka_port,
        http_host=http_host,
        http_port=http_port,
        rack=rack,
        listeners=listeners,
        log_dir_id=log_dir_id,
    )
    current = image.brokers.get(broker_id)
    fields: dict[str, Any] = {"broker_id": broker_id, "incarnation_id": incarnation_id}
    if current is not None and current.incarnation_id == incarnation_id:
        same = (
            current.kafka_host,
            current.kafka_port,
            current.http_host,
            current.http_port,
            current.rack,
            current.listeners,
            current.log_dir_id,
        ) == (kafka_host, kafka_port, http_host, http_port, rack, listeners, log_dir_id)
        if same:
            return _ok(**fields, fenced=current.fenced)
    records: list[Record] = [record]
    if current is not None:
        log_lost = bool(current.log_dir_id) and current.log_dir_id != log_dir_id
        records.extend(
            departure_changes(
                image,
                () if current.fenced or log_lost else (broker_id,),
                lost=(broker_id,) if log_lost else (),
                default_min_isr=default_min_isr,
            )
        )
    return _ok(records, **fields, fenced=True)


def broker_heartbeat(
    image: MetadataImage,
    *,
    broker_id: int,
    incarnation_id: str,
    want_fence: bool = False,
    default_min_isr: int = 1,
) -> ControllerResult:
    """A heartbeat from a registered broker. A fenced broker that does not want to be fenced is
    unfenced; an unfenced broker asking to be fenced (controlled shutdown) is fenced; an
    unfenced broker the active controller hears from for the first time becomes alive. The
    last two may elect it leader of offline partitions (``election.unfence_broker``)."""
    fields: dict[str, Any] = {"broker_id": broker_id, "incarnation_id": incarnation_id}
    current = image.brokers.get(broker_id)
    if current is None:
        return _error(
            ErrorCode.BROKER_ID_NOT_REGISTERED,
            f"broker {broker_id} is not registered",
            **fields,
            fenced=True,
        )
    if current.incarnation_id != incarnation_id:
        return _error(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker {broker_id} is registered with incarnation {current.incarnation_id}, "
            f"not {incarnation_id}",
            **fields,
            fenced=True,
        )
    if not current.fenced and want_fence:
        return _ok(
            fence_broker(image, broker_id, default_min_isr=default_min_isr), **fields, fenced=True
        )
    if not want_fence and (current.fenced or not current.alive):
        return _ok(
            unfence_broker(image, broker_id, default_min_isr=default_min_isr),
            **fields,
            fenced=False,
        )
    return _ok(**fields, fenced=current.fenced)


#: Partitions an ``unregister_broker`` refusal names (the rest are counted).
_UNREGISTER_NAMED_PARTITIONS = 5


def unregister_broker(
    image: MetadataImage, *, broker_id: Any, voter_ids: Sequence[int] = ()
) -> ControllerResult:
    """Kafka's UnregisterBroker: remove broker ``broker_id``'s registration (the last step of
    removing a broker, after draining and stopping it; see ``fluxctl cluster remove-node``).

    Refused, in this order (the first that applies):

    - ``POLICY_VIOLATION`` if the id is a controller voter (``voter_ids``): a combined node
      leaves the quorum first (``fluxctl controller remove``);
    - ``BROKER_ID_NOT_REGISTERED`` if no broker has the id;
    - ``INVALID_REQUEST`` if the broker still holds a replica (in some partition's replicas,
      adding or removing replicas, ISR or ELR): unregistering it would leave partitions
      pointing at a broker nobody knows, so it must be drained first;
    - ``INVALID_REQUEST`` if it is unfenced: a running broker would register again on its next
      heartbeat (Kafka unregisters it anyway and lets it come back; refusing says why it would
      not stick). A stopped broker is fenced within ``broker.session.timeout.ms``.

    Partitions are untouched (none refers to the broker). The broker's config overrides stay,
    as in Kafka: a broker registering later with the same id gets them back."""
    try:
        broker_id = _check_int(broker_id, "broker_id")
    except _Rejected as rejected:
        return _error(rejected.error_code, rejected.message)
    fields: dict[str, Any] = {"broker_id": broker_id}
    if broker_id in voter_ids:
        return _error(
            ErrorCode.POLICY_VIOLATION,
            f"node {broker_id} is a controller voter: remove it from the quorum first "
            f"(fluxctl controller remove {broker_id})",
            **fields,
        )
    registration = image.brokers.get(broker_id)
    if registration is None:
        return _error(
            ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered", **fields
        )
    held = _partitions_holding(image, broker_id)
    if held:
        named = ", ".join(held[:_UNREGISTER_NAMED_PARTITIONS])
        more = len(held) - _UNREGISTER_NAMED_PARTITIONS
        return _error(
            ErrorCode.INVALID_REQUEST,
            f"broker {broker_id} still holds replicas of {len(held)} partition(s) ({named}"
            f"{f' and {more} more' if more > 0 else ''}): drain it first "
            f"(fluxctl cluster remove-node {broker_id})",
            **fields,
        )
    if not registration.fenced:
        return _error(
            ErrorCode.INVALID_REQUEST,
            f"broker {broker_id} is running (unfenced): stop its process first, or it registers "
            "again on its next heartbeat",
            **fields,
        )
    record = UnregisterBroker(broker_id=broker_id, incarnation_id=registration.incarnation_id)
    return _ok([record], **fields)


def _partitions_holding(image: MetadataImage, broker_id: int) -> list[str]:
    """``topic-partition`` of every partition that refers to ``broker_id`` in any role."""
    return [
        f"{name}-{index}"
        for name, topic in image.topics.items()
        for index, state in enumerate(topic.partitions)
        if broker_id in (*state.replicas, *state.adding, *state.removing, *state.isr, *state.elr)
    ]


# -- topics -------------------------------------------------------------------------------


def _live_brokers_with_racks(image: MetadataImage) -> list[tuple[int, str | None]]:
    return [(b.broker_id, b.rack) for b in image.brokers.values() if not b.fenced]


def _validate_configs(configs: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    if len(configs) > MAX_CONFIG_CHANGES:
        raise _Rejected(ErrorCode.INVALID_CONFIG, f"more than {MAX_CONFIG_CHANGES} configs")
    for key, value in configs.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise _Rejected(ErrorCode.INVALID_CONFIG, f"config {key!r} must map to a string")
        try:
            validate_topic_config(key, value)
        except InvalidConfigError as error:
            raise _Rejected(ErrorCode.INVALID_CONFIG, str(error)) from None
    _validate_together(dict(configs))
    return tuple(sorted(configs.items()))


def _validate_together(values: dict[str, str]) -> None:
    try:
        validate_topic_configs(values)
    except InvalidConfigError as error:
        raise _Rejected(ErrorCode.INVALID_CONFIG, str(error)) from None


def _validate_partition_count(count: Any, what: str) -> int:
    if type(count) is not int or count < 1:
        raise _Rejected(ErrorCode.INVALID_PARTITIONS, f"{what} must be at least 1, got {count!r}")
    if count > MAX_PARTITIONS_PER_TOPIC:
        raise _Rejected(
            ErrorCode.INVALID_PARTITIONS,
            f"{what} {count} is more than the limit of {MAX_PARTITIONS_PER_TOPIC} per topic",
        )
    return count


def _validate_replication_factor(image: MetadataImage, replication_factor: Any) -> int:
    if type(replication_factor) is not int or replication_factor < 1:
        raise _Rejected(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor must be at least 1, got {replication_factor!r}",
        )
    if replication_factor > MAX_REPLICATION_FACTOR:
        raise _Rejected(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is more than the limit of "
            f"{MAX_REPLICATION_FACTOR}",
        )
    live = len(image.live_broker_ids())
    if replication_factor > live:
        raise _Rejected(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is larger than the {live} live brokers",
        )
    return replication_factor


def _validate_replica_list(
    image: MetadataImage, partition: int, replicas: Sequence[int], expected_size: int | None
) -> tuple[int, ...]:
    if isinstance(replicas, str | bytes) or not isinstance(replicas, Sequence):
        raise _Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {partition}: replicas must be a list"
        )
    result = tuple(replicas)
    if not result:
        raise _Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {partition} has no replicas"
        )
    if len(result) > MAX_REPLICATION_FACTOR:
        raise _Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"partition {partition} has more than {MAX_REPLICATION_FACTOR} replicas",
        )
    if len(set(result)) != len(result):
        raise _Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"partition {partition} lists a broker twice: {list(result)}",
        )
    if expected_size is not None and len(result) != expected_size:
        raise _Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"partition {partition} has {len(result)} replicas, expected {expected_size} "
            "like the others",
        )
    for broker_id in result:
        if type(broker_id) is not int or broker_id not in image.brokers:
            raise _Rejected(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition}: broker {broker_id!r} is not registered",
            )
        if not image.is_live(broker_id):
            raise _Rejected(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition}: broker {broker_id} is fenced",
            )
    return result


def _initial_spec(image: MetadataImage, replicas: tuple[int, ...]) -> PartitionSpec:
    live = tuple(r for r in replicas if image.is_live(r))
    # Lead on an alive replica where there is one (a live one the active controller has not
    # heard from yet may have died with the previous controller).
    leader = next((r for r in live if image.is_alive(r)), live[0] if live else -1)
    return PartitionSpec(replicas=replicas, isr=live, leader=leader)


def _placed(
    image: MetadataImage,
    count: int,
    replication_factor: int,
    rng: random.Random,
    *,
    start_partition: int = 0,
    start_index: int | None = None,
) -> list[tuple[int, ...]]:
    try:
        return place_replicas(
            _live_brokers_with_racks(image),
            count,
            replication_factor,
            rng=rng,
            start_partition=start_partition,
            start_index=start_index,
        )
    except InvalidReplicationFactorError as error:
        raise _Rejected(ErrorCode.INVALID_REPLICATION_FACTOR, str(error)) from None


def _check_name_collision(image: MetadataImage, name: str) -> None:
    if name in image.topics:
        raise _Rejected(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    # Kafka's rule: '.' and '_' collide in metric names, so "a.b" and "a_b" cannot coexist.
    normalized = name.replace(".", "_")
    for existing in image.topics:
        if existing.replace(".", "_") == normalized:
            raise _Rejected(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"topic {name!r} collides with existing topic {existing!r}",
            )


def _assignment_specs(
    image: MetadataImage, assignments: Mapping[int, Sequence[int]]
) -> list[tuple[int, ...]]:
    count = _validate_partition_count(len(assignments), "number of assigned partitions")
    numbers = sorted(assignments)
    if numbers != list(range(count)):
        raise _Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"assigned partitions must be numbered 0 to {count - 1}, got {numbers}",
        )
    placed: list[tuple[int, ...]] = []
    for partition in numbers:
        size = len(placed[0]) if placed else None
        placed.append(_validate_replica_list(image, partition, assignments[partition], size))
    return placed


def create_topic(
    image: MetadataImage,
    *,
    name: str,
    num_partitions: int,
    replication_factor: int,
    assignments: Mapping[int, Sequence[int]] | None,
    configs: Mapping[str, str],
    topic_id: str,
    default_partitions: int,
    default_replication_factor: int,
    rng: random.Random,
    validate_only: bool = False,
) -> ControllerResult:
    """Create a topic. ``-1`` for ``num_partitions``/``replication_factor`` means the default;
    ``assignments`` (partition -> replicas, leader first) replaces both counts."""
    try:
        try:
            validate_topic_name(name)
        except InvalidTopicError as error:
            raise _Rejected(ErrorCode.INVALID_TOPIC_EXCEPTION, str(error)) from None
        _check_name_collision(image, name)
        if not isinstance(topic_id, str) or not topic_id:
            raise _Rejected(ErrorCode.INVALID_REQUEST, "topic id must be a non-empty string")
        if image.topic_by_id(topic_id) is not None:
            raise _Rejected(ErrorCode.INVALID_REQUEST, f"topic id {topic_id} is already in use")
        config = _validate_configs(configs)
        if assignments is not None:
            if num_partitions != -1 or replication_factor != -1:
                raise _Rejected(
                    ErrorCode.INVALID_REQUEST,
                    "give either replica assignments or partition count and replication "
                    "factor (-1), not both",
                )
            placed = _assignment_specs(image, assignments)
        else:
            count = default_partitions if num_partitions == -1 else num_partitions
            factor = default_replication_factor if replication_factor == -1 else replication_factor
            count = _validate_partition_count(count, "number of partitions")
            factor = _validate_replication_factor(image, factor)
            placed = _placed(image, count, factor, rng)
    except _Rejected as rejected:
        return _error(rejected.error_code, rejected.message, name=name)
    specs = tuple(_initial_spec(image, replicas) for replicas in placed)
    record = CreateTopic(name=name, topic_id=topic_id, partitions=specs, config=config)
    response = {
        "name": name,
        "topic_id": topic_id,
        "num_partitions": len(specs),
        "replication_factor": len(specs[0].replicas),
        "partitions": [
            {"partition": i, "replicas": list(s.replicas), "leader": s.leader, "isr": list(s.isr)}
            for i, s in enumerate(specs)
        ],
        "configs": dict(config),
    }
    return _ok([] if validate_only else [record], **response)


def _resolve_topic(image: MetadataImage, name: str | None, topic_id: str | None) -> TopicImage:
    if topic_id is not None:
        topic = image.topic_by_id(topic_id)
        if topic is None or (name is not None and topic.name != name):
            raise _Rejected(ErrorCode.UNKNOWN_TOPIC_ID, f"unknown topic id {topic_id}")
        return topic
    if name is None:
        raise _Rejected(ErrorCode.INVALID_REQUEST, "give a topic name or a topic id")
    found = image.topics.get(name)
    if found is None:
        raise _Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return found


def delete_topic(
    image: MetadataImage, *, name: str | None = None, topic_id: str | None = None
) -> ControllerResult:
    """Delete a topic by name or by id (not one of ``UNDELETABLE_TOPICS``)."""
    try:
        topic = _resolve_topic(image, name, topic_id)
    except _Rejected as rejected:
        return _error(rejected.error_code, rejected.message, name=name, topic_id=topic_id)
    if topic.name in UNDELETABLE_TOPICS:
        return _error(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"{topic.name} is an internal topic (the cluster's group offsets or transaction "
            "state) and cannot be deleted",
            name=topic.name,
            topic_id=topic.topic_id,
        )
    return _ok([DeleteTopic(topic_id=topic.topic_id)], name=topic.name, topic_id=topic.topic_id)


def create_partitions(
    image: MetadataImage,
    *,
    name: str,
    count: int,
    assignments: Sequence[Sequence[int]] | None,
    rng: random.Random,
    validate_only: bool = False,
) -> ControllerResult:
    """Grow topic ``name`` to ``count`` partitions; ``assignments`` lists the replicas of the
    new partitions only (Kafka's CreatePartitions)."""
    try:
        topic = _resolve_topic(image, name, None)
        current = len(topic.partitions)
        if type(count) is not int or count <= current:
            raise _Rejected(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {current} partitions; the new count {count!r} must be larger",
            )
        _validate_partition_count(count, "number of partitions")
        factor = len(topic.partitions[0].replicas)
        added = count - current
        if assignments is not None:
            if len(assignments) != added:
                raise _Rejected(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"{len(assignments)} assignments given for {added} new partitions",
                )
            placed = [
                _validate_replica_list(image, current + i, replicas, factor)
                for i, replicas in enumerate(assignments)
            ]
        else:
            _validate_replication_factor(image, factor)
            # Continue the spread where it stopped (Kafka: start from partition 0's leader).
            live = [broker_id for broker_id, _ in sorted(_live_brokers_with_racks(image))]
            first_leader = topic.partitions[0].preferred_leader
            start_index = next((i for i, b in enumerate(live) if b >= first_leader), 0)
            placed = _placed(
                image, added, factor, rng, start_partition=current, start_index=start_index
            )
    except _Rejected as rejected:
        return _error(rejected.error_code, rejected.message, name=name)
    specs = tuple(_initial_spec(image, replicas) for replicas in placed)
    record = CreatePartitions(topic_id=topic.topic_id, partitions=specs)
    response = {
        "name": name,
        "topic_id": topic.topic_id,
        "count": count,
        "partitions": [
            {"partition": current + i, "replicas": list(s.replicas), "leader": s.leader}
            for i, s in enumerate(specs)
        ],
    }
    return _ok([] if validate_only else [record], **response)


# -- partitions ---------------------------------------------------------------------------


def _validate_alter_partition(
    image: MetadataImage,
    broker_id: int,
    incarnation_id: str,
    topic_id: str,
    partition: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: Sequence[int],
) -> tuple[TopicImage, PartitionState, tuple[int, ...]]:
    registration = image.brokers.get(broker_id)
    if registration is None or registration.incarnation_id != incarnation_id:
        raise _Rejected(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker {broker_id} incarnation {incarnation_id} is not the registered one",
        )
    topic = image.topic_by_id(topic_id)
    if topic is None:
        raise _Rejected(ErrorCode.UNKNOWN_TOPIC_ID, f"unknown topic id {topic_id}")
    if type(partition) is not int or not 0 <= partition < len(topic.partitions):
        raise _Rejected(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"topic {topic.name!r} has no partition {partition}",
        )
    state = topic.partitions[partition]
    if state.leader != broker_id:
        raise _Rejected(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {broker_id} is not the leader of {topic.name}-{partition} "
            f"(the leader is {state.leader})",
        )
    _check_int(leader_epoch, "leader_epoch")
    _check_int(partition_epoch, "partition_epoch")
    if leader_epoch < state.leader_epoch:
        raise _Rejected(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"leader epoch {leader_epoch} is older than the current {state.leader_epoch}",
        )
    if leader_epoch > state.leader_epoch:
        raise _Rejected(
            ErrorCode.UNKNOWN_LEADER_EPOCH,
            f"leader epoch {leader_epoch} is newer than the current {state.leader_epoch}",
        )
    if partition_epoch != state.partition_epoch:
        raise _Rejected(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"partition epoch {partition_epoch} is not the current {state.partition_epoch}",
        )
    if isinstance(isr, str | bytes) or not isinstance(isr, Sequence):
        raise _Rejected(ErrorCode.INVALID_REQUEST, "isr must be a list of broker ids")
    proposed = [_check_int(member, "isr member") for member in isr]
    if len(set(proposed)) != len(proposed):
        raise _Rejected(ErrorCode.INVALID_REQUEST, f"the ISR {proposed} lists a broker twice")
    if not set(proposed) <= set(state.replicas):
        raise _Rejected(
            ErrorCode.INVALID_REQUEST,
            f"the ISR {proposed} is not a subset of the replicas {list(state.replicas)}",
        )
    if broker_id not in proposed:
        raise _Rejected(
            ErrorCode.INVALID_REQUEST, f"the ISR {proposed} does not contain the leader {broker_id}"
        )
    for member in proposed:
        if member not in state.isr and not image.is_live(member):
            raise _Rejected(
                ErrorCode.INELIGIBLE_REPLICA,
                f"broker {member} cannot join the ISR: it is fenced or not registered",
            )
    # Kept in replica order so that a mere reordering is not a change.
    new_isr = tuple(r for r in state.replicas if r in proposed)
    return topic, state, new_isr


def alter_partition(
    image: MetadataImage,
    *,
    broker_id: int,
    incarnation_id: str,
    topic_id: str,
    partition: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: Sequence[int],
    default_min_isr: int = 1,
) -> ControllerResult:
    """The partition leader proposes a new ISR (Kafka's AlterPartition). The response carries
    the partition state after the change (or the current state when rejected)."""
    fields: dict[str, Any] = {"topic_id": topic_id, "partition": partition}
    try:
        topic, state, new_isr = _validate_alter_partition(
            image,
            broker_id,
            incarnation_id,
            topic_id,
            partition,
            leader_epoch,
            partition_epoch,
            isr,
        )
    except _Rejected as rejected:
        current = _current_state(image, topic_id, partition)
        extra = _state_fields(current) if current is not None else {}
        return _error(rejected.error_code, rejected.message, **fields, **extra)
    if new_isr == state.isr:
        return _ok(**fields, **_state_fields(state))
    # Replicas leaving the ISR stay eligible while the partition cannot acknowledge acks=all
    # writes without them (KIP-966); joining the ISR takes a replica out of the ELR.
    min_isr = min_insync_replicas(topic, default_min_isr)
    leaving = [r for r in state.isr if r not in new_isr]
    elr = set(state.elr) | (set(leaving) if len(new_isr) < min_isr else set())
    change = settled_change(
        topic, partition, state, leader=state.leader, isr=new_isr, elr=elr, min_isr=min_isr
    )
    assert change is not None, "an ISR change is a change"
    new_state = PartitionState(
        replicas=state.replicas,
        isr=change.isr,
        leader=change.leader,
        leader_epoch=change.leader_epoch,
        partition_epoch=change.partition_epoch,
        elr=change.elr,
        adding=state.adding,
        removing=state.removing,
    )
    completed = _completed_reassignment(
        image, topic, partition, new_state, epoch=change.partition_epoch
    )
    if completed is not None:
        # The last adding replica joined the ISR: the reassignment completes in this change.
        done = reassigned_state(completed)
        return _ok([completed], **fields, **_state_fields(done))
    return _ok([change], **fields, **_state_fields(new_state))


def alter_partitions(
    image: MetadataImage,
    *,
    broker_id: int,
    incarnation_id: str,
    partitions: Sequence[Mapping[str, Any]],
    default_min_isr: int = 1,
) -> ControllerResult:
    """AlterPartition for many partitions of one leader at once (Kafka's request carries a
    list): each item (``topic_id``, ``partition``, ``leader_epoch``, ``partition_epoch``,
    ``isr``) is decided as ``alter_partition`` decides it, on the same image, and all the
    changes commit as one command. ``response["partitions"]`` has one answer per item, in
    order; a partition listed twice is refused the second time."""
    if len(partitions) > MAX_ALTER_PARTITIONS:
        return _error(
            ErrorCode.INVALID_REQUEST,
            f"{len(partitions)} partitions in one request; at most {MAX_ALTER_PARTITIONS}",
            partitions=[],
        )
    records: list[Record] = []
    answers: list[dict[str, Any]] = []
    seen: set[tuple[Any, Any]] = set()
    for item in partitions:
        key = (item.get("topic_id"), item.get("partition"))
        if key in seen:
            answers.append(
                {
                    "topic_id": key[0],
                    "partition": key[1],
                    "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": "partition listed twice in one request",
                }
            )
            continue
        seen.add(key)
        result = alter_partition(
            image,
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            topic_id=item["topic_id"],
            partition=item["partition"],
            leader_epoch=item["leader_epoch"],
            partition_epoch=item["partition_epoch"],
            isr=item["isr"],
            default_min_isr=default_min_isr,
        )
        records.extend(result.records)
        answers.append(result.response)
    return _ok(records, partitions=answers)


# -- reassignments (KIP-455) -------------------------------------------------------------------


def alter_partition_reassignments(
    image: MetadataImage,
    *,
    requests: Sequence[tuple[str, int, Sequence[int] | None]],
) -> ControllerResult:
    """Kafka's AlterPartitionReassignments: per ``(topic, partition, target replicas)`` start
    moving the partition to the target (None cancels a running reassignment).

    The new replicas join as followers and catch up; the partition's replicas are the target
    then the leaving ones, ``adding`` the new and ``removing`` the leaving. When every adding
    replica is in the ISR (``alter_partition`` notices) the reassignment completes: the
    replicas become the target, the leaving ones drop out of the ISR, and leadership moves to
    the first target replica in the ISR if the leader leaves. A new target for a partition
    being reassigned replaces the old one (the original replicas stay what they were).
    Cancelling returns to the original replicas (the adding ones leave), in the running order as
    Kafka does (so the preferred replica may differ from before). Per-partition outcomes in
    ``response["partitions"]``."""
    records: list[Record] = []
    results = []
    for name, index, target in requests:
        outcome: dict[str, Any] = {"topic": name, "partition": index}
        try:
            topic = image.topics.get(name)
            if topic is None or type(index) is not int or not 0 <= index < len(topic.partitions):
                raise _Rejected(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {name}-{index}"
                )
            state = topic.partitions[index]
            if target is None:
                record = _cancel_reassignment(image, topic, index, state)
            else:
                record = _start_reassignment(image, topic, index, state, tuple(target))
        except _Rejected as rejected:
            results.append(
                {
                    **outcome,
                    "error_code": int(rejected.error_code),
                    "error_message": rejected.message,
                }  # fmt: skip
            )
            continue
        if record is not None:
            records.append(record)
        results.append({**outcome, "error_code": 0, "error_message": None})
    return _ok(records, partitions=results)


def _start_reassignment(
    image: MetadataImage,
    topic: TopicImage,
    index: int,
    state: PartitionState,
    target: tuple[int, ...],
) -> PartitionReassignment | None:
    if not target or len(set(target)) != len(target):
        raise _Rejected(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"replicas {list(target)} are empty or repeat"
        )
    unknown = [r for r in target if r not in image.brokers]
    if unknown:
        raise _Rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"unknown brokers {unknown}")
    original = state.original_replicas
    if target == original and not state.reassigning:
        return None  # already there
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    moving = PartitionState(
        replicas=target + removing,
        isr=tuple(r for r in state.isr if r in target or r in removing),
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        partition_epoch=state.partition_epoch,
        elr=tuple(r for r in state.elr if r in target or r in removing),
        adding=adding,
        removing=removing,
    )
    completed = _completed_reassignment(
        image, topic, index, moving, epoch=state.partition_epoch + 1
    )
    if completed is not None:
        return completed
    return _reassignment_record(topic, index, moving, epoch=state.partition_epoch + 1)


def _cancel_reassignment(
    image: MetadataImage, topic: TopicImage, index: int, state: PartitionState
) -> PartitionReassignment:
    if not state.reassigning:
        raise _Rejected(
            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"{topic.name}-{index} is not being reassigned"
        )
    original = state.original_replicas
    back = PartitionState(
        replicas=original,
        isr=state.isr,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        partition_epoch=state.partition_epoch,
        elr=state.elr,
        adding=(),
        removing=tuple(r for r in state.replicas if r not in original),
    )
    record = _completed_reassignment(image, topic, index, back, epoch=state.partition_epoch + 1)
    if record is None:
        raise _Rejected(
            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
            f"{topic.name}-{index}: no original replica is in the ISR to go back to",
        )
    return record


def _completed_reassignment(
    image: MetadataImage, topic: TopicImage, index: int, state: PartitionState, *, epoch: int
) -> PartitionReassignment | None:
    """The record that completes ``state``'s reassignment (every adding replica in the ISR),
    or None when it cannot complete yet (or none runs)."""
    if not state.reassigning or not set(state.adding) <= set(state.isr):
        return None
    target = state.target_replicas
    isr = tuple(r for r in state.isr if r in target)
    if not isr:
        return None  # nobody of the target holds the data yet
    leader, leader_epoch = state.leader, state.leader_epoch
    if leader not in target:
        alive = [r for r in target if r in isr and image.is_alive(r)]
        leader = alive[0] if alive else -1
        leader_epoch += 1
    done = PartitionState(
        replicas=target,
        isr=isr,
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=state.partition_epoch,
        elr=tuple(r for r in state.elr if r in target),
    )
    return _reassignment_record(topic, index, done, epoch=epoch)


def _reassignment_record(
    topic: TopicImage, index: int, state: PartitionState, *, epoch: int
) -> PartitionReassignment:
    return PartitionReassignment(
        topic_id=topic.topic_id,
        partition=index,
        replicas=state.replicas,
        adding=state.adding,
        removing=state.removing,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        partition_epoch=epoch,
        elr=state.elr,
    )


def list_partition_reassignments(
    image: MetadataImage, partitions: Sequence[tuple[str, int]] | None = None
) -> list[dict[str, Any]]:
    """The running reassignments (of ``partitions``, or all): topic, partition, replicas,
    adding, removing."""
    found = []
    for name, topic in sorted(image.topics.items()):
        for index, state in enumerate(topic.partitions):
            if not state.reassigning:
                continue
            if partitions is not None and (name, index) not in partitions:
                continue
            found.append(
                {
                    "topic": name,
                    "partition": index,
                    "replicas": list(state.replicas),
                    "adding": list(state.adding),
                    "removing": list(state.removing),
                }  # fmt: skip
            )
    return found


def _current_state(image: MetadataImage, topic_id: str, partition: Any) -> PartitionState | None:
    topic = image.topic_by_id(topic_id) if isinstance(topic_id, str) else None
    if topic is None or type(partition) is not int or not 0 <= partition < len(topic.partitions):
        return None
    return topic.partitions[partition]


ELECTION_TYPES = ("preferred", "unclean")


def _elect_one(
    image: MetadataImage,
    topic: TopicImage,
    partition: int,
    election_type: str,
    default_min_isr: int,
) -> PartitionChange:
    state = topic.partitions[partition]
    min_isr = min_insync_replicas(topic, default_min_isr)
    if election_type == "preferred":
        preferred = state.preferred_leader
        if state.leader == preferred:
            raise _Rejected(
                ErrorCode.ELECTION_NOT_NEEDED, f"broker {preferred} is already the leader"
            )
        if preferred not in state.isr or not image.is_alive(preferred):
            raise _Rejected(
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"preferred replica {preferred} is not alive and in the ISR {list(state.isr)}",
            )
        return leader_change(
            topic, partition, state, leader=preferred, isr=state.isr, min_isr=min_isr
        )
    if state.leader != -1:
        raise _Rejected(
            ErrorCode.ELECTION_NOT_NEEDED, f"the partition has a leader ({state.leader})"
        )
    clean = first_alive_replica(image, state, among=state.isr)
    if clean is not None:
        return leader_change(topic, partition, state, leader=clean, isr=state.isr, min_isr=min_isr)
    # An operator's unclean election: an eligible replica if one is alive, else any.
    elected = elect_without_isr(
        image, topic, partition, state, isr=state.isr, elr=state.elr, min_isr=min_isr, unclean=True
    )
    if elected is None:
        raise _Rejected(
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"none of the replicas {list(state.replicas)} is alive",
        )
    return elected


def elect_leaders(
    image: MetadataImage,
    *,
    partitions: Sequence[tuple[str, int]] | None,
    election_type: str = "preferred",
    default_min_isr: int = 1,
) -> ControllerResult:
    """Kafka's ElectLeaders: ``"preferred"`` moves leadership to the preferred replica where it
    is alive and in the ISR; ``"unclean"`` gives offline partitions a leader (an alive ISR
    member if any, else an alive ELR member, else the first alive replica, with ISR = [it]).
    ``partitions=None`` means all.
    Per-partition outcomes are in ``response["partitions"]``."""
    if election_type not in ELECTION_TYPES:
        return _error(
            ErrorCode.INVALID_REQUEST,
            f"election type {election_type!r} is not one of {', '.join(ELECTION_TYPES)}",
            partitions=[],
        )
    if partitions is None:
        wanted = [(name, i) for name, t in image.topics.items() for i in range(len(t.partitions))]
    else:
        wanted = list(dict.fromkeys((name, index) for name, index in partitions))
    records: list[Record] = []
    results = []
    for name, index in wanted:
        outcome: dict[str, Any] = {"topic": name, "partition": index}
        try:
            topic = image.topics.get(name)
            if topic is None or type(index) is not int or not 0 <= index < len(topic.partitions):
                raise _Rejected(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {name}-{index}"
                )
            change = _elect_one(image, topic, index, election_type, default_min_isr)
        except _Rejected as rejected:
            if partitions is None and rejected.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                # Electing "all" reports only the partitions it changed (Kafka does the same).
                continue
            results.append(
                {
                    **outcome,
                    "error_code": int(rejected.error_code),
                    "error_message": rejected.message,
                }
            )
            continue
        records.append(change)
        results.append({**outcome, "error_code": 0, "error_message": None, "leader": change.leader})
    return _ok(records, partitions=results)


# -- configs ------------------------------------------------------------------------------


def _validate_topic_changes(changes: Mapping[str, str | None]) -> None:
    for key, value in changes.items():
        if value is None:
            if key not in TOPIC_CONFIG_KEYS:
                raise _Rejected(ErrorCode.INVALID_CONFIG, f"unknown topic config {key!r}")
            continue
        if not isinstance(value, str):
            raise _Rejected(ErrorCode.INVALID_CONFIG, f"config {key!r} must map to a string")
        try:
            validate_topic_config(key, value)
        except InvalidConfigError as error:
            raise _Rejected(ErrorCode.INVALID_CONFIG, str(error)) from None


def _validate_broker_changes(resource_name: str, changes: Mapping[str, str | None]) -> None:
    if not isinstance(resource_name, str) or not _BROKER_RESOURCE_NAME.match(resource_name):
        raise _Rejected(
            ErrorCode.INVALID_REQUEST,
            f"broker resource name must be a broker id or empty, got {resource_name!r}",
        )
    for key, value in changes.items():
        if not isinstance(key, str) or not _BROKER_CONFIG_KEY.match(key):
            raise _Rejected(
                ErrorCode.INVALID_CONFIG, f"broker config key {key!r} must match [a-z0-9._]+"
            )
        if value is not None and (
            not isinstance(value, str) or len(value) > MAX_CONFIG_VALUE_LENGTH
        ):
            raise _Rejected(
                ErrorCode.INVALID_CONFIG,
                f"broker config {key!r} must map to a string of at most "
                f"{MAX_CONFIG_VALUE_LENGTH} characters",
            )
        # The replication throttles (cluster/replication/throttle.py) are bytes per second.
        if key.endswith(".throttled.rate") and value is not None:
            if not value.isdigit() or int(value) < 1:
                raise _Rejected(
                    ErrorCode.INVALID_CONFIG,
                    f"broker config {key!r} must be a positive number of bytes per second,"
                    f" got {value!r}",
                )


def alter_configs(
    image: MetadataImage,
    *,
    resource_type: str,
    resource_name: str,
    changes: Mapping[str, str | None],
    validate_only: bool = False,
) -> ControllerResult:
    """Set (str) or delete (None) config overrides of a topic or a broker (``resource_name``
    is a broker id, or ``""`` for the cluster-wide default). Only real changes make records."""
    fields: dict[str, Any] = {"resource_type": resource_type, "resource_name": resource_name}
    try:
        if len(changes) > MAX_CONFIG_CHANGES:
            raise _Rejected(ErrorCode.INVALID_REQUEST, f"more than {MAX_CONFIG_CHANGES} changes")
        if resource_type == "topic":
            topic = image.topics.get(resource_name)
            if topic is None:
                raise _Rejected(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {resource_name!r}"
                )
            _validate_topic_changes(changes)
            current = topic.config_dict()
            merged = {**current, **changes}
            _validate_together({k: v for k, v in merged.items() if v is not None})
        elif resource_type == "broker":
            _validate_broker_changes(resource_name, changes)
            current = dict(image.broker_configs.get(resource_name, ()))
        else:
            raise _Rejected(
                ErrorCode.INVALID_REQUEST,
                f"resource type must be 'topic' or 'broker', got {resource_type!r}",
            )
    except _Rejected as rejected:
        return _error(rejected.error_code, rejected.message, **fields)
    records: list[Record] = [
        ConfigChange(resource_type=resource_type, resource_name=resource_name, key=key, value=value)
        for key, value in sorted(changes.items())
        if current.get(key) != value
    ]
    return _ok([] if validate_only else records, **fields)


PRODUCER_ID_BLOCK_SIZE = 1000


def allocate_producer_ids(
    image: MetadataImage, *, broker_id: int, count: int = PRODUCER_ID_BLOCK_SIZE
) -> ControllerResult:
    """Hand broker ``broker_id`` the next block of producer ids (InitProducerId draws from it).

    Only registered brokers may ask; blocks never overlap because the record applies only at
    the image's next unallocated id."""
    if broker_id not in image.brokers:
        return _error(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
    if not 1 <= count <= PRODUCER_ID_BLOCK_SIZE:
        return _error(ErrorCode.INVALID_REQUEST, f"count must be in 1..{PRODUCER_ID_BLOCK_SIZE}")
    first = image.next_producer_id
    return _ok(
        [AllocateProducerIds(broker_id=broker_id, first_producer_id=first, count=count)],
        first_producer_id=first,
        count=count,
    )


MAX_SUBSCRIPTIONS = 10_000
MAX_SUBSCRIPTION_TOPICS = 1000
MAX_ADDRESS_LENGTH = 2048
_SUBSCRIPTION_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_ADDRESS_SCHEMES = ("http://", "https://", "ws://", "wss://")


def register_subscription(
    image: MetadataImage,
    *,
    subscription_id: str,
    address: str,
    topics: Sequence[str],
    read_old: bool,
    now_ms: int,
    max_in_flight: int = 1,
    signing_secret: str = "",
) -> ControllerResult:
    """Create a push subscription, or reactivate an existing inactive one with the same id
    (its offsets were kept). ``created`` in the response says which. ``max_in_flight`` is the
    subscription's window: an existing subscription takes the new value."""
    if not _SUBSCRIPTION_ID.match(subscription_id):
        return _error(ErrorCode.INVALID_REQUEST, f"invalid subscription id {subscription_id!r}")
    if len(address) > MAX_ADDRESS_LENGTH or not address.startswith(_ADDRESS_SCHEMES):
        return _error(ErrorCode.INVALID_REQUEST, "address must be an http(s) or ws(s) URL")
    if not topics or len(topics) > MAX_SUBSCRIPTION_TOPICS:
        return _error(
            ErrorCode.INVALID_REQUEST, f"topics must name 1..{MAX_SUBSCRIPTION_TOPICS} topics"
        )
    for name in topics:
        try:
            validate_topic_name(name)
        except InvalidTopicError as error:
            return _error(ErrorCode.INVALID_TOPIC_EXCEPTION, str(error))
    if not 1 <= max_in_flight <= MAX_SUBSCRIPTION_IN_FLIGHT:
        return _error(
            ErrorCode.INVALID_REQUEST, f"max_in_flight must be in 1..{MAX_SUBSCRIPTION_IN_FLIGHT}"
        )
    current = image.subscriptions.get(subscription_id)
    fields = {"subscription_id": subscription_id}
    if current is not None:
        records: list[Record] = []
        if not current.active:
            records.append(SubscriptionStateChange(subscription_id, active=True, changed_ms=now_ms))
        if current.max_in_flight != max_in_flight:
            records.append(SubscriptionWindowChange(subscription_id, max_in_flight=max_in_flight))
        return _ok(records, created=False, reactivated=not current.active, **fields)
    if len(image.subscriptions) >= MAX_SUBSCRIPTIONS:
        return _error(ErrorCode.INVALID_REQUEST, f"at most {MAX_SUBSCRIPTIONS} subscriptions")
    record = RegisterSubscription(
        subscription_id=subscription_id,
        address=address,
        topics=tuple(dict.fromkeys(topics)),
        read_old=read_old,
        created_ms=now_ms,
        max_in_flight=max_in_flight,
        signing_secret=signing_secret,
    )
    return _ok([record], created=True, reactivated=False, **fields)


def set_subscription_state(
    image: MetadataImage, *, subscription_id: str, active: bool, now_ms: int
) -> ControllerResult:
    current = image.subscriptions.get(subscription_id)
    if current is None:
        return _error(ErrorCode.RESOURCE_NOT_FOUND, f"no subscription {subscription_id!r}")
    if current.active == active:
        return _ok(subscription_id=subscription_id, active=active)
    change = SubscriptionStateChange(subscription_id, active=active, changed_ms=now_ms)
    return _ok([change], subscription_id=subscription_id, active=active)


def delete_subscription(image: MetadataImage, *, subscription_id: str) -> ControllerResult:
    if subscription_id not in image.subscriptions:
        return _error(ErrorCode.RESOURCE_NOT_FOUND, f"no subscription {subscription_id!r}")
    return _ok([DeleteSubscription(subscription_id)], subscription_id=subscription_id)
