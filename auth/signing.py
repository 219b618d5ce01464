"""Signatures of push deliveries (pure): a subscriber proves a delivery came from the cluster.

Each subscription has a signing secret, returned once by ``POST /subscribe`` as
``signingSecret``. A webhook delivery carries

    X-Flux-Timestamp: <unix milliseconds>
    X-Flux-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + body bytes)>

and a WebSocket connection carries the same headers on its opening handshake, signed over
``"<timestamp>." + <subscription id>``. A subscriber recomputes the HMAC with its secret,
compares in constant time, and refuses timestamps too far from its clock (replays).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

__all__ = [
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "new_signing_secret",
    "sign",
    "signature_headers",
    "verify",
]

SIGNATURE_HEADER = "X-Flux-Signature"
TIMESTAMP_HEADER = "X-Flux-Timestamp"
_VERSION = "v1="


def new_signing_secret() -> str:
    return secrets.token_urlsafe(32)


def sign(secret: str, timestamp_ms: int, payload: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp_ms}.".encode() + payload, hashlib.sha256)
    return _VERSION + mac.hexdigest()


def signature_headers(secret: str, timestamp_ms: int, payload: bytes) -> dict[str, str]:
    return {
        TIMESTAMP_HEADER: str(timestamp_ms),
        SIGNATURE_HEADER: sign(secret, timestamp_ms, payload),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    payload: bytes,
    *,
    now_ms: int,
    tolerance_ms: int = 300_000,
) -> bool:
    """Whether ``headers`` (any mapping with ``get``) sign ``payload`` with ``secret`` at a
    time within ``tolerance_ms`` of ``now_ms``."""
    timestamp_text = headers.get(TIMESTAMP_HEADER)
    signature = headers.get(SIGNATURE_HEADER)
    if not timestamp_text or not signature:
        return False
    try:
        timestamp_ms = int(timestamp_text)
    except ValueError:
        return False
    if abs(now_ms - timestamp_ms) > tolerance_ms:
        return False
    return hmac.compare_digest(sign(secret, timestamp_ms, payload), signature)
