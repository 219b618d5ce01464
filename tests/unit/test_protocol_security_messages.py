"""Descriptions of the SASL, ACL and SCRAM messages: round trips of every version, and literals.

The representative bodies give every field of the message; a field that a version does not have
carries its default there, so a round trip at any version gives the body back unchanged.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable
from typing import Any

import pytest
from flux.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)
from flux.protocol.errors import InvalidFrameError
from flux.protocol.messages import (
    ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
    ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
    CREATE_ACLS_REQUEST,
    CREATE_ACLS_RESPONSE,
    DELETE_ACLS_REQUEST,
    DELETE_ACLS_RESPONSE,
    DESCRIBE_ACLS_REQUEST,
    DESCRIBE_ACLS_RESPONSE,
    DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
    DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
    REQUESTS,
    RESPONSES,
    SASL_AUTHENTICATE_REQUEST,
    SASL_AUTHENTICATE_RESPONSE,
    SASL_HANDSHAKE_REQUEST,
    SASL_HANDSHAKE_RESPONSE,
)
from flux.protocol.schema import EncodeError, Message

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

Body = dict[str, Any]

# Kafka's codes and enums used below.
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
INVALID_REQUEST = 42
SASL_AUTHENTICATION_FAILED = 58
RESOURCE_NOT_FOUND = 91
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
READ, WRITE, ALTER = 3, 4, 7
DENY, ALLOW = 2, 3
SCRAM_SHA_256, SCRAM_SHA_512 = 1, 2


def h(text: str) -> bytes:
    """Hex with spaces and | separators allowed, for readable literals."""
    return bytes.fromhex(text.replace("|", " "))


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def decode(message: Message, version: int, raw: bytes) -> Body:
    body, end = message.decode(memoryview(raw), 0, version)
    assert end == len(raw)
    return body


# ------------------------------------------------------------------ representative bodies

PLAIN_TOKEN = b"\x00user\x00pass"


def sasl_handshake_requests(version: int) -> list[Body]:
    return [{"mechanism": "SCRAM-SHA-256"}, {"mechanism": ""}]


def sasl_handshake_responses(version: int) -> list[Body]:
    return [
        {"error_code": 0, "mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]},
        {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": []},
    ]


def sasl_authenticate_requests(version: int) -> list[Body]:
    return [{"auth_bytes": PLAIN_TOKEN}, {"auth_bytes": b""}, {"auth_bytes": bytes(range(256)) * 3}]


def sasl_authenticate_responses(version: int) -> list[Body]:
    return [
        {
            "error_code": 0,
            "error_message": None,
            "auth_bytes": b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
            "session_lifetime_ms": 3_600_000 if version >= 1 else 0,
        },
        {
            "error_code": SASL_AUTHENTICATION_FAILED,
            "error_message": "Authentication failed: Invalid username or password",
            "auth_bytes": b"",
            "session_lifetime_ms": 0,
        },
    ]


def acl_filter(version: int, *, nulls: bool) -> Body:
    return {
        "resource_type_filter": TOPIC,
        "resource_name_filter": None if nulls else "orders",
        "pattern_type_filter": PREFIXED if version >= 1 else LITERAL,
        "principal_filter": None if nulls else "User:alice",
        "host_filter": None if nulls else "*",
        "operation": READ,
        "permission_type": ALLOW,
    }


def describe_acls_requests(version: int) -> list[Body]:
    return [acl_filter(version, nulls=False), acl_filter(version, nulls=True)]


def describe_acls_responses(version: int) -> list[Body]:
    alice = {"principal": "User:alice", "host": "*", "operation": READ, "permission_type": ALLOW}
    bob = {"principal": "User:bob", "host": "10.0.0.1", "operation": WRITE, "permission_type": DENY}
    return [
        {
            "throttle_time_ms": 12,
            "error_code": 0,
            "error_message": None,
            "resources": [
                {
                    "resource_type": TOPIC,
                    "resource_name": "orders",
                    "pattern_type": PREFIXED if version >= 1 else LITERAL,
                    "acls": [alice, bob],
                },
                {
                    "resource_type": GROUP,
                    "resource_name": "group-1",
                    "pattern_type": LITERAL,
                    "acls": [],
                },
            ],
        },
        {
            "throttle_time_ms": 0,
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Cluster authorization failed.",
            "resources": [],
        },
    ]


def create_acls_requests(version: int) -> list[Body]:
    return [
        {
            "creations": [
                {
                    "resource_type": TOPIC,
                    "resource_name": "orders",
                    "resource_pattern_type": PREFIXED if version >= 1 else LITERAL,
                    "principal": "User:alice",
                    "host": "*",
                    "operation": WRITE,
                    "permission_type": ALLOW,
                },
                {
                    "resource_type": CLUSTER,
                    "resource_name": "kafka-cluster",
                    "resource_pattern_type": LITERAL,
                    "principal": "User:admin",
                    "host": "*",
                    "operation": ALTER,
                    "permission_type": ALLOW,
                },
            ]
        },
        {"creations": []},
    ]


def create_acls_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 0,
            "results": [
                {"error_code": 0, "error_message": None},
                {"error_code": INVALID_REQUEST, "error_message": "Invalid principal"},
            ],
        },
        {"throttle_time_ms": 7, "results": []},
    ]


def delete_acls_requests(version: int) -> list[Body]:
    return [
        {"filters": [acl_filter(version, nulls=False), acl_filter(version, nulls=True)]},
        {"filters": []},
    ]


def delete_acls_responses(version: int) -> list[Body]:
    matching = {
        "error_code": 0,
        "error_message": None,
        "resource_type": TOPIC,
        "resource_name": "orders",
        "pattern_type": PREFIXED if version >= 1 else LITERAL,
        "principal": "User:alice",
        "host": "*",
        "operation": READ,
        "permission_type": ALLOW,
    }
    failed = matching | {"error_code": INVALID_REQUEST, "error_message": "gone"}
    return [
        {
            "throttle_time_ms": 5,
            "filter_results": [
                {"error_code": 0, "error_message": None, "matching_acls": [matching]},
                {"error_code": 0, "error_message": None, "matching_acls": [failed, matching]},
                {
                    "error_code": CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": "Cluster authorization failed.",
                    "matching_acls": [],
                },
            ],
        }
    ]


def describe_user_scram_credentials_requests(version: int) -> list[Body]:
    # Null and empty both mean every user, but they stay distinct on the wire.
    return [{"users": None}, {"users": []}, {"users": [{"name": "alice"}, {"name": "bob"}]}]


def describe_user_scram_credentials_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "results": [
                {
                    "user": "alice",
                    "error_code": 0,
                    "error_message": None,
                    "credential_infos": [
                        {"mechanism": SCRAM_SHA_256, "iterations": 4096},
                        {"mechanism": SCRAM_SHA_512, "iterations": 8192},
                    ],
                },
                {
                    "user": "nobody",
                    "error_code": RESOURCE_NOT_FOUND,
                    "error_message": "Attempt to describe a user credential that does not exist",
                    "credential_infos": [],
                },
            ],
        },
        {
            "throttle_time_ms": 3,
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Cluster authorization failed.",
            "results": [],
        },
    ]


def alter_user_scram_credentials_requests(version: int) -> list[Body]:
    return [
        {
            "deletions": [{"name": "bob", "mechanism": SCRAM_SHA_512}],
            "upsertions": [
                {
                    "name": "alice",
                    "mechanism": SCRAM_SHA_256,
                    "iterations": 4096,
                    "salt": bytes(range(16)),
                    "salted_password": bytes(range(32, 64)),
                },
                {
                    "name": "carol",
                    "mechanism": SCRAM_SHA_512,
                    "iterations": 8192,
                    "salt": b"",
                    "salted_password": b"\xff" * 200,
                },
            ],
        },
        {"deletions": [], "upsertions": []},
    ]


def alter_user_scram_credentials_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 0,
            "results": [
                {"user": "alice", "error_code": 0, "error_message": None},
                {"user": "bob", "error_code": RESOURCE_NOT_FOUND, "error_message": "no credential"},
            ],
        }
    ]


# (our message, its representative bodies, kafka-python's module and class for the same message)
CASES: list[tuple[Message, Callable[[int], list[Body]], str, str]] = [
    (SASL_HANDSHAKE_REQUEST, sasl_handshake_requests, "sasl", "SaslHandshakeRequest"),
    (SASL_HANDSHAKE_RESPONSE, sasl_handshake_responses, "sasl", "SaslHandshakeResponse"),
    (SASL_AUTHENTICATE_REQUEST, sasl_authenticate_requests, "sasl", "SaslAuthenticateRequest"),
    (SASL_AUTHENTICATE_RESPONSE, sasl_authenticate_responses, "sasl", "SaslAuthenticateResponse"),
    (DESCRIBE_ACLS_REQUEST, describe_acls_requests, "admin.acl", "DescribeAclsRequest"),
    (DESCRIBE_ACLS_RESPONSE, describe_acls_responses, "admin.acl", "DescribeAclsResponse"),
    (CREATE_ACLS_REQUEST, create_acls_requests, "admin.acl", "CreateAclsRequest"),
    (CREATE_ACLS_RESPONSE, create_acls_responses, "admin.acl", "CreateAclsResponse"),
    (DELETE_ACLS_REQUEST, delete_acls_requests, "admin.acl", "DeleteAclsRequest"),
    (DELETE_ACLS_RESPONSE, delete_acls_responses, "admin.acl", "DeleteAclsResponse"),
    (
        DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
        describe_user_scram_credentials_requests,
        "admin.users",
        "DescribeUserScramCredentialsRequest",
    ),
    (
        DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
        describe_user_scram_credentials_responses,
        "admin.users",
        "DescribeUserScramCredentialsResponse",
    ),
    (
        ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
        alter_user_scram_credentials_requests,
        "admin.users",
        "AlterUserScramCredentialsRequest",
    ),
    (
        ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
        alter_user_scram_credentials_responses,
        "admin.users",
        "AlterUserScramCredentialsResponse",
    ),
]

VERSION_CASES = [
    pytest.param(message, bodies, module, name, version, id=f"{message.name}-v{version}")
    for message, bodies, module, name in CASES
    for version in range(message.valid_versions.low, message.valid_versions.high + 1)
]


@pytest.mark.parametrize(("message", "bodies", "module", "name", "version"), VERSION_CASES)
def test_every_version_round_trips(
    message: Message, bodies: Callable[[int], list[Body]], module: str, name: str, version: int
) -> None:
    for body in bodies(version):
        raw = message.encode(version, body)
        decoded = decode(message, version, raw)
        assert decoded == body
        assert message.encode(version, decoded) == raw
    # An empty body encodes the defaults, and decodes to the message's default body.
    assert decode(message, version, message.encode(version, {})) == message.default_body()


@pytest.mark.parametrize(("message", "bodies", "module", "name", "version"), VERSION_CASES)
def test_kafka_python_reads_and_rewrites_every_version(
    message: Message, bodies: Callable[[int], list[Body]], module: str, name: str, version: int
) -> None:
    # kafka-python 3 generates its codec from Kafka's own JSON definitions: an independent
    # reading of the same schemas. (Kafka 4 dropped the ACL APIs' v0, but its JSON still
    # describes every field from v0, so kafka-python reads v0 too.)
    theirs = getattr(importlib.import_module(f"kafka.protocol.{module}"), name)
    for body in bodies(version):
        raw = message.encode(version, body)
        decoded = theirs.decode(raw, version=version, header=False)
        # Their dict has only the fields of this version; ours has all, with defaults.
        assert_contains(body, decoded.to_dict(json=False))
        assert bytes(decoded.encode(header=False, framed=False)) == raw


def assert_contains(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, dict):
        assert set(theirs) <= set(ours)
        for key, value in theirs.items():
            assert_contains(ours[key], value)
    elif isinstance(theirs, list):
        assert len(theirs) == len(ours)
        for mine, other in zip(ours, theirs, strict=True):
            assert_contains(mine, other)
    else:
        assert theirs == ours


# ------------------------------------------------------------------------------ registry

NEW_APIS = {
    ApiKey.SASL_HANDSHAKE: (SASL_HANDSHAKE_REQUEST, SASL_HANDSHAKE_RESPONSE, (0, 1), None),
    ApiKey.SASL_AUTHENTICATE: (SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE, (0, 2), 2),
    ApiKey.DESCRIBE_ACLS: (DESCRIBE_ACLS_REQUEST, DESCRIBE_ACLS_RESPONSE, (0, 3), 2),
    ApiKey.CREATE_ACLS: (CREATE_ACLS_REQUEST, CREATE_ACLS_RESPONSE, (0, 3), 2),
    ApiKey.DELETE_ACLS: (DELETE_ACLS_REQUEST, DELETE_ACLS_RESPONSE, (0, 3), 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (
        DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
        DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
        (0, 0),
        0,
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (
        ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
        ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
        (0, 0),
        0,
    ),
}


@pytest.mark.parametrize("api_key", list(NEW_APIS), ids=lambda key: ApiKey(key).name)
def test_messages_are_registered_with_their_versions(api_key: int) -> None:
    request, response, (low, high), first_flexible = NEW_APIS[api_key]
    assert REQUESTS[api_key] is request
    assert RESPONSES[api_key] is response
    for message in (request, response):
        assert message.api_key == api_key
        assert (message.valid_versions.low, message.valid_versions.high) == (low, high)
        for version in range(low, high + 1):
            flexible = first_flexible is not None and version >= first_flexible
            assert message.is_flexible(version) is flexible
            assert request_header_version(api_key, version) == (2 if flexible else 1)
            assert response_header_version(api_key, version) == (1 if flexible else 0)
        with pytest.raises(ValueError):
            message.plan(high + 1)


# ------------------------------------------------------------------------- SaslHandshake


def test_sasl_handshake_v1_request_literal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Header v1 (not flexible): api_key 17, version 1, correlation id 7, client id "c";
    # then the mechanism as an int16-length string.
    frame = h("0011 0001 | 00000007 | 0001 63 | 0005 504c41494e")
    body = {"mechanism": "PLAIN"}
    assert SASL_HANDSHAKE_REQUEST.encode(1, body) == h("0005 504c41494e")
    assert SASL_HANDSHAKE_REQUEST.encode(0, body) == h("0005 504c41494e")

    # The codec only frames APIs the broker serves; pretend it serves this one.
    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.SASL_HANDSHAKE, (0, 1))
    assert encode_request(17, 1, 7, "c", body) == sized(frame)
    assert decode_request(frame) == (RequestHeader(17, 1, 7, "c"), body)


def test_sasl_handshake_response_literal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Error 33 and the one mechanism the broker enables; response header v0 (no tag section).
    body_bytes = h("0021 | 00000001 | 0005 504c41494e")
    body = {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["PLAIN"]}
    for version in (0, 1):
        assert SASL_HANDSHAKE_RESPONSE.encode(version, body) == body_bytes
        assert decode(SASL_HANDSHAKE_RESPONSE, version, body_bytes) == body

    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.SASL_HANDSHAKE, (0, 1))
    frame = h("00000007") + body_bytes
    assert encode_response(RequestHeader(17, 1, 7, "c"), body) == sized(frame)
    assert decode_response(17, 1, frame) == (7, body)


def test_sasl_handshake_mechanism_is_not_nullable() -> None:
    with pytest.raises(EncodeError, match="mechanism"):
        SASL_HANDSHAKE_REQUEST.encode(1, {"mechanism": None})


# ---------------------------------------------------------------------- SaslAuthenticate


def test_sasl_authenticate_v0_and_v1_requests_use_int32_lengths() -> None:
    raw = h("0000000a | 00 75736572 00 70617373")
    for version in (0, 1):
        assert SASL_AUTHENTICATE_REQUEST.encode(version, {"auth_bytes": PLAIN_TOKEN}) == raw


def test_sasl_authenticate_v2_request_literal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Compact bytes: unsigned varint of length + 1 (10 bytes -> 0x0b), then the body's empty
    # tagged-field section. Request header v2: header v1 plus its own empty tag section.
    body_bytes = h("0b | 00 75736572 00 70617373 | 00")
    frame = h("0024 0002 | 0000002a | 0001 63 | 00") + body_bytes
    body = {"auth_bytes": PLAIN_TOKEN}
    assert SASL_AUTHENTICATE_REQUEST.encode(2, body) == body_bytes
    assert decode(SASL_AUTHENTICATE_REQUEST, 2, body_bytes) == body

    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.SASL_AUTHENTICATE, (0, 2))
    assert encode_request(36, 2, 42, "c", body) == sized(frame)
    assert decode_request(frame) == (RequestHeader(36, 2, 42, "c"), body)


def test_sasl_authenticate_v2_response_literal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Error 0, null message (compact: 0x00), empty bytes (compact: 0x01), lifetime, no tags.
    body = {"error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 1000}
    body_bytes = h("0000 | 00 | 01 | 00000000000003e8 | 00")
    assert SASL_AUTHENTICATE_RESPONSE.encode(2, body) == body_bytes

    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.SASL_AUTHENTICATE, (0, 2))
    # Response header v1: the correlation id and an empty tagged-field section.
    frame = h("00000009 | 00") + body_bytes
    assert encode_response(RequestHeader(36, 2, 9, None), body) == sized(frame)
    assert decode_response(36, 2, frame) == (9, body)


def test_sasl_authenticate_session_lifetime_starts_at_v1() -> None:
    body = {"error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 5}
    v0 = SASL_AUTHENTICATE_RESPONSE.encode(0, body)
    assert v0 == h("0000 | ffff | 00000000")
    assert decode(SASL_AUTHENTICATE_RESPONSE, 0, v0)["session_lifetime_ms"] == 0
    v1 = SASL_AUTHENTICATE_RESPONSE.encode(1, body)
    assert v1 == h("0000 | ffff | 00000000 | 0000000000000005")
    assert decode(SASL_AUTHENTICATE_RESPONSE, 1, v1) == body
    assert SASL_AUTHENTICATE_RESPONSE.default_body() == {
        "error_code": 0,
        "error_message": None,
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }


def test_sasl_authenticate_v2_skips_unknown_tagged_fields() -> None:
    # One tagged field: tag 5, two bytes.
    raw = h("0b | 00 75736572 00 70617373 | 01 | 05 02 abcd")
    assert decode(SASL_AUTHENTICATE_REQUEST, 2, raw) == {"auth_bytes": PLAIN_TOKEN}


def test_sasl_authenticate_auth_bytes_are_not_nullable() -> None:
    for version in (0, 1, 2):
        with pytest.raises(EncodeError, match="auth_bytes"):
            SASL_AUTHENTICATE_REQUEST.encode(version, {"auth_bytes": None})
    with pytest.raises(InvalidFrameError):
        SASL_AUTHENTICATE_REQUEST.decode(memoryview(h("ffffffff")), 0, 0)
    with pytest.raises(InvalidFrameError):
        SASL_AUTHENTICATE_REQUEST.decode(memoryview(h("00 00")), 0, 2)


# ----------------------------------------------------------------------------------- ACLs


def test_describe_acls_request_literals_and_pattern_type_from_v1() -> None:
    body = acl_filter(1, nulls=True) | {"pattern_type_filter": 1}  # ANY
    v0 = DESCRIBE_ACLS_REQUEST.encode(0, body)
    assert v0 == h("02 | ffff | ffff | ffff | 03 | 03")
    assert decode(DESCRIBE_ACLS_REQUEST, 0, v0)["pattern_type_filter"] == LITERAL
    assert DESCRIBE_ACLS_REQUEST.encode(1, body) == h("02 | ffff | 01 | ffff | ffff | 03 | 03")
    # Flexible: compact nullable strings (null -> 0x00) and a trailing tagged-field section.
    assert DESCRIBE_ACLS_REQUEST.encode(2, body) == h("02 | 00 | 01 | 00 | 00 | 03 | 03 | 00")
    assert DESCRIBE_ACLS_REQUEST.encode(3, body | {"host_filter": "h"}) == h(
        "02 | 00 | 01 | 00 | 02 68 | 03 | 03 | 00"
    )


def test_create_acls_response_literals() -> None:
    body = {"throttle_time_ms": 1, "results": [{"error_code": 0, "error_message": None}]}
    assert CREATE_ACLS_RESPONSE.encode(1, body) == h("00000001 | 00000001 | 0000 ffff")
    # Compact array of one (0x02); the struct and the message each end with a tag section.
    assert CREATE_ACLS_RESPONSE.encode(2, body) == h("00000001 | 02 | 0000 00 00 | 00")


def test_acl_strings_outside_filters_are_not_nullable() -> None:
    creation = {"resource_type": TOPIC, "resource_name": None, "principal": "User:a", "host": "*"}
    with pytest.raises(EncodeError, match="resource_name"):
        CREATE_ACLS_REQUEST.encode(2, {"creations": [creation]})
    with pytest.raises(EncodeError, match="principal"):
        DESCRIBE_ACLS_RESPONSE.encode(
            3, {"resources": [{"resource_name": "t", "acls": [{"principal": None}]}]}
        )


def test_acl_pattern_types_default_to_literal() -> None:
    assert DESCRIBE_ACLS_REQUEST.default_body()["pattern_type_filter"] == LITERAL
    raw = CREATE_ACLS_REQUEST.encode(0, {"creations": [{}]})
    assert decode(CREATE_ACLS_REQUEST, 0, raw)["creations"][0]["resource_pattern_type"] == LITERAL
    raw = DELETE_ACLS_REQUEST.encode(3, {"filters": [{}]})
    assert decode(DELETE_ACLS_REQUEST, 3, raw)["filters"] == [
        {
            "resource_type_filter": 0,
            "resource_name_filter": None,
            "pattern_type_filter": LITERAL,
            "principal_filter": None,
            "host_filter": None,
            "operation": 0,
            "permission_type": 0,
        }
    ]


# ------------------------------------------------------------------------ SCRAM credentials


def test_describe_user_scram_credentials_request_literals() -> None:
    # A null array is a compact length of 0, an empty one 1.
    encode = DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST.encode
    assert encode(0, {"users": None}) == h("00 | 00")
    assert encode(0, {"users": []}) == h("01 | 00")
    assert encode(0, {"users": [{"name": "al"}]}) == h("02 | 03 616c 00 | 00")
    assert DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST.default_body() == {"users": []}


def test_alter_user_scram_credentials_upsertion_literal() -> None:
    upsertion = {
        "name": "a",
        "mechanism": SCRAM_SHA_256,
        "iterations": 4096,
        "salt": b"\x01\x02",
        "salted_password": b"\x03",
    }
    request = {"deletions": [], "upsertions": [upsertion]}
    raw = h("01 | 02 | 02 61 | 01 | 00001000 | 03 0102 | 02 03 | 00 | 00")
    assert ALTER_USER_SCRAM_CREDENTIALS_REQUEST.encode(0, request) == raw
    assert decode(ALTER_USER_SCRAM_CREDENTIALS_REQUEST, 0, raw) == request
    assert ALTER_USER_SCRAM_CREDENTIALS_REQUEST.encode(0, {}) == h("01 01 00")
    with pytest.raises(EncodeError, match="salt"):
        ALTER_USER_SCRAM_CREDENTIALS_REQUEST.encode(0, {"upsertions": [upsertion | {"salt": None}]})
