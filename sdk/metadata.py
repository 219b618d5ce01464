"""Transport-independent client logic: bootstrap parsing, version negotiation, the metadata
cache with leader routing, and the retry budget.

Nothing here does I/O or sleeps, so the synchronous ``ClusterClient`` and the async client to
come share it: they send the Metadata request this module describes, hand the response to
``ClusterMetadata.update`` and ask ``leader_for`` / ``controller`` where to send the next
request; ``RetryBudget`` says how long to back off and when to give up. Clocks and random
sources are injected, so the unit tests pass literal values.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from flux.protocol.api import SUPPORTED_VERSIONS, ApiKey
from flux.protocol.errors import ErrorCode

from . import limits
from .errors import (
    ConfigurationError,
    LeaderNotAvailableError,
    NotControllerError,
    UnknownTopicError,
    UnsupportedVersionError,
    error_for,
)

__all__ = [
    "CLIENT_VERSIONS",
    "Address",
    "BrokerInfo",
    "ClusterMetadata",
    "MetadataSnapshot",
    "PartitionInfo",
    "RetryBudget",
    "RetryPolicy",
    "TopicInfo",
    "format_address",
    "negotiate_version",
    "parse_bootstrap",
]

Address = tuple[str, int]

#: The versions this SDK's request bodies and response readers are written for, per API. The
#: version used on a connection is the highest one in this range, the codec's range and the
#: broker's advertised range. (Metadata v0 has no controller id, so the SDK needs v1+.)
CLIENT_VERSIONS: Mapping[int, tuple[int, int]] = MappingProxyType(
    {
        ApiKey.PRODUCE: (3, 9),
        ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (1, 7),
        ApiKey.METADATA: (1, 12),
        ApiKey.API_VERSIONS: (0, 3),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (1, 6),
        ApiKey.DESCRIBE_CONFIGS: (1, 4),
        ApiKey.DESCRIBE_CLUSTER: (0, 1),
        ApiKey.CREATE_PARTITIONS: (0, 3),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.UNREGISTER_BROKER: (0, 0),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        # Partition sizes for the rebalance planner (Admin.describe_log_dirs); Kafka 4 dropped
        # v0, and v1 reads the same.
        ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
        # Consumer groups (flux.sdk.groups and Admin): FindCoordinator v4 batches keys,
        # JoinGroup v4+ answers MEMBER_ID_REQUIRED, OffsetFetch v8 nests groups (not used).
        ApiKey.FIND_COORDINATOR: (1, 4),
        ApiKey.JOIN_GROUP: (4, 7),
        ApiKey.SYNC_GROUP: (3, 5),
        ApiKey.HEARTBEAT: (1, 4),
        ApiKey.LEAVE_GROUP: (1, 4),
        ApiKey.OFFSET_COMMIT: (2, 8),
        ApiKey.OFFSET_FETCH: (2, 7),
        ApiKey.LIST_GROUPS: (1, 4),
        ApiKey.DESCRIBE_GROUPS: (1, 5),
        ApiKey.DELETE_GROUPS: (0, 2),
        # Idempotent and transactional producers (InitProducerId v3+ names the producer id
        # and epoch it bumps). Transactions: the client forms, v0-3 (v4+ is KIP-890's
        # broker-to-broker batching, v4+ EndTxn bumps the epoch per transaction).
        ApiKey.INIT_PRODUCER_ID: (0, 4),
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
        ApiKey.END_TXN: (0, 3),
        ApiKey.TXN_OFFSET_COMMIT: (0, 3),
        # SASL (flux.sdk.connection): SaslHandshake v1 carries the tokens in SaslAuthenticate
        # requests (v0's raw frames are not spoken); SaslAuthenticate v1+ tells the session
        # lifetime (KIP-368).
        ApiKey.SASL_HANDSHAKE: (1, 1),
        ApiKey.SASL_AUTHENTICATE: (0, 2),
        # SCRAM credentials (Admin).
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        # ACLs (Admin): v1 adds pattern types (PREFIXED); v2+ is flexible.
        ApiKey.DESCRIBE_ACLS: (1, 3),
        ApiKey.CREATE_ACLS: (1, 3),
        ApiKey.DELETE_ACLS: (1, 3),
    }
)


# -- bootstrap ------------------------------------------------------------------------------


def parse_bootstrap(bootstrap: str) -> tuple[Address, ...]:
    """``"host:port,host:port"`` (IPv6 as ``[::1]:9092``) into addresses, in order."""
    if not isinstance(bootstrap, str) or not bootstrap.strip():
        raise ConfigurationError("bootstrap servers must be a non-empty 'host:port,...' string")
    entries = [entry.strip() for entry in bootstrap.split(",") if entry.strip()]
    if not entries:
        raise ConfigurationError(f"bootstrap servers {bootstrap!r} name no 'host:port'")
    if len(entries) > limits.BOOTSTRAP_ADDRESSES_MAX:
        raise ConfigurationError(
            f"{len(entries)} bootstrap addresses exceed the limit of "
            f"{limits.BOOTSTRAP_ADDRESSES_MAX}"
        )
    return tuple(_parse_address(entry) for entry in entries)


def _parse_address(entry: str) -> Address:
    host, sep, port_text = entry.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigurationError(f"bootstrap address {entry!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def format_address(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- version negotiation --------------------------------------------------------------------


def negotiate_version(
    api_key: int,
    broker_versions: Mapping[int, tuple[int, int]],
    *,
    broker: str = "the broker",
) -> int:
    """The highest version of ``api_key`` that this client, the codec and the broker share.

    Raises ``UnsupportedVersionError`` naming the API and both ranges when there is none.
    """
    client = CLIENT_VERSIONS.get(api_key)
    codec = SUPPORTED_VERSIONS.get(api_key)
    advertised = broker_versions.get(api_key)
    name = _api_name(api_key)
    if client is None or codec is None:
        raise UnsupportedVersionError(
            ErrorCode.UNSUPPORTED_VERSION, f"this client does not implement {name}"
        )
    if advertised is None:
        raise UnsupportedVersionError(
            ErrorCode.UNSUPPORTED_VERSION, f"{broker} does not support {name}"
        )
    low = max(client[0], codec[0], advertised[0])
    high = min(client[1], codec[1], advertised[1])
    if low > high:
        raise UnsupportedVersionError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"{broker} supports {name} versions {advertised[0]}-{advertised[1]}, "
            f"this client {max(client[0], codec[0])}-{min(client[1], codec[1])}",
        )
    return high


def _api_name(api_key: int) -> str:
    try:
        words = ApiKey(api_key).name.split("_")
    except ValueError:
        return f"API key {api_key}"
    return "".join(word.capitalize() for word in words) + f" (API key {api_key})"


# -- metadata -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> Address:
        return self.host, self.port


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as the cluster's metadata describes it (``leader_id`` -1: no leader)."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True)
class MetadataSnapshot:
    """An immutable view of the cluster; ``ClusterMetadata`` swaps in a new one per update.

    ``topic_errors`` holds the topic-level error codes of the latest response (for example
    UNKNOWN_TOPIC_OR_PARTITION for a topic that was asked for and does not exist).
    """

    cluster_id: str | None = None
    controller_id: int = -1
    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    topic_errors: Mapping[str, ErrorCode] = field(default_factory=dict)


class ClusterMetadata:
    """The client's metadata cache and routing table. Pure: no I/O, injected clock.

    The client tells it which topics it cares about (``track``), sends the request body
    ``request_body`` returns, and hands the response to ``update``. Routing questions
    (``leader_for``, ``controller``, ``partition_count``) raise the typed error a caller would
    retry on (``LeaderNotAvailableError``, ``NotControllerError``, ``UnknownTopicError``).

    Thread-safety: none; one owner. Readers may keep a ``snapshot``; it never changes.
    Invariant: every leader id a ``leader_for`` call returns names a broker of the snapshot.
    """

    def __init__(
        self,
        *,
        max_age_s: float = limits.METADATA_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_age_s = max_age_s
        self._clock = clock
        self._snapshot = MetadataSnapshot()
        self._tracked: set[str] = set()
        self._updated_at: float | None = None

    @property
    def snapshot(self) -> MetadataSnapshot:
        return self._snapshot

    @property
    def tracked_topics(self) -> frozenset[str]:
        return frozenset(self._tracked)

    def track(self, topics: Iterable[str]) -> bool:
        """Add topics to refresh; True if one of them was not tracked yet."""
        before = len(self._tracked)
        self._tracked.update(topics)
        return len(self._tracked) != before

    def forget(self, topic: str) -> None:
        self._tracked.discard(topic)

    def needs_refresh(self, topic: str | None = None) -> bool:
        """True before the first update, when the cache is older than its maximum age, or when
        ``topic`` is neither known nor known to be missing."""
        if self._updated_at is None or self._clock() - self._updated_at > self._max_age_s:
            return True
        if topic is None:
            return False
        return topic not in self._snapshot.topics and topic not in self._snapshot.topic_errors

    @staticmethod
    def request_body(
        topics: Iterable[str] | None, *, allow_auto_topic_creation: bool
    ) -> dict[str, Any]:
        """A Metadata request (v1+) for ``topics``, or for every topic when ``None``."""
        return {
            "topics": None if topics is None else [{"name": name} for name in sorted(topics)],
            "allow_auto_topic_creation": allow_auto_topic_creation,
            "include_topic_authorized_operations": False,
        }

    def update(self, response: Mapping[str, Any], *, requested: Iterable[str] | None) -> None:
        """Apply a Metadata response to the request for ``requested`` topics (None: all).

        Brokers, controller and cluster id are replaced; topics named in the request are
        replaced by what the response says (gone if it reports an error); other cached topics
        stay unless every topic was requested.
        """
        brokers = {
            item["node_id"]: BrokerInfo(item["node_id"], item["host"], item["port"], item["rack"])
            for item in response["brokers"]
        }
        if requested is None:
            topics: dict[str, TopicInfo] = {}
        else:
            asked = set(requested)
            topics = {k: v for k, v in self._snapshot.topics.items() if k not in asked}
        errors: dict[str, ErrorCode] = {}
        for item in response["topics"]:
            name = item["name"]
            if name is None:
                continue
            code = ErrorCode.from_code(item["error_code"])
            if code is not ErrorCode.NONE:
                errors[name] = code
                topics.pop(name, None)
                continue
            topics[name] = _topic_info(item)
        self._snapshot = MetadataSnapshot(
            cluster_id=response.get("cluster_id"),
            controller_id=response.get("controller_id", -1),
            brokers=MappingProxyType(brokers),
            topics=MappingProxyType(topics),
            topic_errors=MappingProxyType(errors),
        )
        self._updated_at = self._clock()

    # -- routing ---------------------------------------------------------------------------

    def topic(self, name: str) -> TopicInfo:
        """The cached topic, or the typed error its last lookup returned."""
        info = self._snapshot.topics.get(name)
        if info is not None:
            return info
        code = self._snapshot.topic_errors.get(name)
        if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise UnknownTopicError(code, f"topic {name!r} does not exist")
        if code is not None:
            raise error_for(code, f"topic {name!r}: {code.message}")
        raise UnknownTopicError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} is not in the metadata"
        )

    def partition_count(self, topic: str) -> int:
        return len(self.topic(topic).partitions)

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        info = self.topic(topic)
        if not 0 <= partition < len(info.partitions):
            raise UnknownTopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic!r} has no partition {partition} (it has {len(info.partitions)})",
            )
        return info.partitions[partition]

    def leader_for(self, topic: str, partition: int) -> BrokerInfo:
        """The broker leading ``topic``-``partition``; ``LeaderNotAvailableError`` if none."""
        info = self.partition(topic, partition)
        broker = self._snapshot.brokers.get(info.leader_id)
        if broker is None:
            raise LeaderNotAvailableError(
                ErrorCode.LEADER_NOT_AVAILABLE,
                f"{topic}-{partition} has no leader in the metadata (leader id {info.leader_id})",
            )
        return broker

    def controller(self) -> BrokerInfo:
        broker = self._snapshot.brokers.get(self._snapshot.controller_id)
        if broker is None:
            raise NotControllerError(
                ErrorCode.NOT_CONTROLLER,
                f"no live controller in the metadata (controller id "
                f"{self._snapshot.controller_id})",
            )
        return broker


def _topic_info(item: Mapping[str, Any]) -> TopicInfo:
    name = item["name"]
    partitions = sorted(
        (
            PartitionInfo(
                topic=name,
                partition=part["partition_index"],
                leader_id=part["leader_id"],
                leader_epoch=part.get("leader_epoch", -1),
                replicas=tuple(part["replica_nodes"]),
                isr=tuple(part["isr_nodes"]),
                offline_replicas=tuple(part.get("offline_replicas") or ()),
                error=ErrorCode.from_code(part["error_code"]),
            )
            for part in item["partitions"]
        ),
        key=lambda info: info.partition,
    )
    # Routing indexes partitions by position; a response with gaps would misroute.
    assert [info.partition for info in partitions] == list(range(len(partitions))), name
    return TopicInfo(
        name=name,
        topic_id=item.get("topic_id") or uuid.UUID(int=0),
        internal=bool(item.get("is_internal", False)),
        partitions=tuple(partitions),
    )


# -- retries --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a retried operation backs off and when it gives up: after ``max_attempts``
    attempts or ``timeout_s`` seconds, whichever comes first. UNKNOWN_TOPIC_OR_PARTITION is
    retried only for ``unknown_topic_timeout_s``."""

    max_attempts: int = limits.RETRY_ATTEMPTS_DEFAULT
    timeout_s: float = limits.RETRY_TIMEOUT_S
    backoff_initial_s: float = limits.RETRY_BACKOFF_INITIAL_S
    backoff_max_s: float = limits.RETRY_BACKOFF_MAX_S
    unknown_topic_timeout_s: float = limits.UNKNOWN_TOPIC_RETRY_TIMEOUT_S
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= limits.RETRY_ATTEMPTS_MAX:
            raise ConfigurationError(
                f"max_attempts must be in 1..{limits.RETRY_ATTEMPTS_MAX}, got {self.max_attempts}"
            )
        if not 0 < self.timeout_s <= limits.RETRY_TIMEOUT_MAX_S:
            raise ConfigurationError(
                f"timeout_s must be in (0, {limits.RETRY_TIMEOUT_MAX_S}], got {self.timeout_s}"
            )
        if self.backoff_initial_s < 0 or self.backoff_max_s < 0:
            raise ConfigurationError("retry backoffs must not be negative")
        if not 0 <= self.jitter < 1:
            raise ConfigurationError(f"jitter {self.jitter} must be in [0, 1)")

    def backoff_s(self, failed_attempts: int, *, rng: Callable[[], float] = random.random) -> float:
        """Exponential backoff after ``failed_attempts`` (>= 1) failures, with +-jitter."""
        base = min(self.backoff_max_s, self.backoff_initial_s * 2 ** (failed_attempts - 1))
        return base * (1 + self.jitter * (2 * rng() - 1))


class RetryBudget:
    """The retry state of one operation: counts attempts and watches the deadline.

    ``next_delay_s()`` after each failed attempt returns how long to back off, or ``None``
    when the operation must give up. Thread-safety: none; one per operation.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.policy = policy
        self.failed_attempts = 0
        self._clock = clock
        self._rng = rng
        self._started = clock()

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    def remaining_s(self) -> float:
        return max(0.0, self.policy.timeout_s - self.elapsed_s)

    def next_delay_s(self, *, unknown_topic: bool = False) -> float | None:
        self.failed_attempts += 1
        if self.failed_attempts >= self.policy.max_attempts:
            return None
        limit_s = self.policy.timeout_s
        if unknown_topic:
            limit_s = min(limit_s, self.policy.unknown_topic_timeout_s)
        remaining = limit_s - self.elapsed_s
        if remaining <= 0:
            return None
        return min(self.policy.backoff_s(self.failed_attempts, rng=self._rng), remaining)
