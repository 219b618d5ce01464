"""Authentication on a Kafka listener: TLS contexts and the SASL state of one connection.

A listener's security protocol (``cluster.config.Listener.security_protocol``) decides what a
connection must do before its requests are served:

- ``PLAINTEXT``: nothing; the principal is ``User:ANONYMOUS``.
- ``SSL``: the TLS handshake (``asyncio`` with the context of ``server_ssl_context``); with a
  client certificate the principal is its subject (``User:CN=...``), else ``User:ANONYMOUS``.
- ``SASL_PLAINTEXT`` / ``SASL_SSL``: a SASL exchange first, Kafka's way. The client sends
  ApiVersions (optional) and SaslHandshake naming a mechanism; with SaslHandshake v1 the
  tokens then travel in SaslAuthenticate requests, with v0 as raw size-prefixed frames (old
  clients). Any other request before the exchange completes closes the connection, as Kafka
  does; so does a failed exchange, after its error response. Mechanisms: PLAIN (the password is
  checked against the user's stored SCRAM credential, in a worker thread since that is one
  PBKDF2) and SCRAM-SHA-256/512 (``flux.auth.scram``).

Re-authentication (KIP-368): with ``connections_max_reauth_ms`` > 0 a SASL session lasts that
long (SaslAuthenticate v1+ tells the client ``session_lifetime_ms``); the client re-runs
SaslHandshake + SaslAuthenticate on the same connection, as the same principal, before it
ends. Requests keep being served under the old session while it is still valid; a request
other than SaslHandshake/SaslAuthenticate after it expired closes the connection.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flux.auth.errors import AuthenticationError, UnacceptableCredentialError
from flux.auth.plain import PlainServer
from flux.auth.scram import MECHANISMS as SCRAM_MECHANISMS
from flux.auth.scram import ScramCredential, ScramServer
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode

__all__ = [
    "FAILED_AUTHENTICATION_DELAY_S",
    "CredentialLookup",
    "ImageCredentials",
    "listener_security",
    "strongest_credential",
    "ListenerSecurity",
    "SaslFailure",
    "SaslSession",
    "server_ssl_context",
]

log = logging.getLogger("flux.cluster.kafka.sasl")

#: ``(user, mechanism)`` -> that user's stored credential, or None.
CredentialLookup = Callable[[str, str], ScramCredential | None]

FAILED_AUTHENTICATION_DELAY_S = 0.1
#: What a connection may send before it is authenticated.
_BEFORE_AUTH = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: A password login is checked against the strongest credential the user has.
_PASSWORD_CREDENTIAL_ORDER = ("SCRAM-SHA-512", "SCRAM-SHA-256")


def server_ssl_context(
    certfile: str, keyfile: str, cafile: str, client_auth: str
) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or newer) with this node's certificate; ``client_auth``
    ``none`` | ``requested`` | ``required`` (Kafka's ``ssl.client.auth``), client certificates
    verified against ``cafile``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if cafile:
        context.load_verify_locations(cafile)
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[client_auth]
    return context


@dataclass(frozen=True)
class ListenerSecurity:
    """What one listener asks of its connections."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    reauth_ms: int = 0
    credentials: CredentialLookup = field(default=lambda _user, _mechanism: None)
    clock: Callable[[], float] = time.monotonic

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


class SaslFailure(Exception):
    """The connection must close: ``response`` (a response body, or None) goes out first.
    ``authentication_failed``: wrong credentials (answered after
    ``FAILED_AUTHENTICATION_DELAY_S``, Kafka's ``connection.failed.authentication.delay.ms``,
    so guessing passwords is slow), not a protocol mistake."""

    def __init__(
        self,
        reason: str,
        response: dict[str, Any] | None = None,
        *,
        authentication_failed: bool = False,
    ) -> None:
        super().__init__(reason)
        self.response = response
        self.authentication_failed = authentication_failed


class SaslSession:
    """The SASL state of one connection on a SASL listener."""

    def __init__(self, security: ListenerSecurity, peer: str) -> None:
        self._security = security
        self._peer = peer
        self.principal: str | None = None
        self._expires_at: float | None = None
        self._mechanism: str | None = None
        self._exchange: ScramServer | PlainServer | None = None
        #: After a SaslHandshake v0, the next frames are raw SASL tokens.
        self.expects_raw_token = False

    # -- what may pass --------------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        """A principal whose session has not expired."""
        if self.principal is None:
            return False
        return self._expires_at is None or self._security.clock() < self._expires_at

    def check_request(self, api_key: int) -> None:
        """Raise ``SaslFailure`` if ``api_key`` may not be served now."""
        if api_key in _BEFORE_AUTH:
            if api_key == ApiKey.SASL_AUTHENTICATE and self._exchange is None:
                raise SaslFailure("SaslAuthenticate before SaslHandshake")
            return
        if self.authenticated:
            return
        if self.principal is not None:
            raise SaslFailure(f"the SASL session of {self.principal} expired")
        raise SaslFailure(f"request (API {api_key}) before SASL authentication completed")

    # -- the exchange ---------------------------------------------------------------------

    def handshake(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """SaslHandshake: choose the mechanism; an unsupported one is answered with the list
        and the connection closes after it."""
        mechanism = body.get("mechanism")
        enabled = list(self._security.mechanisms)
        if self._exchange is not None and not self.authenticated:
            raise SaslFailure(
                "SaslHandshake during a SASL exchange",
                {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled},
            )
        if mechanism not in enabled:
            raise SaslFailure(
                f"unsupported SASL mechanism {mechanism!r}",
                {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled},
            )
        if self.principal is not None and version == 0:
            raise SaslFailure(
                "re-authentication needs SaslHandshake v1",
                {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled},
            )
        self._mechanism = mechanism
        if mechanism in SCRAM_MECHANISMS:
            self._exchange = ScramServer(
                mechanism, lambda user: self._security.credentials(user, mechanism)
            )
        else:
            self._exchange = PlainServer(self._verify_plain)
        self.expects_raw_token = version == 0
        return {"error_code": ErrorCode.NONE, "mechanisms": enabled}

    async def authenticate(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """SaslAuthenticate: one token of the exchange."""
        answer = await self._step(bytes(body.get("auth_bytes") or b""))
        response: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "auth_bytes": answer,
            "session_lifetime_ms": 0,
        }
        if self.principal is not None and self._exchange is None:
            response["session_lifetime_ms"] = self._security.reauth_ms
        return response

    async def raw_token(self, token: bytes) -> bytes:
        """One raw SASL token after a SaslHandshake v0; the answer to send, raw."""
        answer = await self._step(token)
        if self._exchange is None:
            self.expects_raw_token = False
        return answer

    async def _step(self, token: bytes) -> bytes:
        exchange = self._exchange
        if exchange is None:
            raise SaslFailure("SaslAuthenticate before SaslHandshake")
        try:
            if isinstance(exchange, PlainServer):
                # One PBKDF2 of the stored credential's iterations: off the event loop.
                answer = await asyncio.to_thread(exchange.step, token)
            else:
                answer = exchange.step(token)
        except AuthenticationError as error:
            self._exchange = None
            raise SaslFailure(
                str(error),
                {
                    "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                    "error_message": str(error),
                    "auth_bytes": b"",
                    "session_lifetime_ms": 0,
                },
                authentication_failed=True,
            ) from None
        if exchange.complete:
            self._complete(f"User:{exchange.username}")
        return answer

    def _complete(self, principal: str) -> None:
        if self.principal is not None and principal != self.principal:
            self._exchange = None
            message = f"cannot change principals during re-authentication ({self.principal})"
            raise SaslFailure(
                message,
                {
                    "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                    "error_message": message,
                    "auth_bytes": b"",
                    "session_lifetime_ms": 0,
                },
            )
        first = self.principal is None
        self.principal = principal
        self._exchange = None
        reauth_ms = self._security.reauth_ms
        self._expires_at = self._security.clock() + reauth_ms / 1000 if reauth_ms > 0 else None
        log.debug(
            "%s %s as %s with %s",
            self._peer,
            "authenticated" if first else "re-authenticated",
            principal,
            self._mechanism,
        )

    def _verify_plain(self, username: str, password: str) -> bool:
        credential = strongest_credential(self._security.credentials, username)
        if credential is not None:
            return credential.verify_password(password)
        # The same work for an unknown user, so the time taken does not tell who exists.
        _unknown_user_credential().verify_password(password)
        return False


def strongest_credential(credentials: CredentialLookup, user: str) -> ScramCredential | None:
    """The credential a password login (SASL/PLAIN, HTTP Basic) is checked against: the
    user's SCRAM-SHA-512 one, else its SCRAM-SHA-256 one, else None."""
    for mechanism in _PASSWORD_CREDENTIAL_ORDER:
        credential = credentials(user, mechanism)
        if credential is not None:
            return credential
    return None


@functools.cache
def _unknown_user_credential() -> ScramCredential:
    return ScramCredential.from_password("SCRAM-SHA-512", secrets.token_hex(16))


class ImageCredentials:
    """``CredentialLookup`` over the broker's current metadata image: the SCRAM credentials
    its ``UserScramCredential`` records set (each decoded once, while its record stays)."""

    def __init__(self, image: Callable[[], Any]) -> None:
        self._image = image
        self._decoded: dict[tuple[str, str], tuple[Any, ScramCredential | None]] = {}

    def __call__(self, user: str, mechanism: str) -> ScramCredential | None:
        key = (user, mechanism)
        record = self._image().scram_credentials.get(key)
        if record is None:
            self._decoded.pop(key, None)
            return None
        cached = self._decoded.get(key)
        if cached is not None and cached[0] is record:
            return cached[1]
        try:
            credential: ScramCredential | None = ScramCredential.from_dict(
                {
                    "mechanism": record.mechanism,
                    "salt": record.salt,
                    "stored_key": record.stored_key,
                    "server_key": record.server_key,
                    "iterations": record.iterations,
                }
            )
        except (UnacceptableCredentialError, ValueError):
            log.error("the stored %s credential of a user cannot be read", mechanism)
            credential = None
        self._decoded[key] = (record, credential)
        return credential


def listener_security(
    protocol: str, security: Any, credentials: CredentialLookup
) -> ListenerSecurity:
    """The ``ListenerSecurity`` of a listener speaking ``protocol`` under the node's
    ``[security]`` section ``security``."""
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = server_ssl_context(
            security.ssl_certfile,
            security.ssl_keyfile,
            security.ssl_cafile,
            security.ssl_client_auth,
        )
    return ListenerSecurity(
        protocol=protocol,
        ssl_context=context,
        mechanisms=tuple(security.sasl_enabled_mechanisms),
        reauth_ms=security.connections_max_reauth_ms,
        credentials=credentials,
    )
