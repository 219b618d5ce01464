"""Descriptions of the replica admin messages: round trips of every version, and literals.

DescribeLogDirs, ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments are
described but not served yet: they are in ``REQUESTS``/``RESPONSES`` and absent from
``SUPPORTED_VERSIONS``.

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
from flux.protocol.errors import UnsupportedVersionError
from flux.protocol.messages import (
    ALTER_PARTITION_REASSIGNMENTS_REQUEST,
    ALTER_PARTITION_REASSIGNMENTS_RESPONSE,
    DESCRIBE_LOG_DIRS_REQUEST,
    DESCRIBE_LOG_DIRS_RESPONSE,
    ELECT_LEADERS_REQUEST,
    ELECT_LEADERS_RESPONSE,
    LIST_PARTITION_REASSIGNMENTS_REQUEST,
    LIST_PARTITION_REASSIGNMENTS_RESPONSE,
    REQUESTS,
    RESPONSES,
)
from flux.protocol.schema import EncodeError, Field, Message, VersionRange

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

Body = dict[str, Any]

# Kafka's codes used below.
UNKNOWN_TOPIC_OR_PARTITION = 3
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REPLICA_ASSIGNMENT = 39
KAFKA_STORAGE_ERROR = 56
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85


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


def describe_log_dirs_requests(version: int) -> list[Body]:
    return [
        {
            "topics": [
                {"topic": "orders", "partitions": [0, 1, 2]},
                {"topic": "audit", "partitions": []},
            ]
        },
        {"topics": None},
        {"topics": []},
    ]


def describe_log_dirs_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 3,
            "error_code": 0,
            "results": [
                {
                    "error_code": 0,
                    "log_dir": "/var/lib/flux/data-0",
                    "topics": [
                        {
                            "name": "orders",
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "partition_size": 1_048_576,
                                    "offset_lag": 0,
                                    "is_future_key": False,
                                },
                                {
                                    "partition_index": 2,
                                    "partition_size": 4096,
                                    "offset_lag": 17,
                                    "is_future_key": True,
                                },
                            ],
                        },
                        {"name": "audit", "partitions": []},
                    ],
                    "total_bytes": 500_000_000_000 if version >= 4 else -1,
                    "usable_bytes": 123_456_789_012 if version >= 4 else -1,
                    "is_cordoned": version >= 5,
                },
                {
                    "error_code": KAFKA_STORAGE_ERROR,
                    "log_dir": "/var/lib/flux/data-1",
                    "topics": [],
                    "total_bytes": -1,
                    "usable_bytes": -1,
                    "is_cordoned": False,
                },
            ],
        },
        {
            "throttle_time_ms": 0,
            "error_code": CLUSTER_AUTHORIZATION_FAILED if version >= 3 else 0,
            "results": [],
        },
    ]


def elect_leaders_requests(version: int) -> list[Body]:
    return [
        {
            "election_type": 1 if version >= 1 else 0,
            "topic_partitions": [
                {"topic": "orders", "partitions": [0, 1]},
                {"topic": "audit", "partitions": []},
            ],
            "timeout_ms": 30_000,
        },
        # Null: every partition.
        {"election_type": 0, "topic_partitions": None, "timeout_ms": 60_000},
        {"election_type": 0, "topic_partitions": [], "timeout_ms": 0},
    ]


def elect_leaders_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 2,
            "error_code": 0,
            "replica_election_results": [
                {
                    "topic": "orders",
                    "partition_result": [
                        {"partition_id": 0, "error_code": 0, "error_message": None},
                        {
                            "partition_id": 1,
                            "error_code": ELECTION_NOT_NEEDED,
                            "error_message": "Leader election not needed for topic partition.",
                        },
                        {
                            "partition_id": 2,
                            "error_code": ELIGIBLE_LEADERS_NOT_AVAILABLE,
                            "error_message": "",
                        },
                    ],
                },
                {"topic": "audit", "partition_result": []},
            ],
        },
        {
            "throttle_time_ms": 0,
            "error_code": CLUSTER_AUTHORIZATION_FAILED if version >= 1 else 0,
            "replica_election_results": [],
        },
    ]


def alter_partition_reassignments_requests(version: int) -> list[Body]:
    return [
        {
            "timeout_ms": 30_000,
            "allow_replication_factor_change": version < 1,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {"partition_index": 0, "replicas": [1, 2, 3]},
                        # Null replicas: cancel the pending reassignment.
                        {"partition_index": 1, "replicas": None},
                        {"partition_index": 2, "replicas": []},
                    ],
                },
                {"name": "audit", "partitions": []},
            ],
        },
        {"timeout_ms": 60_000, "allow_replication_factor_change": True, "topics": []},
    ]


def alter_partition_reassignments_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 1,
            "allow_replication_factor_change": version < 1,
            "error_code": 0,
            "error_message": None,
            "responses": [
                {
                    "name": "orders",
                    "partitions": [
                        {"partition_index": 0, "error_code": 0, "error_message": None},
                        {
                            "partition_index": 1,
                            "error_code": NO_REASSIGNMENT_IN_PROGRESS,
                            "error_message": "no reassignment in progress",
                        },
                        {
                            "partition_index": 2,
                            "error_code": INVALID_REPLICA_ASSIGNMENT,
                            "error_message": "",
                        },
                    ],
                },
                {"name": "audit", "partitions": []},
            ],
        },
        {
            "throttle_time_ms": 0,
            "allow_replication_factor_change": True,
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Cluster authorization failed.",
            "responses": [],
        },
    ]


def list_partition_reassignments_requests(version: int) -> list[Body]:
    return [
        {
            "timeout_ms": 30_000,
            "topics": [
                {"name": "orders", "partition_indexes": [0, 1]},
                {"name": "audit", "partition_indexes": []},
            ],
        },
        # Null (the default): every ongoing reassignment.
        {"timeout_ms": 60_000, "topics": None},
        {"timeout_ms": 0, "topics": []},
    ]


def list_partition_reassignments_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "replicas": [1, 2, 3, 4],
                            "adding_replicas": [4],
                            "removing_replicas": [1],
                        },
                        {
                            "partition_index": 1,
                            "replicas": [],
                            "adding_replicas": [],
                            "removing_replicas": [],
                        },
                    ],
                },
                {"name": "audit", "partitions": []},
            ],
        },
        {
            "throttle_time_ms": 5,
            "error_code": UNKNOWN_TOPIC_OR_PARTITION,
            "error_message": "unknown topic",
            "topics": [],
        },
    ]


# (our message, its representative bodies, kafka-python's module and class for the same message)
CASES: list[tuple[Message, Callable[[int], list[Body]], str, str]] = [
    (
        DESCRIBE_LOG_DIRS_REQUEST,
        describe_log_dirs_requests,
        "admin.cluster",
        "DescribeLogDirsRequest",
    ),
    (
        DESCRIBE_LOG_DIRS_RESPONSE,
        describe_log_dirs_responses,
        "admin.cluster",
        "DescribeLogDirsResponse",
    ),
    (ELECT_LEADERS_REQUEST, elect_leaders_requests, "admin.topics", "ElectLeadersRequest"),
    (ELECT_LEADERS_RESPONSE, elect_leaders_responses, "admin.topics", "ElectLeadersResponse"),
    (
        ALTER_PARTITION_REASSIGNMENTS_REQUEST,
        alter_partition_reassignments_requests,
        "admin.topics",
        "AlterPartitionReassignmentsRequest",
    ),
    (
        ALTER_PARTITION_REASSIGNMENTS_RESPONSE,
        alter_partition_reassignments_responses,
        "admin.topics",
        "AlterPartitionReassignmentsResponse",
    ),
    (
        LIST_PARTITION_REASSIGNMENTS_REQUEST,
        list_partition_reassignments_requests,
        "admin.topics",
        "ListPartitionReassignmentsRequest",
    ),
    (
        LIST_PARTITION_REASSIGNMENTS_RESPONSE,
        list_partition_reassignments_responses,
        "admin.topics",
        "ListPartitionReassignmentsResponse",
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
        assert set(body) == set(message.default_body())  # every field is given
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
    # reading of the same schemas. (Kafka 4 dropped DescribeLogDirs v0, but its JSON still
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


# ---------------------------------------------------------------- against Kafka's own JSON


def _range(text: str | None) -> VersionRange:
    return VersionRange.parse(text)


def _json_default(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):  # IsCordoned's default is a JSON boolean
        return "true" if value else "false"
    return str(value)


def _our_default(spec: Field) -> str | None:
    return spec.default if isinstance(spec.default, str) else None


def assert_fields_match(ours: tuple[Field, ...], theirs: list[dict[str, Any]], path: str) -> None:
    assert [spec.name for spec in ours] == [spec["name"] for spec in theirs], path
    for spec, json_spec in zip(ours, theirs, strict=True):
        where = f"{path}.{spec.name}"
        assert spec.type == json_spec["type"], where
        assert spec.versions == _range(json_spec["versions"]), where
        assert spec.nullable_versions == _range(json_spec.get("nullableVersions")), where
        assert spec.tag == json_spec.get("tag"), where
        assert spec.tagged_versions == _range(json_spec.get("taggedVersions")), where
        assert _our_default(spec) == _json_default(json_spec.get("default")), where
        assert_fields_match(spec.fields, json_spec.get("fields", []), where)


@pytest.mark.parametrize(
    "message", [case[0] for case in CASES], ids=[case[0].name for case in CASES]
)
def test_descriptions_match_kafkas_json(message: Message) -> None:
    # kafka-python bundles Kafka's current JSON definitions.
    load_json = importlib.import_module("kafka.protocol.schemas").load_json
    schema = load_json(message.name)
    assert message.api_key == schema["apiKey"]
    valid = _range(schema["validVersions"])
    # Kafka 4 dropped DescribeLogDirs v0 (v1 is the same on the wire); Flux keeps it.
    low = 0 if message.name.startswith("DescribeLogDirs") else valid.low
    assert message.valid_versions == VersionRange(low, valid.high)
    for version in range(low, valid.high + 1):
        assert message.is_flexible(version) is (version in _range(schema["flexibleVersions"]))
    assert_fields_match(message.fields, schema["fields"], message.name)


# ------------------------------------------------------------------------------ registry

# api key: (request, response, (lowest, highest version), first flexible version)
NEW_APIS = {
    ApiKey.DESCRIBE_LOG_DIRS: (DESCRIBE_LOG_DIRS_REQUEST, DESCRIBE_LOG_DIRS_RESPONSE, (0, 5), 2),
    ApiKey.ELECT_LEADERS: (ELECT_LEADERS_REQUEST, ELECT_LEADERS_RESPONSE, (0, 2), 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (
        ALTER_PARTITION_REASSIGNMENTS_REQUEST,
        ALTER_PARTITION_REASSIGNMENTS_RESPONSE,
        (0, 1),
        0,
    ),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (
        LIST_PARTITION_REASSIGNMENTS_REQUEST,
        LIST_PARTITION_REASSIGNMENTS_RESPONSE,
        (0, 0),
        0,
    ),
}

NEW_API_VERSIONS = [
    pytest.param(api_key, version, id=f"{ApiKey(api_key).name}-v{version}")
    for api_key, (_, _, (low, high), _) in NEW_APIS.items()
    for version in range(low, high + 1)
]


@pytest.mark.parametrize("api_key", list(NEW_APIS), ids=lambda key: ApiKey(key).name)
def test_messages_are_registered_with_their_versions(api_key: int) -> None:
    request, response, (low, high), first_flexible = NEW_APIS[api_key]
    assert REQUESTS[api_key] is request
    assert RESPONSES[api_key] is response
    for message in (request, response):
        assert message.api_key == api_key
        assert (message.valid_versions.low, message.valid_versions.high) == (low, high)
        for version in range(low, high + 1):
            flexible = version >= first_flexible
            assert message.is_flexible(version) is flexible
            assert request_header_version(api_key, version) == (2 if flexible else 1)
            assert response_header_version(api_key, version) == (1 if flexible else 0)
        with pytest.raises(ValueError):
            message.plan(high + 1)


#: The admin APIs the broker serves, and the versions it serves them in.
SERVED = {
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
}


def test_served_admin_apis() -> None:
    # Every admin API the codec describes has a handler serving it, in these versions.
    assert set(NEW_APIS) == set(SERVED)
    for api_key, versions in SERVED.items():
        assert SUPPORTED_VERSIONS[api_key] == versions


#: Versions the codec describes (the schema's range) above what the broker serves.
UNSERVED_VERSIONS = [
    pytest.param(api_key, version, id=f"{ApiKey(api_key).name}-v{version}")
    for api_key, (_, _, (_, high), _) in NEW_APIS.items()
    for version in range(SERVED[api_key][1] + 1, high + 1)
]


def test_some_described_versions_are_not_served() -> None:
    # The test below must check something: DescribeLogDirs v5 is described, not served.
    assert UNSERVED_VERSIONS


@pytest.mark.parametrize(("api_key", "version"), UNSERVED_VERSIONS)
def test_described_versions_not_served_are_refused(api_key: int, version: int) -> None:
    # Described, but nobody may advertise them (ApiVersions) before a handler serves them.
    assert version > SUPPORTED_VERSIONS[api_key][1]
    request, response, _, _ = NEW_APIS[api_key]
    # So the codec refuses them, with the correlation id for the error answer...
    header = h("ffff") + (b"\x00" if request.is_flexible(version) else b"")
    frame = struct.pack(">hhi", api_key, version, 77) + header + request.encode(version, {})
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(frame)
    assert caught.value.correlation_id == 77
    assert (caught.value.api_key, caught.value.api_version) == (api_key, version)
    with pytest.raises(UnsupportedVersionError):
        encode_request(api_key, version, 77, None, {})
    with pytest.raises(UnsupportedVersionError):
        encode_response(RequestHeader(api_key, version, 77, None), {})
    with pytest.raises(UnsupportedVersionError):
        decode_response(api_key, version, h("0000004d") + response.encode(version, {}))


@pytest.mark.parametrize(("api_key", "version"), NEW_API_VERSIONS)
def test_frames_decode_once_the_api_is_served(
    api_key: int, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The codec frames only APIs the broker serves; pretend it serves this one.
    request, response, (low, high), _ = NEW_APIS[api_key]
    monkeypatch.setitem(SUPPORTED_VERSIONS, api_key, (low, high))
    bodies = {message: bodies for message, bodies, _, _ in CASES}
    for body in bodies[request](version):
        frame = encode_request(api_key, version, 11, "client", body)
        assert decode_request(frame[4:]) == (RequestHeader(api_key, version, 11, "client"), body)
    header = RequestHeader(api_key, version, 12, "client")
    for body in bodies[response](version):
        frame = encode_response(header, body)
        assert decode_response(api_key, version, frame[4:]) == (12, body)


# ----------------------------------------------------------------------- DescribeLogDirs


def test_describe_log_dirs_request_literals(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"topics": [{"topic": "t", "partitions": [0, 1]}]}
    v0 = h("00000001 | 0001 74 | 00000002 00000000 00000001")
    for version in (0, 1):
        assert DESCRIBE_LOG_DIRS_REQUEST.encode(version, body) == v0
        assert decode(DESCRIBE_LOG_DIRS_REQUEST, version, v0) == body
    # Null topics (every topic): length -1, then 0x00 once flexible.
    assert DESCRIBE_LOG_DIRS_REQUEST.encode(1, {"topics": None}) == h("ffffffff")
    assert decode(DESCRIBE_LOG_DIRS_REQUEST, 0, h("ffffffff")) == {"topics": None}
    assert DESCRIBE_LOG_DIRS_REQUEST.encode(2, {"topics": None}) == h("00 | 00")
    v2 = h("02 | 02 74 | 03 00000000 00000001 | 00 | 00")
    for version in (2, 3, 4, 5):
        assert DESCRIBE_LOG_DIRS_REQUEST.encode(version, body) == v2
        assert decode(DESCRIBE_LOG_DIRS_REQUEST, version, v2) == body

    # Request header v2 (flexible): api_key 35, version 4, correlation id 5, client id "c".
    frame = h("0023 0004 | 00000005 | 0001 63 | 00") + v2
    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.DESCRIBE_LOG_DIRS, (0, 5))
    assert encode_request(35, 4, 5, "c", body) == sized(frame)
    assert decode_request(frame) == (RequestHeader(35, 4, 5, "c"), body)


def test_describe_log_dirs_response_literals(monkeypatch: pytest.MonkeyPatch) -> None:
    partition = {
        "partition_index": 0,
        "partition_size": 1024,
        "offset_lag": 2,
        "is_future_key": True,
    }
    result = {
        "error_code": 0,
        "log_dir": "/d",
        "topics": [{"name": "t", "partitions": [partition]}],
        "total_bytes": 4096,
        "usable_bytes": 2048,
        "is_cordoned": True,
    }
    body = {"throttle_time_ms": 0, "error_code": KAFKA_STORAGE_ERROR, "results": [result]}
    partition_bytes = "00000000 | 0000000000000400 | 0000000000000002 | 01"
    v0 = h(
        "00000000 | 00000001 | 0000 | 0002 2f64 | 00000001 | 0001 74 | 00000001|" + partition_bytes
    )
    old = {"throttle_time_ms": 0, "error_code": 0}
    old_result = {"total_bytes": -1, "usable_bytes": -1, "is_cordoned": False}
    for version in (0, 1):
        assert DESCRIBE_LOG_DIRS_RESPONSE.encode(version, body) == v0
        assert decode(DESCRIBE_LOG_DIRS_RESPONSE, version, v0) == old | {
            "results": [result | old_result]
        }
    flexible = "02 | 0000 | 03 2f64 | 02 | 02 74 | 02 |" + partition_bytes + "| 00 | 00"
    v2 = h("00000000 |" + flexible + "| 00 | 00")
    assert DESCRIBE_LOG_DIRS_RESPONSE.encode(2, body) == v2
    # v3: the top-level error code.
    v3 = h("00000000 | 0038 |" + flexible + "| 00 | 00")
    assert DESCRIBE_LOG_DIRS_RESPONSE.encode(3, body) == v3
    assert decode(DESCRIBE_LOG_DIRS_RESPONSE, 3, v3) == body | {"results": [result | old_result]}
    # v4: the volume's total and usable bytes; v5: the cordoned flag.
    v4 = h("00000000 | 0038 |" + flexible + "| 0000000000001000 | 0000000000000800 | 00 | 00")
    assert DESCRIBE_LOG_DIRS_RESPONSE.encode(4, body) == v4
    assert decode(DESCRIBE_LOG_DIRS_RESPONSE, 4, v4) == body | {
        "results": [result | {"is_cordoned": False}]
    }
    v5 = h("00000000 | 0038 |" + flexible + "| 0000000000001000 | 0000000000000800 | 01 | 00 | 00")
    assert DESCRIBE_LOG_DIRS_RESPONSE.encode(5, body) == v5
    assert decode(DESCRIBE_LOG_DIRS_RESPONSE, 5, v5) == body

    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.DESCRIBE_LOG_DIRS, (0, 5))
    # Response header v0 for v0-1 (no tag section), v1 from v2.
    expected_v1 = old | {"results": [result | old_result]}
    frame = h("00000009") + v0
    assert encode_response(RequestHeader(35, 1, 9, None), body) == sized(frame)
    assert decode_response(35, 1, frame) == (9, expected_v1)
    frame = h("00000009 | 00") + v5
    assert encode_response(RequestHeader(35, 5, 9, None), body) == sized(frame)
    assert decode_response(35, 5, frame) == (9, body)


# -------------------------------------------------------------------------- ElectLeaders


def test_elect_leaders_request_literals(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {
        "election_type": 1,
        "topic_partitions": [{"topic": "t", "partitions": [0]}],
        "timeout_ms": 60_000,
    }
    v0 = h("00000001 | 0001 74 | 00000001 00000000 | 0000ea60")
    assert ELECT_LEADERS_REQUEST.encode(0, body) == v0
    assert decode(ELECT_LEADERS_REQUEST, 0, v0) == body | {"election_type": 0}
    # v1: the election type (0 preferred, 1 unclean) comes first.
    v1 = h("01 | 00000001 | 0001 74 | 00000001 00000000 | 0000ea60")
    assert ELECT_LEADERS_REQUEST.encode(1, body) == v1
    assert decode(ELECT_LEADERS_REQUEST, 1, v1) == body
    v2 = h("01 | 02 | 02 74 | 02 00000000 | 00 | 0000ea60 | 00")
    assert ELECT_LEADERS_REQUEST.encode(2, body) == v2
    assert decode(ELECT_LEADERS_REQUEST, 2, v2) == body
    # Null topic partitions (every partition); the timeout defaults to 60s.
    everything = {"election_type": 0, "topic_partitions": None}
    assert ELECT_LEADERS_REQUEST.encode(1, everything) == h("00 | ffffffff | 0000ea60")
    assert ELECT_LEADERS_REQUEST.encode(2, everything) == h("00 | 00 | 0000ea60 | 00")
    assert decode(ELECT_LEADERS_REQUEST, 2, h("00 | 00 | 0000ea60 | 00")) == everything | {
        "timeout_ms": 60_000
    }

    frame = h("002b 0002 | 00000007 | ffff | 00") + v2
    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.ELECT_LEADERS, (0, 2))
    assert encode_request(43, 2, 7, None, body) == sized(frame)
    assert decode_request(frame) == (RequestHeader(43, 2, 7, None), body)


def test_elect_leaders_response_literals() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": CLUSTER_AUTHORIZATION_FAILED,
        "replica_election_results": [
            {
                "topic": "t",
                "partition_result": [
                    {"partition_id": 0, "error_code": ELECTION_NOT_NEEDED, "error_message": None}
                ],
            }
        ],
    }
    v0 = h("00000000 | 00000001 | 0001 74 | 00000001 | 00000000 0054 ffff")
    assert ELECT_LEADERS_RESPONSE.encode(0, body) == v0
    assert decode(ELECT_LEADERS_RESPONSE, 0, v0) == body | {"error_code": 0}
    # v1: the top-level error code.
    v1 = h("00000000 | 001f | 00000001 | 0001 74 | 00000001 | 00000000 0054 ffff")
    assert ELECT_LEADERS_RESPONSE.encode(1, body) == v1
    assert decode(ELECT_LEADERS_RESPONSE, 1, v1) == body
    v2 = h("00000000 | 001f | 02 | 02 74 | 02 | 00000000 0054 00 | 00 | 00 | 00")
    assert ELECT_LEADERS_RESPONSE.encode(2, body) == v2
    assert decode(ELECT_LEADERS_RESPONSE, 2, v2) == body


# ----------------------------------------------------------- AlterPartitionReassignments


def test_alter_partition_reassignments_request_literals(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {
        "timeout_ms": 60_000,
        "allow_replication_factor_change": False,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "replicas": [1, 2]},
                    {"partition_index": 1, "replicas": None},
                ],
            }
        ],
    }
    topics = "02 | 02 74 | 03 | 00000000 | 03 00000001 00000002 | 00 | 00000001 | 00 | 00 | 00"
    # Flexible from v0: compact arrays, null replicas (cancel) are 0x00.
    v0 = h("0000ea60 |" + topics + "| 00")
    assert ALTER_PARTITION_REASSIGNMENTS_REQUEST.encode(0, body) == v0
    assert decode(ALTER_PARTITION_REASSIGNMENTS_REQUEST, 0, v0) == body | {
        "allow_replication_factor_change": True
    }
    # v1: may the replication factor change? (default true)
    v1 = h("0000ea60 | 00 |" + topics + "| 00")
    assert ALTER_PARTITION_REASSIGNMENTS_REQUEST.encode(1, body) == v1
    assert decode(ALTER_PARTITION_REASSIGNMENTS_REQUEST, 1, v1) == body
    assert ALTER_PARTITION_REASSIGNMENTS_REQUEST.encode(1, {}) == h("0000ea60 | 01 | 01 | 00")
    # A partition without replicas cancels its reassignment.
    raw = ALTER_PARTITION_REASSIGNMENTS_REQUEST.encode(0, {"topics": [{"partitions": [{}]}]})
    assert decode(ALTER_PARTITION_REASSIGNMENTS_REQUEST, 0, raw)["topics"] == [
        {"name": "", "partitions": [{"partition_index": 0, "replicas": None}]}
    ]

    # Request header v2 from v0.
    frame = h("002d 0001 | 00000003 | 0001 63 | 00") + v1
    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.ALTER_PARTITION_REASSIGNMENTS, (0, 1))
    assert encode_request(45, 1, 3, "c", body) == sized(frame)
    assert decode_request(frame) == (RequestHeader(45, 1, 3, "c"), body)


def test_alter_partition_reassignments_response_literals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = {
        "throttle_time_ms": 0,
        "allow_replication_factor_change": False,
        "error_code": 0,
        "error_message": None,
        "responses": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 1,
                        "error_code": NO_REASSIGNMENT_IN_PROGRESS,
                        "error_message": "x",
                    }
                ],
            }
        ],
    }
    responses = "02 | 02 74 | 02 | 00000001 | 0055 | 02 78 | 00 | 00 | 00"
    v0 = h("00000000 | 0000 | 00 |" + responses)
    assert ALTER_PARTITION_REASSIGNMENTS_RESPONSE.encode(0, body) == v0
    assert decode(ALTER_PARTITION_REASSIGNMENTS_RESPONSE, 0, v0) == body | {
        "allow_replication_factor_change": True
    }
    v1 = h("00000000 | 00 | 0000 | 00 |" + responses)
    assert ALTER_PARTITION_REASSIGNMENTS_RESPONSE.encode(1, body) == v1
    assert decode(ALTER_PARTITION_REASSIGNMENTS_RESPONSE, 1, v1) == body

    # Response header v1 (a tag section) from v0.
    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.ALTER_PARTITION_REASSIGNMENTS, (0, 1))
    frame = h("0000000c | 00") + v1
    assert encode_response(RequestHeader(45, 1, 12, None), body) == sized(frame)
    assert decode_response(45, 1, frame) == (12, body)


def test_alter_partition_reassignments_strings_are_not_nullable_outside_nullable_versions() -> None:
    with pytest.raises(EncodeError, match="name"):
        ALTER_PARTITION_REASSIGNMENTS_REQUEST.encode(0, {"topics": [{"name": None}]})
    with pytest.raises(EncodeError, match="partition_index"):
        ALTER_PARTITION_REASSIGNMENTS_REQUEST.encode(
            0, {"topics": [{"partitions": [{"partition_index": None}]}]}
        )


# ------------------------------------------------------------ ListPartitionReassignments


def test_list_partition_reassignments_literals() -> None:
    request = {"timeout_ms": 1000, "topics": [{"name": "t", "partition_indexes": [0]}]}
    raw = h("000003e8 | 02 | 02 74 | 02 00000000 | 00 | 00")
    assert LIST_PARTITION_REASSIGNMENTS_REQUEST.encode(0, request) == raw
    assert decode(LIST_PARTITION_REASSIGNMENTS_REQUEST, 0, raw) == request
    # The defaults: a 60s timeout and null topics (every ongoing reassignment).
    assert LIST_PARTITION_REASSIGNMENTS_REQUEST.default_body() == {
        "timeout_ms": 60_000,
        "topics": None,
    }
    assert LIST_PARTITION_REASSIGNMENTS_REQUEST.encode(0, {}) == h("0000ea60 | 00 | 00")

    response = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "replicas": [1, 2],
                        "adding_replicas": [2],
                        "removing_replicas": [],
                    }
                ],
            }
        ],
    }
    raw = h(
        "00000000 | 0000 | 00 | 02 | 02 74 | 02 | 00000000 | 03 00000001 00000002"
        "| 02 00000002 | 01 | 00 | 00 | 00"
    )
    assert LIST_PARTITION_REASSIGNMENTS_RESPONSE.encode(0, response) == raw
    assert decode(LIST_PARTITION_REASSIGNMENTS_RESPONSE, 0, raw) == response
