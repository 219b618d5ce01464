"""How this node's HTTP traffic with other nodes is secured (``[security] internal_tls`` and
``internal_auth``).

``internal_tls``: the broker and controller HTTP servers speak HTTPS with the node's
certificate (``security.ssl_certfile``/``ssl_keyfile``), and nodes connect to each other with
HTTPS, verifying the peer against ``security.ssl_cafile`` and presenting their own certificate.

``internal_auth``: node-to-node endpoints (``/controller/...`` except ``GET
/controller/status``, ``/replication/...`` and ``/internal/...``) require the cluster's node
token (``flux.auth.internal``); a request without it gets 401 and changes nothing. Clients'
endpoints (the HTTP API, ``/metrics``, ``/health``) are not affected by it.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from flux.auth.internal import authorization_value, verify_authorization

from .config import NodeConfig
from .kafka.sasl import server_ssl_context

__all__ = ["INTERNAL_PREFIXES", "InternalSecurity"]

log = logging.getLogger("flux.cluster.internal")

#: Path prefixes only other nodes call.
INTERNAL_PREFIXES = ("/controller/", "/replication/", "/internal/")
#: Read-only paths under those prefixes anyone may call (status pages for operators).
PUBLIC_PATHS = frozenset({"/controller/status"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class InternalSecurity:
    """What this node uses to call other nodes and to check their calls."""

    scheme: str = "http"
    client_ssl: ssl.SSLContext | None = None
    server_ssl: ssl.SSLContext | None = None
    secret: str | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, config: NodeConfig) -> InternalSecurity:
        security = config.security
        client_ssl = server_ssl = None
        if security.internal_tls:
            server_ssl = server_ssl_context(
                security.ssl_certfile,
                security.ssl_keyfile,
                security.ssl_cafile,
                "requested" if security.ssl_cafile else "none",
            )
            client_ssl = ssl.create_default_context(cafile=security.ssl_cafile or None)
            client_ssl.load_cert_chain(security.ssl_certfile, security.ssl_keyfile)
        secret = config.controller.secret if security.internal_auth else None
        return cls(
            scheme="https" if security.internal_tls else "http",
            client_ssl=client_ssl,
            server_ssl=server_ssl,
            secret=secret or None,
        )

    def url(self, address: str, path: str) -> str:
        return f"{self.scheme}://{address}{path}"

    @property
    def headers(self) -> dict[str, str]:
        """Headers every node-to-node request carries."""
        if self.secret is None:
            return {}
        return {"Authorization": authorization_value(self.secret)}

    @property
    def ssl(self) -> ssl.SSLContext | bool:
        """aiohttp's ``ssl`` argument for node-to-node requests."""
        return self.client_ssl if self.client_ssl is not None else True

    def middlewares(self, prefixes: Sequence[str] = INTERNAL_PREFIXES) -> list[Any]:
        """aiohttp middlewares refusing node-only paths without the node token."""
        secret = self.secret
        if secret is None:
            return []

        @web.middleware
        async def require_node_token(request: web.Request, handler: Handler) -> web.StreamResponse:
            path = request.path
            if path.startswith(tuple(prefixes)) and path not in PUBLIC_PATHS:
                if not verify_authorization(request.headers.get("Authorization"), secret):
                    log.warning(
                        "refused %s %s from %s: no valid node credential",
                        request.method,
                        path,
                        request.remote,
                    )
                    return web.json_response(
                        {
                            "error": "unauthorized",
                            "message": "this endpoint is for cluster members only",
                        },
                        status=401,
                    )
            return await handler(request)

        return [require_node_token]
