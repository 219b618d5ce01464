"""Node configuration: one TOML file per node, every key overridable by a ``FLUX_`` variable.

The schema below is the single list of keys a node understands. Loading is strict: an unknown
section or key, or a value of the wrong type or out of range, raises ``ConfigError`` whose
message names the key (``broker.kafka_port: expected an integer in 1..65535, got 'x'``), and
the node refuses to start.

Environment overrides use ``FLUX_<SECTION>__<KEY>`` (two underscores between section and key,
upper case), e.g. ``FLUX_BROKER__KAFKA_PORT=19092``. Values are parsed as TOML values when they
look like one (numbers, booleans, arrays) and as plain strings otherwise.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ConfigError",
    "NodeConfig",
    "SCHEMA",
    "Voter",
    "load_config",
    "parse_config",
    "parse_voter",
]

_MS_DAY = 24 * 3600 * 1000


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the offending key."""


@dataclass(frozen=True)
class _Key:
    default: Any
    check: Callable[[Any], Any]  # returns the normalized value or raises ValueError(description)
    doc: str


def _int(low: int | None = None, high: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer{_range(low, high)}, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(f"expected an integer{_range(low, high)}, got {value!r}")
        return value

    return check


def _range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f" in {low}..{high}"
    if low is not None:
        return f" >= {low}"
    return ""


def _str(choices: tuple[str, ...] | None = None) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        if choices is not None and value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return check


def _ratio(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"expected a number between 0 and 1, got {value!r}")
    return float(value)


def _cleanup_policy(value: Any) -> str:
    if not isinstance(value, str) or value.replace(" ", "") not in (
        "delete",
        "compact",
        "compact,delete",
        "delete,compact",
    ):
        raise ValueError(f"expected delete, compact or compact,delete, got {value!r}")
    return value.replace(" ", "")


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _roles(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"expected a non-empty list of roles, got {value!r}")
    for role in value:
        if role not in ("broker", "controller"):
            raise ValueError(f"unknown role {role!r} (expected broker or controller)")
    return tuple(dict.fromkeys(value))


def _str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return tuple(value)


_PORT = _int(0, 65535)

_LISTENER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Listener:
    """One Kafka listener: where it binds and what clients connecting to it are told.

    ``advertised_port`` 0 means "the port actually bound" (so ``port = 0`` works).
    ``security_protocol``: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``."""

    name: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int = 0
    security_protocol: str = "PLAINTEXT"

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


#: Kafka's security protocols: a listener named after one of them uses it unless
#: ``broker.listener_security_protocol_map`` says otherwise.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _protocol_map(value: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(value, tuple) and all(isinstance(item, tuple) for item in value):
        return value  # already parsed
    pairs = []
    for item in _str_list(value):
        name, colon, protocol = item.partition(":")
        if not colon or not _LISTENER_NAME.fullmatch(name) or protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"entry {item!r} is not of the form NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        pairs.append((name, protocol))
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"listener names must be unique, got {names}")
    return tuple(pairs)


def _protocol_of(name: str, protocols: Mapping[str, str]) -> str:
    """A listener's security protocol: mapped, else its name if that is a protocol, else
    PLAINTEXT (Kafka refuses an unmapped name; Flux keeps the listener names it accepted before
    listeners had protocols, such as ``INTERNAL``, working as they did)."""
    if name in protocols:
        return protocols[name]
    return name if name in SECURITY_PROTOCOLS else "PLAINTEXT"


def _mechanisms(value: Any) -> tuple[str, ...]:
    mechanisms = _str_list(value)
    for mechanism in mechanisms:
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(
                f"unknown SASL mechanism {mechanism!r} (supported: {', '.join(SASL_MECHANISMS)})"
            )
    return tuple(dict.fromkeys(mechanisms))


def _parse_listener(text: str) -> tuple[str, str, int]:
    name, sep, address = text.partition("://")
    host, colon, port_text = address.rpartition(":")
    if not sep or not colon or not _LISTENER_NAME.fullmatch(name):
        raise ValueError(f"listener {text!r} is not of the form NAME://host:port")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"listener {text!r} has no valid port") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"listener {text!r}: port {port} is not in 0..65535")
    return name, host.strip("[]"), port


def _listener_list(value: Any) -> tuple[tuple[str, str, int], ...]:
    if isinstance(value, tuple) and all(isinstance(item, tuple) for item in value):
        return value  # already parsed
    parsed = tuple(_parse_listener(item) for item in _str_list(value))
    names = [name for name, _, _ in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"listener names must be unique, got {names}")
    return parsed


@dataclass(frozen=True)
class Voter:
    """One controller quorum member: ``id@host:raft_port:http_port``."""

    node_id: int
    host: str
    raft_port: int
    http_port: int

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}"

    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.raft_port}:{self.http_port}"


def parse_voter(text: str) -> Voter:
    node_id, at, address = text.partition("@")
    host, _, ports = address.partition(":")
    raft_port, _, http_port = ports.partition(":")
    try:
        voter = Voter(int(node_id), host, int(raft_port), int(http_port))
    except ValueError:
        raise ValueError(f"voter {text!r} is not of the form id@host:raft_port:http_port") from None
    if not at or not host or not (0 < voter.raft_port < 65536 and 0 < voter.http_port < 65536):
        raise ValueError(f"voter {text!r} is not of the form id@host:raft_port:http_port")
    return voter


def _voters(value: Any) -> tuple[Voter, ...]:
    if isinstance(value, tuple) and all(isinstance(item, Voter) for item in value):
        voters = value  # already parsed (defaults, or a config re-validated)
    else:
        voters = tuple(parse_voter(item) for item in _str_list(value))
    ids = [voter.node_id for voter in voters]
    if len(set(ids)) != len(ids):
        raise ValueError(f"voter ids must be unique, got {ids}")
    return voters


_MS = _int(-1)

# The original Flux knobs given in seconds, and the millisecond key each one sets.
_SECONDS_KEYS = {
    ("message", "ttl"): "ttl_ms",
    ("message", "cleanup_time"): "cleanup_interval_ms",
    ("subscriber", "retry_interval"): "retry_interval_ms",
    ("subscriber", "timeout"): "timeout_ms",
    ("subscriber", "inactive_time"): "inactive_time_ms",
    ("subscriber", "cleanup_time"): "cleanup_interval_ms",
}


def _seconds(*, allow_never: bool = False) -> Callable[[Any], float | None]:
    """A duration in seconds (int or float > 0; -1 = never if ``allow_never``); None = unset."""

    def check(value: Any) -> float | None:
        if value is None:
            return None
        never = " (or -1 for never)" if allow_never else ""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number of seconds > 0{never}, got {value!r}")
        if allow_never and value == -1:
            return -1
        if value <= 0:
            raise ValueError(f"expected a number of seconds > 0{never}, got {value!r}")
        return value

    return check


SCHEMA: dict[str, dict[str, _Key]] = {
    "node": {
        "id": _Key(1, _int(0, 2**31 - 1), "broker/controller id, unique in the cluster"),
        "roles": _Key(("broker", "controller"), _roles, "broker and/or controller"),
        "data_dir": _Key("./data", _str(), "directory owned by this node"),
        "log_level": _Key("INFO", _str(("DEBUG", "INFO", "WARNING", "ERROR")), "logging level"),
        "cluster_id": _Key("flux-local", _str(), "cluster id reported to clients"),
    },
    "broker": {
        "host": _Key("127.0.0.1", _str(), "address the listeners bind"),
        "advertised_host": _Key("", _str(), "host clients are told to use (default: host)"),
        "kafka_port": _Key(9092, _PORT, "Kafka protocol listener port (0 = any free port)"),
        "listeners": _Key(
            (), _listener_list, "Kafka listeners NAME://host:port (default: one on host:kafka_port)"
        ),
        "advertised_listeners": _Key(
            (), _listener_list, "addresses clients are told per listener, NAME://host:port"
        ),
        "listener_security_protocol_map": _Key(
            (),
            _protocol_map,
            "listener.security.protocol.map: NAME:PROTOCOL per listener not named after its "
            "protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)",
        ),
        "http_port": _Key(0, _PORT, "HTTP API port (0 = any free port)"),
        "rack": _Key("", _str(), "rack id reported in metadata"),
        "auto_create_topics": _Key(True, _bool, "create unknown topics on metadata/produce"),
        "message_max_bytes": _Key(1048588, _int(1024), "largest record batch accepted"),
        "socket_request_max_bytes": _Key(104857600, _int(1024), "largest request frame"),
        "max_connections": _Key(
            1000,
            _int(1),
            "max.connections per listener: connections served at once on each Kafka listener "
            "(one past it is closed on accept) and on the HTTP port (one past it is answered "
            "503, other brokers' served within a reserve)",
        ),
        "connections_max_idle_ms": _Key(
            600000,
            _int(1),
            "connections.max.idle.ms: a Kafka or HTTP connection with nothing to do this long "
            "(no request and no answer owed, or a request stalled part-way) is closed",
        ),
        "queued_max_request_bytes": _Key(
            104857600,
            _int(1024),
            "queued.max.request.bytes: bytes of Kafka requests the node holds at once, over all "
            "connections (read, not yet handled); a request that does not fit waits unread",
        ),
        "fetch_max_bytes": _Key(57671680, _int(1024), "upper bound of one fetch response"),
        "retention_check_interval_ms": _Key(300000, _int(10), "how often retention runs"),
        "flush_check_interval_ms": _Key(1000, _int(10), "how often the flush.ms policy runs"),
        "request_timeout_ms": _Key(30000, _int(1), "upper bound for any delayed request"),
        "heartbeat_interval_ms": _Key(500, _int(10), "broker heartbeat period to the controller"),
        "offsets_topic_partitions": _Key(
            12, _int(1, 1000), "partitions of __consumer_offsets (Kafka's default is 50)"
        ),
        "transaction_state_partitions": _Key(
            12,
            _int(1, 1000),
            "partitions of __transaction_state (transaction.state.log.num.partitions; Kafka 50)",
        ),
        "offsets_topic_segment_bytes": _Key(
            104857600,
            _int(1024, 2**31 - 1),
            "offsets.topic.segment.bytes: segment.bytes of __consumer_offsets when created",
        ),
        "offsets_retention_minutes": _Key(
            10080,
            _int(1, 2**31 - 1),
            "offsets.retention.minutes: committed offsets of a group empty this long expire",
        ),
        "offsets_retention_ms": _Key(
            0, _int(0), "offsets_retention_minutes in ms when > 0 (for tests; 0 = use minutes)"
        ),
        "transaction_partition_verification_enable": _Key(
            True,
            _bool,
            "transaction.partition.verification.enable: a partition leader asks the "
            "coordinator before a producer's first transactional batch there (KIP-890)",
        ),
        "transactional_id_expiration_ms": _Key(
            604_800_000,
            _int(1, 2**62),
            "transactional.id.expiration.ms: a transactional id with no transaction and no "
            "change this long is removed",
        ),
        "offsets_retention_check_interval_ms": _Key(
            600000, _int(10), "offsets.retention.check.interval.ms: how often offsets expire"
        ),
        "group_initial_rebalance_delay_ms": _Key(
            3000, _int(0), "group.initial.rebalance.delay.ms: wait for more members"
        ),
        "group_min_session_timeout_ms": _Key(
            6000, _int(1), "group.min.session.timeout.ms: shortest consumer session accepted"
        ),
        "group_max_session_timeout_ms": _Key(
            1_800_000,
            _int(1),
            "group.max.session.timeout.ms: longest consumer session accepted (also bounds how"
            " long a silent member holds a rebalance)",
        ),
        "replica_lag_time_max_ms": _Key(
            10000, _int(10), "a follower not caught up this long leaves the ISR"
        ),
    },
    "controller": {
        "host": _Key("127.0.0.1", _str(), "address the Raft and controller HTTP ports bind"),
        "raft_port": _Key(9093, _PORT, "Raft transport port (must match this node's voter entry)"),
        "http_port": _Key(9094, _PORT, "controller HTTP port (must match this node's voter entry)"),
        "voters": _Key((), _voters, "quorum voters as id@host:raft_port:http_port"),
        "secret": _Key("", _str(), "cluster shared secret for the Raft transport"),
        "session_timeout_ms": _Key(3000, _int(100), "broker.session.timeout.ms: fence after"),
        "liveness_probe_after_ms": _Key(
            1000,
            _int(0),
            "probe a broker whose heartbeats are this late; a refused connection fences it at"
            " once (0: off)",
        ),
        "preferred_leader_election_delay_ms": _Key(
            5000, _int(0), "how long a preferred leader must be electable before it is restored"
        ),
        "metadata_deltas_max": _Key(
            10_000,
            _int(1),
            "metadata commands kept to send brokers as deltas; one further behind gets a snapshot",
        ),
        "election_timeout_min_ms": _Key(400, _int(50), "Raft election timeout, lower bound"),
        "election_timeout_max_ms": _Key(1000, _int(100), "Raft election timeout, upper bound"),
    },
    "topic": {
        "partitions": _Key(1, _int(1, 100000), "default partition count"),
        "replication_factor": _Key(1, _int(1, 32), "default replication factor"),
        "min_insync_replicas": _Key(1, _int(1, 32), "default min.insync.replicas"),
        "retention_ms": _Key(7 * _MS_DAY, _MS, "default retention.ms (-1 = unlimited)"),
        "retention_bytes": _Key(-1, _int(-1), "default retention.bytes (-1 = unlimited)"),
        "segment_bytes": _Key(1 << 30, _int(1024, 2**31 - 1), "default segment.bytes"),
        "segment_ms": _Key(7 * _MS_DAY, _int(1), "default segment.ms"),
        "flush_messages": _Key(-1, _int(-1), "default flush.messages (-1 = never by count)"),
        "flush_ms": _Key(-1, _int(-1), "default flush.ms (-1 = never by time)"),
        "storage": _Key("disk", _str(("disk", "memory")), "default storage of new topics"),
        "message_timestamp_type": _Key(
            "CreateTime", _str(("CreateTime", "LogAppendTime")), "default timestamp type"
        ),
        "unclean_leader_election_enable": _Key(
            False, _bool, "default unclean.leader.election.enable"
        ),
        "memory_bytes_max": _Key(
            256 << 20, _int(1024), "default memory.bytes.max: bytes a memory topic partition holds"
        ),
        "cleanup_policy": _Key("delete", _cleanup_policy, "default cleanup.policy"),
        "delete_retention_ms": _Key(
            _MS_DAY, _int(0), "default delete.retention.ms: how long tombstones stay readable"
        ),
        "min_cleanable_dirty_ratio": _Key(
            0.5, _ratio, "default min.cleanable.dirty.ratio: dirty share that triggers a clean"
        ),
        "min_compaction_lag_ms": _Key(
            0, _int(0), "default min.compaction.lag.ms: records younger are never compacted"
        ),
        "max_compaction_lag_ms": _Key(
            2**63 - 1, _int(1), "default max.compaction.lag.ms: records older are compacted"
        ),
        "buffer": _Key(
            100,
            _int(1, 100000),
            "original Flux: messages a push delivery reads ahead per partition",
        ),
    },
    "api": {
        "port": _Key(0, _PORT, "original Flux name of broker.http_port (0 = use broker.http_port)"),
    },
    "message": {
        "ttl_ms": _Key(-1, _MS, "memory-topic message TTL (-1 = none)"),
        "cleanup_interval_ms": _Key(60000, _int(10), "memory-topic cleanup period"),
        "ttl": _Key(None, _seconds(allow_never=True), "original Flux: ttl_ms in seconds"),
        "cleanup_time": _Key(None, _seconds(), "original Flux: cleanup_interval_ms in seconds"),
    },
    "subscriber": {
        "retry_count": _Key(5, _int(0), "push delivery retries"),
        "retry_interval_ms": _Key(1000, _int(1), "pause between push retries"),
        "timeout_ms": _Key(5000, _int(1), "one push delivery's timeout"),
        "inactive_time_ms": _Key(3600000, _int(1), "inactive subscriber deleted after"),
        "cleanup_interval_ms": _Key(60000, _int(10), "subscriber cleanup period"),
        "retry_interval": _Key(None, _seconds(), "original Flux: retry_interval_ms in seconds"),
        "timeout": _Key(None, _seconds(), "original Flux: timeout_ms in seconds"),
        "inactive_time": _Key(None, _seconds(), "original Flux: inactive_time_ms in seconds"),
        "cleanup_time": _Key(None, _seconds(), "original Flux: cleanup_interval_ms in seconds"),
    },
    "dedup": {
        "window_ms": _Key(600000, _int(0), "message-id deduplication window"),
    },
    "security": {
        "ssl_certfile": _Key("", _str(), "ssl.keystore: PEM certificate (chain) of this node"),
        "ssl_keyfile": _Key("", _str(), "PEM private key of ssl_certfile"),
        "ssl_cafile": _Key(
            "", _str(), "ssl.truststore: PEM CA bundle that client certificates must chain to"
        ),
        "ssl_client_auth": _Key(
            "none",
            _str(("none", "requested", "required")),
            "ssl.client.auth: ask TLS clients for a certificate (its subject is the principal)",
        ),
        "sasl_enabled_mechanisms": _Key(
            SASL_MECHANISMS, _mechanisms, "sasl.enabled.mechanisms on SASL listeners"
        ),
        "authorizer_enable": _Key(
            False,
            _bool,
            "authorize every Kafka request by ACLs (Kafka's authorizer.class.name set)",
        ),
        "super_users": _Key(
            (), _str_list, "super.users: principals allowed everything, e.g. User:admin"
        ),
        "allow_everyone_if_no_acl_found": _Key(
            False,
            _bool,
            "allow.everyone.if.no.acl.found: a resource without ACLs is open to all",
        ),
        "http_auth": _Key(
            "none",
            _str(("none", "required")),
            "HTTP API clients must send Basic credentials of a SCRAM user (required) or not",
        ),
        "internal_tls": _Key(
            False,
            _bool,
            "node-to-node and node HTTP over TLS with ssl_certfile/ssl_keyfile, peers verified "
            "against ssl_cafile",
        ),
        "internal_auth": _Key(
            False,
            _bool,
            "node-only HTTP endpoints require the cluster credential derived from "
            "controller.secret (every node then needs the secret)",
        ),
        "connections_max_reauth_ms": _Key(
            0,
            _int(0),
            "connections.max.reauth.ms (KIP-368): a SASL session's lifetime (0 = unlimited)",
        ),
    },
    "v1": {
        "port": _Key(
            -1, _int(-1, 65535), "FLUX V1 line-protocol listener (-1 = off, 0 = any free port)"
        ),
        "max_line_bytes": _Key(1 << 20, _int(256), "the longest V1 request line"),
        "max_in_flight": _Key(256, _int(1), "V1 requests in flight per connection"),
    },
    "cleaner": {
        "enable": _Key(
            True, _bool, "log.cleaner.enable: compact topics with cleanup.policy=compact"
        ),
        "dedupe_buffer_bytes": _Key(
            64 << 20,
            _int(1 << 20),
            "log.cleaner.dedupe.buffer.size: memory for the key map of one clean",
        ),
        "io_max_bytes_per_second": _Key(
            -1, _int(-1), "log.cleaner.io.max.bytes.per.second: read+write throttle (-1 = none)"
        ),
        "backoff_ms": _Key(
            15000, _int(10), "log.cleaner.backoff.ms: pause when no log needs cleaning"
        ),
    },
}


class NodeConfig:
    """A validated node configuration: ``config.broker.kafka_port``, ``config["broker"]["..."]``.

    Immutable after construction; every section of ``SCHEMA`` is present with defaults filled.
    """

    def __init__(self, values: Mapping[str, Mapping[str, Any]]) -> None:
        self._values = {section: dict(keys) for section, keys in values.items()}
        for section, keys in self._values.items():
            object.__setattr__(self, section, _Section(keys))

    def __getitem__(self, section: str) -> dict[str, Any]:
        return dict(self._values[section])

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {section: dict(keys) for section, keys in self._values.items()}

    @property
    def data_dir(self) -> Path:
        return Path(self._values["node"]["data_dir"])

    @property
    def advertised_host(self) -> str:
        broker = self._values["broker"]
        return broker["advertised_host"] or broker["host"]

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """The Kafka listeners, primary first. Without ``broker.listeners`` there is one,
        ``PLAINTEXT`` on ``host:kafka_port`` advertised as ``advertised_host``. The primary
        listener's advertised host is also the broker's HTTP address for other brokers."""
        broker = self._values["broker"]
        if not broker["listeners"]:
            return (
                Listener("PLAINTEXT", broker["host"], broker["kafka_port"], self.advertised_host),
            )
        advertised = {name: (host, port) for name, host, port in broker["advertised_listeners"]}
        protocols = dict(broker["listener_security_protocol_map"])
        listeners = []
        for name, host, port in broker["listeners"]:
            advertised_host, advertised_port = advertised.get(name, (host, 0))
            protocol = _protocol_of(name, protocols)
            listeners.append(Listener(name, host, port, advertised_host, advertised_port, protocol))
        return tuple(listeners)


class _Section:
    def __init__(self, keys: Mapping[str, Any]) -> None:
        self.__dict__.update(keys)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("configuration is read-only")


def parse_config(raw: Mapping[str, Any], *, environ: Mapping[str, str] | None = None) -> NodeConfig:
    """Validate ``raw`` (parsed TOML) plus ``FLUX_`` overrides from ``environ``."""
    merged: dict[str, dict[str, Any]] = {}
    for section, keys in raw.items():
        if section not in SCHEMA:
            raise ConfigError(f"unknown section [{section}] (known: {', '.join(SCHEMA)})")
        if not isinstance(keys, Mapping):
            raise ConfigError(f"[{section}] must be a table")
        merged[section] = dict(keys)
    for name, text in (environ if environ is not None else os.environ).items():
        if not name.startswith("FLUX_") or "__" not in name:
            continue
        section, _, key = name[len("FLUX_") :].partition("__")
        section, key = section.lower(), key.lower()
        if section not in SCHEMA or key not in SCHEMA[section]:
            raise ConfigError(f"{name}: no such configuration key {section}.{key}")
        merged.setdefault(section, {})[key] = _parse_env_value(text)
    values: dict[str, dict[str, Any]] = {}
    for section, keys in SCHEMA.items():
        given = merged.get(section, {})
        for key in given:
            if key not in keys:
                raise ConfigError(
                    f"{section}.{key}: unknown configuration key (known in [{section}]: "
                    f"{', '.join(keys)})"
                )
        values[section] = {}
        for key, spec in keys.items():
            value = given.get(key, spec.default)
            try:
                values[section][key] = spec.check(value)
            except ValueError as error:
                raise ConfigError(f"{section}.{key}: {error}") from None
    _apply_seconds_keys(values, merged)
    _check_api_port(values)
    _check_roles(values)
    _check_listeners(values["broker"])
    _check_security(values["broker"], values["security"])
    if values["security"]["internal_auth"] and not values["controller"]["secret"]:
        raise ConfigError(
            "controller.secret: security.internal_auth needs the cluster's shared secret on "
            "every node, brokers included"
        )
    _check_election_timeouts(values["controller"])
    if (
        values["broker"]["group_min_session_timeout_ms"]
        > values["broker"]["group_max_session_timeout_ms"]
    ):
        raise ConfigError(
            "broker.group_min_session_timeout_ms must be at most "
            "broker.group_max_session_timeout_ms"
        )
    return NodeConfig(values)


def _apply_seconds_keys(
    values: dict[str, dict[str, Any]], given: dict[str, dict[str, Any]]
) -> None:
    """The original Flux knobs in seconds set their millisecond twins; both given must agree."""
    for (section, key), ms_key in _SECONDS_KEYS.items():
        seconds = values[section][key]
        if seconds is None:
            continue
        milliseconds = -1 if seconds == -1 else max(1, round(seconds * 1000))
        if ms_key in given.get(section, {}) and values[section][ms_key] != milliseconds:
            raise ConfigError(
                f"{section}.{key}: {seconds} s disagrees with {section}.{ms_key} "
                f"{values[section][ms_key]} (give one of them)"
            )
        try:
            values[section][ms_key] = SCHEMA[section][ms_key].check(milliseconds)
        except ValueError as error:
            raise ConfigError(f"{section}.{key}: {error}") from None


def _check_api_port(values: dict[str, dict[str, Any]]) -> None:
    """``api.port`` is the original Flux name of the broker's HTTP port (one server serves the
    HTTP API, metrics and replication)."""
    api_port, http_port = values["api"]["port"], values["broker"]["http_port"]
    if api_port and http_port and api_port != http_port:
        raise ConfigError(
            f"api.port: {api_port} disagrees with broker.http_port {http_port} (they name the "
            f"same HTTP listener; give one of them)"
        )
    if api_port:
        values["broker"]["http_port"] = api_port


def _check_roles(values: dict[str, dict[str, Any]]) -> None:
    """Cross-key rules: a controller is one of the voters, on the ports its entry names."""
    node_id = values["node"]["id"]
    controller = values["controller"]
    voters = controller["voters"]
    if "controller" in values["node"]["roles"]:
        if not controller["secret"]:
            raise ConfigError(
                "controller.secret: the controller role needs the cluster's shared secret "
                "(fluxctl cluster up generates one)"
            )
        if not voters:
            # A lone node with no voters list forms a quorum of one on its own ports.
            controller["voters"] = (
                Voter(
                    node_id, controller["host"], controller["raft_port"], controller["http_port"]
                ),
            )
            return
        mine = [voter for voter in voters if voter.node_id == node_id]
        if not mine:
            raise ConfigError(
                f"controller.voters: this node (id {node_id}) is not among the voters"
            )
        if (mine[0].raft_port, mine[0].http_port) != (
            controller["raft_port"],
            controller["http_port"],
        ):
            raise ConfigError(
                f"controller.voters: entry {mine[0]} does not match controller.raft_port "
                f"{controller['raft_port']} / controller.http_port {controller['http_port']}"
            )
    elif not voters:
        raise ConfigError("controller.voters: a broker-only node needs the controller voters")


_WILDCARDS = ("", "0.0.0.0", "::")


def _check_listeners(broker: dict[str, Any]) -> None:
    """Every advertised listener names a listener; none advertises a wildcard address."""
    if not broker["listeners"] and (broker["advertised_host"] or broker["host"]) in _WILDCARDS:
        raise ConfigError(
            f"broker.advertised_host: the listener binds {broker['host']!r}; give the address "
            f"clients should use in broker.advertised_host"
        )
    names = {name for name, _, _ in broker["listeners"]}
    for name, host, _ in broker["advertised_listeners"]:
        if name not in names:
            raise ConfigError(
                f"broker.advertised_listeners: {name!r} is not in broker.listeners "
                f"({', '.join(sorted(names)) or 'none set'})"
            )
        if host in _WILDCARDS:
            raise ConfigError(f"broker.advertised_listeners: {name} advertises {host!r}")
    advertised = {name for name, _, _ in broker["advertised_listeners"]}
    for name, host, _ in broker["listeners"]:
        if name not in advertised and host in _WILDCARDS:
            raise ConfigError(
                f"broker.listeners: {name} binds {host or 'every address'!r}; give its address "
                f"for clients in broker.advertised_listeners"
            )


def _check_security(broker: dict[str, Any], security: dict[str, Any]) -> None:
    """Every listener has a security protocol; TLS listeners have a certificate and key (and a
    CA when client certificates are asked for); the files exist."""
    protocols = dict(broker["listener_security_protocol_map"])
    names = {name for name, _, _ in broker["listeners"]} or {"PLAINTEXT"}
    for name in protocols:
        if name not in names:
            raise ConfigError(
                f"broker.listener_security_protocol_map: {name!r} is not in broker.listeners "
                f"({', '.join(sorted(names))})"
            )
    used = {_protocol_of(name, protocols) for name in names}
    if used & {"SSL", "SASL_SSL"}:
        for key in ("ssl_certfile", "ssl_keyfile"):
            if not security[key]:
                raise ConfigError(f"security.{key}: required by the SSL listener(s)")
        if security["ssl_client_auth"] != "none" and not security["ssl_cafile"]:
            raise ConfigError(
                f"security.ssl_cafile: required with ssl_client_auth = "
                f"{security['ssl_client_auth']!r}"
            )
    for key in ("ssl_certfile", "ssl_keyfile", "ssl_cafile"):
        if security[key] and not Path(security[key]).is_file():
            raise ConfigError(f"security.{key}: no such file {security[key]!r}")
    if security["internal_tls"]:
        for key in ("ssl_certfile", "ssl_keyfile", "ssl_cafile"):
            if not security[key]:
                raise ConfigError(f"security.{key}: required by security.internal_tls")
    if used & {"SASL_PLAINTEXT", "SASL_SSL"} and not security["sasl_enabled_mechanisms"]:
        raise ConfigError("security.sasl_enabled_mechanisms: a SASL listener needs at least one")


def _check_election_timeouts(controller: dict[str, Any]) -> None:
    if controller["election_timeout_min_ms"] >= controller["election_timeout_max_ms"]:
        raise ConfigError(
            "controller.election_timeout_min_ms must be below controller.election_timeout_max_ms"
        )


def load_config(
    path: str | Path | None,
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> NodeConfig:
    """Read and validate the TOML file at ``path`` (or only defaults if None), with
    ``overrides`` (``{section: {key: value}}``, e.g. command-line flags) applied on top, and
    ``FLUX_`` environment variables on top of both."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as file:
                raw = tomllib.load(file)
        except OSError as error:
            raise ConfigError(f"cannot read configuration file {path}: {error}") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: invalid TOML: {error}") from None
    for section, keys in (overrides or {}).items():
        existing = raw.setdefault(section, {})
        if not isinstance(existing, dict):
            raise ConfigError(f"[{section}] must be a table")
        existing.update(keys)
    return parse_config(raw, environ=environ)


def _parse_env_value(text: str) -> Any:
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text
