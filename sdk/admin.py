"""``AsyncAdmin`` and its synchronous twin ``Admin``: topics, configs, partitions, offsets,
consumer groups, SCRAM users and the cluster description.

    async with AsyncAdmin("127.0.0.1:9092") as admin:
        await admin.create_topic("orders", partitions=3, configs={"retention.ms": "3600000"})
    with Admin("127.0.0.1:9092") as admin:
        print(admin.describe_topic("orders").partitions[0].leader)

CreateTopics, DeleteTopics and CreatePartitions go to the controller (Metadata
``controller_id``), as Kafka's admin client sends them, and are retried on NOT_CONTROLLER.
Describe calls and config changes (IncrementalAlterConfigs, which the broker forwards to the
controller) go to any broker. Group operations go to the group's coordinator (found with
FindCoordinator and looked up again when it moves), except ListGroups, which every broker
answers for the groups it coordinates. Every broker error is raised as the typed exception of
``flux.sdk.errors``, carrying the broker's ``error_message``.

SCRAM users (``alter_user_scram_credentials`` / ``describe_user_scram_credentials``, Kafka's
AlterUserScramCredentials 51 and DescribeUserScramCredentials 50) go to any broker, which
forwards alterations to the controller. As Kafka's clients do, the password never leaves the
client: it sends a fresh random salt (``secrets.token_bytes(32)``) and the salted password
(PBKDF2-HMAC of the mechanism's hash, ``iterations`` rounds), from which the broker derives the
keys it stores. Iterations must be in Kafka's 4096..16384 (checked before hashing, so a typo
cannot make the client spin). The broker applies one user's alterations all together or not at
all, and different users' independently. A describe answers from one broker's metadata, which
may lag a just-made change for a moment on a multi-node cluster.

``Admin`` has the same methods, blocking: it runs an ``AsyncAdmin`` on its own event-loop
thread (``flux.sdk._sync.LoopThread``).

Thread-safety: an ``AsyncAdmin`` belongs to one event loop; an ``Admin`` may be shared by
threads (calls are serialized on its loop).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flux.auth.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MECHANISMS,
    MIN_ITERATIONS,
    SALT_BYTES,
)
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode

from . import limits
from ._group_requests import (
    describe_groups_body,
    offset_commit_body,
    offset_fetch_body,
    read_described_group,
    read_offset_commit,
    read_offset_fetch,
)
from ._sync import LoopThread, SyncProxy
from .cluster_client import COORDINATOR_RETRY_CODES, LEADER_RETRY_CODES, ClusterClient
from .consumer_protocol import decode_assignment
from .errors import (
    ConfigurationError,
    FluxConnectionError,
    FluxError,
    FluxTimeoutError,
    GroupNotEmptyError,
    KafkaError,
    LeaderNotAvailableError,
    UnknownTopicError,
    error_for,
)
from .metadata import RetryPolicy
from .security import ClientSecurity

__all__ = [
    "AclBinding",
    "AclFilter",
    "Admin",
    "AsyncAdmin",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "PartitionDescription",
    "ScramCredentialDeletion",
    "ScramCredentialInfo",
    "ScramCredentialUpsertion",
    "TopicDescription",
    "UserScramCredentials",
    "list_offsets",
]

_RESOURCE_TOPIC = 2
_RESOURCE_BROKER = 4
# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType).
_CONFIG_OP_SET = 0
_CONFIG_OP_DELETE = 1
_EARLIEST_TIMESTAMP = -2
_LATEST_TIMESTAMP = -1
_DEBUGGING_REPLICA_ID = -2  # Kafka's replica id for tools reading any replica's offsets
# Kafka's ConfigSource numbers (DescribeConfigs v1+), by name.
_CONFIG_SOURCES = {
    -1: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
_DEFAULT_CONFIG_SOURCE = 5
# SCRAM credentials: Kafka's mechanism codes, hashes, iteration bounds and salt length are
# flux.auth.scram's (one table for the broker and the client).
_SCRAM_MECHANISM_NAMES = {code: name for name, code in MECHANISM_TYPES.items()}
# A topic just created may be missing from a broker's metadata, or leaderless, for a moment.
_NEW_TOPIC_RETRY_CODES = frozenset(
    {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE}
)


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: list[PartitionDescription]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    value: str | None
    source: str
    read_only: bool
    is_default: bool


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerDescription]


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group as ListGroups reports it (``state`` is None from brokers before v4)."""

    group_id: str
    protocol_type: str
    state: str | None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A group member; ``assignment`` is decoded for ``consumer`` groups (else empty)."""

    member_id: str
    client_id: str
    host: str
    assignment: dict[str, list[int]]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group, its committed offsets and its lag.

    ``offsets``: committed offset per (topic, partition). ``high_watermarks`` and ``lag`` cover
    every partition with a committed offset or assigned to a member: lag is the high
    watermark minus the committed offset, or minus the log start offset when nothing is
    committed (everything retained is still to be read).
    """

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    offsets: dict[tuple[str, int], int]
    high_watermarks: dict[tuple[str, int], int]
    lag: dict[tuple[str, int], int]

    def owner_of(self, topic: str, partition: int) -> MemberDescription | None:
        for member in self.members:
            if partition in member.assignment.get(topic, ()):
                return member
        return None


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """One SCRAM credential of a user, as described: never a salt or key."""

    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True)
class UserScramCredentials:
    """A user's SCRAM credentials (one per mechanism), sorted by mechanism."""

    user: str
    credentials: list[ScramCredentialInfo]


@dataclass(frozen=True, slots=True)
class ScramCredentialUpsertion:
    """Set ``user``'s ``mechanism`` credential (``SCRAM-SHA-256`` or ``SCRAM-SHA-512``) from
    ``password``; creates the user if needed. ``repr`` hides the password."""

    user: str
    mechanism: str
    password: str = field(repr=False)
    iterations: int = DEFAULT_ITERATIONS


@dataclass(frozen=True, slots=True)
class ScramCredentialDeletion:
    """Delete ``user``'s ``mechanism`` credential."""

    user: str
    mechanism: str


#: Kafka's ACL wire codes by name (``org.apache.kafka.common.acl`` / ``.resource``).
ACL_RESOURCE_TYPES = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
ACL_PATTERN_TYPES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
ACL_OPERATIONS = {
    "ANY": 1,
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}
ACL_PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (Kafka's ``AclBinding``), fields by name: ``resource_type`` TOPIC, GROUP,
    CLUSTER or TRANSACTIONAL_ID; ``pattern_type`` LITERAL or PREFIXED; ``principal``
    ``User:name``; ``host`` ``*`` or an IP address; ``operation`` READ, WRITE, ...;
    ``permission`` ALLOW or DENY."""

    resource_type: str
    resource_name: str
    principal: str
    operation: str
    permission: str = "ALLOW"
    pattern_type: str = "LITERAL"
    host: str = "*"


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Selects ACLs to describe or delete; None (or ANY) matches anything. ``pattern_type``
    MATCH selects every ACL that applies to ``resource_name`` (literal, wildcard, prefixes)."""

    resource_type: str = "ANY"
    resource_name: str | None = None
    pattern_type: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str = "ANY"
    permission: str = "ANY"


def _acl_code(table: dict[str, int], value: str, what: str) -> int:
    code = table.get(value.upper()) if isinstance(value, str) else None
    if code is None:
        raise ConfigurationError(f"{what} must be one of {', '.join(table)}, got {value!r}")
    return code


def _acl_filter_body(acl_filter: AclFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": _acl_code(
            ACL_RESOURCE_TYPES, acl_filter.resource_type, "resource type"
        ),
        "resource_name_filter": acl_filter.resource_name,
        "pattern_type_filter": _acl_code(
            ACL_PATTERN_TYPES, acl_filter.pattern_type, "pattern type"
        ),
        "principal_filter": acl_filter.principal,
        "host_filter": acl_filter.host,
        "operation": _acl_code(ACL_OPERATIONS, acl_filter.operation, "operation"),
        "permission_type": _acl_code(ACL_PERMISSIONS, acl_filter.permission, "permission"),
    }


def _name_of(table: dict[str, int], code: int) -> str:
    return next((name for name, value in table.items() if value == code), f"UNKNOWN({code})")


def _acl_from(item: dict[str, Any], resource: dict[str, Any] | None = None) -> AclBinding:
    source = resource if resource is not None else item
    return AclBinding(
        resource_type=_name_of(ACL_RESOURCE_TYPES, source["resource_type"]),
        resource_name=source["resource_name"],
        pattern_type=_name_of(ACL_PATTERN_TYPES, source["pattern_type"]),
        principal=item["principal"],
        host=item["host"],
        operation=_name_of(ACL_OPERATIONS, item["operation"]),
        permission=_name_of(ACL_PERMISSIONS, item["permission_type"]),
    )


class AsyncAdmin:
    """Administrative operations on a cluster. ``timeout_s`` bounds each operation's retries."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "flux-admin",
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        security: ClientSecurity | Mapping[str, Any] | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ConfigurationError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self.client = ClusterClient(
            bootstrap,
            client_id=client_id,
            request_timeout_s=min(timeout_s, limits.REQUEST_TIMEOUT_S),
            retry=RetryPolicy(timeout_s=timeout_s),
            security=security,
        )

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.client.close()

    @property
    def _timeout_ms(self) -> int:
        return int(self.timeout_s * 1000)

    async def supports(self, api_key: int) -> bool:
        """Whether a broker advertises ``api_key`` in ApiVersions."""
        return api_key in await self.client.api_versions()

    # -- topics ----------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> TopicDescription:
        """Create a topic (-1: the broker's default count / factor) and describe it.

        With ``validate_only`` nothing is created and the description comes from the
        CreateTopics response (no topic id, no leaders)."""
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [
                        {"name": key, "value": value} for key, value in (configs or {}).items()
                    ],
                }
            ],
            "timeout_ms": self._timeout_ms,
            "validate_only": validate_only,
        }
        result = await self.client.call_controller(
            ApiKey.CREATE_TOPICS, body, lambda response, _: _single(response["topics"], name)
        )
        if validate_only:
            count = result.get("num_partitions", partitions)
            return TopicDescription(
                name=name,
                topic_id=uuid.UUID(int=0),
                internal=False,
                partitions=[
                    PartitionDescription(index, -1, -1, [], [], []) for index in range(count)
                ],
            )
        return await self._wait_described(name)

    async def _wait_described(self, name: str) -> TopicDescription:
        """Describe a topic just created: brokers learn of it from the controller, so its
        metadata may lag for a moment. Retried like any routing error, then raised."""

        def describe(response: dict[str, Any], _: int) -> TopicDescription:
            description = _describe_from_metadata(response, name)
            leaderless = [p.partition for p in description.partitions if p.leader < 0]
            if leaderless:
                raise LeaderNotAvailableError(
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    f"topic {name!r} was created but partitions {leaderless} have no leader yet",
                )
            return description

        return await self.client.call_any(
            ApiKey.METADATA,
            _metadata_body([name]),
            describe,
            retry_codes=_NEW_TOPIC_RETRY_CODES,
        )

    async def delete_topic(self, name: str) -> None:
        body = {"topics": [{"name": name}], "topic_names": [name], "timeout_ms": self._timeout_ms}
        await self.client.call_controller(
            ApiKey.DELETE_TOPICS, body, lambda response, _: _single(response["responses"], name)
        )
        self.client.metadata.forget(name)

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        """Names of every topic, sorted; internal topics (``__consumer_offsets``) only if asked."""

        def names(response: dict[str, Any], _: int) -> list[str]:
            return sorted(
                topic["name"]
                for topic in response["topics"]
                if topic["error_code"] == ErrorCode.NONE
                and (include_internal or not topic.get("is_internal", False))
            )

        return await self.client.call_metadata(None, names)

    async def describe_topic(self, name: str) -> TopicDescription:
        """Partitions with leader, leader epoch, replicas, ISR and offline replicas.

        ``UnknownTopicError`` if the topic does not exist (never auto-creates it)."""
        return await self.client.call_metadata(
            [name], lambda response, _: _describe_from_metadata(response, name)
        )

    async def create_partitions(
        self, name: str, total: int, *, validate_only: bool = False
    ) -> None:
        """Grow ``name`` to ``total`` partitions (CreatePartitions, API key 37)."""
        body = {
            "topics": [{"name": name, "count": total, "assignments": None}],
            "timeout_ms": self._timeout_ms,
            "validate_only": validate_only,
        }
        await self.client.call_controller(
            ApiKey.CREATE_PARTITIONS,
            body,
            lambda response, _: _single(response["results"], name),
        )

    # -- reassignments ---------------------------------------------------------------------

    async def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> dict[tuple[str, int], FluxError | None]:
        """Move partitions to new replicas (AlterPartitionReassignments, API key 45):
        ``{(topic, partition): [broker ids] or None to cancel}``. Per partition: None when
        the controller took it, else the error (``InvalidReplicaAssignmentError``,
        a ``KafkaError`` naming the code, such as NO_REASSIGNMENT_IN_PROGRESS). The move runs on (see
        ``list_partition_reassignments``)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), replicas in reassignments.items():
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "replicas": None if replicas is None else [int(r) for r in replicas],
                }
            )
        body = {
            "timeout_ms": self._timeout_ms,
            "allow_replication_factor_change": True,
            "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()],
        }

        def read(response: dict[str, Any], _: int) -> dict[tuple[str, int], FluxError | None]:
            _raise_for(
                response.get("error_code", 0), response.get("error_message"), context="reassignment"
            )
            outcome: dict[tuple[str, int], FluxError | None] = {}
            for topic in response["responses"]:
                for item in topic["partitions"]:
                    code = ErrorCode.from_code(item["error_code"])
                    outcome[(topic["name"], item["partition_index"])] = (
                        None
                        if code is ErrorCode.NONE
                        else error_for(code, item.get("error_message") or code.message)
                    )
            return outcome

        return await self.client.call_controller(ApiKey.ALTER_PARTITION_REASSIGNMENTS, body, read)

    async def list_partition_reassignments(
        self,
    ) -> dict[tuple[str, int], dict[str, list[int]]]:
        """The running reassignments (ListPartitionReassignments, API key 46):
        ``{(topic, partition): {"replicas", "adding", "removing"}}``."""
        body = {"timeout_ms": self._timeout_ms, "topics": None}

        def read(response: dict[str, Any], _: int) -> dict[tuple[str, int], dict[str, list[int]]]:
            _raise_for(
                response.get("error_code", 0), response.get("error_message"), context="reassignment"
            )
            return {
                (topic["name"], item["partition_index"]): {
                    "replicas": list(item["replicas"]),
                    "adding": list(item["adding_replicas"]),
                    "removing": list(item["removing_replicas"]),
                }
                for topic in response["topics"]
                for item in topic["partitions"]
            }

        return await self.client.call_controller(ApiKey.LIST_PARTITION_REASSIGNMENTS, body, read)

    async def unregister_broker(self, broker_id: int) -> None:
        """Remove broker ``broker_id``'s registration (UnregisterBroker, API key 64), the last
        step of removing a broker. The controller refuses a controller voter
        (``PolicyViolationError``), an unknown id (a ``KafkaError`` with code
        BROKER_ID_NOT_REGISTERED), a broker that still holds replicas and a running (unfenced)
        one (``InvalidRequestError``), with a message saying which
        (``flux.controller.handlers.unregister_broker``)."""
        body = {"broker_id": int(broker_id)}

        def read(response: dict[str, Any], _: int) -> None:
            _raise_for(
                response.get("error_code", 0),
                response.get("error_message"),
                context=f"unregistering broker {broker_id}",
            )

        await self.client.call_controller(ApiKey.UNREGISTER_BROKER, body, read)

    # -- configs and cluster ---------------------------------------------------------------

    async def describe_configs(self, topic: str) -> dict[str, ConfigEntry]:
        """Every configuration key of ``topic`` with its value and where it comes from."""
        body = {
            "resources": [
                {
                    "resource_type": _RESOURCE_TOPIC,
                    "resource_name": topic,
                    "configuration_keys": None,
                }
            ],
            "include_synonyms": False,
            "include_documentation": False,
        }
        return await self.client.call_any(ApiKey.DESCRIBE_CONFIGS, body, _read_configs)

    async def alter_topic_configs(
        self,
        topic: str,
        set: Mapping[str, str] | None = None,  # noqa: A002 - reads as admin.alter(t, set=...)
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Set config overrides of ``topic`` and delete others (IncrementalAlterConfigs, API key
        44); overrides not named stay as they are, and a deleted key goes back to the broker's
        default. All or nothing: ``InvalidConfigError`` names an unknown key or a bad value and
        then nothing changes; ``UnknownTopicError`` if there is no such topic.

        The broker that answers already shows the change (in DescribeConfigs, and in how its
        replicas behave); the other brokers follow as their metadata catches up."""
        changes = _config_changes(set or {}, delete)
        body = {
            "resources": [
                {
                    "resource_type": _RESOURCE_TOPIC,
                    "resource_name": topic,
                    "configs": changes,
                }
            ],
            "validate_only": validate_only,
        }

        def read(response: dict[str, Any], _: int) -> None:
            for result in response["responses"]:
                if result["resource_name"] == topic:
                    _raise_for(
                        result["error_code"],
                        result.get("error_message"),
                        context=f"topic {topic!r}",
                    )
                    return
            raise error_for(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"the broker did not answer for {topic!r}"
            )

        await self.client.call_any(ApiKey.INCREMENTAL_ALTER_CONFIGS, body, read)

    async def alter_broker_configs(
        self,
        broker_id: int | None,
        set: Mapping[str, str] | None = None,  # noqa: A002 - reads as admin.alter(b, set=...)
        delete: Iterable[str] = (),
    ) -> None:
        """Set and delete dynamic broker configs (IncrementalAlterConfigs) of one broker, or
        with ``broker_id=None`` the cluster-wide default every broker falls back to (Kafka's
        ``--entity-default``); e.g. ``leader.replication.throttled.rate``, the bytes/s a
        leader sends to replicas a reassignment adds. ``InvalidConfigError`` for a bad value."""
        name = "" if broker_id is None else str(broker_id)
        body = {
            "resources": [
                {
                    "resource_type": _RESOURCE_BROKER,
                    "resource_name": name,
                    "configs": _config_changes(set or {}, delete),
                }
            ],
            "validate_only": False,
        }

        def read(response: dict[str, Any], _: int) -> None:
            for result in response["responses"]:
                _raise_for(
                    result["error_code"],
                    result.get("error_message"),
                    context=f"broker {name or 'default'}",
                )

        await self.client.call_any(ApiKey.INCREMENTAL_ALTER_CONFIGS, body, read)

    async def describe_cluster(self) -> ClusterDescription:
        body = {"include_cluster_authorized_operations": False, "endpoint_type": 1}

        def read(response: dict[str, Any], _: int) -> ClusterDescription:
            _raise_for(response["error_code"], response.get("error_message"))
            return ClusterDescription(
                cluster_id=response["cluster_id"],
                controller_id=response["controller_id"],
                brokers=sorted(
                    (
                        BrokerDescription(b["broker_id"], b["host"], b["port"], b["rack"])
                        for b in response["brokers"]
                    ),
                    key=lambda broker: broker.node_id,
                ),
            )

        return await self.client.call_any(ApiKey.DESCRIBE_CLUSTER, body, read)

    # -- offsets ---------------------------------------------------------------------------

    async def high_watermarks(self, topic: str) -> dict[int, int]:
        """Partition -> high watermark (the offset the next record will get)."""
        return await list_offsets(self.client, topic, _LATEST_TIMESTAMP)

    async def earliest_offsets(self, topic: str) -> dict[int, int]:
        """Partition -> log start offset."""
        return await list_offsets(self.client, topic, _EARLIEST_TIMESTAMP)

    async def replica_log_end_offsets(self, topic: str) -> dict[int, dict[int, int | None]]:
        """Partition -> {replica broker id -> that replica's log end offset}, asked of every
        replica (ListOffsets with Kafka's debugging replica id). ``None`` for a replica that
        did not answer (down, or not hosting the partition yet)."""
        description = await self.describe_topic(topic)
        by_broker: dict[int, list[int]] = {}
        for partition in description.partitions:
            for replica in partition.replicas:
                by_broker.setdefault(replica, []).append(partition.partition)
        answers: dict[int, dict[int, int | None]] = {
            p.partition: {replica: None for replica in p.replicas} for p in description.partitions
        }
        for broker, partitions in by_broker.items():
            body = _list_offsets_body(topic, partitions, _LATEST_TIMESTAMP)
            body["replica_id"] = _DEBUGGING_REPLICA_ID
            try:
                offsets = await self.client.send_once(
                    broker, ApiKey.LIST_OFFSETS, body, _read_offsets_lenient
                )
            except FluxError:
                continue
            for partition, offset in offsets.items():
                answers[partition][broker] = offset
        return answers

    async def describe_log_dirs(
        self, brokers: Iterable[int] | None = None
    ) -> dict[int, dict[tuple[str, int], int]]:
        """Broker id -> {(topic, partition) -> bytes of that broker's replica}: DescribeLogDirs
        (Kafka's API 35) to each of ``brokers`` (default: every broker in the metadata), the
        log directories of a broker summed, future replicas and directories in error left
        out. A broker that cannot be reached is left out; a broker's error (such as a refused
        authorization) is raised."""
        await self.client.refresh()
        chosen = sorted(self.client.metadata.snapshot.brokers if brokers is None else brokers)
        sizes: dict[int, dict[tuple[str, int], int]] = {}
        for broker in chosen:
            try:
                sizes[broker] = await self.client.send_once(
                    broker, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, _read_log_dir_sizes
                )
            except (FluxConnectionError, FluxTimeoutError):
                continue
        return sizes

    # -- consumer groups -------------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        """Every group of the cluster: ListGroups to each broker (each lists the groups it
        coordinates), merged and sorted by id."""
        await self.client.refresh()
        found: dict[str, GroupListing] = {}
        for node_id in sorted(self.client.metadata.snapshot.brokers):
            listings = await self.client.retrying(
                lambda node_id=node_id: self.client.send_once(
                    node_id, ApiKey.LIST_GROUPS, {"states_filter": []}, _read_group_listings
                ),
                retry_codes=COORDINATOR_RETRY_CODES,
                what=f"ListGroups to broker {node_id}",
            )
            for listing in listings:
                found.setdefault(listing.group_id, listing)
        return [found[group_id] for group_id in sorted(found)]

    async def describe_group(self, group_id: str) -> GroupDescription:
        """State, members with their assignments, committed offsets, high watermarks and lag.

        A group that does not exist is described in state ``Dead`` with nothing in it."""
        group = await self.client.call_coordinator(
            group_id,
            ApiKey.DESCRIBE_GROUPS,
            describe_groups_body([group_id]),
            lambda response, version: read_described_group(response, version, group_id),
        )
        committed = await self.committed_offsets(group_id)
        consumer = group["protocol_type"] == "consumer"
        members = [
            MemberDescription(
                member_id=member["member_id"],
                client_id=member["client_id"],
                host=member["client_host"],
                assignment=(
                    decode_assignment(member["member_assignment"]).assigned
                    if consumer and member["member_assignment"]
                    else {}
                ),
            )
            for member in group["members"]
        ]
        partitions = set(committed)
        for member in members:
            partitions.update((t, p) for t, ps in member.assignment.items() for p in ps)
        high_watermarks: dict[tuple[str, int], int] = {}
        lag: dict[tuple[str, int], int] = {}
        for topic in sorted({topic for topic, _ in partitions}):
            try:
                ends = await self.high_watermarks(topic)
                starts = await self.earliest_offsets(topic)
            except UnknownTopicError:
                continue  # offsets committed for a topic deleted since
            for t, partition in partitions:
                if t != topic or partition not in ends:
                    continue
                high_watermarks[(topic, partition)] = ends[partition]
                base = committed.get((topic, partition), starts[partition])
                lag[(topic, partition)] = max(0, ends[partition] - base)
        return GroupDescription(
            group_id=group_id,
            state=group["group_state"],
            protocol_type=group["protocol_type"],
            protocol=group["protocol_data"],
            members=members,
            offsets=dict(sorted(committed.items())),
            high_watermarks=dict(sorted(high_watermarks.items())),
            lag=dict(sorted(lag.items())),
        )

    async def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> committed offset, for every partition the group committed."""
        return await self.client.call_coordinator(
            group_id, ApiKey.OFFSET_FETCH, offset_fetch_body(group_id, None), read_offset_fetch
        )

    async def reset_offsets(
        self, group_id: str, topic: str, *, to: str | int = "earliest"
    ) -> dict[int, int]:
        """Commit new offsets for every partition of ``topic``: ``"earliest"`` (log start),
        ``"latest"`` (high watermark) or an offset (clamped into each partition's range).
        Returns partition -> committed offset.

        Only a group without active members can be reset (the commit carries no generation);
        otherwise ``GroupNotEmptyError`` says how many members are active."""
        if isinstance(to, bool) or not (isinstance(to, int) or to in ("earliest", "latest")):
            raise ConfigurationError(f"to must be 'earliest', 'latest' or an offset, got {to!r}")
        if isinstance(to, int) and to < 0:
            raise ConfigurationError(f"offset {to} is negative")
        await self._require_empty(group_id)
        starts = await self.earliest_offsets(topic)
        ends = await self.high_watermarks(topic)
        if to == "earliest":
            targets = dict(starts)
        elif to == "latest":
            targets = dict(ends)
        else:
            targets = {p: min(max(int(to), starts[p]), ends[p]) for p in ends}
        body = offset_commit_body(
            group_id,
            generation_id=-1,
            member_id="",
            offsets={(topic, partition): offset for partition, offset in targets.items()},
        )
        try:
            await self.client.call_coordinator(
                group_id, ApiKey.OFFSET_COMMIT, body, read_offset_commit
            )
        except KafkaError as error:
            if error.code is ErrorCode.UNKNOWN_MEMBER_ID:
                # The coordinator refuses a generation-less commit while members are active.
                raise GroupNotEmptyError(
                    ErrorCode.NON_EMPTY_GROUP,
                    f"cannot reset the offsets of group {group_id!r}: members are active "
                    "(stop its consumers first)",
                ) from error
            raise
        return dict(sorted(targets.items()))

    async def _require_empty(self, group_id: str) -> None:
        group = await self.client.call_coordinator(
            group_id,
            ApiKey.DESCRIBE_GROUPS,
            describe_groups_body([group_id]),
            lambda response, version: read_described_group(response, version, group_id),
        )
        if group["group_state"] not in ("Empty", "Dead") or group["members"]:
            raise GroupNotEmptyError(
                ErrorCode.NON_EMPTY_GROUP,
                f"cannot reset the offsets of group {group_id!r}: {len(group['members'])} "
                f"members are active (state {group['group_state']}); stop its consumers first",
            )

    # -- SCRAM users -------------------------------------------------------------------------

    async def alter_user_scram_credentials(
        self,
        upsertions: Iterable[ScramCredentialUpsertion] = (),
        deletions: Iterable[ScramCredentialDeletion] = (),
    ) -> None:
        """Set and delete SCRAM credentials (see the module docstring).

        A user's alterations apply all together or not at all; on a failure the typed error
        (``ResourceNotFoundError`` deleting a credential that does not exist, ``KafkaError``
        UNACCEPTABLE_CREDENTIAL, ...) names every user that failed, and says which users'
        alterations were applied nonetheless. ``ConfigurationError`` for an unknown mechanism
        or iterations outside 4096..16384, before anything is sent."""
        upserts = list(upsertions)
        deletes = list(deletions)
        if not upserts and not deletes:
            raise ConfigurationError("nothing to alter: give upsertions and/or deletions")
        if len(upserts) + len(deletes) > limits.SCRAM_ALTERATIONS_MAX:
            raise ConfigurationError(
                f"at most {limits.SCRAM_ALTERATIONS_MAX} SCRAM credential alterations per call"
            )
        body = {
            "deletions": [
                {"name": _user_name(item.user), "mechanism": _mechanism_code(item.mechanism)}
                for item in deletes
            ],
            "upsertions": [_upsertion_body(item) for item in upserts],
        }
        names = list(dict.fromkeys([*(d.user for d in deletes), *(u.user for u in upserts)]))

        def read(response: dict[str, Any], _: int) -> None:
            _raise_for_users(response["results"], names, applied="were applied nonetheless")

        await self.client.call_any(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body, read)

    # -- ACLs --------------------------------------------------------------------------------

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Create ACL bindings (CreateAcls); the first refused one raises its typed error
        (``KafkaError`` INVALID_REQUEST naming the problem, CLUSTER_AUTHORIZATION_FAILED, ...),
        after the valid ones were created."""
        items = list(bindings)
        if not items:
            raise ConfigurationError("no ACL bindings to create")
        body = {
            "creations": [
                {
                    "resource_type": _acl_code(
                        ACL_RESOURCE_TYPES, b.resource_type, "resource type"
                    ),
                    "resource_name": b.resource_name,
                    "resource_pattern_type": _acl_code(
                        ACL_PATTERN_TYPES, b.pattern_type, "pattern type"
                    ),
                    "principal": b.principal,
                    "host": b.host,
                    "operation": _acl_code(ACL_OPERATIONS, b.operation, "operation"),
                    "permission_type": _acl_code(ACL_PERMISSIONS, b.permission, "permission"),
                }
                for b in items
            ]
        }

        def read(response: dict[str, Any], _: int) -> None:
            for result in response["results"]:
                _raise_for(result["error_code"], result.get("error_message"), context="CreateAcls")

        await self.client.call_any(ApiKey.CREATE_ACLS, body, read)

    async def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        """The ACL bindings matching ``acl_filter`` (all of them by default)."""
        body = _acl_filter_body(acl_filter or AclFilter())

        def read(response: dict[str, Any], _: int) -> list[AclBinding]:
            _raise_for(
                response["error_code"], response.get("error_message"), context="DescribeAcls"
            )
            return [
                _acl_from(acl, resource)
                for resource in response["resources"]
                for acl in resource["acls"]
            ]

        return await self.client.call_any(ApiKey.DESCRIBE_ACLS, body, read)

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Delete every ACL binding matching any of ``filters``; the bindings deleted."""
        items = list(filters)
        if not items:
            raise ConfigurationError("no ACL filters given")
        body = {"filters": [_acl_filter_body(item) for item in items]}

        def read(response: dict[str, Any], _: int) -> list[AclBinding]:
            deleted: dict[AclBinding, None] = {}
            for result in response["filter_results"]:
                _raise_for(result["error_code"], result.get("error_message"), context="DeleteAcls")
                for acl in result["matching_acls"]:
                    deleted[_acl_from(acl)] = None
            return list(deleted)

        return await self.client.call_any(ApiKey.DELETE_ACLS, body, read)

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, UserScramCredentials]:
        """User -> its SCRAM credentials (mechanism and iterations, never a secret), sorted by
        user; every user with a credential when ``users`` is None, nobody for an empty list
        (Kafka's Java client describes everyone for both). A named user without credentials
        raises ``ResourceNotFoundError``."""
        names = None if users is None else list(dict.fromkeys(_user_name(u) for u in users))
        body = {"users": None if names is None else [{"name": name} for name in names]}

        def read(response: dict[str, Any], _: int) -> dict[str, UserScramCredentials]:
            _raise_for(response["error_code"], response.get("error_message"))
            _raise_for_users(response["results"], names or [])
            described = {}
            for result in response["results"]:
                infos = sorted(
                    (
                        ScramCredentialInfo(
                            mechanism=_SCRAM_MECHANISM_NAMES.get(
                                info["mechanism"], f"UNKNOWN({info['mechanism']})"
                            ),
                            iterations=info["iterations"],
                        )
                        for info in result["credential_infos"]
                    ),
                    key=lambda info: info.mechanism,
                )
                described[result["user"]] = UserScramCredentials(result["user"], infos)
            return dict(sorted(described.items()))

        if names == []:
            return {}
        return await self.client.call_any(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body, read)

    async def delete_group(self, group_id: str) -> None:
        """Delete a group without members and its committed offsets (``GroupNotEmptyError``
        while members are active, ``GroupNotFoundError`` if there is no such group)."""

        def read(response: dict[str, Any], _: int) -> None:
            for result in response["results"]:
                if result["group_id"] == group_id:
                    _raise_for(result["error_code"], context=f"deleting group {group_id!r}")
                    return
            raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for group {group_id!r}")

        await self.client.call_coordinator(
            group_id, ApiKey.DELETE_GROUPS, {"groups_names": [group_id]}, read
        )


class Admin:
    """The blocking twin of ``AsyncAdmin``: the same methods, run on a private event loop."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "flux-admin",
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        security: ClientSecurity | Mapping[str, Any] | None = None,
    ) -> None:
        self._async = AsyncAdmin(
            bootstrap, client_id=client_id, timeout_s=timeout_s, security=security
        )
        self._loop = LoopThread("flux-admin")
        self.timeout_s = timeout_s

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._loop.run(self._async.close())
        except FluxError:
            pass
        finally:
            self._loop.close()

    @property
    def client(self) -> Any:
        """The client underneath, as a blocking ``SyncProxy`` (for tools and tests)."""
        return SyncProxy(self._async.client, self._loop)

    def run_async(self, coroutine: Any) -> Any:
        """Run a coroutine (of ``client``, say) on this admin's event loop and wait for it."""
        return self._loop.run(coroutine)

    def supports(self, api_key: int) -> bool:
        return self._loop.run(self._async.supports(api_key))

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> TopicDescription:
        return self._loop.run(
            self._async.create_topic(name, partitions, replication_factor, configs, validate_only)
        )

    def delete_topic(self, name: str) -> None:
        self._loop.run(self._async.delete_topic(name))

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._loop.run(self._async.list_topics(include_internal=include_internal))

    def describe_topic(self, name: str) -> TopicDescription:
        return self._loop.run(self._async.describe_topic(name))

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        self._loop.run(self._async.create_partitions(name, total, validate_only=validate_only))

    def describe_configs(self, topic: str) -> dict[str, ConfigEntry]:
        return self._loop.run(self._async.describe_configs(topic))

    def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> dict[tuple[str, int], FluxError | None]:
        return self._loop.run(self._async.alter_partition_reassignments(reassignments))

    def list_partition_reassignments(self) -> dict[tuple[str, int], dict[str, list[int]]]:
        return self._loop.run(self._async.list_partition_reassignments())

    def unregister_broker(self, broker_id: int) -> None:
        self._loop.run(self._async.unregister_broker(broker_id))

    def alter_broker_configs(
        self,
        broker_id: int | None,
        set: Mapping[str, str] | None = None,  # noqa: A002 - the same name as AsyncAdmin's
        delete: Iterable[str] = (),
    ) -> None:
        self._loop.run(self._async.alter_broker_configs(broker_id, set, delete))

    def alter_topic_configs(
        self,
        topic: str,
        set: Mapping[str, str] | None = None,  # noqa: A002 - the same name as AsyncAdmin's
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        self._loop.run(
            self._async.alter_topic_configs(topic, set, delete, validate_only=validate_only)
        )

    def describe_cluster(self) -> ClusterDescription:
        return self._loop.run(self._async.describe_cluster())

    def high_watermarks(self, topic: str) -> dict[int, int]:
        return self._loop.run(self._async.high_watermarks(topic))

    def earliest_offsets(self, topic: str) -> dict[int, int]:
        return self._loop.run(self._async.earliest_offsets(topic))

    def replica_log_end_offsets(self, topic: str) -> dict[int, dict[int, int | None]]:
        return self._loop.run(self._async.replica_log_end_offsets(topic))

    def describe_log_dirs(
        self, brokers: Iterable[int] | None = None
    ) -> dict[int, dict[tuple[str, int], int]]:
        return self._loop.run(self._async.describe_log_dirs(brokers))

    def list_groups(self) -> list[GroupListing]:
        return self._loop.run(self._async.list_groups())

    def describe_group(self, group_id: str) -> GroupDescription:
        return self._loop.run(self._async.describe_group(group_id))

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return self._loop.run(self._async.committed_offsets(group_id))

    def reset_offsets(
        self, group_id: str, topic: str, *, to: str | int = "earliest"
    ) -> dict[int, int]:
        return self._loop.run(self._async.reset_offsets(group_id, topic, to=to))

    def delete_group(self, group_id: str) -> None:
        self._loop.run(self._async.delete_group(group_id))

    def alter_user_scram_credentials(
        self,
        upsertions: Iterable[ScramCredentialUpsertion] = (),
        deletions: Iterable[ScramCredentialDeletion] = (),
    ) -> None:
        self._loop.run(self._async.alter_user_scram_credentials(upsertions, deletions))

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, UserScramCredentials]:
        return self._loop.run(self._async.describe_user_scram_credentials(users))

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        self._loop.run(self._async.create_acls(bindings))

    def describe_acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        return self._loop.run(self._async.describe_acls(acl_filter))

    def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        return self._loop.run(self._async.delete_acls(filters))


def _read_group_listings(response: dict[str, Any], version: int) -> list[GroupListing]:
    _raise_for(response["error_code"], context="ListGroups")
    return [
        GroupListing(
            group_id=group["group_id"],
            protocol_type=group["protocol_type"],
            state=group.get("group_state") if version >= 4 else None,
        )
        for group in response["groups"]
    ]


# -- shared with the simple consumer ----------------------------------------------------------


async def list_offsets(
    client: ClusterClient, topic: str, timestamp: int, *, isolation_level: int = 0
) -> dict[int, int]:
    """ListOffsets for every partition of ``topic`` (-1 latest, -2 earliest): one request per
    partition leader. A routing error re-groups the partitions by fresh leaders and retries.
    ``isolation_level=1`` (read_committed): "latest" is the last stable offset."""

    async def attempt() -> dict[int, int]:
        by_leader: dict[int, list[int]] = {}
        for partition, leader in (await client.leaders(topic)).items():
            by_leader.setdefault(leader, []).append(partition)
        offsets: dict[int, int] = {}
        for leader, partitions in by_leader.items():
            body = _list_offsets_body(topic, partitions, timestamp, isolation_level)
            offsets.update(await client.send_once(leader, ApiKey.LIST_OFFSETS, body, _read_offsets))
        return dict(sorted(offsets.items()))

    return await client.retrying(
        attempt, retry_codes=LEADER_RETRY_CODES, what=f"ListOffsets for {topic!r}"
    )


def _list_offsets_body(
    topic: str, partitions: list[int], timestamp: int, isolation_level: int = 0
) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "current_leader_epoch": -1,
                        "timestamp": timestamp,
                    }
                    for partition in partitions
                ],
            }
        ],
    }


def _read_offsets_lenient(response: dict[str, Any], version: int) -> dict[int, int]:
    """Offsets of the partitions that answered without an error."""
    return {
        result["partition_index"]: result["offset"]
        for topic in response["topics"]
        for result in topic["partitions"]
        if result["error_code"] == 0
    }


def _read_log_dir_sizes(response: dict[str, Any], version: int) -> dict[tuple[str, int], int]:
    """(topic, partition) -> bytes, summed over the log directories that answered."""
    _raise_for(response.get("error_code", 0), context="DescribeLogDirs")
    sizes: dict[tuple[str, int], int] = {}
    for result in response["results"]:
        if result["error_code"] != 0:
            continue  # an offline directory: its replicas are not readable there
        for topic in result["topics"]:
            for partition in topic["partitions"]:
                if not partition["is_future_key"]:
                    key = (topic["name"], partition["partition_index"])
                    sizes[key] = sizes.get(key, 0) + partition["partition_size"]
    return sizes


def _read_offsets(response: dict[str, Any], version: int) -> dict[int, int]:
    offsets = {}
    for topic in response["topics"]:
        for result in topic["partitions"]:
            _raise_for(result["error_code"], context=f"{topic['name']}-{result['partition_index']}")
            offset = result["offset"]
            if version == 0:
                offset = (result.get("old_style_offsets") or [-1])[0]
            offsets[result["partition_index"]] = offset
    return offsets


# -- response readers ---------------------------------------------------------------------------


def _raise_for(code: int, message: str | None = None, *, context: str | None = None) -> None:
    """Raise the typed error for a non-zero ``code``: with the broker's ``message`` if it sent
    one, else with the code's description prefixed by ``context``."""
    if code != ErrorCode.NONE:
        error_code = ErrorCode.from_code(code)
        if not message:
            message = f"{context}: {error_code.message}" if context else error_code.message
        raise error_for(error_code, message)


def _user_name(user: Any) -> str:
    if not isinstance(user, str) or not user:
        raise ConfigurationError(f"a SCRAM user name must be a non-empty string, got {user!r}")
    return user


def _mechanism_code(mechanism: Any) -> int:
    name = mechanism.strip().upper() if isinstance(mechanism, str) else mechanism
    if name not in MECHANISM_TYPES:
        raise ConfigurationError(
            f"SCRAM mechanism must be one of {', '.join(MECHANISM_TYPES)}, got {mechanism!r}"
        )
    return MECHANISM_TYPES[name]


def _upsertion_body(item: ScramCredentialUpsertion) -> dict[str, Any]:
    """One upsertion as the request carries it: a fresh salt and the salted password."""
    code = _mechanism_code(item.mechanism)
    low, high = MIN_ITERATIONS, MAX_ITERATIONS
    if isinstance(item.iterations, bool) or not isinstance(item.iterations, int):
        raise ConfigurationError(f"iterations must be an integer, got {item.iterations!r}")
    if not low <= item.iterations <= high:
        raise ConfigurationError(f"iterations must be in {low}..{high}, got {item.iterations}")
    if not isinstance(item.password, str) or not item.password:
        raise ConfigurationError(f"the password of user {item.user!r} must not be empty")
    try:
        password = item.password.encode("utf-8")
    except UnicodeEncodeError:
        # The codec's message would quote a character of the password.
        raise ConfigurationError("a password must be encodable as UTF-8") from None
    salt = secrets.token_bytes(SALT_BYTES)
    hash_name = MECHANISMS[_SCRAM_MECHANISM_NAMES[code]]
    return {
        "name": _user_name(item.user),
        "mechanism": code,
        "iterations": item.iterations,
        "salt": salt,
        "salted_password": hashlib.pbkdf2_hmac(hash_name, password, salt, item.iterations),
    }


def _raise_for_users(
    results: list[dict[str, Any]], names: list[str], *, applied: str | None = None
) -> None:
    """Raise for the per-user results of a SCRAM credentials answer that carry an error (or
    for a user in ``names`` it did not answer for): the first failure's type, with a message
    naming every failed user, and with ``applied`` the users whose part succeeded."""
    failed = [r for r in results if r["error_code"] != ErrorCode.NONE]
    answered = {r["user"] for r in results}
    missing = [name for name in names if name not in answered]
    if not failed and not missing:
        return
    parts = [
        f"user {r['user']!r}: "
        + (r.get("error_message") or ErrorCode.from_code(r["error_code"]).message)
        for r in failed
    ] + [f"user {name!r}: the broker did not answer for it" for name in missing]
    succeeded = sorted(answered - {r["user"] for r in failed})
    if succeeded and applied:
        parts.append(f"the alterations of {', '.join(map(repr, succeeded))} {applied}")
    code = failed[0]["error_code"] if failed else ErrorCode.UNKNOWN_SERVER_ERROR
    raise error_for(code, "; ".join(parts))


def _single(results: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The one per-topic result of a CreateTopics / DeleteTopics / CreatePartitions answer."""
    for result in results:
        if result["name"] == name:
            _raise_for(result["error_code"], result.get("error_message"), context=f"topic {name!r}")
            return result
    raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"the broker did not answer for {name!r}")


def _metadata_body(topics: list[str]) -> dict[str, Any]:
    return {
        "topics": [{"name": name} for name in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }


def _describe_from_metadata(response: dict[str, Any], name: str) -> TopicDescription:
    for topic in response["topics"]:
        if topic["name"] != name:
            continue
        if topic["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            break
        _raise_for(topic["error_code"], context=f"topic {name!r}")
        partitions = sorted(topic["partitions"], key=lambda part: part["partition_index"])
        return TopicDescription(
            name=name,
            topic_id=topic.get("topic_id") or uuid.UUID(int=0),
            internal=bool(topic.get("is_internal", False)),
            partitions=[
                PartitionDescription(
                    partition=part["partition_index"],
                    leader=part["leader_id"],
                    leader_epoch=part.get("leader_epoch", -1),
                    replicas=list(part["replica_nodes"]),
                    isr=list(part["isr_nodes"]),
                    offline_replicas=list(part.get("offline_replicas") or []),
                )
                for part in partitions
            ],
        )
    raise UnknownTopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")


def _config_changes(to_set: Mapping[str, str], to_delete: Iterable[str]) -> list[dict[str, Any]]:
    """The AlterableConfig entries of one IncrementalAlterConfigs resource."""
    if isinstance(to_delete, str):
        raise ConfigurationError(f"delete must be a list of config names, got {to_delete!r}")
    deleted = list(to_delete)
    for key, value in to_set.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigurationError(f"config {key!r} must map to a string, got {value!r}")
    both = sorted(frozenset(to_set) & frozenset(deleted))
    if both:
        raise ConfigurationError(f"configs {both} are both set and deleted")
    return [
        {"name": key, "config_operation": _CONFIG_OP_SET, "value": value}
        for key, value in to_set.items()
    ] + [
        {"name": key, "config_operation": _CONFIG_OP_DELETE, "value": None}
        for key in dict.fromkeys(deleted)
    ]


def _read_configs(response: dict[str, Any], version: int) -> dict[str, ConfigEntry]:
    (result,) = response["results"]
    _raise_for(result["error_code"], result.get("error_message"))
    entries = {}
    for item in result["configs"]:
        source_number = item.get("config_source", -1)
        if version == 0:
            is_default = bool(item.get("is_default"))
        else:
            is_default = source_number == _DEFAULT_CONFIG_SOURCE
        entries[item["name"]] = ConfigEntry(
            value=item["value"],
            source=_CONFIG_SOURCES.get(source_number, str(source_number)),
            read_only=bool(item["read_only"]),
            is_default=is_default,
        )
    return dict(sorted(entries.items()))
