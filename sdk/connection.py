"""``BrokerConnection``: one asyncio connection to one broker, with pipelined requests.

Opening it connects (over TLS for the ``SSL`` and ``SASL_SSL`` security protocols, with the
client's ``flux.sdk.security.ClientSecurity``), negotiates versions (ApiVersions; a broker that
does not know the version asked answers in v0 and is asked again in one it speaks) and, for
``SASL_PLAINTEXT`` and ``SASL_SSL``, authenticates. Each later request uses the highest version
this SDK, the codec and the broker share (``flux.sdk.metadata.negotiate_version``).

SASL, as Kafka's clients do it: SaslHandshake v1 names the mechanism, then the tokens travel in
SaslAuthenticate requests (v2 when the broker advertises it). PLAIN sends one message;
SCRAM-SHA-256/512 send client-first and client-final (``flux.auth.scram.ScramClient``) and check
the server's signature, so a broker that does not know the credential is not trusted either.
The salted password is computed on the event loop: one PBKDF2 of at most 16384 iterations, a few
milliseconds, once per (re-)authentication. A refusal raises ``FluxAuthenticationError`` with
the broker's ``error_message`` (never the password) and closes the connection; a TLS handshake
that fails (an untrusted broker certificate, a refused client certificate the broker reports
with a TLS alert) raises it too. It is not a transport error, so ``ClusterClient`` does not
retry it. A TLS connection the broker closes before it answered anything stays a (retried)
``FluxConnectionError``, with a hint about client certificates: a broker refusing the client's
certificate under TLS 1.3 may just close the connection, which looks the same as a broker going
away, and a client that gave up for good on a restarting broker would be the worse mistake.

Re-authentication (KIP-368): when SaslAuthenticate answers ``session_lifetime_ms`` > 0, the
connection runs SaslHandshake + SaslAuthenticate again, on the same connection, once
``REAUTHENTICATE_FRACTION`` of the lifetime has passed since the last SaslAuthenticate was sent
(the broker starts its clock later, when it has checked it). Meanwhile new requests wait (a
gate) and requests already sent are answered as usual: the broker serves them under the old
session, which is still valid. A refused re-authentication closes the connection with
``FluxAuthenticationError``, which every waiting request then raises.

Requests are pipelined: ``request`` writes the frame and waits for the response with its
correlation id, which one reader task dispatches; at most ``limits.CONNECTION_PENDING_MAX``
requests wait for answers at once (more wait for a slot). Failures: ``FluxConnectionError``
(connect or I/O failed, or the broker closed the connection), ``FluxTimeoutError`` (no response
in time) and ``FluxProtocolError`` (undecodable response). After any of them the connection is
closed, every waiting request fails with the same error, and the connection is not used again.

Thread-safety: none; a connection belongs to the event loop that opened it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

from flux.auth.errors import AuthenticationError
from flux.auth.scram import ScramClient
from flux.protocol.api import ApiKey, decode_response, encode_request
from flux.protocol.errors import ErrorCode, ProtocolError

from . import limits
from .errors import (
    FluxAuthenticationError,
    FluxConnectionError,
    FluxError,
    FluxProtocolError,
    FluxTimeoutError,
    UnsupportedVersionError,
)
from .metadata import Address, format_address, negotiate_version
from .security import ClientSecurity

__all__ = ["REAUTHENTICATE_FRACTION", "Body", "BrokerConnection"]

#: A request body, or a function building it for the negotiated version.
Body = dict[str, Any] | Callable[[int], dict[str, Any]]

_CLIENT_SOFTWARE_NAME = "flux-sdk"
_CLIENT_SOFTWARE_VERSION = "0.2.0"
_API_VERSIONS_MAX = 3
_SIZE = struct.Struct(">i")
#: Added to the error of a TLS connection the broker closed before it was open: an asyncio
#: broker that refuses the client's certificate under TLS 1.3 just closes the connection (no
#: alert reaches the client, whose side of the handshake had completed).
_CLOSED_AFTER_TLS_HANDSHAKE = (
    "; if this persists, the broker may require a client certificate it trusts (ssl_certfile)"
)
#: A SASL session is renewed once this fraction of its lifetime has passed (Kafka's clients
#: pick 85% to 95%; the earliest leaves the most room for answers queued ahead of ours).
REAUTHENTICATE_FRACTION = 0.85


class BrokerConnection:
    """See the module docstring. Open with ``await BrokerConnection.open(...)``.

    ``authentications`` counts the SASL exchanges completed on it (1 after opening, one more
    per re-authentication; 0 without SASL).

    Invariants: every entry of ``_pending`` is a future not yet done, keyed by the correlation
    id of a request written on this connection and not yet answered; ``_authenticated`` is set
    except while a re-authentication runs (and always once closed).
    """

    def __init__(
        self,
        address: Address,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        node_id: int | None,
        client_id: str,
        timeout_s: float,
        security: ClientSecurity | None = None,
    ) -> None:
        self.address = address
        self.node_id = node_id
        self.api_versions: Mapping[int, tuple[int, int]] = {}
        self.closed = False
        self.authentications = 0
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._security = security or ClientSecurity()
        self._label = _label(address, node_id)
        self._correlation_id = 0
        self._pending: dict[int, tuple[int, int, asyncio.Future[dict[str, Any]]]] = {}
        self._slots = asyncio.Semaphore(limits.CONNECTION_PENDING_MAX)
        self._failure: FluxError | None = None
        self._opened = False
        self._authenticated = asyncio.Event()
        self._authenticated.set()
        self._reauthentication: asyncio.Task[None] | None = None
        # True while a re-authentication exchanges messages: then only it opens the gate.
        self._reauthenticating = False
        self._reader_task = asyncio.get_running_loop().create_task(self._read_responses())

    @classmethod
    async def open(
        cls,
        address: Address,
        *,
        node_id: int | None,
        client_id: str,
        timeout_s: float,
        security: ClientSecurity | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> BrokerConnection:
        """Connect, negotiate versions and authenticate as ``security`` says (PLAINTEXT by
        default). ``ssl_context``: the TLS context to use (``ClusterClient`` builds one per
        client); without one, ``security.ssl_context()`` builds it here."""
        security = security or ClientSecurity()
        if security.uses_tls and ssl_context is None:
            ssl_context = security.ssl_context()
        label = _label(address, node_id)
        try:
            async with asyncio.timeout(min(timeout_s, limits.CONNECT_TIMEOUT_S)):
                reader, writer = await asyncio.open_connection(
                    address[0],
                    address[1],
                    limit=limits.FRAME_BYTES_MAX,
                    ssl=ssl_context if security.uses_tls else None,
                    server_hostname=address[0] if security.uses_tls else None,
                )
        except TimeoutError as error:
            raise FluxTimeoutError(f"connecting to {label} timed out") from error
        except ssl.SSLError as error:
            raise FluxAuthenticationError(
                f"TLS handshake with {label} failed: {_ssl_reason(error)}"
            ) from error
        except OSError as error:
            raise FluxConnectionError(
                f"cannot connect to {label}: {error.strerror or error}",
                addresses=(format_address(address),),
            ) from error
        connection = cls(
            address,
            reader,
            writer,
            node_id=node_id,
            client_id=client_id,
            timeout_s=timeout_s,
            security=security,
        )
        try:
            connection.api_versions = await connection._negotiate()
            if security.uses_sasl:
                lifetime_ms, sent_at = await connection._authenticate()
                connection._schedule_reauthentication(lifetime_ms, sent_at)
        except BaseException:
            connection.close()
            raise
        connection._opened = True
        return connection

    def __repr__(self) -> str:
        return f"BrokerConnection({self._label})"

    def close(self, error: FluxError | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self._failure = error or FluxConnectionError(f"connection to {self._label} is closed")
        for _, _, future in self._pending.values():
            if not future.done():
                future.set_exception(self._failure)
                future.exception()  # retrieved: a request that gave up must not warn
        self._pending.clear()
        self._writer.close()
        current = asyncio.current_task()
        if current is not self._reader_task:
            self._reader_task.cancel()
        if not self._reauthenticating:
            self._authenticated.set()  # gated requests wake up and find the connection closed
            if self._reauthentication is not None and current is not self._reauthentication:
                self._reauthentication.cancel()
        # Else the re-authentication finishes (its requests fail at once) and opens the gate:
        # a broker that refused it closes the connection right after its answer, and the
        # refusal, not the closed connection, is what waiting requests must raise.

    def version_for(self, api_key: int) -> int:
        return negotiate_version(api_key, self.api_versions, broker=self._label)

    async def request(
        self, api_key: int, body: Body, *, timeout_s: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Send one request at the negotiated version; return ``(version, response)``."""
        version = self.version_for(api_key)
        payload = body(version) if callable(body) else body
        return version, await self._exchange(api_key, version, payload, timeout_s)

    async def send_without_response(self, api_key: int, body: Body) -> int:
        """Send a request the broker does not answer (Produce with acks=0); its version."""
        version = self.version_for(api_key)
        payload = body(version) if callable(body) else body
        await self._wait_authenticated()
        # Correlation id 0 is never used for answered requests (they count from 1).
        frame = encode_request(api_key, version, 0, self._client_id, payload)
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except OSError as error:
            raise self._fail_io(error) from error
        return version

    # -- internals -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            failure = self._failure
            assert failure is not None
            if isinstance(failure, FluxAuthenticationError):
                raise FluxAuthenticationError(str(failure), code=failure.code)
            raise type(failure)(str(failure))

    async def _wait_authenticated(self) -> None:
        """Wait while a re-authentication runs; raise if the connection is closed."""
        self._check_open()
        if not self._authenticated.is_set():
            await self._authenticated.wait()
            self._check_open()

    async def _exchange(
        self,
        api_key: int,
        version: int,
        payload: dict[str, Any],
        timeout_s: float | None,
        *,
        gated: bool = True,
    ) -> dict[str, Any]:
        """Send one request and wait for its answer; ``gated`` requests first wait for a
        re-authentication in progress (the SASL requests of that exchange are not gated)."""
        if gated:
            await self._wait_authenticated()
        self._check_open()
        async with self._slots:
            self._check_open()
            self._correlation_id = self._correlation_id % 0x7FFFFFFF + 1
            correlation_id = self._correlation_id
            frame = encode_request(api_key, version, correlation_id, self._client_id, payload)
            future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (api_key, version, future)
            try:
                self._writer.write(frame)
                await self._writer.drain()
            except OSError as error:
                raise self._fail_io(error) from error
            try:
                async with asyncio.timeout(timeout_s or self._timeout_s):
                    return await asyncio.shield(future)
            except TimeoutError as error:
                # The answer may still come, out of turn for nobody; start afresh instead.
                failure = FluxTimeoutError(f"no response from {self._label} in time")
                self.close(failure)
                raise failure from error

    def _fail_io(self, error: OSError) -> FluxConnectionError:
        failure = FluxConnectionError(
            f"connection to {self._label} failed: {error.strerror or error}",
            addresses=(format_address(self.address),),
        )
        self.close(failure)
        return failure

    async def _read_responses(self) -> None:
        try:
            while True:
                size_bytes = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(size_bytes)
                if not 4 <= size <= limits.FRAME_BYTES_MAX:
                    raise ProtocolError(f"response frame of {size} bytes")
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue  # a request that timed out on our side; nobody waits
                api_key, version, future = entry
                _, response = decode_response(api_key, version, frame)
                if not future.done():
                    future.set_result(response)
        except asyncio.CancelledError:
            raise
        except ssl.SSLError as error:
            if self._opened:
                message = f"connection to {self._label} failed: {_ssl_reason(error)}"
                self.close(FluxConnectionError(message, addresses=(format_address(self.address),)))
            else:
                # TLS 1.3 reports a refused client certificate on the first read.
                self.close(
                    FluxAuthenticationError(
                        f"TLS handshake with {self._label} failed: {_ssl_reason(error)}"
                    )
                )
        except (asyncio.IncompleteReadError, OSError) as error:
            hint = ""
            if self._security.uses_tls and not self._opened:
                hint = _CLOSED_AFTER_TLS_HANDSHAKE
            self.close(
                FluxConnectionError(
                    f"connection to {self._label} closed by the broker ({error}){hint}",
                    addresses=(format_address(self.address),),
                )
            )
        except ProtocolError as error:
            self.close(FluxProtocolError(f"{self._label} sent an undecodable response: {error}"))

    async def _negotiate(self) -> dict[int, tuple[int, int]]:
        version = _API_VERSIONS_MAX
        body = {
            "client_software_name": _CLIENT_SOFTWARE_NAME,
            "client_software_version": _CLIENT_SOFTWARE_VERSION,
        }
        response = await self._exchange(ApiKey.API_VERSIONS, version, body, None)
        ranges = _ranges(response)
        if response["error_code"] == ErrorCode.UNSUPPORTED_VERSION:
            version = negotiate_version(ApiKey.API_VERSIONS, ranges, broker=self._label)
            response = await self._exchange(ApiKey.API_VERSIONS, version, body, None)
            ranges = _ranges(response)
        if response["error_code"] != ErrorCode.NONE:
            raise UnsupportedVersionError(
                response["error_code"], f"{self._label} refused ApiVersions v{version}"
            )
        return ranges

    # -- SASL ------------------------------------------------------------------------------

    async def _authenticate(self) -> tuple[int, float]:
        """One SASL exchange (see the module docstring): the session lifetime the broker
        answered (0: unlimited) and when the last SaslAuthenticate was sent (monotonic)."""
        security = self._security
        mechanism = security.sasl_mechanism
        username = security.sasl_username
        password = security.sasl_password
        assert mechanism is not None and username is not None and password is not None
        try:
            handshake_version = self.version_for(ApiKey.SASL_HANDSHAKE)
            version = self.version_for(ApiKey.SASL_AUTHENTICATE)
        except UnsupportedVersionError as error:
            raise FluxAuthenticationError(
                f"cannot authenticate with {self._label}: {error.message}", code=error.code
            ) from None
        handshake = await self._exchange(
            ApiKey.SASL_HANDSHAKE, handshake_version, {"mechanism": mechanism}, None, gated=False
        )
        code = ErrorCode.from_code(handshake["error_code"])
        if code is ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            enabled = ", ".join(handshake.get("mechanisms") or []) or "none"
            raise FluxAuthenticationError(
                f"{self._label} does not enable SASL mechanism {mechanism} (enabled: {enabled})",
                code=code,
            )
        if code is not ErrorCode.NONE:
            raise FluxAuthenticationError(
                f"{self._label} refused SaslHandshake for {mechanism}: {code.message}", code=code
            )
        what = f"SASL {mechanism} authentication of user {username!r} with {self._label}"
        try:
            if mechanism == "PLAIN":
                sent_at = time.monotonic()
                _, lifetime_ms = await self._sasl_token(
                    version, _plain_message(username, password), what
                )
            else:
                client = ScramClient(mechanism, username, password)
                server_first, _ = await self._sasl_token(version, client.first(), what)
                final = client.final(server_first)
                sent_at = time.monotonic()
                server_final, lifetime_ms = await self._sasl_token(version, final, what)
                client.verify(server_final)
        except AuthenticationError as error:
            # flux.auth's messages never hold a secret; they say what the server got wrong.
            raise FluxAuthenticationError(f"{what} failed: {error}") from None
        self.authentications += 1
        return lifetime_ms, sent_at

    async def _sasl_token(self, version: int, token: bytes, what: str) -> tuple[bytes, int]:
        """Send one SASL token; the server's answer and the session lifetime it gave (0 before
        the exchange completes, or for an unlimited session), or ``FluxAuthenticationError``
        with the broker's message."""
        response = await self._exchange(
            ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}, None, gated=False
        )
        code = ErrorCode.from_code(response["error_code"])
        if code is not ErrorCode.NONE:
            reason = response.get("error_message") or code.message
            raise FluxAuthenticationError(f"{what} failed: {reason}", code=code)
        lifetime_ms = int(response.get("session_lifetime_ms") or 0) if version >= 1 else 0
        return bytes(response.get("auth_bytes") or b""), lifetime_ms

    def _schedule_reauthentication(self, lifetime_ms: int, sent_at: float) -> None:
        if lifetime_ms <= 0 or self.closed:
            return
        due = sent_at + lifetime_ms / 1000 * REAUTHENTICATE_FRACTION
        self._reauthentication = asyncio.get_running_loop().create_task(
            self._reauthenticate_at(due)
        )

    async def _reauthenticate_at(self, due: float) -> None:
        """At ``due`` (monotonic), re-authenticate with gated requests waiting; then schedule
        the next one. A failure closes the connection with its error."""
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if self.closed:
            return
        self._reauthenticating = True
        self._authenticated.clear()
        try:
            lifetime_ms, sent_at = await self._authenticate()
        except FluxError as error:
            if isinstance(error, FluxAuthenticationError):
                error = FluxAuthenticationError(
                    f"re-authentication failed: {error}", code=error.code
                )
                if self.closed:
                    self._failure = error  # the reader saw the close that followed it
            self.close(error)  # no-op when the connection is already closed
            return
        except Exception as error:  # noqa: BLE001 - nobody awaits this task: report it
            self.close(
                FluxConnectionError(
                    f"re-authentication with {self._label} failed: {type(error).__name__}",
                    addresses=(format_address(self.address),),
                )
            )
            return
        finally:
            self._reauthenticating = False
            self._authenticated.set()
        self._schedule_reauthentication(lifetime_ms, sent_at)


def _label(address: Address, node_id: int | None) -> str:
    if node_id is None:
        return f"bootstrap broker {format_address(address)}"
    return f"broker {node_id} at {format_address(address)}"


def _plain_message(username: str, password: str) -> bytes:
    """RFC 4616: an empty authorization id, the user name and the password, NUL-separated."""
    return b"\x00" + username.encode("utf-8") + b"\x00" + password.encode("utf-8")


def _ssl_reason(error: ssl.SSLError) -> str:
    """The reason of a TLS failure without OpenSSL's file and line noise."""
    verify = getattr(error, "verify_message", None)
    if verify:
        return f"certificate verify failed: {verify}"
    return str(getattr(error, "reason", None) or error.strerror or error)


def _ranges(response: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    return {
        item["api_key"]: (item["min_version"], item["max_version"]) for item in response["api_keys"]
    }


async def close_quietly(connection: BrokerConnection) -> None:
    """Close ``connection`` and let its reader task finish."""
    connection.close()
    with contextlib.suppress(BaseException):
        await connection._reader_task
