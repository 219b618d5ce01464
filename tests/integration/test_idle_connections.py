"""Connections with nothing to do are closed after ``broker.connections_max_idle_ms`` (Kafka's
``connections.max.idle.ms``), on the Kafka listener and on the broker's and the controller's
HTTP ports; a request whose bytes stop part-way counts as idle; a connection that owes an
answer (a long-polling fetch) is not idle; clients carry on over a new connection."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import create_topic, fetch, wait_until
from tests.integration.http_helpers import metric_value, socket_address

pytestmark = pytest.mark.integration

IDLE_MS = 1000


@pytest.fixture
def node(node_factory: Callable[..., NodeProcess]) -> NodeProcess:
    return node_factory(broker={"connections_max_idle_ms": IDLE_MS})


def _seconds_until_closed(connection: socket.socket) -> float:
    """How long until the peer closes ``connection`` (it must, within 15 s)."""
    started = time.monotonic()
    connection.settimeout(15)
    while connection.recv(65536):
        pass
    return time.monotonic() - started


def _idle_closed(node: NodeProcess) -> float:
    return metric_value(node, "flux_kafka_idle_connections_closed_total")


def test_kafka_connections_idle_or_stalled_are_closed_and_a_long_fetch_is_not(
    node: NodeProcess,
) -> None:
    bootstrap = node.ready["bootstrap_servers"]
    with KafkaConnection.from_bootstrap(bootstrap) as conn:
        assert create_topic(conn, "quiet") == ErrorCode.NONE
        # Idle after an answer: closed once the idle time has passed, not before.
        assert conn.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        took = _seconds_until_closed(conn._socket)
        assert IDLE_MS / 1000 * 0.9 < took < 10, took
    # A request that stops part-way (its size came, most of its bytes did not).
    with socket.create_connection(socket_address(bootstrap.split(",")[0])) as stalled:
        stalled.sendall((100).to_bytes(4, "big") + b"\x00\x12" + b"\x00" * 8)
        assert IDLE_MS / 1000 * 0.9 < _seconds_until_closed(stalled) < 10
    # Owing an answer is not idle: a fetch that waits 2.5 s for records that never come is
    # answered, and the connection then serves another request.
    with KafkaConnection.from_bootstrap(bootstrap) as conn:
        wait_until(lambda: fetch(conn, "quiet", 0)["error_code"] == ErrorCode.NONE, timeout_s=15)
        started = time.monotonic()
        answer = fetch(conn, "quiet", 0, max_wait_ms=2500, min_bytes=1)
        assert answer["error_code"] == ErrorCode.NONE and time.monotonic() - started >= 2.4
        assert conn.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    assert _idle_closed(node) >= 2


def test_an_unmodified_client_carries_on_after_its_idle_connection_is_closed(
    node: NodeProcess,
) -> None:
    delivered: list[str | None] = []
    producer = Producer(
        {
            "bootstrap.servers": node.ready["bootstrap_servers"],
            "log.connection.close": False,
            "acks": "all",
        }
    )

    def send(value: bytes) -> None:
        producer.produce("resumed", value, on_delivery=lambda e, m: delivered.append(e and str(e)))
        assert producer.flush(30) == 0

    send(b"before")
    closed = _idle_closed(node)
    wait_until(lambda: _idle_closed(node) > closed, timeout_s=15)  # its connection, idle
    send(b"after")
    assert delivered == [None, None]


def test_http_connections_idle_or_trickling_headers_are_closed(node: NodeProcess) -> None:
    ports = (
        (node.ready["broker_http"], "/health"),
        (node.ready["controller_http"], "/controller/status"),
    )
    for address, path in ports:
        # Idle after an answer.
        with socket.create_connection(socket_address(address)) as idle:
            idle.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert b" 200 " in idle.recv(65536)
            assert IDLE_MS / 1000 * 0.9 < _seconds_until_closed(idle) < 10
        # Headers that never end (and nothing sent at all).
        with socket.create_connection(socket_address(address)) as trickling:
            trickling.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode())
            assert _seconds_until_closed(trickling) < 10
        with socket.create_connection(socket_address(address)) as silent:
            assert _seconds_until_closed(silent) < 10
