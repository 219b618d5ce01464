"""ClusterClient (async) routing and retries against scripted in-process fake brokers.

A single real broker cannot be made to answer NOT_LEADER_OR_FOLLOWER or NOT_CONTROLLER, so
these tests run tiny socket servers that speak the real codec and answer from a script.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flux.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    RequestHeader,
    decode_request,
    encode_response,
)
from flux.protocol.errors import ErrorCode
from flux.sdk.cluster_client import ClusterClient
from flux.sdk.errors import FluxConnectionError, NotLeaderError
from flux.sdk.metadata import RetryPolicy
from flux.sdk.simple import SimpleProducer

Handler = Callable[[RequestHeader, dict[str, Any]], dict[str, Any]]
FAST = RetryPolicy(max_attempts=5, timeout_s=5, backoff_initial_s=0.001, backoff_max_s=0.01)


class FakeBroker:
    """Answers ApiVersions itself and every other request with ``handlers[api_key]``."""

    def __init__(self, node_id: int, advertised: dict[int, tuple[int, int]] | None = None):
        self.node_id = node_id
        self.advertised = advertised or dict(SUPPORTED_VERSIONS)
        self.handlers: dict[int, Handler] = {}
        self.received: list[RequestHeader] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._clients: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        """Stop listening and drop every connection (like a killed process)."""
        for sock in (self._server, *self._clients):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept / recv
            except OSError:
                pass
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self._clients.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            while True:
                size_bytes = client.recv(4, socket.MSG_WAITALL)
                if len(size_bytes) < 4:
                    return
                (size,) = struct.unpack(">i", size_bytes)
                header, body = decode_request(client.recv(size, socket.MSG_WAITALL))
                self.received.append(header)
                if header.api_key == ApiKey.API_VERSIONS:
                    answer = {
                        "error_code": 0,
                        "api_keys": [
                            {"api_key": key, "min_version": low, "max_version": high}
                            for key, (low, high) in self.advertised.items()
                        ],
                    }
                else:
                    answer = self.handlers[header.api_key](header, body)
                client.sendall(encode_response(header, answer))
        except OSError:
            return

    def versions_of(self, api_key: int) -> list[int]:
        return [h.api_version for h in self.received if h.api_key == api_key]


def metadata_answer(brokers: list[FakeBroker], leader: int, controller: int) -> dict[str, Any]:
    return {
        "brokers": [
            {"node_id": b.node_id, "host": "127.0.0.1", "port": b.port, "rack": None}
            for b in brokers
        ],
        "cluster_id": "fake",
        "controller_id": controller,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "topic_id": uuid.UUID(int=1),
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": 0,
                        "leader_id": leader,
                        "leader_epoch": 1,
                        "replica_nodes": [b.node_id for b in brokers],
                        "isr_nodes": [b.node_id for b in brokers],
                        "offline_replicas": [],
                    }
                ],
            }
        ],
    }


def produce_answer(code: ErrorCode, offset: int = -1) -> Handler:
    def answer(header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {"index": 0, "error_code": code, "base_offset": offset}
                    ],
                }
            ]
        }

    return answer


@pytest.fixture
def brokers() -> Iterator[list[FakeBroker]]:
    fakes = [FakeBroker(1), FakeBroker(2, advertised={**SUPPORTED_VERSIONS, 0: (3, 7)})]
    yield fakes
    for fake in fakes:
        fake.close()


def _serve_metadata(brokers: list[FakeBroker], state: dict[str, int]) -> None:
    for fake in brokers:
        fake.handlers[ApiKey.METADATA] = lambda h, b: metadata_answer(
            brokers, state["leader"], state["controller"]
        )


def test_not_leader_refreshes_and_reroutes(brokers: list[FakeBroker]) -> None:
    one, two = brokers
    state = {"leader": 1, "controller": 1}
    _serve_metadata(brokers, state)

    def moved(header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        state["leader"] = 2  # leadership moved: broker 1 refuses, metadata now says 2
        return produce_answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)(header, body)

    one.handlers[ApiKey.PRODUCE] = moved
    two.handlers[ApiKey.PRODUCE] = produce_answer(ErrorCode.NONE, offset=41)
    with SimpleProducer(f"127.0.0.1:{one.port}", timeout_s=5) as producer:
        producer.client.retry = FAST
        assert producer.send("t", b"x", partition=0).offset == 41
    assert one.versions_of(ApiKey.PRODUCE) == [9]
    assert two.versions_of(ApiKey.PRODUCE) == [7]  # negotiated per broker: 2 advertises 3-7


def test_persistent_not_leader_raises_typed_error(brokers: list[FakeBroker]) -> None:
    one, _ = brokers
    _serve_metadata(brokers, {"leader": 1, "controller": 1})
    one.handlers[ApiKey.PRODUCE] = produce_answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    with SimpleProducer(f"127.0.0.1:{one.port}") as producer:
        producer.client.retry = FAST
        with pytest.raises(NotLeaderError):
            producer.send("t", b"x", partition=0)
    assert len(one.versions_of(ApiKey.PRODUCE)) == FAST.max_attempts


def test_not_controller_follows_the_new_controller(brokers: list[FakeBroker]) -> None:
    one, two = brokers
    state = {"leader": 1, "controller": 1}
    _serve_metadata(brokers, state)

    def create_answer(code: ErrorCode) -> Handler:
        def answer(header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
            state["controller"] = 2
            return {"topics": [{"name": "n", "error_code": code, "error_message": None}]}

        return answer

    one.handlers[ApiKey.CREATE_TOPICS] = create_answer(ErrorCode.NOT_CONTROLLER)
    two.handlers[ApiKey.CREATE_TOPICS] = create_answer(ErrorCode.NONE)

    async def create() -> int:
        async with ClusterClient(f"127.0.0.1:{one.port}", retry=FAST) as client:
            return await client.call_controller(
                ApiKey.CREATE_TOPICS,
                {"topics": [{"name": "n", "num_partitions": 1, "replication_factor": 1}]},
                lambda response, _: _raise_first(response),
            )

    assert asyncio.run(create()) == 0
    assert len(one.versions_of(ApiKey.CREATE_TOPICS)) == 1
    assert len(two.versions_of(ApiKey.CREATE_TOPICS)) == 1


def _raise_first(response: dict[str, Any]) -> int:
    from flux.sdk.errors import error_for

    code = response["topics"][0]["error_code"]
    if code:
        raise error_for(code)
    return code


def test_metadata_survives_the_bootstrap_broker(brokers: list[FakeBroker]) -> None:
    one, two = brokers
    _serve_metadata(brokers, {"leader": 2, "controller": 2})

    async def refresh_twice() -> None:
        async with ClusterClient(f"127.0.0.1:{one.port}", retry=FAST) as client:
            await client.refresh(["t"])
            one.close()
            snapshot = await client.refresh()
            assert snapshot.brokers.keys() == {1, 2}
            assert (await client.leader_for("t", 0)).node_id == 2

    asyncio.run(refresh_twice())
    assert len(two.versions_of(ApiKey.METADATA)) >= 1


def test_nobody_home_names_every_address_tried() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def call() -> None:
        async with ClusterClient(f"127.0.0.1:{port}", retry=FAST) as client:
            await client.call_any(ApiKey.METADATA, {"topics": []}, lambda r, v: r)

    with pytest.raises(FluxConnectionError) as caught:
        asyncio.run(call())
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert "gave up after 5 attempts" in str(caught.value)
