"""Helpers for the HTTP API, push and memory-topic tests: a module-scoped cluster, JSON calls,
and small subscriber servers (webhook and WebSocket) that run in a thread of the test."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from aiohttp import web
from flux.cluster.launcher import NodeProcess, free_port, running_local_cluster

from tests.conftest import FAST_FAILURE_DETECTION


@contextmanager
def running_cluster(
    root: Path, nodes: int = 3, **sections: dict[str, Any]
) -> Iterator[list[NodeProcess]]:
    extra: dict[str, dict[str, Any]] = {s: dict(k) for s, k in FAST_FAILURE_DETECTION.items()}
    for section, keys in sections.items():
        extra.setdefault(section, {}).update(keys)
    with running_local_cluster(root, nodes, extra=extra) as processes:
        yield processes


def http_address(node: NodeProcess) -> str:
    return f"http://{node.ready['broker_http']}"


def call(
    node: NodeProcess | str, method: str, path: str, body: Any = None, *, raw: bytes | None = None
) -> tuple[int, Any]:
    """``(status, decoded JSON)`` of one HTTP API call."""
    base = node if isinstance(node, str) else http_address(node)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            payload = reply.read()
            status = reply.status
    except urllib.error.HTTPError as error:
        payload = error.read()
        status = error.code
    try:
        return status, json.loads(payload) if payload else None
    except ValueError:
        return status, payload.decode(errors="replace")


def read_messages(node: NodeProcess, topic: str, partition: int) -> list[dict[str, Any]]:
    """Every committed message of one partition (up to 10,000), as ``GET .../messages``."""
    status, answer = call(
        node, "GET", f"/topics/{topic}/partitions/{partition}/messages?limit=10000"
    )
    assert status == 200, answer
    return list(answer["messages"])


def metrics_text(node: NodeProcess) -> str:
    with urllib.request.urlopen(http_address(node) + "/metrics", timeout=30) as reply:
        return reply.read().decode()


def socket_address(text: str) -> tuple[str, int]:
    """``(host, port)`` of a ``host:port`` address (a node's ``broker_http``, a bootstrap
    server), for ``socket.create_connection``."""
    host, _, port = text.rpartition(":")
    return host, int(port)


def metric_value(node: NodeProcess, name: str) -> float:
    """The sum of the samples named ``name`` in the node's /metrics, over their labels (0 when
    there is none)."""
    total = 0.0
    for line in metrics_text(node).splitlines():
        if line.startswith((name + " ", name + "{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


class SubscriberServer:
    """Serves ``POST /poll`` (``_poll``) and ``GET /ws`` (``_ws``) of a subclass from an event
    loop in a thread of the test; ``start`` binds a free port, ``stop`` closes the WebSockets
    still open (``_sockets``) and the loop."""

    port: int
    _loop: asyncio.AbstractEventLoop | None
    _thread: threading.Thread | None
    _sockets: set[web.WebSocketResponse]

    async def _poll(self, request: web.Request) -> web.Response:
        raise NotImplementedError

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        raise NotImplementedError

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_address(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def _close_sockets(self) -> None:
        for ws in list(self._sockets):
            await ws.close()

    def start(self) -> Self:
        self.port = free_port()
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.add_routes([web.post("/poll", self._poll), web.get("/ws", self._ws)])
            runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            closing = asyncio.run_coroutine_threadsafe(self._close_sockets(), self._loop)
            closing.result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


@dataclass
class Subscriber(SubscriberServer):
    """A webhook (``POST /poll``) and WebSocket (``GET /ws``) subscriber in a thread.

    ``fail`` decides per message whether to answer 500 (webhook) or a nack (WebSocket).
    Every delivery attempt is recorded in ``attempts`` with its arrival time (monotonic)."""

    fail: Callable[[dict[str, Any]], bool] = lambda message: False
    # "ok" answers, "hang" holds the request for ``hang_s`` without answering, "reset" drops
    # the connection without an answer.
    behaviour: str = "ok"
    hang_s: float = 3.0
    attempts: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sockets: set[web.WebSocketResponse] = field(default_factory=set)

    def acked(self) -> list[dict[str, Any]]:
        with self._lock:
            return [m for _, m in self.attempts if not m.get("_failed")]

    def all_attempts(self) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            return list(self.attempts)

    def _record(self, message: dict[str, Any]) -> bool:
        failed = self.fail(message) or "_hung" in message or "_reset" in message
        with self._lock:
            self.attempts.append((time.monotonic(), {**message, "_failed": failed}))
        return failed

    async def _poll(self, request: web.Request) -> web.Response:
        message = await request.json()
        if self.behaviour == "hang":
            self._record({**message, "_hung": True})
            await asyncio.sleep(self.hang_s)
            return web.Response(status=504)
        if self.behaviour == "reset":
            self._record({**message, "_reset": True})
            assert request.transport is not None
            request.transport.abort()
            return web.Response(status=500)
        if self._record(message):
            return web.Response(status=500)
        return web.json_response({"ok": True})

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._sockets.add(socket)
        try:
            async for frame in socket:
                message = json.loads(frame.data)
                key = "nack" if self._record(message) else "ack"
                await socket.send_json({key: message["id"]})
        finally:
            self._sockets.discard(socket)
        return socket


def create_topic_http(
    node: NodeProcess, name: str, partitions: int, replication_factor: int = 3, **configs: str
) -> None:
    status, answer = call(
        node,
        "POST",
        "/topics",
        {
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
            "configs": configs,
        },
    )
    assert status == 201, answer


def create_everywhere(
    nodes: list[NodeProcess],
    name: str,
    partitions: int,
    replication_factor: int = 3,
    **configs: str,
) -> None:
    """Create a topic over HTTP and wait until every broker's metadata has it."""
    create_topic_http(nodes[0], name, partitions, replication_factor, **configs)
    for node in nodes:
        deadline = time.monotonic() + 30
        while call(node, "GET", f"/topics/{name}")[0] != 200:
            assert time.monotonic() < deadline, f"{name} not visible on node {node.node_id}"
            time.sleep(0.05)


def stalled_bodies(
    address: str, path: str, headers: str = ""
) -> Iterator[tuple[bytes, bytes, float]]:
    """``(status, answer, seconds)`` of two POSTs to ``path`` whose bodies stop arriving: one
    short of its Content-Length, one chunked whose second chunk is malformed. ``headers``: more
    header lines, each ending in CRLF."""
    host, port = address.rsplit(":", 1)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}".encode()
    )
    short = head + b"Content-Length: 100\r\n\r\n" + b'{"topic": "t", '
    chunked = head + b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\n'
    for first, later in ((short, b""), (chunked, b"zz\r\n")):
        with socket.create_connection((host, int(port)), timeout=15) as connection:
            started = time.monotonic()
            connection.sendall(first)
            if later:
                # Parsed apart from the headers (the case at issue); nothing to wait for.
                time.sleep(0.2)
                connection.sendall(later)
            answer = b""
            while b"}" not in answer.partition(b"\r\n\r\n")[2]:  # the end of the JSON answer
                chunk = connection.recv(65536)
                assert chunk, answer
                answer += chunk
            yield answer.split(b" ", 2)[1], answer, time.monotonic() - started
