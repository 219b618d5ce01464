"""The Kafka protocol listener: framing, per-connection request loop, and input limits.

Each connection is served by one task that reads a size-prefixed frame, decodes it, awaits the
handler and writes the response, so responses leave in request order (as Kafka guarantees).
A connection that sends something we cannot answer (an impossible size, an undecodable frame,
an unknown API) is logged and closed; every other connection is unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping

from flux.protocol.api import (
    RequestHeader,
    decode_request,
    encode_unsupported_api_versions_response,
)
from flux.protocol.errors import InvalidFrameError, UnsupportedVersionError
from flux.protocol.framing import SIZE_PREFIX, read_size

__all__ = ["Handler", "KafkaServer"]

log = logging.getLogger("flux.cluster.kafka")

API_VERSIONS_KEY = 18

# A handler returns the encoded response frame, or None when the request expects no answer
# (a Produce with acks=0).
Handler = Callable[[RequestHeader, dict, "ConnectionInfo"], Awaitable[bytes | None]]


class ConnectionInfo:
    """One client connection: its peer address and the listener it came in on."""

    __slots__ = ("peer", "listener", "requests")

    def __init__(self, peer: str, listener: str = "PLAINTEXT") -> None:
        self.peer = peer
        self.listener = listener
        self.requests = 0


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
    ) -> None:
        self._handler = handler
        self.listener = listener
        self._advertised_versions = dict(advertised_versions)
        self._host = host
        self._port = port
        self._max_request_bytes = max_request_bytes
        self._max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._accept, self._host, self._port, reuse_address=True, limit=1 << 20
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
        if len(self._connections) >= self._max_connections:
            log.warning(
                "refusing connection from %s: %d connections open", peer, len(self._connections)
            )
            writer.close()
            return
        self._connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await self._serve(reader, writer, ConnectionInfo(peer, self.listener))
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
        while True:
            prefix = await reader.readexactly(SIZE_PREFIX)
            try:
                size = read_size(prefix, self._max_request_bytes)
            except InvalidFrameError as error:
                log.warning("closing connection from %s: %s", info.peer, error)
                return
            frame = await reader.readexactly(size)
            try:
                header, body = decode_request(frame)
            except UnsupportedVersionError as error:
                if error.api_key == API_VERSIONS_KEY and error.correlation_id is not None:
                    # Clients probe ApiVersions at their newest version and retry lower.
                    writer.write(
                        encode_unsupported_api_versions_response(
                            error.correlation_id, advertised=self._advertised_versions
                        )
                    )
                    await writer.drain()
                    continue
                log.warning("closing connection from %s: %s", info.peer, error)
                return
            except InvalidFrameError as error:
                log.warning("closing connection from %s: malformed request: %s", info.peer, error)
                return
            info.requests += 1
            try:
                response = await self._handler(header, body, info)
            except UnsupportedVersionError as error:
                log.warning("closing connection from %s: %s", info.peer, error)
                return
            if response is not None:
                writer.write(response)
                await writer.drain()


def _peer_name(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
