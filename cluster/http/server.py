"""The broker's HTTP listener (aiohttp).

It serves ``GET /health``, ``GET /ping``, the replication endpoint, and the routes of the HTTP
API (``api.HttpApi``: original Flux publish/subscribe, REST, metrics, and the internal
broker-to-broker endpoints). ``broker.http_port`` (alias ``api.port``) is its port: one
listener for all of it. The broker registers the bound port with the controller, so other
brokers can reach it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import WSCloseCode, WSMsgType, web

from ..connection_limit import ConnectionLimit
from ..replication.session import FetchSession, SessionOverflowError
from ..replication.wire import ReplicationWireError, decode_fetch_request, encode_fetch_response
from .malformed import MalformedRequestLog

__all__ = ["HTTP_LISTENER", "BrokerHttpServer"]

log = logging.getLogger("flux.cluster.http")

MAX_REQUEST_BYTES = 4 << 20

#: The HTTP port's name where listeners are named (metrics, logs): never a Kafka listener's
#: name, which has no hyphen.
HTTP_LISTENER = "http-port"

#: Largest replication request accepted (a full request names every followed partition).
MAX_REPLICATION_MESSAGE_BYTES = 64 << 20


class ReplicationEndpoint(Protocol):
    def open_fetch_session(self, replica_id: int, incarnation_id: str) -> FetchSession: ...

    def close_fetch_session(self, session: FetchSession) -> None: ...


class BrokerHttpServer:
    """``health`` is a callable returning the JSON document of ``GET /health``;
    ``on_malformed`` is called for each request the HTTP parser refuses (``malformed``);
    ``idle_timeout_s`` (``broker.connections_max_idle_ms``) closes a connection that waits that
    long for a request: idle after its last answer, or trickling a request's headers (aiohttp's
    keep-alive timer, which runs from the connection's start or its last answer and which no
    byte of a request short of its headers moves). A request being handled (a WebSocket, a
    long poll) is not idle. At most ``max_connections`` (``broker.max_connections``) are
    served at once, clients' and other brokers' (replication sessions, forwarding links)
    together: one past it is closed as soon as it is accepted (``connection_limit.py``;
    ``on_refused`` counts it). A burst accepted in one turn of the event loop is counted
    as one, so the port may exceed the limit by up to one accept backlog (128)."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        health: Callable[[], dict[str, Any]],
        replication: ReplicationEndpoint,
        routes: list[web.RouteDef] | None = None,
        ssl_context: Any = None,
        middlewares: list[Any] | None = None,
        on_malformed: Callable[[], None] | None = None,
        idle_timeout_s: float = 600.0,
        max_connections: int = 1000,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self._connection_limit = ConnectionLimit(
            HTTP_LISTENER, max_connections, log=log, on_refused=on_refused
        )
        self._ssl_context = ssl_context
        self._idle_timeout_s = idle_timeout_s
        self._middlewares = list(middlewares or [])
        self._host = host
        self._port = port
        self._health = health
        self._replication = replication
        self._replication_sockets: set[web.WebSocketResponse] = set()
        self._routes = list(routes or [])
        self._runner: web.AppRunner | None = None
        # Malformed requests: one counted, rate-limited line each, not aiohttp's traceback.
        self._request_log = MalformedRequestLog(log, count=on_malformed)
        self.port = 0

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=self._middlewares)
        app.add_routes(
            [
                web.get("/health", self._get_health),
                web.get("/ping", self._ping),
                web.get("/replication/session", self._replication_session),
                *self._routes,
            ]
        )
        self._runner = web.AppRunner(
            app,
            access_log=None,
            logger=self._request_log,
            keepalive_timeout=self._idle_timeout_s,
        )
        await self._runner.setup()
        site = _LimitedSite(
            self._runner, self._host, self._port, self._connection_limit, self._ssl_context
        )
        await site.start()
        self.port = site.port

    @property
    def connection_count(self) -> int:
        """Connections open on the port (``flux_connections{listener="http-port"}``)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    async def stop(self) -> None:
        # Followers' sessions are long-lived: close them, or the runner waits for them.
        sockets = list(self._replication_sockets)
        if sockets:
            await asyncio.gather(
                *(socket.close(code=WSCloseCode.GOING_AWAY) for socket in sockets),
                return_exceptions=True,
            )
        if self._runner is not None:
            await self._runner.cleanup()

    async def _get_health(self, request: web.Request) -> web.Response:
        document = self._health()
        return web.json_response(document, status=200 if document.get("healthy") else 503)

    async def _replication_session(self, request: web.Request) -> web.StreamResponse:
        """Leader side of replication: a follower's fetch session on one WebSocket (binary
        requests and answers, see ``replication/session.py`` and ``replication/wire.py``)."""
        try:
            replica_id = int(request.query["replica_id"])
            incarnation_id = request.query["broker_epoch"]
        except (KeyError, ValueError) as error:
            return web.json_response(
                {"error": f"a replication session needs replica_id and broker_epoch: {error}"},
                status=400,
            )
        socket = web.WebSocketResponse(
            compress=False, max_msg_size=MAX_REPLICATION_MESSAGE_BYTES, timeout=1.0
        )
        await socket.prepare(request)
        session = self._replication.open_fetch_session(replica_id, incarnation_id)
        reader = asyncio.create_task(self._read_fetch_requests(socket, session))
        self._replication_sockets.add(socket)
        try:
            while (fetch := await session.next_request()) is not None:
                answers = await session.serve(fetch)
                if socket.closed:
                    break
                await socket.send_bytes(b"".join(encode_fetch_response(answers)))
        except ConnectionError as error:
            log.debug("replication session of broker %d ended: %s", replica_id, error)
        finally:
            self._replication_sockets.discard(socket)
            self._replication.close_fetch_session(session)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await socket.close()
        return socket

    async def _read_fetch_requests(
        self, socket: web.WebSocketResponse, session: FetchSession
    ) -> None:
        """Queue the follower's requests on its session; a bad message closes the session."""
        try:
            async for message in socket:
                if message.type is not WSMsgType.BINARY:
                    raise ReplicationWireError(f"unexpected {message.type.name} message")
                session.push(decode_fetch_request(message.data))
        except (ReplicationWireError, SessionOverflowError) as error:
            log.warning("bad replication request from broker %d: %s", session.replica_id, error)
            await socket.close(code=WSCloseCode.UNSUPPORTED_DATA, message=str(error)[:120].encode())
        finally:
            session.close()

    async def _ping(self, request: web.Request) -> web.Response:
        return web.json_response({"pong": True})


class _LimitedSite(web.BaseSite):
    """aiohttp's TCP site with ``limit`` applied on accept: the protocol a new connection gets
    is the runner's request handler, or, past the limit, one that closes it at once."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        limit: ConnectionLimit,
        ssl_context: Any,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._limit = limit

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        await super().start()
        self._server = await asyncio.get_running_loop().create_server(
            self._protocol,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
        )

    def _protocol(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        open_connections = len(server.connections)
        if open_connections < self._limit.limit:
            return server()
        return _Refused(self._limit, open_connections)


class _Refused(asyncio.Protocol):
    """A connection past the limit: counted, logged, and closed before anything is read."""

    def __init__(self, limit: ConnectionLimit, open_connections: int) -> None:
        self._limit = limit
        self._open_connections = open_connections

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._limit.refuse(self._open_connections, transport.get_extra_info("peername"))
        transport.close()
