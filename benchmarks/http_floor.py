"""The floor under the HTTP front door's per-message cost: what its parts cost with no Flux
work behind them, on this machine.

- ``aiohttp``: a bare aiohttp server (its own process) whose ``POST /publish`` handler parses
  the JSON body and answers a JSON object, as a node answers a publish, driven by wrk
  (``--connections``, ``--seconds``; the ``POST /publish`` body of ``push_http_publish.lua``):
  requests per second, and the server's CPU per request.
- ``forward_link``: round trips on one ``ForwardLinks`` link (``cluster/http/forward_link.py``,
  the frames a broker forwards a publish in) to a server process whose produce answers at
  once; ``--link-calls`` calls from ``--link-concurrency`` concurrent callers: the CPU per
  round trip of each end.
- ``websocket`` and ``tcp``: the transport alone, one frame pair at a time (an 80-byte request,
  a 300-byte answer: the sizes of a follower's fetch request and a one-message answer), over a
  bare aiohttp WebSocket and over a bare asyncio protocol with 4-byte length prefixes, both
  ends on uvloop as the nodes run (``--pingpong-calls`` round trips each, to a server process
  of their own): the CPU per round trip of each end, what a replication round with one
  follower costs before any Flux work.

Prints one JSON object.

    python benchmarks/http_floor.py [--connections 16] [--seconds 5] [--link-calls 20000]
        [--link-concurrency 4] [--pingpong-calls 20000]
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from flux.cluster.http.forward_link import LINK_PATH, ForwardLinks, serve_produce_link  # noqa: E402
from flux.cluster.launcher import free_port  # noqa: E402
from scaling import _cpu_seconds  # noqa: E402

_BODY = '{"id":"x-1","message":"m-1","topic":"t"}'


# -- the server process -------------------------------------------------------------------------


async def _publish(request: web.Request) -> web.Response:
    body = json.loads(await request.read())
    return web.json_response(
        {"topic": body["topic"], "partition": 0, "offset": 0, "duplicate": False}
    )


async def _produce(topic: str, partition: int, records: list[Any]) -> tuple[int, Any]:
    offsets = [
        {"topic": topic, "partition": partition, "offset": i, "duplicate": False}
        for i in range(len(records))
    ]
    return 200, {"offsets": offsets}


async def _link(request: web.Request) -> web.StreamResponse:
    return await serve_produce_link(request, _produce)


def _serve(port: int) -> None:
    app = web.Application()
    app.router.add_post("/publish", _publish)
    app.router.add_get(LINK_PATH, _link)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


_PING = b"r" * 80
_PONG = b"a" * 300


async def _pingpong_websocket(request: web.Request) -> web.StreamResponse:
    socket = web.WebSocketResponse(compress=False)
    await socket.prepare(request)
    async for _ in socket:
        await socket.send_bytes(_PONG)
    return socket


class _Framed(asyncio.Protocol, abc.ABC):
    """Length-prefixed frames (4 bytes, big-endian) over a bare connection: each whole frame
    received goes to ``frame_received``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.buffer = bytearray()

    def send(self, frame: bytes) -> None:
        self.transport.write(len(frame).to_bytes(4, "big") + frame)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            size = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < 4 + size:
                return
            frame = bytes(self.buffer[4 : 4 + size])
            del self.buffer[: 4 + size]
            self.frame_received(frame)

    @abc.abstractmethod
    def frame_received(self, frame: bytes) -> None:
        """One whole frame, its length prefix removed."""


class _PingPongServer(_Framed):
    """Answers each frame with ``_PONG``."""

    def frame_received(self, frame: bytes) -> None:
        self.send(_PONG)


def _serve_pingpong(port: int, tcp_port: int) -> None:
    import uvloop

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/pingpong", _pingpong_websocket)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.get_running_loop().create_server(_PingPongServer, "127.0.0.1", tcp_port)
        await asyncio.Event().wait()

    uvloop.run(run())


class _PingPongClient(_Framed):
    """Hands each frame to the call waiting for it."""

    waiter: asyncio.Future[bytes] | None = None

    def frame_received(self, frame: bytes) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(frame)


async def _pingpong(kind: str, port: int, calls: int, server_pid: int) -> dict[str, Any]:
    """``calls`` frame pairs, one at a time, over a bare WebSocket or TCP connection."""
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as session:
        if kind == "websocket":
            socket = await session.ws_connect(f"http://127.0.0.1:{port}/pingpong", compress=0)

            async def one() -> None:
                await socket.send_bytes(_PING)
                answer = await socket.receive()
                assert answer.data == _PONG

        else:
            _, protocol = await loop.create_connection(_PingPongClient, "127.0.0.1", port)

            async def one() -> None:
                protocol.waiter = loop.create_future()
                protocol.send(_PING)
                assert await protocol.waiter == _PONG

        for _ in range(200):  # warm-up
            await one()
        server_before = _cpu_seconds(server_pid)
        cpu_before = time.process_time()
        started = time.perf_counter()
        for _ in range(calls):
            await one()
        elapsed = time.perf_counter() - started
        caller_cpu = time.process_time() - cpu_before
        server_cpu = _cpu_seconds(server_pid) - server_before
    return {
        "round_trips": calls,
        "round_trips_per_s": round(calls / elapsed),
        "caller_cpu_us_per_round_trip": round(caller_cpu / calls * 1e6, 1),
        "server_cpu_us_per_round_trip": round(server_cpu / calls * 1e6, 1),
    }


# -- the measurements ---------------------------------------------------------------------------


def _wrk(port: int, connections: int, seconds: float, server_pid: int) -> dict[str, Any]:
    script = Path(os.environ.get("TMPDIR", "/tmp")) / f"http-floor-{os.getpid()}.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = '{_BODY}'\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    try:
        before = _cpu_seconds(server_pid)
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{max(1, round(seconds))}s",
                "-s",
                str(script),
                f"http://127.0.0.1:{port}/publish",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=seconds + 60,
        ).stdout
        cpu = _cpu_seconds(server_pid) - before
    finally:
        script.unlink(missing_ok=True)
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return {
        "connections": connections,
        "requests_per_s": round(rate),
        "server_cpu_us_per_request": round(cpu / max(requests, 1) * 1e6, 1),
        "non_2xx": int(m.group(1)) if (m := re.search(r"Non-2xx.*?(\d+)", out)) else 0,
    }


class _Peers:
    """What ``ForwardLinks`` asks of ``BrokerPeers``: one leader, plain HTTP."""

    internal = None

    def __init__(self, port: int) -> None:
        self._port = port
        self._client: aiohttp.ClientSession | None = None

    def address(self, broker_id: int) -> str:
        return f"127.0.0.1:{self._port}"

    def headers(self) -> dict[str, str]:
        return {}

    def client(self) -> aiohttp.ClientSession:
        if self._client is None:
            self._client = aiohttp.ClientSession()
        return self._client


async def _link_round_trips(
    port: int, calls: int, concurrency: int, server_pid: int
) -> dict[str, Any]:
    peers = _Peers(port)
    links = ForwardLinks(peers)
    record = {"key": None, "value": "bS0x", "headers": [["flux-msg-id", "eC0x"]]}
    try:
        await links.produce(1, "t", 0, [record], 5.0)  # open the link

        async def caller() -> None:
            for _ in range(calls // concurrency):
                status, _ = await links.produce(1, "t", 0, [record], 5.0)
                assert status == 200

        server_before = _cpu_seconds(server_pid)
        cpu_before = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        caller_cpu = time.process_time() - cpu_before
        server_cpu = _cpu_seconds(server_pid) - server_before
    finally:
        await links.close()
        await peers.client().close()
    done = calls // concurrency * concurrency
    return {
        "calls": done,
        "concurrency": concurrency,
        "round_trips_per_s": round(done / elapsed),
        "caller_cpu_us_per_call": round(caller_cpu / done * 1e6, 1),
        "leader_cpu_us_per_call": round(server_cpu / done * 1e6, 1),
    }


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the server process exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server did not listen within 30 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--link-calls", type=int, default=20000)
    parser.add_argument("--link-concurrency", type=int, default=4)
    parser.add_argument("--pingpong-calls", type=int, default=20000)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-pingpong", type=int, nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve)
        return
    if args.serve_pingpong:
        _serve_pingpong(*args.serve_pingpong)
        return
    import uvloop

    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        _wait_listening(port, server)
        figures = {
            "aiohttp": _wrk(port, args.connections, args.seconds, server.pid),
            "forward_link": asyncio.run(
                _link_round_trips(port, args.link_calls, args.link_concurrency, server.pid)
            ),
        }
    finally:
        server.terminate()
        server.wait(timeout=10)
    ws_port, tcp_port = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve-pingpong", str(ws_port), str(tcp_port)]
    )
    try:
        _wait_listening(ws_port, server)
        _wait_listening(tcp_port, server)
        for kind, kind_port in (("websocket", ws_port), ("tcp", tcp_port)):
            figures[kind] = uvloop.run(_pingpong(kind, kind_port, args.pingpong_calls, server.pid))
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
