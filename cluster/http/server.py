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
from typing import Any, Protocol, cast

from aiohttp import WSCloseCode, WSMsgType, web

from ..connection_limit import ConnectionLimit
from ..replication.session import FetchSession, SessionOverflowError
from ..replication.wire import ReplicationWireError, decode_fetch_request, encode_fetch_response
from .auth import NODE_PREFIXES
from .malformed import MalformedRequestLog

__all__ = ["HTTP_LISTENER", "BrokerHttpServer"]

log = logging.getLogger("flux.cluster.http")

MAX_REQUEST_BYTES = 4 << 20

#: The HTTP port's name where listeners are named (metrics, logs): never a Kafka listener's
#: name, which has no hyphen.
HTTP_LISTENER = "http-port"

#: Connections past ``broker.max_connections`` that the HTTP port still serves for other
#: brokers (replication sessions, forwarding links and internal requests: a few per peer).
PEER_RESERVE = 64
#: Connections past the limit whose first request line is being read, at most; more are
#: closed on accept.
SCREENING_MAX = 32
#: How long a connection past the limit has to send its request line.
SCREENING_TIMEOUT_S = 5.0
#: Longest request line read past the limit (aiohttp's own bound on a line).
SCREENING_MAX_LINE = 8190

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
    served at once (``connection_limit.py``; ``on_refused`` counts each refusal). Past it, a
    connection's first request line is read (``_Screening``): another broker's (a path under
    ``/internal/`` or ``/replication/``) is served within ``PEER_RESERVE`` more connections,
    so a flood of clients cannot cut replication or forwarding off (Kafka exempts its
    inter-broker listener from ``max.connections`` the same way, KIP-402); a client's is
    answered ``503`` and closed. A burst accepted in one turn of the event loop is counted
    as one, so the port may exceed its bound by up to one accept backlog (128)."""

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
        self._site: _LimitedSite | None = None
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
        self._site = site
        self.port = site.port

    @property
    def connection_count(self) -> int:
        """Connections open on the port (``flux_connections{listener="http-port"}``)."""
        return self._site.open_connections if self._site is not None else 0

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
    is the runner's request handler or, past the limit, ``_Screening`` (``_Refused``, which
    closes it at once, when ``SCREENING_MAX`` connections are being screened already)."""

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
        #: Connections past the limit whose request line is being read (``_Screening``).
        self.screening = 0

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

    @property
    def open_connections(self) -> int:
        server = self._runner.server
        return len(server.connections) if server is not None else 0

    def _protocol(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        open_connections = self.open_connections
        if open_connections < self._limit.limit:
            return server()
        if self.screening < SCREENING_MAX:
            return _Screening(self, open_connections)
        return _Refused(self._limit, open_connections)

    def admit(self, transport: asyncio.Transport, received: bytes) -> None:
        """Serve a screened connection as if accepted now: the request handler takes the
        transport and the bytes read so far."""
        server = self._runner.server
        assert server is not None
        handler = server()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        handler.data_received(received)

    def peer_slot_free(self) -> bool:
        return self.open_connections < self._limit.limit + PEER_RESERVE

    def refuse(self, open_connections: int, peer: object) -> None:
        self._limit.refuse(open_connections, peer)


class _Refused(asyncio.Protocol):
    """A connection past the limit: counted, logged, and closed before anything is read."""

    def __init__(self, limit: ConnectionLimit, open_connections: int) -> None:
        self._limit = limit
        self._open_connections = open_connections

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._limit.refuse(self._open_connections, transport.get_extra_info("peername"))
        transport.close()


#: What a client past the limit is answered once its request line is read.
_LIMIT_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json\r\n"
    b"Connection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
_LIMIT_BODY = (
    b'{"error": "too many connections: this broker serves broker.max_connections at once; '
    b'retry on another connection later"}'
)


class _Screening(asyncio.Protocol):
    """A connection past the limit, read up to the end of its request line: another
    broker's is handed to the request handler (``_LimitedSite.admit``) while
    ``PEER_RESERVE`` allows; any other is refused (counted, logged, answered ``503``), as is
    one whose line does not come within ``SCREENING_TIMEOUT_S`` or ``SCREENING_MAX_LINE``."""

    def __init__(self, site: _LimitedSite, open_connections: int) -> None:
        self._site = site
        self._open_connections = open_connections
        self._received = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Counted from here: a TLS connection whose handshake fails never gets this far.
        self._site.screening += 1
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._timer = asyncio.get_running_loop().call_later(SCREENING_TIMEOUT_S, self._refuse, b"")

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return  # decided already
        self._received += data
        end = self._received.find(b"\r\n")
        if end < 0:
            if len(self._received) > SCREENING_MAX_LINE:
                self._refuse(b"")
            return
        parts = bytes(self._received[:end]).split(b" ")
        path = parts[1].decode("latin-1") if len(parts) == 3 else ""
        if path.startswith(NODE_PREFIXES) and self._site.peer_slot_free():
            transport = self._done()
            self._site.admit(transport, bytes(self._received))
        else:
            self._refuse(_LIMIT_ANSWER % (len(_LIMIT_BODY), _LIMIT_BODY))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._done()

    def _refuse(self, answer: bytes) -> None:
        transport = self._done()
        self._site.refuse(self._open_connections, transport.get_extra_info("peername"))
        if answer:
            transport.write(answer)
        transport.close()

    def _done(self) -> asyncio.Transport:
        """Stop screening: the transport, no longer this protocol's to decide on."""
        transport = self._transport
        assert transport is not None
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
        self._site.screening -= 1
        return transport
