"""Errors raised by ``flux.auth``.

Messages are safe to send to an unauthenticated client and to log: they never contain a
password, a proof, a key or a salt, and an authentication failure never says whether the user
exists. The optional ``reason`` of an ``AuthenticationError`` is for the broker's own log (a
fixed phrase such as "invalid proof"); it is not part of ``str(error)`` and is never sent::

    AuthError
    ├── AuthenticationError          a SASL exchange failed
    │   └── IllegalSaslStateError    a step after the exchange completed or failed
    ├── UnacceptableCredentialError  a SCRAM credential outside Kafka's bounds
    ├── InvalidPrincipalError        a principal that is not "Type:name"
    └── InvalidAclError              an ACL binding or filter that cannot be used

Kafka error codes map onto this tree in one place, ``ERROR_CODES``.
"""

from __future__ import annotations

from flux.protocol.errors import ErrorCode

__all__ = [
    "ERROR_CODES",
    "AuthError",
    "AuthenticationError",
    "IllegalSaslStateError",
    "InvalidAclError",
    "InvalidPrincipalError",
    "UnacceptableCredentialError",
]


class AuthError(Exception):
    """Base of every exception raised by ``flux.auth``."""


class AuthenticationError(AuthError):
    """A SASL exchange failed. ``str(error)`` is what the client is told (Kafka's wording);
    ``reason`` is a fixed phrase for the server's log, or None."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class IllegalSaslStateError(AuthenticationError):
    """A message arrived after the exchange had already completed or failed."""


class UnacceptableCredentialError(AuthError):
    """A SCRAM credential Kafka would refuse: unknown mechanism, too few or too many
    iterations, or a salt or key of the wrong size."""


class InvalidPrincipalError(AuthError, ValueError):
    """A principal string that is not "Type:name" with both parts non-empty."""


class InvalidAclError(AuthError, ValueError):
    """An ACL binding that cannot be created, or a filter with UNKNOWN fields; the message
    names the offending field."""


#: The Kafka error code a client is sent for each error (most specific class first).
ERROR_CODES: dict[type[AuthError], ErrorCode] = {
    IllegalSaslStateError: ErrorCode.ILLEGAL_SASL_STATE,
    AuthenticationError: ErrorCode.SASL_AUTHENTICATION_FAILED,
    UnacceptableCredentialError: ErrorCode.UNACCEPTABLE_CREDENTIAL,
    InvalidPrincipalError: ErrorCode.INVALID_REQUEST,
    InvalidAclError: ErrorCode.INVALID_REQUEST,
    AuthError: ErrorCode.UNKNOWN_SERVER_ERROR,
}
