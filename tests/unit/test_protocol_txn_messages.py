"""Descriptions of the transaction messages: round trips of every version, and literals.

AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit, DescribeProducers,
DescribeTransactions and ListTransactions are described but not served yet: they are in
``REQUESTS``/``RESPONSES`` and absent from ``SUPPORTED_VERSIONS``. InitProducerId (served) is
checked here too, against the same Kafka JSON.

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
    ADD_OFFSETS_TO_TXN_REQUEST,
    ADD_OFFSETS_TO_TXN_RESPONSE,
    ADD_PARTITIONS_TO_TXN_REQUEST,
    ADD_PARTITIONS_TO_TXN_RESPONSE,
    DESCRIBE_PRODUCERS_REQUEST,
    DESCRIBE_PRODUCERS_RESPONSE,
    DESCRIBE_TRANSACTIONS_REQUEST,
    DESCRIBE_TRANSACTIONS_RESPONSE,
    END_TXN_REQUEST,
    END_TXN_RESPONSE,
    INIT_PRODUCER_ID_REQUEST,
    INIT_PRODUCER_ID_RESPONSE,
    LIST_TRANSACTIONS_REQUEST,
    LIST_TRANSACTIONS_RESPONSE,
    REQUESTS,
    RESPONSES,
    TXN_OFFSET_COMMIT_REQUEST,
    TXN_OFFSET_COMMIT_RESPONSE,
    WRITE_TXN_MARKERS_REQUEST,
    WRITE_TXN_MARKERS_RESPONSE,
)
from flux.protocol.schema import EncodeError, Message

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

Body = dict[str, Any]

# Kafka's codes used below.
NOT_COORDINATOR = 16
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105

PID = 42
EPOCH = 3


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


def init_producer_id_requests(version: int) -> list[Body]:
    return [
        {
            "transactional_id": "tx-1",
            "transaction_timeout_ms": 60_000,
            "producer_id": PID if version >= 3 else -1,
            "producer_epoch": EPOCH if version >= 3 else -1,
            "enable2_pc": version >= 6,
            "keep_prepared_txn": version >= 6,
        },
        {
            "transactional_id": None,
            "transaction_timeout_ms": 0,
            "producer_id": -1,
            "producer_epoch": -1,
            "enable2_pc": False,
            "keep_prepared_txn": False,
        },
    ]


def init_producer_id_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 4,
            "error_code": 0,
            "producer_id": PID,
            "producer_epoch": EPOCH,
            "ongoing_txn_producer_id": 41 if version >= 6 else -1,
            "ongoing_txn_producer_epoch": 2 if version >= 6 else -1,
        },
        {
            "throttle_time_ms": 0,
            "error_code": PRODUCER_FENCED,
            "producer_id": -1,
            "producer_epoch": -1,
            "ongoing_txn_producer_id": -1,
            "ongoing_txn_producer_epoch": -1,
        },
    ]


def add_partitions_to_txn_requests(version: int) -> list[Body]:
    topics = [{"name": "orders", "partitions": [0, 1, 2]}, {"name": "audit", "partitions": []}]
    if version <= 3:
        return [
            {
                "transactions": [],
                "v3_and_below_transactional_id": "tx-1",
                "v3_and_below_producer_id": PID,
                "v3_and_below_producer_epoch": EPOCH,
                "v3_and_below_topics": topics,
            }
        ]
    return [
        {
            "transactions": [
                {
                    "transactional_id": "tx-1",
                    "producer_id": PID,
                    "producer_epoch": EPOCH,
                    "verify_only": True,
                    "topics": topics,
                },
                {
                    "transactional_id": "tx-2",
                    "producer_id": 7,
                    "producer_epoch": 0,
                    "verify_only": False,
                    "topics": [],
                },
            ],
            "v3_and_below_transactional_id": "",
            "v3_and_below_producer_id": 0,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [],
        }
    ]


def add_partitions_to_txn_responses(version: int) -> list[Body]:
    topic_results = [
        {
            "name": "orders",
            "results_by_partition": [
                {"partition_index": 0, "partition_error_code": 0},
                {"partition_index": 1, "partition_error_code": INVALID_TXN_STATE},
            ],
        },
        {"name": "audit", "results_by_partition": []},
    ]
    if version <= 3:
        return [
            {
                "throttle_time_ms": 2,
                "error_code": 0,
                "results_by_transaction": [],
                "results_by_topic_v3_and_below": topic_results,
            }
        ]
    return [
        {
            "throttle_time_ms": 2,
            "error_code": 0,
            "results_by_transaction": [
                {"transactional_id": "tx-1", "topic_results": topic_results},
                {"transactional_id": "tx-2", "topic_results": []},
            ],
            "results_by_topic_v3_and_below": [],
        },
        {
            "throttle_time_ms": 0,
            "error_code": NOT_COORDINATOR,
            "results_by_transaction": [],
            "results_by_topic_v3_and_below": [],
        },
    ]


def add_offsets_to_txn_requests(version: int) -> list[Body]:
    return [
        {
            "transactional_id": "tx-1",
            "producer_id": PID,
            "producer_epoch": EPOCH,
            "group_id": "group-1",
        }
    ]


def add_offsets_to_txn_responses(version: int) -> list[Body]:
    return [
        {"throttle_time_ms": 0, "error_code": 0},
        {"throttle_time_ms": 9, "error_code": INVALID_PRODUCER_EPOCH},
    ]


def end_txn_requests(version: int) -> list[Body]:
    return [
        {
            "transactional_id": "tx-1",
            "producer_id": PID,
            "producer_epoch": EPOCH,
            "committed": True,
        },
        {"transactional_id": "tx-2", "producer_id": 7, "producer_epoch": 0, "committed": False},
    ]


def end_txn_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 1,
            "error_code": 0,
            "producer_id": PID if version >= 5 else -1,
            "producer_epoch": EPOCH + 1 if version >= 5 else -1,
        },
        {
            "throttle_time_ms": 0,
            "error_code": PRODUCER_FENCED,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    ]


def write_txn_markers_requests(version: int) -> list[Body]:
    return [
        {
            "markers": [
                {
                    "producer_id": PID,
                    "producer_epoch": EPOCH,
                    "transaction_result": True,
                    "topics": [
                        {"name": "orders", "partition_indexes": [0, 2]},
                        {"name": "__consumer_offsets", "partition_indexes": [17]},
                    ],
                    "coordinator_epoch": 5,
                    "transaction_version": 2 if version >= 2 else 0,
                },
                {
                    "producer_id": 7,
                    "producer_epoch": 1,
                    "transaction_result": False,
                    "topics": [],
                    "coordinator_epoch": 0,
                    "transaction_version": 0,
                },
            ]
        },
        {"markers": []},
    ]


def write_txn_markers_responses(version: int) -> list[Body]:
    return [
        {
            "markers": [
                {
                    "producer_id": PID,
                    "topics": [
                        {
                            "name": "orders",
                            "partitions": [
                                {"partition_index": 0, "error_code": 0},
                                {"partition_index": 2, "error_code": NOT_COORDINATOR},
                            ],
                        }
                    ],
                },
                {"producer_id": 7, "topics": []},
            ]
        }
    ]


def txn_offset_commit_requests(version: int) -> list[Body]:
    return [
        {
            "transactional_id": "tx-1",
            "group_id": "group-1",
            "producer_id": PID,
            "producer_epoch": EPOCH,
            "generation_id": 4 if version >= 3 else -1,
            "member_id": "member-1" if version >= 3 else "",
            "group_instance_id": "instance-1" if version >= 3 else None,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 100,
                            "committed_leader_epoch": 6 if version >= 2 else -1,
                            "committed_metadata": "meta",
                        },
                        {
                            "partition_index": 1,
                            "committed_offset": 0,
                            "committed_leader_epoch": -1,
                            "committed_metadata": None,
                        },
                    ],
                },
                {"name": "audit", "partitions": []},
            ],
        }
    ]


def txn_offset_commit_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 3,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {"partition_index": 0, "error_code": 0},
                        {"partition_index": 1, "error_code": INVALID_PRODUCER_EPOCH},
                    ],
                }
            ],
        },
        {"throttle_time_ms": 0, "topics": []},
    ]


def describe_producers_requests(version: int) -> list[Body]:
    return [
        {
            "topics": [
                {"name": "orders", "partition_indexes": [0, 1]},
                {"name": "audit", "partition_indexes": []},
            ]
        },
        {"topics": []},
    ]


def describe_producers_responses(version: int) -> list[Body]:
    producer = {
        "producer_id": PID,
        "producer_epoch": EPOCH,
        "last_sequence": 99,
        "last_timestamp": 1_700_000_000_000,
        "coordinator_epoch": 5,
        "current_txn_start_offset": 1234,
    }
    idle = {
        "producer_id": 7,
        "producer_epoch": 0,
        "last_sequence": -1,
        "last_timestamp": -1,
        "coordinator_epoch": 0,
        "current_txn_start_offset": -1,
    }
    return [
        {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 0,
                            "error_message": None,
                            "active_producers": [producer, idle],
                        },
                        {
                            "partition_index": 1,
                            "error_code": NOT_COORDINATOR,
                            "error_message": "not the leader",
                            "active_producers": [],
                        },
                    ],
                }
            ],
        }
    ]


def describe_transactions_requests(version: int) -> list[Body]:
    return [{"transactional_ids": ["tx-1", "tx-2"]}, {"transactional_ids": []}]


def describe_transactions_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 0,
            "transaction_states": [
                {
                    "error_code": 0,
                    "transactional_id": "tx-1",
                    "transaction_state": "Ongoing",
                    "transaction_timeout_ms": 60_000,
                    "transaction_start_time_ms": 1_700_000_000_000,
                    "producer_id": PID,
                    "producer_epoch": EPOCH,
                    "topics": [
                        {"topic": "orders", "partitions": [0, 2]},
                        {"topic": "audit", "partitions": []},
                    ],
                },
                {
                    "error_code": TRANSACTIONAL_ID_NOT_FOUND,
                    "transactional_id": "tx-2",
                    "transaction_state": "",
                    "transaction_timeout_ms": 0,
                    "transaction_start_time_ms": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                },
            ],
        }
    ]


def list_transactions_requests(version: int) -> list[Body]:
    return [
        {
            "state_filters": ["Ongoing", "PrepareCommit"],
            "producer_id_filters": [PID, 7],
            "duration_filter": 30_000 if version >= 1 else -1,
            "transactional_id_pattern": "tx-.*" if version >= 2 else None,
        },
        {
            "state_filters": [],
            "producer_id_filters": [],
            "duration_filter": -1,
            "transactional_id_pattern": None,
        },
    ]


def list_transactions_responses(version: int) -> list[Body]:
    return [
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "unknown_state_filters": ["Bogus"],
            "transaction_states": [
                {"transactional_id": "tx-1", "producer_id": PID, "transaction_state": "Ongoing"},
                {"transactional_id": "tx-2", "producer_id": 7, "transaction_state": "Empty"},
            ],
        },
        {
            "throttle_time_ms": 5,
            "error_code": NOT_COORDINATOR,
            "unknown_state_filters": [],
            "transaction_states": [],
        },
    ]


# (our message, its representative bodies, kafka-python's module and class for the same message)
CASES: list[tuple[Message, Callable[[int], list[Body]], str, str]] = [
    (
        INIT_PRODUCER_ID_REQUEST,
        init_producer_id_requests,
        "producer.transaction",
        "InitProducerIdRequest",
    ),
    (
        INIT_PRODUCER_ID_RESPONSE,
        init_producer_id_responses,
        "producer.transaction",
        "InitProducerIdResponse",
    ),
    (
        ADD_PARTITIONS_TO_TXN_REQUEST,
        add_partitions_to_txn_requests,
        "producer.transaction",
        "AddPartitionsToTxnRequest",
    ),
    (
        ADD_PARTITIONS_TO_TXN_RESPONSE,
        add_partitions_to_txn_responses,
        "producer.transaction",
        "AddPartitionsToTxnResponse",
    ),
    (
        ADD_OFFSETS_TO_TXN_REQUEST,
        add_offsets_to_txn_requests,
        "producer.transaction",
        "AddOffsetsToTxnRequest",
    ),
    (
        ADD_OFFSETS_TO_TXN_RESPONSE,
        add_offsets_to_txn_responses,
        "producer.transaction",
        "AddOffsetsToTxnResponse",
    ),
    (END_TXN_REQUEST, end_txn_requests, "producer.transaction", "EndTxnRequest"),
    (END_TXN_RESPONSE, end_txn_responses, "producer.transaction", "EndTxnResponse"),
    (
        WRITE_TXN_MARKERS_REQUEST,
        write_txn_markers_requests,
        "producer.transaction",
        "WriteTxnMarkersRequest",
    ),
    (
        WRITE_TXN_MARKERS_RESPONSE,
        write_txn_markers_responses,
        "producer.transaction",
        "WriteTxnMarkersResponse",
    ),
    (
        TXN_OFFSET_COMMIT_REQUEST,
        txn_offset_commit_requests,
        "producer.transaction",
        "TxnOffsetCommitRequest",
    ),
    (
        TXN_OFFSET_COMMIT_RESPONSE,
        txn_offset_commit_responses,
        "producer.transaction",
        "TxnOffsetCommitResponse",
    ),
    (
        DESCRIBE_PRODUCERS_REQUEST,
        describe_producers_requests,
        "admin.transactions",
        "DescribeProducersRequest",
    ),
    (
        DESCRIBE_PRODUCERS_RESPONSE,
        describe_producers_responses,
        "admin.transactions",
        "DescribeProducersResponse",
    ),
    (
        DESCRIBE_TRANSACTIONS_REQUEST,
        describe_transactions_requests,
        "admin.transactions",
        "DescribeTransactionsRequest",
    ),
    (
        DESCRIBE_TRANSACTIONS_RESPONSE,
        describe_transactions_responses,
        "admin.transactions",
        "DescribeTransactionsResponse",
    ),
    (
        LIST_TRANSACTIONS_REQUEST,
        list_transactions_requests,
        "admin.transactions",
        "ListTransactionsRequest",
    ),
    (
        LIST_TRANSACTIONS_RESPONSE,
        list_transactions_responses,
        "admin.transactions",
        "ListTransactionsResponse",
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
    # reading of the same schemas. (Kafka 4 dropped WriteTxnMarkers v0, but its JSON still
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

# api key: (request, response, (lowest, highest version), first flexible version)
NEW_APIS = {
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        ADD_PARTITIONS_TO_TXN_REQUEST,
        ADD_PARTITIONS_TO_TXN_RESPONSE,
        (0, 5),
        3,
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (
        ADD_OFFSETS_TO_TXN_REQUEST,
        ADD_OFFSETS_TO_TXN_RESPONSE,
        (0, 4),
        3,
    ),
    ApiKey.END_TXN: (END_TXN_REQUEST, END_TXN_RESPONSE, (0, 5), 3),
    ApiKey.WRITE_TXN_MARKERS: (
        WRITE_TXN_MARKERS_REQUEST,
        WRITE_TXN_MARKERS_RESPONSE,
        (0, 2),
        1,
    ),
    ApiKey.TXN_OFFSET_COMMIT: (
        TXN_OFFSET_COMMIT_REQUEST,
        TXN_OFFSET_COMMIT_RESPONSE,
        (0, 5),
        3,
    ),
    ApiKey.DESCRIBE_PRODUCERS: (
        DESCRIBE_PRODUCERS_REQUEST,
        DESCRIBE_PRODUCERS_RESPONSE,
        (0, 0),
        0,
    ),
    ApiKey.DESCRIBE_TRANSACTIONS: (
        DESCRIBE_TRANSACTIONS_REQUEST,
        DESCRIBE_TRANSACTIONS_RESPONSE,
        (0, 0),
        0,
    ),
    ApiKey.LIST_TRANSACTIONS: (
        LIST_TRANSACTIONS_REQUEST,
        LIST_TRANSACTIONS_RESPONSE,
        (0, 2),
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


#: The transaction APIs the broker serves, and the versions it serves them in.
SERVED = {
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
}


def test_served_transaction_apis() -> None:
    for api_key, versions in SERVED.items():
        assert SUPPORTED_VERSIONS[api_key] == versions


@pytest.mark.parametrize(
    "api_key", [key for key in NEW_APIS if key not in SERVED], ids=lambda key: ApiKey(key).name
)
def test_transaction_apis_are_not_served_yet(api_key: int) -> None:
    # Described, but nobody may advertise them (ApiVersions) before a handler exists.
    assert api_key not in SUPPORTED_VERSIONS
    request, response, (low, _), _ = NEW_APIS[api_key]
    # So the codec refuses them, with the correlation id for the error answer...
    frame = struct.pack(">hhi", api_key, low, 77) + h("ffff") + request.encode(low, {})
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(frame)
    assert caught.value.correlation_id == 77
    with pytest.raises(UnsupportedVersionError):
        encode_request(api_key, low, 77, None, {})
    with pytest.raises(UnsupportedVersionError):
        encode_response(RequestHeader(api_key, low, 77, None), {})
    with pytest.raises(UnsupportedVersionError):
        decode_response(api_key, low, h("0000004d") + response.encode(low, {}))


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


# ------------------------------------------------------------------------ InitProducerId


def test_init_producer_id_matches_kafka() -> None:
    # Kafka's InitProducerId JSON: 0-6, flexible 2+; ProducerId/ProducerEpoch in the request
    # from v3 (default -1), 2PC fields from v6.
    assert (
        INIT_PRODUCER_ID_REQUEST.valid_versions.low,
        INIT_PRODUCER_ID_REQUEST.valid_versions.high,
    ) == (0, 6)
    assert INIT_PRODUCER_ID_REQUEST.default_body() == {
        "transactional_id": None,
        "transaction_timeout_ms": 0,
        "producer_id": -1,
        "producer_epoch": -1,
        "enable2_pc": False,
        "keep_prepared_txn": False,
    }
    assert INIT_PRODUCER_ID_RESPONSE.default_body() == {
        "throttle_time_ms": 0,
        "error_code": 0,
        "producer_id": -1,
        "producer_epoch": 0,
        "ongoing_txn_producer_id": -1,
        "ongoing_txn_producer_epoch": -1,
    }
    body = {
        "transactional_id": "tx",
        "transaction_timeout_ms": 1000,
        "producer_id": PID,
        "producer_epoch": EPOCH,
        "enable2_pc": True,
        "keep_prepared_txn": False,
    }
    assert INIT_PRODUCER_ID_REQUEST.encode(1, body) == h("0002 7478 | 000003e8")
    assert INIT_PRODUCER_ID_REQUEST.encode(3, body) == h(
        "03 7478 | 000003e8 | 000000000000002a | 0003 | 00"
    )
    assert INIT_PRODUCER_ID_REQUEST.encode(6, body) == h(
        "03 7478 | 000003e8 | 000000000000002a | 0003 | 01 | 00 | 00"
    )


# -------------------------------------------------------------------- AddPartitionsToTxn


def test_add_partitions_to_txn_v0_request_literal() -> None:
    body = {
        "v3_and_below_transactional_id": "tx",
        "v3_and_below_producer_id": PID,
        "v3_and_below_producer_epoch": EPOCH,
        "v3_and_below_topics": [{"name": "t", "partitions": [0, 1]}],
    }
    raw = h("0002 7478 | 000000000000002a | 0003 | 00000001 | 0001 74 | 00000002 00000000 00000001")
    assert ADD_PARTITIONS_TO_TXN_REQUEST.encode(0, body) == raw
    assert decode(ADD_PARTITIONS_TO_TXN_REQUEST, 0, raw) == body | {"transactions": []}
    # v3, flexible: compact strings and arrays, a tag section after every struct.
    raw = h("03 7478 | 000000000000002a | 0003 | 02 | 02 74 | 03 00000000 00000001 | 00 | 00")
    assert ADD_PARTITIONS_TO_TXN_REQUEST.encode(3, body) == raw
    # The batched fields of v4+ are not on the wire before v4.
    assert ADD_PARTITIONS_TO_TXN_REQUEST.encode(3, body | {"transactions": [{}]}) == raw


def test_add_partitions_to_txn_v4_request_literal() -> None:
    transaction = {
        "transactional_id": "tx",
        "producer_id": PID,
        "producer_epoch": EPOCH,
        "verify_only": True,
        "topics": [{"name": "t", "partitions": [0, 1]}],
    }
    raw = h(
        "02 | 03 7478 | 000000000000002a | 0003 | 01 | 02 | 02 74 | 03 00000000 00000001 | 00"
        "| 00 | 00"
    )
    body = {"transactions": [transaction]}
    # The V3AndBelow fields are gone from v4.
    full = body | {"v3_and_below_transactional_id": "ignored", "v3_and_below_producer_id": 9}
    for version in (4, 5):
        assert ADD_PARTITIONS_TO_TXN_REQUEST.encode(version, full) == raw
        decoded = decode(ADD_PARTITIONS_TO_TXN_REQUEST, version, raw)
        assert decoded["transactions"] == [transaction]
        assert decoded["v3_and_below_transactional_id"] == ""
    assert ADD_PARTITIONS_TO_TXN_REQUEST.default_body()["transactions"] == []
    raw = ADD_PARTITIONS_TO_TXN_REQUEST.encode(4, {"transactions": [{}]})
    assert decode(ADD_PARTITIONS_TO_TXN_REQUEST, 4, raw)["transactions"][0]["verify_only"] is False


def test_add_partitions_to_txn_response_literals() -> None:
    topic = {
        "name": "t",
        "results_by_partition": [{"partition_index": 1, "partition_error_code": INVALID_TXN_STATE}],
    }
    body = {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [topic]}
    raw = h("00000000 | 00000001 | 0001 74 | 00000001 | 00000001 0030")
    assert ADD_PARTITIONS_TO_TXN_RESPONSE.encode(0, body) == raw
    assert ADD_PARTITIONS_TO_TXN_RESPONSE.encode(2, body) == raw
    assert decode(ADD_PARTITIONS_TO_TXN_RESPONSE, 0, raw)["results_by_topic_v3_and_below"] == [
        topic
    ]
    raw = h("00000000 | 02 | 02 74 | 02 | 00000001 0030 00 | 00 | 00")
    assert ADD_PARTITIONS_TO_TXN_RESPONSE.encode(3, body) == raw
    # v4: a top-level error code and results by transaction.
    batched = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "results_by_transaction": [{"transactional_id": "tx", "topic_results": [topic]}],
    }
    raw = h("00000000 | 0000 | 02 | 03 7478 | 02 | 02 74 | 02 | 00000001 0030 00 | 00 | 00 | 00")
    assert ADD_PARTITIONS_TO_TXN_RESPONSE.encode(4, batched) == raw
    assert decode(ADD_PARTITIONS_TO_TXN_RESPONSE, 5, raw) == batched | {
        "results_by_topic_v3_and_below": []
    }


# ----------------------------------------------------------------------- AddOffsetsToTxn


def test_add_offsets_to_txn_literals() -> None:
    body = {"transactional_id": "tx", "producer_id": PID, "producer_epoch": EPOCH, "group_id": "g"}
    raw = h("0002 7478 | 000000000000002a | 0003 | 0001 67")
    for version in (0, 1, 2):
        assert ADD_OFFSETS_TO_TXN_REQUEST.encode(version, body) == raw
        assert decode(ADD_OFFSETS_TO_TXN_REQUEST, version, raw) == body
    raw = h("03 7478 | 000000000000002a | 0003 | 02 67 | 00")
    for version in (3, 4):
        assert ADD_OFFSETS_TO_TXN_REQUEST.encode(version, body) == raw
        assert decode(ADD_OFFSETS_TO_TXN_REQUEST, version, raw) == body
    response = {"throttle_time_ms": 5, "error_code": INVALID_PRODUCER_EPOCH}
    assert ADD_OFFSETS_TO_TXN_RESPONSE.encode(2, response) == h("00000005 | 002f")
    assert ADD_OFFSETS_TO_TXN_RESPONSE.encode(3, response) == h("00000005 | 002f | 00")


# -------------------------------------------------------------------------------- EndTxn

END_TXN = {"transactional_id": "tx", "producer_id": PID, "producer_epoch": EPOCH, "committed": True}


def test_end_txn_v0_request_literal(monkeypatch: pytest.MonkeyPatch) -> None:
    body_bytes = h("0002 7478 | 000000000000002a | 0003 | 01")
    assert END_TXN_REQUEST.encode(0, END_TXN) == body_bytes
    assert decode(END_TXN_REQUEST, 0, body_bytes) == END_TXN
    assert END_TXN_REQUEST.encode(0, END_TXN | {"committed": False})[-1:] == b"\x00"

    # Request header v1: api_key 26, version 0, correlation id 7, client id "c".
    frame = h("001a 0000 | 00000007 | 0001 63") + body_bytes
    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.END_TXN, (0, 5))
    assert encode_request(26, 0, 7, "c", END_TXN) == sized(frame)
    assert decode_request(frame) == (RequestHeader(26, 0, 7, "c"), END_TXN)


def test_end_txn_v3_request_literal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Compact string (length + 1), then the body's empty tagged-field section.
    body_bytes = h("03 7478 | 000000000000002a | 0003 | 01 | 00")
    assert END_TXN_REQUEST.encode(3, END_TXN) == body_bytes
    assert decode(END_TXN_REQUEST, 3, body_bytes) == END_TXN

    # Request header v2: header v1 plus its own empty tag section.
    frame = h("001a 0003 | 0000002a | 0001 63 | 00") + body_bytes
    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.END_TXN, (0, 5))
    assert encode_request(26, 3, 42, "c", END_TXN) == sized(frame)
    assert decode_request(frame) == (RequestHeader(26, 3, 42, "c"), END_TXN)


def test_end_txn_response_literals(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": PRODUCER_FENCED,
        "producer_id": PID,
        "producer_epoch": EPOCH + 1,
    }
    v2 = h("00000000 | 005a")
    assert END_TXN_RESPONSE.encode(2, body) == v2
    assert decode(END_TXN_RESPONSE, 2, v2) == body | {"producer_id": -1, "producer_epoch": -1}
    assert END_TXN_RESPONSE.encode(4, body) == h("00000000 | 005a | 00")
    # v5 returns the producer id and the bumped epoch.
    v5 = h("00000000 | 005a | 000000000000002a | 0004 | 00")
    assert END_TXN_RESPONSE.encode(5, body) == v5

    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.END_TXN, (0, 5))
    # Response header v0 for v0-2 (no tag section), v1 from v3.
    frame = h("00000009") + v2
    assert encode_response(RequestHeader(26, 2, 9, None), body) == sized(frame)
    assert decode_response(26, 2, frame) == (9, body | {"producer_id": -1, "producer_epoch": -1})
    frame = h("00000009 | 00") + v5
    assert encode_response(RequestHeader(26, 5, 9, None), body) == sized(frame)
    assert decode_response(26, 5, frame) == (9, body)


# ----------------------------------------------------------------------- WriteTxnMarkers

MARKER = {
    "producer_id": PID,
    "producer_epoch": EPOCH,
    "transaction_result": True,
    "topics": [{"name": "t", "partition_indexes": [0]}],
    "coordinator_epoch": 5,
    "transaction_version": 2,
}


def test_write_txn_markers_v0_request_literal() -> None:
    raw = h(
        "00000001 | 000000000000002a | 0003 | 01 | 00000001 | 0001 74 | 00000001 00000000| 00000005"
    )
    assert WRITE_TXN_MARKERS_REQUEST.encode(0, {"markers": [MARKER]}) == raw
    assert decode(WRITE_TXN_MARKERS_REQUEST, 0, raw) == {
        "markers": [MARKER | {"transaction_version": 0}]
    }


def test_write_txn_markers_v1_request_literal(monkeypatch: pytest.MonkeyPatch) -> None:
    body_bytes = h(
        "02 | 000000000000002a | 0003 | 01 | 02 | 02 74 | 02 00000000 | 00 | 00000005| 00 | 00"
    )
    body = {"markers": [MARKER | {"transaction_version": 0}]}
    assert WRITE_TXN_MARKERS_REQUEST.encode(1, {"markers": [MARKER]}) == body_bytes
    assert decode(WRITE_TXN_MARKERS_REQUEST, 1, body_bytes) == body

    frame = h("001b 0001 | 00000003 | ffff | 00") + body_bytes
    monkeypatch.setitem(SUPPORTED_VERSIONS, ApiKey.WRITE_TXN_MARKERS, (0, 2))
    assert encode_request(27, 1, 3, None, body) == sized(frame)
    assert decode_request(frame) == (RequestHeader(27, 1, 3, None), body)


def test_write_txn_markers_v2_request_carries_the_transaction_version() -> None:
    raw = h(
        "02 | 000000000000002a | 0003 | 01 | 02 | 02 74 | 02 00000000 | 00 | 00000005 | 02| 00 | 00"
    )
    assert WRITE_TXN_MARKERS_REQUEST.encode(2, {"markers": [MARKER]}) == raw
    assert decode(WRITE_TXN_MARKERS_REQUEST, 2, raw) == {"markers": [MARKER]}


def test_write_txn_markers_response_literals() -> None:
    body = {
        "markers": [
            {
                "producer_id": PID,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}],
            }
        ]
    }
    v0 = h("00000001 | 000000000000002a | 00000001 | 0001 74 | 00000001 | 00000000 0000")
    assert WRITE_TXN_MARKERS_RESPONSE.encode(0, body) == v0
    assert decode(WRITE_TXN_MARKERS_RESPONSE, 0, v0) == body
    v1 = h("02 | 000000000000002a | 02 | 02 74 | 02 | 00000000 0000 00 | 00 | 00 | 00")
    for version in (1, 2):
        assert WRITE_TXN_MARKERS_RESPONSE.encode(version, body) == v1
        assert decode(WRITE_TXN_MARKERS_RESPONSE, version, v1) == body


# ----------------------------------------------------------------------- TxnOffsetCommit


def test_txn_offset_commit_request_literals() -> None:
    partition = {
        "partition_index": 0,
        "committed_offset": 100,
        "committed_leader_epoch": 7,
        "committed_metadata": None,
    }
    body = {
        "transactional_id": "tx",
        "group_id": "g",
        "producer_id": PID,
        "producer_epoch": EPOCH,
        "generation_id": 1,
        "member_id": "m",
        "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [partition]}],
    }
    head = "0002 7478 | 0001 67 | 000000000000002a | 0003 | 00000001 | 0001 74 | 00000001"
    v0 = h(head + "| 00000000 | 0000000000000064 | ffff")
    assert TXN_OFFSET_COMMIT_REQUEST.encode(0, body) == v0
    assert decode(TXN_OFFSET_COMMIT_REQUEST, 1, v0)["topics"][0]["partitions"] == [
        partition | {"committed_leader_epoch": -1}
    ]
    # v2 adds the leader epoch.
    v2 = h(head + "| 00000000 | 0000000000000064 | 00000007 | ffff")
    assert TXN_OFFSET_COMMIT_REQUEST.encode(2, body) == v2
    # v3, flexible, adds the member fields; null group instance id and metadata are 0x00.
    v3 = h(
        "03 7478 | 02 67 | 000000000000002a | 0003 | 00000001 | 02 6d | 00 | 02 | 02 74 | 02"
        "| 00000000 | 0000000000000064 | 00000007 | 00 | 00 | 00 | 00"
    )
    for version in (3, 4, 5):
        assert TXN_OFFSET_COMMIT_REQUEST.encode(version, body) == v3
        assert decode(TXN_OFFSET_COMMIT_REQUEST, version, v3) == body


def test_txn_offset_commit_response_literals() -> None:
    body = {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 1, "error_code": INVALID_PRODUCER_EPOCH}],
            }
        ],
    }
    v0 = h("00000000 | 00000001 | 0001 74 | 00000001 | 00000001 002f")
    assert TXN_OFFSET_COMMIT_RESPONSE.encode(0, body) == v0
    assert decode(TXN_OFFSET_COMMIT_RESPONSE, 2, v0) == body
    v3 = h("00000000 | 02 | 02 74 | 02 | 00000001 002f 00 | 00 | 00")
    assert TXN_OFFSET_COMMIT_RESPONSE.encode(3, body) == v3
    assert decode(TXN_OFFSET_COMMIT_RESPONSE, 5, v3) == body


def test_txn_offset_commit_strings_are_not_nullable_outside_nullable_versions() -> None:
    with pytest.raises(EncodeError, match="transactional_id"):
        TXN_OFFSET_COMMIT_REQUEST.encode(3, {"transactional_id": None})
    # GroupInstanceId may be null; MemberId may not.
    with pytest.raises(EncodeError, match="member_id"):
        TXN_OFFSET_COMMIT_REQUEST.encode(3, {"member_id": None, "group_instance_id": None})
    with pytest.raises(EncodeError, match="committed_offset"):
        TXN_OFFSET_COMMIT_REQUEST.encode(
            0, {"topics": [{"partitions": [{"committed_offset": None}]}]}
        )


# ------------------------------------------------- DescribeProducers / Describe|ListTransactions


def test_describe_producers_literals() -> None:
    request = {"topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    raw = h("02 | 02 74 | 03 00000000 00000001 | 00 | 00")
    assert DESCRIBE_PRODUCERS_REQUEST.encode(0, request) == raw
    assert decode(DESCRIBE_PRODUCERS_REQUEST, 0, raw) == request

    producer = {
        "producer_id": PID,
        "producer_epoch": EPOCH,
        "last_sequence": 9,
        "last_timestamp": 1000,
        "coordinator_epoch": 5,
        "current_txn_start_offset": -1,
    }
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "error_message": None,
        "active_producers": [producer],
    }
    response = {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [partition]}]}
    # The producer epoch is an int32 in this message.
    raw = h(
        "00000000 | 02 | 02 74 | 02 | 00000000 | 0000 | 00 | 02 | 000000000000002a | 00000003"
        "| 00000009 | 00000000000003e8 | 00000005 | ffffffffffffffff | 00 | 00 | 00 | 00"
    )
    assert DESCRIBE_PRODUCERS_RESPONSE.encode(0, response) == raw
    assert decode(DESCRIBE_PRODUCERS_RESPONSE, 0, raw) == response


def test_describe_transactions_literals() -> None:
    request = {"transactional_ids": ["tx"]}
    raw = h("02 | 03 7478 | 00")
    assert DESCRIBE_TRANSACTIONS_REQUEST.encode(0, request) == raw
    assert decode(DESCRIBE_TRANSACTIONS_REQUEST, 0, raw) == request

    state = {
        "error_code": 0,
        "transactional_id": "tx",
        "transaction_state": "Ongoing",
        "transaction_timeout_ms": 60_000,
        "transaction_start_time_ms": 1000,
        "producer_id": PID,
        "producer_epoch": EPOCH,
        "topics": [{"topic": "t", "partitions": [0]}],
    }
    response = {"throttle_time_ms": 0, "transaction_states": [state]}
    raw = h(
        "00000000 | 02 | 0000 | 03 7478 | 08 4f6e676f696e67 | 0000ea60 | 00000000000003e8"
        "| 000000000000002a | 0003 | 02 | 02 74 | 02 00000000 | 00 | 00 | 00"
    )
    assert DESCRIBE_TRANSACTIONS_RESPONSE.encode(0, response) == raw
    assert decode(DESCRIBE_TRANSACTIONS_RESPONSE, 0, raw) == response


def test_list_transactions_literals() -> None:
    request = {
        "state_filters": ["Ongoing"],
        "producer_id_filters": [PID],
        "duration_filter": 1000,
        "transactional_id_pattern": "tx.*",
    }
    head = "02 08 4f6e676f696e67 | 02 000000000000002a"
    assert LIST_TRANSACTIONS_REQUEST.encode(0, request) == h(head + "| 00")
    assert LIST_TRANSACTIONS_REQUEST.encode(1, request) == h(head + "| 00000000000003e8 | 00")
    v2 = h(head + "| 00000000000003e8 | 05 74782e2a | 00")
    assert LIST_TRANSACTIONS_REQUEST.encode(2, request) == v2
    assert decode(LIST_TRANSACTIONS_REQUEST, 2, v2) == request
    # A null pattern (the default) is 0x00; a missing duration filter is -1.
    assert LIST_TRANSACTIONS_REQUEST.encode(2, {}) == h("01 | 01 | ffffffffffffffff | 00 | 00")
    assert decode(LIST_TRANSACTIONS_REQUEST, 0, h(head + "| 00"))["duration_filter"] == -1

    response = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "unknown_state_filters": [],
        "transaction_states": [
            {"transactional_id": "tx", "producer_id": PID, "transaction_state": "Ongoing"}
        ],
    }
    raw = h("00000000 | 0000 | 01 | 02 | 03 7478 | 000000000000002a | 08 4f6e676f696e67 | 00 | 00")
    for version in (0, 1, 2):
        assert LIST_TRANSACTIONS_RESPONSE.encode(version, response) == raw
        assert decode(LIST_TRANSACTIONS_RESPONSE, version, raw) == response
