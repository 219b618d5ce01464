"""The Kafka protocol listener: framing, per-connection request pipeline, and input limits.

Each connection has a reader task and a writer task. The reader reads a size-prefixed frame,
decodes it and awaits the handler, one request after the other, so requests take effect in
arrival order (produce requests append in the order they came). A handler may answer with a
``Deferred`` response instead of waiting: an ``acks=all`` produce has appended and now waits
for the followers. The reader then goes on with the next request while the writer sends the
responses strictly in request order (as the Kafka protocol requires), each once it is ready.
At most ``MAX_IN_FLIGHT_REQUESTS`` responses wait per connection (Kafka's
``queued.max.requests`` in spirit): beyond that the reader stops reading, so a client cannot
make the broker buffer without bound. Across connections, the bytes of requests read and not
yet handled are bounded per node by a ``RequestBytesBudget`` (Kafka's
``queued.max.request.bytes``): a connection whose next request does not fit waits, unread,
until others finish, so a flood of large requests from many clients slows them down instead
of filling the node's memory. Without this, every acks=all request held the connection
for a whole replication round trip and, once requests came faster, they queued for the rest
of the run.

A connection with nothing to do for ``connections_max_idle_s`` (``broker.connections_max_idle_ms``,
Kafka's ``connections.max.idle.ms``, 10 minutes by default) is closed: no request read and no
response written in that time, and no response owed (a long-polling fetch is not idle). A
request whose bytes stop arriving part-way counts as idle, so neither it nor its connection
slot (``max_connections``) is held for ever. Clients reconnect on their next request, as they
do with Kafka.

At most ``max_connections`` connections are served at once (``broker.max_connections``,
Kafka's ``max.connections``, per listener): one past it is closed as soon as it is accepted
(``connection_limit.py``).

A connection that sends something we cannot answer (an impossible size, an undecodable frame,
an unknown API) is logged and closed after the responses already due; every other connection
is unaffected.

A listener's ``ListenerSecurity`` (``sasl.py``) adds TLS (the asyncio server's SSL context)
and, on SASL listeners, the SASL exchange each connection must complete before anything but
ApiVersions, SaslHandshake and SaslAuthenticate is served. Those two SASL APIs are answered
here, not by the handler: they change the connection, not the cluster. The connection's
principal (``ConnectionInfo.principal``) is what authorization goes by.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from flux.auth.principal import ANONYMOUS, principal_from_certificate_subject
from flux.protocol.api import (
    ApiKey,
    RequestHeader,
    decode_request,
    encode_response,
    encode_unsupported_api_versions_response,
)
from flux.protocol.errors import ErrorCode, InvalidFrameError, UnsupportedVersionError
from flux.protocol.framing import SIZE_PREFIX, read_size

from ..connection_limit import ConnectionLimit
from .sasl import FAILED_AUTHENTICATION_DELAY_S, ListenerSecurity, SaslFailure, SaslSession

__all__ = ["MAX_IN_FLIGHT_REQUESTS", "Deferred", "Handler", "KafkaServer", "RequestBytesBudget"]

log = logging.getLogger("flux.cluster.kafka")

API_VERSIONS_KEY = 18
#: Responses one connection may have pending (being computed or waiting to be sent).
MAX_IN_FLIGHT_REQUESTS = 100
#: Bytes a connection's stream reader buffers ahead of what the reader asked for: asyncio
#: stops reading the socket beyond twice this (the rest waits in the kernel, and TCP slows the
#: client). It bounds what a connection waiting for the ``RequestBytesBudget`` holds: with
#: 1 MiB here, 1,000 connections each offering two 900 kB requests made a node resident in
#: 1.7-2.5 GB whatever the budget (benchmarks/connection_flood.py); a frame larger than this
#: still arrives whole (``readexactly`` resumes reading as it consumes).
READ_BUFFER_BYTES = 64 * 1024
#: Frames larger than this must arrive within the server's ``frame_read_timeout_s`` once their
#: size is read (they hold that much of the node's ``RequestBytesBudget`` meanwhile); smaller
#: ones, which hold little, are read without a timer.
SLOW_FRAME_BYTES = 64 * 1024


class RequestBytesBudget:
    """The bytes of Kafka requests a node holds at once: read, and not yet handled.

    ``acquire(size)`` waits until ``size`` more bytes fit in ``capacity_bytes``; ``release``
    returns them. A request larger than the whole budget is let in alone (when nothing else is
    held), so it is slow rather than refused: its size is already bounded by
    ``socket.request.max.bytes``. Waiters are served in arrival order, so a large request is
    not starved by small ones. Used from one event loop only.
    """

    __slots__ = ("capacity_bytes", "in_use_bytes", "_waiters")

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 1:
            raise ValueError("a request byte budget needs at least one byte")
        self.capacity_bytes = capacity_bytes
        self.in_use_bytes = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Connections waiting for room."""
        return len(self._waiters)

    def _fits(self, size: int) -> bool:
        return self.in_use_bytes == 0 or self.in_use_bytes + size <= self.capacity_bytes

    async def acquire(self, size: int) -> None:
        if not self._waiters and self._fits(size):
            self.in_use_bytes += size
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted as it was cancelled: give the bytes back
            else:
                self._waiters.remove(entry)
                self._wake()
            raise

    def release(self, size: int) -> None:
        self.in_use_bytes -= size
        assert self.in_use_bytes >= 0, "released more request bytes than acquired"
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            size, waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self.in_use_bytes += size
            waiter.set_result(None)


class Deferred:
    """A response still being completed by ``task`` (a future: an ``acks=all`` produce waiting
    for its followers); the connection sends it, in request order, when it is done.
    ``then(fn)`` is the deferred result of ``fn`` applied to this one's, chained by callbacks
    (no task per request); cancelling it cancels this one."""

    __slots__ = ("task",)

    def __init__(self, task: asyncio.Future[Any]) -> None:
        self.task = task

    def then(self, fn: Callable[[Any], Any]) -> Deferred:
        source = self.task
        derived: asyncio.Future[Any] = source.get_loop().create_future()

        def forward(done: asyncio.Future[Any]) -> None:
            if derived.done():
                return
            if done.cancelled():
                derived.cancel()
            elif done.exception() is not None:
                derived.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                try:
                    derived.set_result(fn(done.result()))
                except Exception as error:  # noqa: BLE001 - the connection reports it
                    derived.set_exception(error)

        def backward(done: asyncio.Future[Any]) -> None:
            if done.cancelled() and not source.done():
                source.cancel()

        source.add_done_callback(forward)
        derived.add_done_callback(backward)
        return Deferred(derived)


# A handler returns the encoded response frame, None when the request expects no answer (a
# Produce with acks=0), or a Deferred frame (or None) still being completed.
Handler = Callable[[RequestHeader, dict, "ConnectionInfo"], Awaitable["bytes | Deferred | None"]]


class ConnectionInfo:
    """One client connection: its peer address, the listener it came in on, and who it is
    (``principal``, ``User:ANONYMOUS`` until a SASL exchange or a client certificate says)."""

    __slots__ = ("peer", "listener", "requests", "principal", "sasl")

    def __init__(self, peer: str, listener: str = "PLAINTEXT") -> None:
        self.peer = peer
        self.listener = listener
        self.requests = 0
        self.principal = str(ANONYMOUS)
        self.sasl: SaslSession | None = None


class KafkaServer:
    """Accepts Kafka client connections on ``host:port`` and dispatches requests to ``handler``."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str,
        port: int,
        max_request_bytes: int,
        max_connections: int,
        advertised_versions: Mapping[int, tuple[int, int]],
        listener: str = "PLAINTEXT",
        security: ListenerSecurity | None = None,
        request_budget: RequestBytesBudget | None = None,
        frame_read_timeout_s: float = 30.0,
        connections_max_idle_s: float = 600.0,
        on_idle_close: Callable[[], None] | None = None,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self._handler = handler
        self._max_idle_s = connections_max_idle_s
        self._on_idle_close = on_idle_close
        # One budget per node, shared by its listeners; unbounded (what one listener may hold
        # through its connections' limits) when none is given.
        self._request_budget = request_budget or RequestBytesBudget(2**62)
        self._frame_read_timeout_s = frame_read_timeout_s
        self.listener = listener
        self._security = security or ListenerSecurity()
        self._advertised_versions = dict(advertised_versions)
        self._host = host
        self._port = port
        self._max_request_bytes = max_request_bytes
        self._connection_limit = ConnectionLimit(
            listener, max_connections, log=log, on_refused=on_refused
        )
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def connection_count(self) -> int:
        """Connections open on this listener (``flux_connections``)."""
        return len(self._connections)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._accept,
                self._host,
                self._port,
                reuse_address=True,
                limit=READ_BUFFER_BYTES,
                ssl=self._security.ssl_context,
            )
        except OSError as error:
            raise OSError(
                error.errno,
                f"Kafka listener {self.listener} cannot bind {self._host}:{self._port}: "
                f"{error.strerror}",
            ) from None

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = _peer_name(writer)
        if not self._connection_limit.admits(len(self._connections), peer):
            writer.close()
            return
        self._connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        info = ConnectionInfo(peer, self.listener)
        if self._security.ssl_context is not None:
            certificate = writer.get_extra_info("peercert")
            if certificate:
                info.principal = str(principal_from_certificate_subject(certificate.get("subject")))
        if self._security.uses_sasl:
            info.sasl = SaslSession(self._security, peer)
        try:
            await self._serve(reader, writer, info)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, info: ConnectionInfo
    ) -> None:
        responses: asyncio.Queue[bytes | Deferred | None] = asyncio.Queue(MAX_IN_FLIGHT_REQUESTS)

        def close_idle() -> None:
            log.debug("closing connection from %s: idle for %g s", info.peer, self._max_idle_s)
            if self._on_idle_close is not None:
                self._on_idle_close()
            writer.close()  # the reader sees the end of the stream

        watch = _IdleWatch(self._max_idle_s, responses, close_idle)
        sender = asyncio.create_task(_send_in_order(responses, writer, watch))
        try:
            await self._read_requests(reader, responses, info, watch)
            # The client is done, or sent something we close on: what is due still goes out.
            await responses.put(_END)
            await sender
        finally:
            watch.cancel()
            if not sender.done():
                sender.cancel()
            _cancel_pending(responses)
            await asyncio.gather(sender, return_exceptions=True)

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        responses: asyncio.Queue[bytes | Deferred | None],
        info: ConnectionInfo,
        watch: _IdleWatch,
    ) -> None:
        """Read, decode and handle requests in order, queueing their responses; return when
        the connection is to be closed after them."""
        while True:
            watch.reading = True
            try:
                prefix = await reader.readexactly(SIZE_PREFIX)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            try:
                size = read_size(prefix, self._max_request_bytes)
            except InvalidFrameError as error:
                log.warning("closing connection from %s: %s", info.peer, error)
                return
            # Room for the frame in the node's budget before reading it: while there is none,
            # the frame stays in the socket and the client is slowed down (TCP flow control).
            watch.reading = False  # waiting for the node's budget is not the client idling
            await self._request_budget.acquire(size)
            watch.reading, watch.last = True, watch.now()
            try:
                try:
                    if size <= SLOW_FRAME_BYTES:
                        frame = await reader.readexactly(size)
                    else:
                        # A large frame holds budget while it arrives: one that trickles in
                        # (or never does) must not hold it for ever.
                        async with asyncio.timeout(self._frame_read_timeout_s):
                            frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except TimeoutError:
                    log.warning(
                        "closing connection from %s: a %d-byte request did not arrive within %g s",
                        info.peer,
                        size,
                        self._frame_read_timeout_s,
                    )
                    return
                watch.reading = False
                watch.last = watch.now()
                keep_open = await self._serve_frame(frame, responses, info)
                del frame  # not held while the next request is awaited
                if not keep_open:
                    return
            finally:
                self._request_budget.release(size)

    async def _serve_frame(
        self,
        frame: bytes,
        responses: asyncio.Queue[bytes | Deferred | None],
        info: ConnectionInfo,
    ) -> bool:
        """Decode and handle one request frame, queueing its response; False when the
        connection is to be closed after the responses already due. A method of its own so
        that the frame, the decoded request and the response are released once it returns:
        as locals of the read loop they stayed alive while the loop waited for the next
        request, and 1,000 connections each held their last request (900 MB resident for
        1,000 requests of 900 kB, whatever the ``RequestBytesBudget``)."""
        sasl = info.sasl
        if sasl is not None and sasl.expects_raw_token:
            # After SaslHandshake v0 the SASL tokens travel as bare size-prefixed frames.
            try:
                token = await sasl.raw_token(frame)
            except SaslFailure as failure:
                log.info("closing connection from %s: %s", info.peer, failure)
                if failure.authentication_failed:
                    await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
                return False
            if sasl.principal is not None:
                info.principal = sasl.principal
            await responses.put(len(token).to_bytes(4, "big") + token)
            return True
        try:
            header, body = decode_request(frame)
        except UnsupportedVersionError as error:
            if error.api_key == API_VERSIONS_KEY and error.correlation_id is not None:
                # Clients probe ApiVersions at their newest version and retry lower.
                await responses.put(
                    encode_unsupported_api_versions_response(
                        error.correlation_id, advertised=self._advertised_versions
                    )
                )
                return True
            log.warning("closing connection from %s: %s", info.peer, error)
            return False
        except InvalidFrameError as error:
            log.warning("closing connection from %s: malformed request: %s", info.peer, error)
            return False
        info.requests += 1
        if sasl is not None:
            try:
                sasl.check_request(header.api_key)
            except SaslFailure as failure:
                log.warning("closing connection from %s: %s", info.peer, failure)
                return False
        if header.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            answer, close = await self._sasl_request(header, body, info)
            await responses.put(encode_response(header, answer))
            return not close
        try:
            response = await self._handler(header, body, info)
        except UnsupportedVersionError as error:
            log.warning("closing connection from %s: %s", info.peer, error)
            return False
        await responses.put(response)
        return True

    async def _sasl_request(
        self, header: RequestHeader, body: dict[str, Any], info: ConnectionInfo
    ) -> tuple[dict[str, Any], bool]:
        """The answer to a SaslHandshake or SaslAuthenticate, and whether to close after it."""
        handshake = header.api_key == ApiKey.SASL_HANDSHAKE
        sasl = info.sasl
        if sasl is None:
            # Kafka answers these on a listener without SASL with ILLEGAL_SASL_STATE.
            if handshake:
                return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}, False
            return {
                "error_code": ErrorCode.ILLEGAL_SASL_STATE,
                "error_message": f"listener {self.listener} does not use SASL",
                "auth_bytes": b"",
                "session_lifetime_ms": 0,
            }, False
        try:
            if handshake:
                return sasl.handshake(header.api_version, body), False
            answer = await sasl.authenticate(header.api_version, body)
        except SaslFailure as failure:
            if failure.authentication_failed:
                log.info("closing connection from %s: %s", info.peer, failure)
                await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
            else:
                log.warning("closing connection from %s: %s", info.peer, failure)
            if failure.response is None:
                failure.response = {
                    "error_code": ErrorCode.ILLEGAL_SASL_STATE,
                    "error_message": str(failure),
                    "auth_bytes": b"",
                    "session_lifetime_ms": 0,
                }
            return failure.response, True
        if sasl.principal is not None:
            info.principal = sasl.principal
        return answer, False


#: Queued after a connection's last response: the writer stops there.
_END = b"<end of connection>"


async def _send_in_order(
    responses: asyncio.Queue[bytes | Deferred | None],
    writer: asyncio.StreamWriter,
    watch: _IdleWatch,
) -> None:
    """Write each response once ready, in the order the requests came."""
    while True:
        response = await responses.get()
        if response is _END:
            return
        watch.sending = True
        if isinstance(response, Deferred):
            response = await response.task
        if response is not None:
            writer.write(response)
            await writer.drain()
        watch.sending = False
        watch.last = watch.now()


class _IdleWatch:
    """Calls ``close()`` once a connection has had nothing to do for ``idle_s``: its reader
    waiting for a request's bytes (``reading``), no response being sent (``sending``) or
    queued, and the last request read or response written (``last``) ``idle_s`` ago.

    One timer per connection, moved only when it fires (to ``last + idle_s``), so a request
    costs three clock reads (its budget granted, its bytes read, its response written) and a
    few attribute writes, not a timer each."""

    __slots__ = (
        "_close",
        "_handle",
        "_idle_s",
        "_loop",
        "_responses",
        "last",
        "reading",
        "sending",
    )

    def __init__(
        self,
        idle_s: float,
        responses: asyncio.Queue[bytes | Deferred | None],
        close: Callable[[], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._idle_s = idle_s
        self._responses = responses
        self._close = close
        self.reading = True
        self.sending = False
        self.last = self._loop.time()
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self.last + idle_s, self._check
        )

    def now(self) -> float:
        return self._loop.time()

    def _check(self) -> None:
        now = self._loop.time()
        idle = self.reading and not self.sending and self._responses.empty()
        if idle and now - self.last >= self._idle_s:
            self._handle = None
            self._close()
            return
        # Busy: idle at the earliest ``idle_s`` after it ends, which is after now.
        due = self.last + self._idle_s if idle else now + self._idle_s
        self._handle = self._loop.call_at(due, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def _cancel_pending(responses: asyncio.Queue[bytes | Deferred | None]) -> None:
    """The connection is gone: stop the deferred work nobody will read."""
    while not responses.empty():
        response = responses.get_nowait()
        if isinstance(response, Deferred):
            response.task.cancel()


def _peer_name(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
