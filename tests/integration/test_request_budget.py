"""The node-wide request byte budget (``broker.queued_max_request_bytes``, Kafka's
queued.max.request.bytes) with real clients: a budget far smaller than what many connections
send at once slows them down but loses, reorders and refuses nothing, and a request larger than
the whole budget is still served."""

from __future__ import annotations

import select
import socket
import struct
import threading

import pytest
from confluent_kafka import Producer
from flux.protocol.api import ApiKey, decode_response, encode_request
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.sdk.wire import KafkaConnection

from tests.integration.cluster_helpers import create_topic

pytestmark = pytest.mark.integration

BUDGET_BYTES = 256 * 1024
CONNECTIONS = 8
REQUESTS_PER_CONNECTION = 6
VALUE_BYTES = 150 * 1024  # two requests nearly fill the budget


def _produce(correlation_id: int, topic: str, values: list[bytes]) -> bytes:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": 0, "records": build_batch([(None, v, ()) for v in values])}
                ],
            }
        ],
    }
    return encode_request(ApiKey.PRODUCE, 7, correlation_id, "budget-test", body)


def test_many_connections_over_a_small_budget_are_all_served_in_order(cluster_factory) -> None:
    (node,) = cluster_factory(1, broker={"queued_max_request_bytes": BUDGET_BYTES})
    assert create_topic(node, "budget", 1, 1)["error_code"] == ErrorCode.NONE
    results: dict[int, list[tuple[int, int, int]]] = {}
    errors: list[BaseException] = []

    def client(index: int) -> None:
        try:
            with KafkaConnection.from_bootstrap(node.bootstrap_servers) as conn:
                # Every request is sent before any answer is read: the connections together
                # offer 8 x 6 x 150 KiB = 7.2 MiB against a 256 KiB budget.
                for n in range(REQUESTS_PER_CONNECTION):
                    value = b"%02d-%02d-" % (index, n) + b"x" * VALUE_BYTES
                    conn.send_raw(_produce(n, "budget", [value]))
                answers = []
                for _ in range(REQUESTS_PER_CONNECTION):
                    correlation_id, body = decode_response(ApiKey.PRODUCE, 7, conn.receive_frame())
                    partition = body["responses"][0]["partition_responses"][0]
                    answers.append(
                        (correlation_id, partition["error_code"], partition["base_offset"])
                    )
                results[index] = answers
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            errors.append(error)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sorted(results) == list(range(CONNECTIONS))
    offsets = []
    for answers in results.values():
        assert [cid for cid, _, _ in answers] == list(range(REQUESTS_PER_CONNECTION))
        assert all(code == ErrorCode.NONE for _, code, _ in answers), answers
        # One connection's requests are appended in the order it sent them.
        assert [offset for _, _, offset in answers] == sorted(offset for _, _, offset in answers)
        offsets += [offset for _, _, offset in answers]
    assert sorted(offsets) == list(range(CONNECTIONS * REQUESTS_PER_CONNECTION))

    # One request larger than the whole budget (3 x 150 KiB in one batch) is let in alone.
    with KafkaConnection.from_bootstrap(node.bootstrap_servers) as conn:
        conn.send_raw(_produce(99, "budget", [b"y" * VALUE_BYTES for _ in range(3)]))
        correlation_id, body = decode_response(ApiKey.PRODUCE, 7, conn.receive_frame())
    partition = body["responses"][0]["partition_responses"][0]
    assert correlation_id == 99 and partition["error_code"] == ErrorCode.NONE, partition
    assert partition["base_offset"] == CONNECTIONS * REQUESTS_PER_CONNECTION

    # An unmodified client meanwhile works as usual.
    delivered: list[object] = []
    producer = Producer({"bootstrap.servers": node.bootstrap_servers, "acks": "all"})
    for n in range(20):
        producer.produce("budget", b"z%d" % n, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(30) == 0
    assert delivered == [None] * 20


def test_a_trickling_request_holds_the_budget_only_until_its_timeout(cluster_factory) -> None:
    # A client announces a 200 KiB request and sends 10 bytes of it: it holds 200 KiB of the
    # 256 KiB budget, so a 150 KiB request from another connection waits, unread, until the
    # node closes the trickling connection (broker.request_timeout_ms), then is served.
    (node,) = cluster_factory(
        1, broker={"queued_max_request_bytes": BUDGET_BYTES, "request_timeout_ms": 2000}
    )
    assert create_topic(node, "trickle", 1, 1)["error_code"] == ErrorCode.NONE
    host, _, port = node.bootstrap_servers.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as trickler, \
            KafkaConnection.from_bootstrap(node.bootstrap_servers) as other:  # fmt: skip
        trickler.sendall((200 * 1024).to_bytes(4, "big") + b"0123456789")
        other.request(ApiKey.API_VERSIONS, 3, {})  # small requests are not held up
        other.send_raw(_produce(7, "trickle", [b"w" * VALUE_BYTES]))
        correlation_id, body = decode_response(ApiKey.PRODUCE, 7, other.receive_frame())
        # By the time the waiting request was read, the trickler's connection was closed (its
        # end of stream is already there, not 2 s away).
        readable, _, _ = select.select([trickler], [], [], 0.5)
        assert readable and trickler.recv(1) == b""
    partition = body["responses"][0]["partition_responses"][0]
    assert correlation_id == 7 and partition["error_code"] == ErrorCode.NONE, partition
    assert partition["base_offset"] == 0


#: The flood of the memory test: connections that each send two requests of FLOOD_BYTES at
#: once (about 360 MB offered), and how far above its resident memory before the flood the
#: node may go (the budget, 16 MiB, plus what a connection's reader buffers, about 0.25 MB
#: each). Before the read loop released each request it had handled, the node peaked about
#: 360 MB above it here: every connection kept its last request while it waited for the next.
FLOOD_CONNECTIONS = 200
FLOOD_BYTES = 900_000
FLOOD_BUDGET_BYTES = 16 << 20
FLOOD_RSS_GROWTH_MAX_MB = 150


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "the node closed the connection"
        data += chunk
    return data


def _status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_flood_of_big_requests_keeps_the_node_within_its_budget(cluster_factory) -> None:
    (node,) = cluster_factory(
        1,
        broker={"queued_max_request_bytes": FLOOD_BUDGET_BYTES, "max_connections": 400},
    )
    assert create_topic(node, "flood", 1, 1)["error_code"] == ErrorCode.NONE
    assert node.pid is not None
    value = b"f" * FLOOD_BYTES
    frames = [_produce(n, "flood", [value]) for n in range(2)]
    with KafkaConnection.from_bootstrap(node.bootstrap_servers) as conn:
        conn.send_raw(frames[0])  # the partition is led and written once before the flood
        assert decode_response(ApiKey.PRODUCE, 7, conn.receive_frame())[1]["responses"]
    before_mb = _status_mb(node.pid, "VmRSS")
    host, _, port = node.bootstrap_servers.split(",")[0].rpartition(":")
    sockets = [
        socket.create_connection((host, int(port)), timeout=60) for _ in range(FLOOD_CONNECTIONS)
    ]
    try:
        senders = [threading.Thread(target=s.sendall, args=(b"".join(frames),)) for s in sockets]
        for sender in senders:
            sender.start()
        answered = 0
        for sock in sockets:
            for _ in frames:
                (size,) = struct.unpack(">i", _read_exactly(sock, 4))
                _, body = decode_response(ApiKey.PRODUCE, 7, _read_exactly(sock, size))
                assert body["responses"][0]["partition_responses"][0]["error_code"] == 0
                answered += 1
        for sender in senders:
            sender.join(timeout=60)
    finally:
        for sock in sockets:
            sock.close()
    assert answered == 2 * FLOOD_CONNECTIONS
    growth_mb = _status_mb(node.pid, "VmHWM") - before_mb
    assert growth_mb < FLOOD_RSS_GROWTH_MAX_MB, f"peak resident memory grew {growth_mb:.0f} MB"
