"""The broker's HTTP listener (aiohttp).

It serves ``GET /health`` and ``GET /ping`` today; the HTTP API of the original Flux (publish,
subscribe, push delivery), REST, metrics and the replication endpoint are added to this same
server. The broker registers its bound port with the controller, so other brokers can reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ["BrokerHttpServer"]

MAX_REQUEST_BYTES = 1 << 20


class BrokerHttpServer:
    """``health`` is a callable returning the JSON document of ``GET /health``."""

    def __init__(self, *, host: str, port: int, health: Callable[[], dict[str, Any]]) -> None:
        self._host = host
        self._port = port
        self._health = health
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.add_routes([web.get("/health", self._get_health), web.get("/ping", self._ping)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, reuse_address=True)
        await site.start()
        server = site._server  # aiohttp exposes the bound sockets only through the server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _get_health(self, request: web.Request) -> web.Response:
        document = self._health()
        return web.json_response(document, status=200 if document.get("healthy") else 503)

    async def _ping(self, request: web.Request) -> web.Response:
        return web.json_response({"pong": True})
