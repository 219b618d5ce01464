"""Signed push deliveries: a subscription's signing secret comes back from ``POST /subscribe``
once, and every webhook delivery (and every WebSocket handshake) carries an HMAC a subscriber
verifies with it (``flux.auth.signing``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from flux.auth.signing import SIGNATURE_HEADER, verify
from flux.cluster.launcher import NodeProcess

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import SubscriberServer, call

pytestmark = pytest.mark.integration


@dataclass
class RecordingSubscriber(SubscriberServer):
    """Records each webhook body with its headers, and each WebSocket handshake's headers."""

    port: int = 0
    posts: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)
    handshakes: list[dict[str, str]] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)
    _loop: Any = None
    _thread: Any = None
    _sockets: set[web.WebSocketResponse] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def _poll(self, request: web.Request) -> web.Response:
        body = await request.read()
        with self._lock:
            self.posts.append((body, dict(request.headers)))
        return web.json_response({"ok": True})

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        with self._lock:
            self.handshakes.append(dict(request.headers))
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._sockets.add(socket)
        try:
            async for frame in socket:
                message = json.loads(frame.data)
                with self._lock:
                    self.frames.append(message)
                await socket.send_json({"ack": message["id"]})
        finally:
            self._sockets.discard(socket)
        return socket


@pytest.fixture
def subscriber() -> Iterator[RecordingSubscriber]:
    server = RecordingSubscriber().start()
    yield server
    server.stop()


def test_deliveries_are_signed(
    node_factory: Callable[..., NodeProcess], subscriber: RecordingSubscriber
) -> None:
    node = node_factory(topic={"partitions": 1, "replication_factor": 1})
    status, answer = call(
        node, "POST", "/subscribe", {"address": subscriber.address, "topics": ["signed"]}
    )
    assert status in (200, 201), answer
    secret = answer["signingSecret"]
    assert len(secret) >= 32
    # The secret is not shown again.
    status, listed = call(node, "GET", "/subscriptions")
    assert status == 200 and secret not in json.dumps(listed)
    status, described = call(node, "GET", f"/subscriptions/{answer['id']}")
    assert status == 200 and secret not in json.dumps(described)

    for index in range(5):
        status, _ = call(
            node, "POST", "/publish", {"id": f"m{index}", "message": f"v{index}", "topic": "signed"}
        )
        assert status == 200
    wait_until(lambda: len(subscriber.posts) >= 5)
    now_ms = int(time.time() * 1000)
    for body, headers in subscriber.posts:
        assert verify(secret, headers, body, now_ms=now_ms)
        # A tampered body or another secret does not verify.
        assert not verify(secret, headers, body + b" ", now_ms=now_ms)
        assert not verify("another-secret", headers, body, now_ms=now_ms)
        # Nor does an old signature replayed later.
        assert not verify(secret, headers, body, now_ms=now_ms + 600_000)

    status, ws_answer = call(
        node,
        "POST",
        "/subscribe",
        {"address": subscriber.ws_address, "topics": ["signed"], "readOld": True},
    )
    assert status in (200, 201), ws_answer
    ws_secret = ws_answer["signingSecret"]
    assert ws_secret != secret
    wait_until(lambda: len(subscriber.frames) >= 5)
    handshake = subscriber.handshakes[0]
    assert SIGNATURE_HEADER in handshake
    assert verify(ws_secret, handshake, ws_answer["id"].encode(), now_ms=int(time.time() * 1000))
    # Subscribing again to the same address and topics returns the same secret.
    status, again = call(
        node, "POST", "/subscribe", {"address": subscriber.address, "topics": ["signed"]}
    )
    assert status in (200, 201) and again["signingSecret"] == secret
