"""HTTP calls from this broker to the other brokers' HTTP servers.

The HTTP API forwards a request for a partition led elsewhere to that partition's leader, the
push deliverer commits offsets at the group's coordinator, and the memory-topic cleanup asks
every broker for the offsets committed on a topic. Each broker's HTTP address comes from its
registration in the metadata image (``http_host:http_port``).

Every call has a deadline; a broker that does not answer raises ``PeerUnavailableError``.
Requests carry ``X-Flux-Forwarded`` so a receiver never forwards again (no loops while
metadata is in flux).

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from flux.controller.image import MetadataImage

__all__ = ["FORWARDED_HEADER", "BrokerPeers", "PeerUnavailableError"]

log = logging.getLogger("flux.cluster.peers")

FORWARDED_HEADER = "X-Flux-Forwarded"
PEER_TIMEOUT_S = 10.0
MAX_PEER_CONNECTIONS = 100


class PeerUnavailableError(RuntimeError):
    """The other broker is unknown, fenced, or did not answer in time."""


class BrokerPeers:
    def __init__(
        self, image: Callable[[], MetadataImage], *, broker_id: int, internal: Any = None
    ) -> None:
        self._image = image
        #: ``cluster.internal_security.InternalSecurity``: scheme, TLS and node credential.
        self._internal = internal
        self.broker_id = broker_id
        self._session: aiohttp.ClientSession | None = None

    @property
    def internal(self) -> Any:
        """``cluster.internal_security.InternalSecurity`` (None: plain HTTP, no token)."""
        return self._internal

    def headers(self) -> dict[str, str]:
        """Headers of every call to another broker (the forwarding mark, the node token)."""
        headers = {FORWARDED_HEADER: str(self.broker_id)}
        if self._internal is not None:
            headers.update(self._internal.headers)
        return headers

    def client(self) -> aiohttp.ClientSession:
        """The one HTTP client session of this broker's calls to other brokers."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=MAX_PEER_CONNECTIONS),
                timeout=aiohttp.ClientTimeout(total=PEER_TIMEOUT_S, sock_connect=2.0),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def address(self, broker_id: int) -> str | None:
        registration = self._image().brokers.get(broker_id)
        if registration is None or registration.fenced:
            return None
        return f"{registration.http_host}:{registration.http_port}"

    async def request(
        self,
        broker_id: int,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        timeout_s: float = PEER_TIMEOUT_S,
    ) -> tuple[int, Any]:
        """``(status, decoded JSON body)`` of ``method path`` on broker ``broker_id``."""
        address = self.address(broker_id)
        if address is None:
            raise PeerUnavailableError(f"broker {broker_id} is not live")
        try:
            internal = self._internal
            headers = self.headers()
            async with self.client().request(
                method,
                internal.url(address, path) if internal is not None else f"http://{address}{path}",
                json=json_body,
                headers=headers,
                ssl=internal.ssl if internal is not None else True,
                timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=2.0),
            ) as response:
                try:
                    body = await response.json(content_type=None)
                except ValueError:
                    body = {"error": f"HTTP {response.status} without a JSON body"}
                return response.status, body
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise PeerUnavailableError(f"broker {broker_id} at {address}: {error!r}") from None
