"""Valid Kafka requests for every API and version the codec supports, built from its schemas.

``generate_request(seed, index, context)`` walks the request's :class:`~flux.protocol.schema.
Message` description at a version of ``SUPPORTED_VERSIONS`` and fills each field with a seeded,
plausible value (topics and partitions that exist, small arrays, record batches built with
``build_batch``). It encodes the request itself, field by field, into *tokens*: ``(kind, bytes,
key)`` triples whose concatenation is exactly what ``flux.protocol.api.encode_request`` writes
(``tests/unit/test_fuzz_mutations.py`` checks this for every API and version). The tokens are
what makes mutation structure-aware: ``mutate.py`` knows which bytes are a compact length, an
array count, a nullable marker, a tagged-field section or a record batch.

Requests that can damage state (deleting topics or records, reconfiguring, reassigning,
transactions, unregistering brokers) only ever name the context's scratch topics, absent
broker ids and the fuzzer's own groups: the canary's log and configuration change only through
produce requests, which the runner accounts for.

Pure: no I/O, no clock, no global random state; the same ``(seed, index, context)`` always
gives the same bytes.
"""

from __future__ import annotations

import random
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from flux.protocol import primitives as p
from flux.protocol.api import SUPPORTED_VERSIONS, ApiKey
from flux.protocol.compression import Compression
from flux.protocol.messages import REQUESTS
from flux.protocol.records import build_batch
from flux.protocol.schema import Field, Message

from .context import FuzzContext, TopicInfo, case_tag

__all__ = [
    "DESTRUCTIVE_APIS",
    "KafkaRequest",
    "Token",
    "api_choices",
    "case_rng",
    "encode_tokens",
    "generate_request",
]

#: One encoded piece of a request: its kind (what mutations may do to it), its bytes, and the
#: snake_case key of the field it belongs to ("" for framing).
Token = tuple[str, bytes, str]

#: APIs whose valid requests may change or delete state: they name only scratch resources.
DESTRUCTIVE_APIS = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.DELETE_RECORDS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.OFFSET_DELETE,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.UNREGISTER_BROKER,
        ApiKey.DELETE_ACLS,
        ApiKey.CREATE_ACLS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    }
)
# The APIs that matter most are drawn more often.
_WEIGHTS = {ApiKey.PRODUCE: 6, ApiKey.FETCH: 4, ApiKey.METADATA: 3, ApiKey.LIST_OFFSETS: 2}
_CONFIG_NAMES = (
    "retention.ms",
    "segment.bytes",
    "cleanup.policy",
    "max.message.bytes",
    "min.insync.replicas",
    "retention.bytes",
    "fuzz.unknown.key",
)
_CONFIG_VALUES = ("1000", "86400000", "delete", "compact", "1048576", "2", "-1", "", "x")
_CODECS = tuple(Compression)
_FLAGS = 0  # correlation ids of generated requests are the case index (masked to 31 bits)
_TEXT_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-._"


@dataclass(frozen=True)
class KafkaRequest:
    """A generated request: its tokens (size prefix not included) and the body encoded."""

    api_key: int
    api_version: int
    correlation_id: int
    tokens: tuple[Token, ...]
    body: dict[str, Any]

    def payload(self) -> bytes:
        return b"".join(token[1] for token in self.tokens)

    def frame(self) -> bytes:
        payload = self.payload()
        return struct.pack(">i", len(payload)) + payload


def case_rng(seed: int, index: int, salt: str = "") -> random.Random:
    """The random source of case ``index`` of run ``seed`` (string seeding is stable across
    processes and Python runs)."""
    return random.Random(f"{seed}/{index}/{salt}")


def api_choices() -> list[tuple[int, int]]:
    """Every ``(api_key, version)`` the codec supports, each API once per weight."""
    choices = []
    for api_key, (low, high) in sorted(SUPPORTED_VERSIONS.items()):
        if api_key not in REQUESTS:
            continue
        for _ in range(_WEIGHTS.get(api_key, 1)):
            choices.extend((int(api_key), version) for version in range(low, high + 1))
    return choices


_API_CHOICES = api_choices()


def generate_request(
    seed: int,
    index: int,
    context: FuzzContext,
    *,
    api_key: int | None = None,
    api_version: int | None = None,
) -> KafkaRequest:
    """The valid request of case ``index`` (API and version drawn from the seed unless given)."""
    rng = case_rng(seed, index, "kafka")
    if api_key is None:
        api_key, api_version = rng.choice(_API_CHOICES)
    elif api_version is None:
        low, high = SUPPORTED_VERSIONS[api_key]
        api_version = rng.randint(low, high)
    assert api_version is not None
    message = REQUESTS[api_key]
    builder = _Builder(rng, context, api_key, api_version, case_tag("k", seed, index), index)
    body = builder.struct_value(message.fields, ("",), parent_type=message.name)
    correlation_id = index & 0x7FFFFFFF
    tokens = encode_tokens(message, api_version, correlation_id, f"fuzz-{seed}", body)
    return KafkaRequest(api_key, api_version, correlation_id, tuple(tokens), body)


# ------------------------------------------------------------------------------ values


class _Builder:
    """Fills one request's fields; ``topic`` is the topic the struct being filled is about."""

    def __init__(
        self,
        rng: random.Random,
        context: FuzzContext,
        api_key: int,
        api_version: int,
        tag: str,
        index: int,
    ) -> None:
        self.rng = rng
        self.context = context
        self.api_key = api_key
        self.version = api_version
        self.tag = tag
        self.index = index
        self.destructive = api_key in DESTRUCTIVE_APIS
        self.topic: TopicInfo = self._pick_topic()
        self.resource_type = 2
        self.flexible = REQUESTS[api_key].is_flexible(api_version)

    def _pick_topic(self) -> TopicInfo:
        context = self.context
        if self.destructive:
            pool = list(context.scratch) + [TopicInfo(name, 1) for name in context.scratch_names]
            return self.rng.choice(pool)
        if self.api_key == ApiKey.PRODUCE:
            # Mostly the canary, whose log is checked at the end.
            return (
                context.canary
                if self.rng.random() < 0.8
                else self.rng.choice(context.readable_topics)
            )
        return self.rng.choice(context.readable_topics)

    # -- structs and arrays -------------------------------------------------------------------

    def struct_value(
        self, fields: tuple[Field, ...], path: tuple[str, ...], *, parent_type: str
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if "Topic" in parent_type:
            self.topic = self._pick_topic()
        for spec in fields:
            if not spec.present_in(self.version):
                continue
            if spec.tagged_in(self.version) and self.flexible:
                # Tagged fields mostly stay at their default (not written); sometimes set.
                if self.rng.random() < 0.85:
                    continue
            body[spec.key] = self.value(spec, (*path, spec.name), parent_type)
        return body

    def value(self, spec: Field, path: tuple[str, ...], parent_type: str) -> Any:
        rng = self.rng
        nullable = spec.nullable_in(self.version)
        if spec.is_array:
            if nullable and rng.random() < 0.05 and not self._never_null(spec):
                return None
            return self.array_value(spec, path)
        if spec.is_struct:
            if nullable and rng.random() < 0.2:
                return None
            return self.struct_value(spec.fields, path, parent_type=spec.type)
        return self.scalar(spec, parent_type)

    def _never_null(self, spec: Field) -> bool:
        # Null topics mean "all topics/partitions" to Metadata and ElectLeaders: fine for
        # Metadata (a read) but not for an election over the canary.
        return self.destructive or spec.key in ("topic_partitions",)

    def array_value(self, spec: Field, path: tuple[str, ...]) -> list[Any]:
        rng = self.rng
        key = spec.key
        element = spec.element_type
        if spec.is_struct:
            count = rng.choice((1, 1, 1, 2, 2, 3)) if _is_topicish(spec) else rng.randint(0, 2)
            if self.api_key == ApiKey.PRODUCE and key == "partition_data":
                count = 1
            return [
                self.struct_value(spec.fields, path, parent_type=spec.type) for _ in range(count)
            ]
        count = rng.randint(0, 3)
        if element == "string":
            return [
                self.string_for(key.rstrip("s") if key.endswith("s") else key, "", False)
                for _ in range(count)
            ]
        if element in ("int32", "int64", "int16", "int8"):
            if "partition" in key:
                return sorted({self.partition() for _ in range(max(count, 1))})
            if "replica" in key or "broker" in key:
                return rng.sample(list(self.context.broker_ids), k=min(3, max(count, 1)))
            return [rng.randint(0, 5) for _ in range(count)]
        if element == "uuid":
            return [self.topic.topic_id for _ in range(count)]
        return []

    # -- scalars --------------------------------------------------------------------------------

    def partition(self) -> int:
        rng = self.rng
        if rng.random() < 0.05:
            return rng.choice((self.topic.partitions, 99, -1))
        return rng.randrange(max(self.topic.partitions, 1))

    def scalar(self, spec: Field, parent_type: str) -> Any:
        kind = spec.type
        if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
            return self.integer(spec.key, kind)
        if kind == "float64":
            return self.rng.choice((0.0, 0.5, 1.0))
        if kind == "bool":
            return self.boolean(spec.key)
        if kind == "uuid":
            return self.uuid_for(spec.key)
        if kind == "string":
            return self.string_for(spec.key, parent_type, spec.nullable_in(self.version))
        if kind == "bytes":
            if spec.nullable_in(self.version) and self.rng.random() < 0.2:
                return None
            return self.rng.randbytes(self.rng.randint(0, 24))
        if kind == "records":
            if self.rng.random() < 0.03:
                return None
            return self.records()
        raise AssertionError(f"unexpected type {kind}")

    def boolean(self, key: str) -> bool:
        if key == "allow_auto_topic_creation":
            return self.rng.random() < 0.1
        if key == "validate_only":
            return self.rng.random() < 0.7
        return self.rng.random() < 0.5

    def uuid_for(self, key: str) -> uuid.UUID:
        if "topic" in key and self.rng.random() < 0.9:
            return self.topic.topic_id
        return uuid.UUID(int=self.rng.getrandbits(128))

    def integer(self, key: str, kind: str) -> int:
        rng = self.rng
        if key in ("partition", "partition_index", "index"):
            return self.partition()
        if key == "acks":
            return rng.choice((1, -1, -1))
        if key in ("timeout_ms", "timeout"):
            return rng.randint(100, 1500)
        if key == "max_wait_ms":
            return rng.randint(0, 50)
        if key == "min_bytes":
            return rng.choice((0, 1))
        if key in ("max_bytes", "partition_max_bytes"):
            return rng.choice((1024, 65536, 1 << 20))
        if key in ("replica_id",):
            return -1
        if key in ("broker_id", "node_id"):
            pool = self.context.absent_broker_ids if self.destructive else self.context.broker_ids
            return rng.choice(pool)
        if key == "session_id":
            return 0
        if key == "session_epoch":
            return -1
        if key == "isolation_level":
            return rng.choice((0, 1))
        if key in ("fetch_offset", "offset", "committed_offset"):
            return rng.randint(0, 20)
        if key == "timestamp":
            return rng.choice((-1, -2, 1_700_000_000_000))
        if key in ("log_start_offset",):
            return -1
        if "leader_epoch" in key or key in ("last_fetched_epoch", "committed_leader_epoch"):
            return -1
        if key == "producer_id":
            return -1
        if key == "producer_epoch":
            return -1
        if key.startswith("generation_id"):
            return rng.choice((-1, 0, 1))
        if key == "session_timeout_ms":
            return rng.randint(6000, 10000)
        if key == "rebalance_timeout_ms":
            return rng.randint(1000, 3000)
        if key == "num_partitions":
            return rng.choice((-1, 1, 2))
        if key == "replication_factor":
            return rng.choice((-1, 1, 2, 3))
        if key == "count":
            return self.topic.partitions + rng.choice((0, 1, 2))
        if key == "resource_type":
            self.resource_type = rng.choice((2, 2, 2, 4))
            return self.resource_type
        if key == "config_operation":
            return rng.randint(0, 3)
        if key == "key_type":
            return rng.choice((0, 0, 1))
        if key in ("throttle_time_ms", "error_code"):
            return 0
        if key == "iterations":
            return 4096
        if key == "mechanism":
            return rng.choice((1, 2))
        if key == "transaction_timeout_ms":
            return 60000
        if key == "retention_time_ms":
            return -1
        if key in ("pattern_type", "resource_pattern_type", "resource_pattern_type_filter"):
            return 3
        if key in ("operation",):
            return rng.randint(2, 12)
        if key in ("permission_type",):
            return 3
        if key == "election_type":
            return rng.choice((0, 1))
        if key == "max_num_offsets":
            return 1
        if kind == "int8":
            return rng.randint(0, 3)
        return rng.choice((0, 0, 1, -1, rng.randint(2, 100)))

    def string_for(self, key: str, parent_type: str, nullable: bool) -> str | None:
        rng = self.rng
        context = self.context
        if nullable and rng.random() < 0.1 and key not in ("topic", "name", "group_id"):
            return None
        if ("config" in key) or (key == "name" and "Config" in parent_type):
            return rng.choice(_CONFIG_NAMES)
        topicish = key in ("topic", "topic_name") or (key == "name" and "Topic" in parent_type)
        if key == "resource_name":
            if self.resource_type == 4:
                pool = context.absent_broker_ids if self.destructive else context.broker_ids
                return str(rng.choice(pool))
            topicish = True
        if topicish:
            if key == "name" and self.api_key == ApiKey.CREATE_TOPICS:
                return rng.choice(context.scratch_names)
            return self.topic.name
        if key in ("transactional_id",):
            if self.api_key in (ApiKey.PRODUCE, ApiKey.INIT_PRODUCER_ID) and rng.random() < 0.8:
                return None if nullable else ""
            return rng.choice(context.transactional_ids)
        if "group" in key or key in ("key", "coordinator_key"):
            if "instance" in key:
                return None if nullable else ""
            return rng.choice(context.groups)
        if key == "member_id":
            return rng.choice(("", "", "fuzz-member"))
        if key == "protocol_type":
            return "consumer"
        if key == "name" and "Protocol" in parent_type:
            return rng.choice(("range", "roundrobin"))
        if key == "protocol_name":
            return rng.choice(("range", "")) if not nullable else None
        if key == "mechanism":
            return rng.choice(("SCRAM-SHA-256", "PLAIN", "fuzz"))
        if key == "value":
            return rng.choice(_CONFIG_VALUES)
        if key in ("principal", "principal_filter"):
            return "User:fuzz"
        if key in ("host", "host_filter"):
            return "*"
        if key == "name" and ("Scram" in parent_type or "User" in parent_type):
            return "fuzz-user"
        if key in ("rack_id", "cluster_id"):
            return ""
        if key == "client_software_name":
            return "fuzz"
        return "".join(rng.choice(_TEXT_ALPHABET) for _ in range(rng.randint(0, 12)))

    def records(self) -> bytes:
        rng = self.rng
        count = rng.randint(1, 3)
        records = []
        for number in range(count):
            key = None if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 8))
            value = f"{self.tag}{number} ".encode() + rng.randbytes(rng.randint(0, 32))
            headers = [("h", rng.randbytes(3))] if rng.random() < 0.2 else []
            records.append((key, value, headers, None))
        codec = rng.choice(_CODECS) if rng.random() < 0.4 else Compression.NONE
        return build_batch(
            records,
            base_timestamp_ms=1_700_000_000_000 + (self.index % 1_000_000),
            compression=codec,
        )


def _is_topicish(spec: Field) -> bool:
    return "topic" in spec.key or "partition" in spec.key


# ------------------------------------------------------------------------------ encoding


def encode_tokens(
    message: Message, version: int, correlation_id: int, client_id: str | None, body: dict
) -> list[Token]:
    """``encode_request``'s bytes (without the size prefix) as tokens."""
    flexible = message.is_flexible(version)
    tokens: list[Token] = [
        ("hdr_api_key", struct.pack(">h", message.api_key), ""),
        ("hdr_api_version", struct.pack(">h", version), ""),
        ("hdr_correlation_id", struct.pack(">i", correlation_id), ""),
    ]
    if client_id is None:
        tokens.append(("str_len16", b"\xff\xff", "client_id"))
    else:
        raw = client_id.encode()
        tokens.append(("str_len16", struct.pack(">h", len(raw)), "client_id"))
        tokens.append(("str_data", raw, "client_id"))
    if flexible:
        tokens.append(("tag_count", b"\x00", ""))
    _encode_struct(tokens, message.fields, body, version, flexible)
    return tokens


_FIXED = {
    "int8": ">b",
    "int16": ">h",
    "int32": ">i",
    "int64": ">q",
    "uint16": ">H",
    "uint32": ">I",
    "float64": ">d",
}


def _encode_struct(
    tokens: list[Token], fields: tuple[Field, ...], body: dict, version: int, flexible: bool
) -> None:
    present = [f for f in fields if f.present_in(version)]
    inline = [f for f in present if not (flexible and f.tagged_in(version))]
    tagged = sorted(
        (f for f in present if flexible and f.tagged_in(version)), key=lambda f: f.tag or 0
    )
    for spec in inline:
        _encode_value(tokens, spec, body.get(spec.key, spec.default_value()), version, flexible)
    if not flexible:
        return
    written = []
    for spec in tagged:
        value = body.get(spec.key, spec.default_value())
        if value != spec.default_value():
            inner: list[Token] = []
            _encode_value(inner, spec, value, version, flexible)
            written.append((spec, inner))
    tokens.append(("tag_count", p.write_uvarint(len(written)), ""))
    for spec, inner in written:
        size = sum(len(token[1]) for token in inner)
        tokens.append(("tag_header", p.write_uvarint(spec.tag or 0), spec.key))
        tokens.append(("tag_size", p.write_uvarint(size), spec.key))
        tokens.extend(inner)


def _encode_value(
    tokens: list[Token], spec: Field, value: Any, version: int, flexible: bool
) -> None:
    key = spec.key
    nullable = spec.nullable_in(version)
    if spec.is_array:
        if value is None:
            tokens.append(("array_null", b"\x00" if flexible else b"\xff\xff\xff\xff", key))
            return
        if flexible:
            tokens.append(("array_ulen", p.write_compact_array_length(len(value)), key))
        else:
            tokens.append(("array_len32", struct.pack(">i", len(value)), key))
        element = spec.element_type
        for item in value:
            if spec.is_struct:
                _encode_struct(tokens, spec.fields, item, version, flexible)
            else:
                _encode_scalar(tokens, element, key, item, version, flexible, nullable=False)
        return
    if spec.is_struct:
        if nullable:
            if value is None:
                tokens.append(("null_marker", b"\xff", key))
                return
            tokens.append(("null_marker", b"\x01", key))
        _encode_struct(tokens, spec.fields, value, version, flexible)
        return
    _encode_scalar(tokens, spec.type, key, value, version, flexible, nullable=nullable)


def _encode_scalar(
    tokens: list[Token],
    kind: str,
    key: str,
    value: Any,
    version: int,
    flexible: bool,
    *,
    nullable: bool,
) -> None:
    if kind in _FIXED:
        tokens.append((kind, struct.pack(_FIXED[kind], value), key))
    elif kind == "bool":
        tokens.append(("bool", b"\x01" if value else b"\x00", key))
    elif kind == "uuid":
        tokens.append(("uuid", p.write_uuid(value), key))
    elif kind == "string":
        if value is None:
            tokens.append(("str_null", b"\x00" if flexible else b"\xff\xff", key))
            return
        raw = value.encode()
        if flexible:
            tokens.append(("str_ulen", p.write_uvarint(len(raw) + 1), key))
        else:
            tokens.append(("str_len16", struct.pack(">h", len(raw)), key))
        tokens.append(("str_data", raw, key))
    elif kind in ("bytes", "records"):
        if value is None:
            tokens.append(("bytes_null", b"\x00" if flexible else b"\xff\xff\xff\xff", key))
            return
        raw = bytes(value)
        if flexible:
            tokens.append(("bytes_ulen", p.write_uvarint(len(raw) + 1), key))
        else:
            tokens.append(("bytes_len32", struct.pack(">i", len(raw)), key))
        tokens.append(("records" if kind == "records" else "bytes_data", raw, key))
    else:
        raise AssertionError(f"unexpected type {kind}")
