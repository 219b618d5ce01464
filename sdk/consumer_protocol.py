"""The consumer embedded protocol and the range assignor, as the SDK offers them.

The codec lives in ``flux.protocol.consumer`` (the broker's V1 groups use it too); this module
re-exports it, with one difference: bytes that do not decode raise this module's
``ConsumerProtocolError``, a ``FluxProtocolError`` (so a ``FluxError``), as every error the
SDK raises is.
"""

from __future__ import annotations

from flux.protocol import consumer as _codec
from flux.protocol.consumer import (
    ASSIGNMENT_VERSION_MAX,
    RANGE_ASSIGNOR,
    SUBSCRIPTION_VERSION_MAX,
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)

from .errors import FluxProtocolError

__all__ = [
    "ASSIGNMENT_VERSION_MAX",
    "RANGE_ASSIGNOR",
    "SUBSCRIPTION_VERSION_MAX",
    "Assignment",
    "ConsumerProtocolError",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "range_assign",
]


class ConsumerProtocolError(FluxProtocolError):
    """Subscription or assignment bytes that do not decode."""


def decode_subscription(data: bytes) -> Subscription:
    """``flux.protocol.consumer.decode_subscription``; raises ``ConsumerProtocolError``."""
    try:
        return _codec.decode_subscription(data)
    except _codec.ConsumerProtocolError as error:
        raise ConsumerProtocolError(str(error)) from error


def decode_assignment(data: bytes) -> Assignment:
    """``flux.protocol.consumer.decode_assignment``; raises ``ConsumerProtocolError``."""
    try:
        return _codec.decode_assignment(data)
    except _codec.ConsumerProtocolError as error:
        raise ConsumerProtocolError(str(error)) from error
