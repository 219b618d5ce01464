"""The broker's HTTP listener (aiohttp).

It serves ``GET /health``, ``GET /ping``, the replication endpoint, and the routes of the HTTP
API (``api.HttpApi``: original Flux publish/subscribe, REST, metrics, and the internal
broker-to-broker endpoints). ``broker.http_port`` (alias ``api.port``) is its port: one
listener for all of it. The broker registers the bound port with the controller, so other
brokers can reach it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..replication.wire import PartitionData, encode_fetch_response

__all__ = ["BrokerHttpServer"]

log = logging.getLogger("flux.cluster.http")

MAX_REQUEST_BYTES = 4 << 20

ReplicaFetchHandler = Callable[[dict[str, Any]], Awaitable[list[PartitionData]]]


class BrokerHttpServer:
    """``health`` is a callable returning the JSON document of ``GET /health``."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        health: Callable[[], dict[str, Any]],
        replica_fetch: ReplicaFetchHandler,
        routes: list[web.RouteDef] | None = None,
    ) -> None:
        self._host = host
        self._port = port
        self._health = health
        self._replica_fetch = replica_fetch
        self._routes = list(routes or [])
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.add_routes(
            [
                web.get("/health", self._get_health),
                web.get("/ping", self._ping),
                web.post("/replication/fetch", self._post_replication_fetch),
                *self._routes,
            ]
        )
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

    async def _post_replication_fetch(self, request: web.Request) -> web.StreamResponse:
        """Leader side of follower replication: JSON request, binary answer."""
        try:
            body = await request.json()
            if not isinstance(body, dict) or not isinstance(body.get("partitions"), list):
                raise ValueError("the body must be an object with a partitions list")
            answers = await self._replica_fetch(body)
        except (ValueError, KeyError, TypeError) as error:
            # json.JSONDecodeError is a ValueError.
            log.warning("bad replication fetch from %s: %s", request.remote, error)
            return web.json_response({"error": f"bad replication fetch: {error}"}, status=400)
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        chunks = encode_fetch_response(answers)
        response.content_length = sum(len(chunk) for chunk in chunks)
        try:
            await response.prepare(request)
            for chunk in chunks:
                await response.write(bytes(chunk) if isinstance(chunk, memoryview) else chunk)
            await response.write_eof()
        except ConnectionError as error:
            # The follower went away while its long-poll was parked (it died or timed out).
            log.debug("replication fetch from %s not delivered: %s", request.remote, error)
        return response

    async def _ping(self, request: web.Request) -> web.Response:
        return web.json_response({"pong": True})
