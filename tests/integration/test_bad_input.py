"""Every kind of bad input on one connection; a well-behaved client on another keeps working."""

from __future__ import annotations

import socket
import struct

import pytest
from flux.protocol.api import ApiKey, decode_response, encode_request
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import create_topic, produce, produce_values, read_values

pytestmark = pytest.mark.integration


def _raw(node) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10)
    return sock


def _closed_by_broker(sock: socket.socket) -> bool:
    """True once the broker has closed the connection (recv returns EOF or a reset)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _header(api_key: int, version: int, correlation_id: int = 7) -> bytes:
    client_id = b"raw"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


BAD_FRAMES = {
    "negative_size": struct.pack(">i", -5),
    "size_over_socket_request_max_bytes": struct.pack(">i", 2_000_000_000),
    "garbage_body": struct.pack(">i", 12) + b"\xff" * 12,
    "unknown_api_key": struct.pack(">i", 13) + _header(9999, 0),
    "unsupported_produce_version": struct.pack(">i", 13) + _header(ApiKey.PRODUCE, 1),
    "truncated_metadata_body": struct.pack(">i", 17)
    + _header(ApiKey.METADATA, 5)
    + b"\x00\x00\x00\x09",
    "array_length_past_end": struct.pack(">i", 17)
    + _header(ApiKey.METADATA, 1)
    + b"\x7f\xff\xff\xff",
}


@pytest.fixture
def healthy(broker):
    """A well-behaved connection opened before the bad input and used after it."""
    with KafkaConnection.from_bootstrap(broker.bootstrap_servers) as conn:
        assert create_topic(conn, "healthy") == ErrorCode.NONE
        produce_values(conn, "healthy", [b"before"])
        yield conn
        produce_values(conn, "healthy", [b"after"])
        assert [v for _, v in read_values(conn, "healthy")] == [b"before", b"after"]


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_bad_frame_closes_only_that_connection(broker, healthy, name: str) -> None:
    with _raw(broker) as sock:
        sock.sendall(BAD_FRAMES[name])
        assert _closed_by_broker(sock)
    assert "closing connection" in broker.log_tail(20)


def test_frame_cut_short_then_disconnect(broker, healthy) -> None:
    with _raw(broker) as sock:
        sock.sendall(struct.pack(">i", 100) + b"\x00\x03\x00")
    # the broker notices the disconnect; the healthy fixture proves it still serves


def test_unsupported_api_versions_version_gets_error_35(broker, healthy) -> None:
    with _raw(broker) as sock:
        sock.sendall(struct.pack(">i", 13) + _header(ApiKey.API_VERSIONS, 99))
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        frame = sock.recv(size, socket.MSG_WAITALL)
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, frame)
    assert correlation_id == 7
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {entry["api_key"] for entry in body["api_keys"]} >= {0, 1, 3, 18}


def test_corrupt_batch_is_rejected_and_nothing_is_written(broker, healthy) -> None:
    batch = bytearray(build_batch([(None, b"payload", ())]))
    batch[-1] ^= 0x01
    result = produce(healthy, "healthy", bytes(batch))
    assert result["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert [v for _, v in read_values(healthy, "healthy")] == [b"before"]


def test_truncated_batch_is_rejected(broker, healthy) -> None:
    batch = build_batch([(None, b"payload", ())])
    result = produce(healthy, "healthy", batch[:-3])
    assert result["error_code"] == ErrorCode.CORRUPT_MESSAGE


def test_oversized_batch_gets_message_too_large(node_factory) -> None:
    node = node_factory(broker={"message_max_bytes": 4096})
    with KafkaConnection.from_bootstrap(node.bootstrap_servers) as conn:
        assert create_topic(conn, "small") == ErrorCode.NONE
        result = produce(conn, "small", build_batch([(None, b"x" * 10_000, ())]))
        assert result["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        produce_values(conn, "small", [b"fits"])
        assert read_values(conn, "small") == [(0, b"fits")]


@pytest.mark.parametrize(
    ("name", "partitions", "configs", "expected"),
    [
        ("bad/name", 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("zero-partitions", 0, {}, ErrorCode.INVALID_PARTITIONS),
        ("bad-config", 1, {"no.such.config": "1"}, ErrorCode.INVALID_CONFIG),
        ("bad-value", 1, {"retention.ms": "soon"}, ErrorCode.INVALID_CONFIG),
        ("healthy", 1, {}, ErrorCode.TOPIC_ALREADY_EXISTS),
    ],
)
def test_create_topics_rejects_bad_requests(
    broker, healthy, name, partitions, configs, expected
) -> None:
    response = healthy.request(
        ApiKey.CREATE_TOPICS,
        4,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": False,
        },
    )
    assert response["topics"][0]["error_code"] == expected


def test_unknown_topic_produce_and_fetch(broker, healthy) -> None:
    result = produce(healthy, "no-such-topic", build_batch([(None, b"v", ())]))
    assert result["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    result = produce(healthy, "healthy", build_batch([(None, b"v", ())]), partition=5)
    assert result["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_invalid_required_acks(broker, healthy) -> None:
    result = produce(healthy, "healthy", build_batch([(None, b"v", ())]), acks=2)
    assert result["error_code"] == ErrorCode.INVALID_REQUIRED_ACKS


def test_many_bad_connections_then_kafka_client(broker) -> None:
    """A burst of bad connections does not disturb an unmodified client."""
    from confluent_kafka import Producer

    for frame in BAD_FRAMES.values():
        with _raw(broker) as sock:
            sock.sendall(frame)
            assert _closed_by_broker(sock)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": 1})
    delivered = []
    producer.produce("after-burst", value=b"ok", on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(30) == 0
    assert delivered == [None]


def test_encode_request_helper_matches_header_layout() -> None:
    frame = encode_request(ApiKey.METADATA, 1, 7, "raw", {"topics": []})
    assert frame[4 : 4 + 13] == _header(ApiKey.METADATA, 1)
