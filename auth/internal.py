"""The credential nodes of one cluster show each other on their HTTP APIs (pure).

Every node knows the cluster's shared secret (``controller.secret``, which also keys the Raft
transport). Node-to-node HTTP requests (metadata following, broker registration and heartbeats,
admin writes to the controller, replication sessions, forwarded produce and group offsets)
carry ``Authorization: Flux-Node <token>``, the token an HMAC-SHA256 of a fixed label under the
secret: a process that does not know the secret cannot fetch replicas, read the metadata (which
holds SCRAM keys) or write it. The token is the same on every request, so it is a bearer
credential: over plaintext a sniffer could replay it, which is why a secured cluster also runs
its node HTTP over TLS (``security.internal_tls``).
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["AUTHORIZATION_SCHEME", "authorization_value", "node_token", "verify_authorization"]

AUTHORIZATION_SCHEME = "Flux-Node"
_LABEL = b"flux internal node credential v1"


def node_token(secret: str) -> str:
    """The token derived from the cluster secret (hex; the secret itself is never sent)."""
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).hexdigest()


def authorization_value(secret: str) -> str:
    """The ``Authorization`` header value a node sends."""
    return f"{AUTHORIZATION_SCHEME} {node_token(secret)}"


def verify_authorization(value: str | None, secret: str) -> bool:
    """Whether an ``Authorization`` header value carries this cluster's node token."""
    if not value:
        return False
    scheme, _, token = value.partition(" ")
    if scheme != AUTHORIZATION_SCHEME:
        return False
    return hmac.compare_digest(token.strip().encode(), node_token(secret).encode())
