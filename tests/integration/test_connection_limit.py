"""``broker.max_connections`` bounds each listener, the Kafka listener and the HTTP port alike:
a connection past the limit is closed on accept, counted in
``flux_connections_refused_total{listener}``, and the listener serves new connections again
once others close; ``flux_connections{listener}`` reads the open connections."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import metric_value, socket_address

pytestmark = pytest.mark.integration

LIMIT = 4
KAFKA = "PLAINTEXT"
HTTP = "http-port"


@pytest.fixture
def node(node_factory: Callable[..., NodeProcess]) -> NodeProcess:
    return node_factory(broker={"max_connections": LIMIT})


def _closed_at_once(connection: socket.socket) -> bool:
    """Whether the peer closed ``connection`` without answering (within 10 s)."""
    connection.settimeout(10)
    try:
        return connection.recv(65536) == b""
    except ConnectionResetError:
        return True


def _http_served(connection: socket.socket) -> bool:
    connection.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    connection.settimeout(10)
    try:
        return b" 200 " in connection.recv(65536)
    except ConnectionResetError:
        return False


def _kafka_served(connection: socket.socket) -> bool:
    # ApiVersions v0, correlation id 7, client id "t".
    body = b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x01t"
    connection.sendall(len(body).to_bytes(4, "big") + body)
    connection.settimeout(10)
    try:
        answer = connection.recv(65536)
    except ConnectionResetError:
        return False
    return len(answer) > 8 and answer[4:8] == (7).to_bytes(4, "big")


def _fill(address: tuple[str, int], served: Callable[[socket.socket], bool]) -> list[socket.socket]:
    """Connections to ``address``, each served, until one is refused: the served ones."""
    held: list[socket.socket] = []
    for _ in range(LIMIT + 5):
        connection = socket.create_connection(address)
        if not served(connection):
            connection.close()
            return held
        held.append(connection)
    for connection in held:
        connection.close()
    raise AssertionError(f"{len(held)} connections served, past a limit of {LIMIT}")


def _retried(scrape: Callable[[], float]) -> float:
    """``scrape()``, tried again while its connection is refused (for up to 10 s)."""

    def attempt() -> tuple[float] | None:
        try:
            return (scrape(),)
        except OSError:
            return None

    return wait_until(attempt, timeout_s=10)[0]


def _metric(node: NodeProcess, name: str, listener: str) -> float:
    return metric_value(node, f'{name}{{listener="{listener}"}}')


def test_kafka_listener_refuses_connections_past_the_limit(node: NodeProcess) -> None:
    address = socket_address(node.ready["bootstrap_servers"].split(",")[0])
    held = _fill(address, _kafka_served)
    try:
        assert len(held) == LIMIT
        assert _metric(node, "flux_connections", KAFKA) == LIMIT
        with socket.create_connection(address) as refused:
            assert _closed_at_once(refused)
        assert _metric(node, "flux_connections_refused_total", KAFKA) >= 2
        # One closes: the listener serves a new connection again, and a client's requests.
        held.pop().close()
        wait_until(lambda: _metric(node, "flux_connections", KAFKA) < LIMIT, timeout_s=10)
        with KafkaConnection.from_bootstrap(node.ready["bootstrap_servers"]) as conn:
            assert conn.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    finally:
        for connection in held:
            connection.close()


def test_http_port_refuses_connections_past_the_limit(node: NodeProcess) -> None:
    address = socket_address(node.ready["broker_http"])
    held = _fill(address, _http_served)
    try:
        # A single node has no peers on its HTTP port; a probe of the port may hold a slot
        # for a moment.
        assert LIMIT - 1 <= len(held) <= LIMIT
        with socket.create_connection(address) as refused:
            assert _closed_at_once(refused)
        # The held connections are still served.
        assert all(_http_served(connection) for connection in held)
        held.pop().close()
        # Each scrape is a connection of its own, refused again while the port is full (the
        # closed connections' slots free once their handlers finish).
        assert _retried(lambda: _metric(node, "flux_connections_refused_total", HTTP)) >= 2
        assert 1 <= _retried(lambda: _metric(node, "flux_connections", HTTP)) <= LIMIT
    finally:
        for connection in held:
            connection.close()
