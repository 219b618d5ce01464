"""``broker.max_connections`` bounds each listener, the Kafka listener and the HTTP port alike:
a connection past the limit is refused (closed on accept on a Kafka listener, answered ``503``
on the HTTP port), counted in ``flux_connections_refused_total{listener}``, and the listener
serves new connections again once others close; ``flux_connections{listener}`` reads the open
connections. Other brokers' connections to the HTTP port (forwarding, replication) are served
past the limit, so a flood of clients does not cut the cluster's own traffic."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.sdk.wire import KafkaConnection

from tests.integration.cluster_helpers import partitions
from tests.integration.helpers import wait_until
from tests.integration.http_helpers import call, create_everywhere, metric_value, socket_address

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


def _http_answer(connection: socket.socket) -> bytes:
    """The answer to ``GET /ping`` on ``connection`` (empty if it was closed unanswered)."""
    connection.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    connection.settimeout(10)
    answer = b""
    try:
        while chunk := connection.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and answer.endswith(b"}"):
                break
    except ConnectionResetError:
        pass
    return answer


def _http_served(connection: socket.socket) -> bool:
    return b" 200 " in _http_answer(connection)


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


def _fill(
    address: tuple[str, int], served: Callable[[socket.socket], bool], limit: int = LIMIT
) -> list[socket.socket]:
    """Connections to ``address``, each served, until one is refused: the served ones."""
    held: list[socket.socket] = []
    for _ in range(limit + 5):
        connection = socket.create_connection(address)
        if not served(connection):
            connection.close()
            return held
        held.append(connection)
    for connection in held:
        connection.close()
    raise AssertionError(f"{len(held)} connections served, past a limit of {limit}")


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
            answer = _http_answer(refused)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"broker.max_connections" in answer
            assert refused.recv(65536) == b""  # and closed
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


def test_other_brokers_are_served_past_the_http_limit(
    cluster_factory: Callable[..., list[NodeProcess]],
) -> None:
    # Room on the other broker for its own peers and the test's calls.
    limit = 8
    nodes = cluster_factory(2, broker={"max_connections": limit})
    create_everywhere(nodes, "past-limit", 1, 1)
    leader_id = partitions(nodes[0], "past-limit")[0]["leader_id"]
    leader = next(node for node in nodes if node.node_id == leader_id)
    other = next(node for node in nodes if node.node_id != leader_id)
    held = _fill(socket_address(leader.ready["broker_http"]), _http_served, limit)
    try:
        # The other broker has not forwarded to this leader yet: its link is a new connection
        # to a port full of clients.
        status, answer = call(other, "POST", "/publish", {"topic": "past-limit", "message": "m"})
        assert status == 200, answer
        # A client is still refused.
        with socket.create_connection(socket_address(leader.ready["broker_http"])) as refused:
            assert _http_answer(refused).startswith(b"HTTP/1.1 503 ")
    finally:
        for connection in held:
            connection.close()
    # The held connections' slots free once their handlers finish.
    status, page = wait_until(
        lambda: (
            (answer := call(leader, "GET", "/topics/past-limit/partitions/0/messages"))[0] != 503
            and answer
        ),
        timeout_s=10,
    )
    assert status == 200 and [m["value"] for m in page["messages"]] == ["m"], page
