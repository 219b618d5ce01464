"""SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer`` runs it. Pure: no I/O.

The client sends one message, ``authzid NUL username NUL password``, in UTF-8. The username
and password must be non-empty; the authorization id must be empty or equal to the username
(Flux, like Kafka, does not let one user act as another). There is no answer but success: the
server replies with no bytes. The password is checked by the injected ``verify`` (the broker
checks it against the user's stored SCRAM credential, ``ScramCredential.verify_password``).

Failures raise ``AuthenticationError`` with Kafka's client-facing wording: "Authentication
failed: Invalid username or password" for a wrong pair (never saying which part was wrong),
"...: username not specified" / "...: password not specified" for an empty one, and the
generic SASL failure message for a malformed message. No message contains the password.
"""

from __future__ import annotations

from collections.abc import Callable

from flux.auth.errors import AuthenticationError, IllegalSaslStateError
from flux.auth.scram import failure_message

__all__ = ["MAX_PLAIN_MESSAGE_BYTES", "MECHANISM", "PlainServer", "parse_plain"]

MECHANISM = "PLAIN"
#: One PLAIN message. RFC 4616 requires accepting 255 bytes per field; some services use
#: longer passwords (connection strings, API secrets), so the bound is generous.
MAX_PLAIN_MESSAGE_BYTES = 4096

_INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"


def _malformed(reason: str) -> AuthenticationError:
    return AuthenticationError(failure_message(MECHANISM), reason=reason)


def parse_plain(message: bytes) -> tuple[str, str, str]:
    """``(authzid, username, password)`` of a PLAIN message; ``AuthenticationError`` unless it
    is three NUL-separated UTF-8 fields with a username and a password, and an authzid that is
    empty or the username."""
    if len(message) > MAX_PLAIN_MESSAGE_BYTES:
        raise _malformed("PLAIN message too long")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("PLAIN message is not UTF-8") from None
    fields = text.split("\x00")
    if len(fields) != 3:
        raise _malformed(f"PLAIN message has {len(fields)} fields, not 3")
    authzid, username, password = fields
    if not username:
        raise AuthenticationError(
            "Authentication failed: username not specified", reason="empty username"
        )
    if not password:
        raise AuthenticationError(
            "Authentication failed: password not specified", reason="empty password"
        )
    if authzid and authzid != username:
        raise AuthenticationError(
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
            reason="authorization id differs from the user name",
        )
    return authzid, username, password


class PlainServer:
    """The server side of one PLAIN exchange: one ``step``, which returns b"" on success and
    sets ``complete`` and ``username``. ``verify(username, password)`` says whether the pair is
    valid; it should cost the same for an unknown user (a check against a dummy credential),
    or its timing tells which users exist. Not thread-safe: one connection owns it."""

    def __init__(self, verify: Callable[[str, str], bool]) -> None:
        self.mechanism = MECHANISM
        self.username: str | None = None
        self._verify = verify
        self._state = "first"

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def __repr__(self) -> str:
        return f"PlainServer(state={self._state!r})"

    def step(self, message: bytes) -> bytes:
        """Authenticate the client's message; b"" on success, else ``AuthenticationError``."""
        if self._state != "first":
            raise IllegalSaslStateError(
                failure_message(MECHANISM), reason="PLAIN message after the exchange ended"
            )
        self._state = "failed"
        _, username, password = parse_plain(message)
        if not self._verify(username, password):
            raise AuthenticationError(_INVALID_CREDENTIALS, reason="invalid username or password")
        self.username = username
        self._state = "complete"
        return b""
