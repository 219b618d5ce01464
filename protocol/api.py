"""Public entry points of the Kafka wire codec: request/response headers and bodies.

Frames handed to the decoders are *without* their 4-byte size prefix (see
:mod:`flux.protocol.framing`); the encoders return frames *with* it.

Headers (Kafka's ``RequestHeader.json`` / ``ResponseHeader.json``):

* request header v1 = api_key int16, api_version int16, correlation_id int32, client_id
  (nullable int16-length string, never compact); v2 = v1 + a tagged-field section. An API's
  flexible versions use v2, the others v1.
* response header v0 = correlation_id int32; v1 = v0 + a tagged-field section, used for
  flexible versions except by ApiVersions, whose response header is always v0 (a client must be
  able to read it before it knows which versions the broker speaks).

Decoding is strict: a frame must be consumed exactly. Bytes left after the body mean the sender
and Flux disagree about the schema, and answering from a misread body would be worse than
rejecting it, so they raise ``InvalidFrameError``. Every malformed input raises a
:class:`~flux.protocol.errors.ProtocolError` subclass and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from flux.protocol import primitives as p
from flux.protocol.errors import InvalidFrameError, ProtocolError, UnsupportedVersionError
from flux.protocol.messages import REQUESTS, RESPONSES
from flux.protocol.schema import EncodeError, Message

__all__ = [
    "ApiKey",
    "EncodeError",
    "RequestHeader",
    "SUPPORTED_VERSIONS",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_unsupported_api_versions_response",
    "request_header_version",
    "response_header_version",
]


class ApiKey(IntEnum):
    """Kafka API keys."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75


#: The versions this codec implements, per API key (inclusive ranges). A broker advertises
#: these (or narrower ranges) in its ApiVersions response.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 10),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (0, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.OFFSET_COMMIT: (0, 8),
    ApiKey.OFFSET_FETCH: (0, 8),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 7),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 4),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.UNREGISTER_BROKER: (0, 0),
}


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A decoded request header (the tagged fields of header v2 are not kept)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_REQUEST_HEADER_PREFIX = struct.Struct(">hhi")
_UNSUPPORTED_VERSION = 35
# What reading past the end of a buffer looks like from struct and memoryview indexing, plus
# the ValueErrors (UnicodeDecodeError, bad uuid) the primitives may let through.
_DECODE_FAILURES = (struct.error, IndexError, ValueError, OverflowError)


def _supported(api_key: int, api_version: int) -> bool:
    versions = SUPPORTED_VERSIONS.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


def _message(
    table: dict[int, Message], api_key: int, api_version: int, correlation_id: int | None
) -> Message:
    message = table.get(api_key)
    if message is None or not _supported(api_key, api_version):
        raise UnsupportedVersionError(api_key, api_version, correlation_id)
    return message


def request_header_version(api_key: int, api_version: int) -> int:
    """1 for classic versions, 2 for flexible ones."""
    message = REQUESTS.get(api_key)
    return 2 if message is not None and message.is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0 for classic versions and for every ApiVersions response, 1 for flexible ones."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    message = RESPONSES.get(api_key)
    return 1 if message is not None and message.is_flexible(api_version) else 0


def _view(frame: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(frame)
    if view.itemsize != 1 or view.ndim != 1:
        view = view.cast("B")
    return view


def _check_consumed(buf: memoryview, pos: int, what: str) -> None:
    if pos != len(buf):
        raise InvalidFrameError(f"{len(buf) - pos} unexpected bytes after the {what}")


# ------------------------------------------------------------------------------ requests


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, dict[str, Any]]:
    """Decode a request frame (without its size prefix) into its header and body.

    Raises ``UnsupportedVersionError`` (with the correlation id) for an API key or version
    outside ``SUPPORTED_VERSIONS``, and ``InvalidFrameError`` for anything malformed.

    Bytes after a complete body are ignored, as Kafka's brokers ignore them: librdkafka 2.x
    sends three stray bytes after a flexible "all topics" MetadataRequest, and an unmodified
    client must not be disconnected for it. (Responses, which we decode as a client, stay
    strict.)
    """
    buf = _view(frame)
    if len(buf) < _REQUEST_HEADER_PREFIX.size:
        raise InvalidFrameError(f"request of {len(buf)} bytes is shorter than its header")
    api_key, api_version, correlation_id = _REQUEST_HEADER_PREFIX.unpack_from(buf, 0)
    message = _message(REQUESTS, api_key, api_version, correlation_id)
    try:
        client_id, pos = p.read_nullable_string(buf, _REQUEST_HEADER_PREFIX.size)
        if message.is_flexible(api_version):
            pos = p.skip_tagged_fields(buf, pos)
        body, pos = message.decode(buf, pos, api_version)
    except ProtocolError:
        raise
    except _DECODE_FAILURES as exc:
        raise InvalidFrameError(f"malformed {message.name} v{api_version}: {exc}") from None
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    return header, body


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: dict[str, Any],
) -> bytes:
    """Encode a request, size prefix included (request header v1 or v2)."""
    message = _message(REQUESTS, api_key, api_version, correlation_id)
    parts: list[Any] = [
        b"",
        _REQUEST_HEADER_PREFIX.pack(api_key, api_version, correlation_id),
        p.write_nullable_string(client_id),
    ]
    if message.is_flexible(api_version):
        parts.append(p.EMPTY_TAGGED_FIELDS)
    _encode_body(parts, message, api_version, body)
    return _framed(parts)


# ----------------------------------------------------------------------------- responses


def encode_response(header: RequestHeader, body: dict[str, Any]) -> bytes:
    """Encode the response to ``header``'s request, size prefix included."""
    message = _message(RESPONSES, header.api_key, header.api_version, header.correlation_id)
    parts: list[Any] = [b"", p.INT32.pack(header.correlation_id)]
    if response_header_version(header.api_key, header.api_version) == 1:
        parts.append(p.EMPTY_TAGGED_FIELDS)
    _encode_body(parts, message, header.api_version, body)
    return _framed(parts)


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, dict[str, Any]]:
    """Decode a response frame (without its size prefix) into ``(correlation_id, body)``.

    An ApiVersions response that does not parse at ``api_version`` is read again as v0: a
    broker answers an ApiVersions request of a version it does not know with a v0 body
    (error 35 and its own version ranges), as Kafka's clients expect.
    """
    message = _message(RESPONSES, api_key, api_version, None)
    buf = _view(frame)
    try:
        return _decode_response(message, api_version, buf)
    except ProtocolError:
        if api_key != ApiKey.API_VERSIONS or api_version == 0:
            raise
        return _decode_response(message, 0, buf)


def _decode_response(
    message: Message, api_version: int, buf: memoryview
) -> tuple[int, dict[str, Any]]:
    try:
        (correlation_id,) = p.INT32.unpack_from(buf, 0)
        pos = 4
        if response_header_version(message.api_key, api_version) == 1:
            pos = p.skip_tagged_fields(buf, pos)
        body, pos = message.decode(buf, pos, api_version)
    except ProtocolError:
        raise
    except _DECODE_FAILURES as exc:
        raise InvalidFrameError(f"malformed {message.name} v{api_version}: {exc}") from None
    _check_consumed(buf, pos, f"{message.name} v{api_version}")
    return correlation_id, body


def encode_unsupported_api_versions_response(
    correlation_id: int, advertised: Mapping[int, tuple[int, int]] | None = None
) -> bytes:
    """The answer to an ApiVersions request of a version Flux does not support.

    Like Kafka: response header v0 and a v0 body with error 35 (UNSUPPORTED_VERSION) listing
    the version ranges (``advertised``, by default ``SUPPORTED_VERSIONS``), so the client can
    retry with an ApiVersions version both sides know.
    """
    versions = SUPPORTED_VERSIONS if advertised is None else advertised
    body = {
        "error_code": _UNSUPPORTED_VERSION,
        "api_keys": [
            {"api_key": int(key), "min_version": low, "max_version": high}
            for key, (low, high) in sorted(versions.items())
        ],
    }
    parts: list[Any] = [b"", p.INT32.pack(correlation_id)]
    RESPONSES[ApiKey.API_VERSIONS].encode_into(parts, 0, body)
    return _framed(parts)


# ------------------------------------------------------------------------------- helpers


def _encode_body(
    parts: list[Any], message: Message, api_version: int, body: dict[str, Any]
) -> None:
    try:
        message.encode_into(parts, api_version, body)
    except EncodeError as exc:
        raise EncodeError((f"{message.name} v{api_version}", *exc.path), exc.reason) from None


def _framed(parts: list[Any]) -> bytes:
    """Join parts whose first element is a placeholder for the size prefix."""
    size = sum(len(part) for part in parts)
    parts[0] = p.INT32.pack(size)
    return b"".join(parts)
