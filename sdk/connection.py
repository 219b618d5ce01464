"""``BrokerConnection``: one asyncio connection to one broker, with pipelined requests.

Opening it negotiates versions (ApiVersions; a broker that does not know the version asked
answers in v0 and is asked again in one it speaks). Each later request uses the highest version
this SDK, the codec and the broker share (``flux.sdk.metadata.negotiate_version``).

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
import struct
from collections.abc import Callable, Mapping
from typing import Any

from flux.protocol.api import ApiKey, decode_response, encode_request
from flux.protocol.errors import ErrorCode, ProtocolError

from . import limits
from .errors import (
    FluxConnectionError,
    FluxError,
    FluxProtocolError,
    FluxTimeoutError,
    UnsupportedVersionError,
)
from .metadata import Address, format_address, negotiate_version

__all__ = ["Body", "BrokerConnection"]

#: A request body, or a function building it for the negotiated version.
Body = dict[str, Any] | Callable[[int], dict[str, Any]]

_CLIENT_SOFTWARE_NAME = "flux-sdk"
_CLIENT_SOFTWARE_VERSION = "0.2.0"
_API_VERSIONS_MAX = 3
_SIZE = struct.Struct(">i")


class BrokerConnection:
    """See the module docstring. Open with ``await BrokerConnection.open(...)``.

    Invariant: every entry of ``_pending`` is a future not yet done, keyed by the correlation
    id of a request written on this connection and not yet answered.
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
    ) -> None:
        self.address = address
        self.node_id = node_id
        self.api_versions: Mapping[int, tuple[int, int]] = {}
        self.closed = False
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._label = _label(address, node_id)
        self._correlation_id = 0
        self._pending: dict[int, tuple[int, int, asyncio.Future[dict[str, Any]]]] = {}
        self._slots = asyncio.Semaphore(limits.CONNECTION_PENDING_MAX)
        self._failure: FluxError | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_responses())

    @classmethod
    async def open(
        cls, address: Address, *, node_id: int | None, client_id: str, timeout_s: float
    ) -> BrokerConnection:
        label = _label(address, node_id)
        try:
            async with asyncio.timeout(min(timeout_s, limits.CONNECT_TIMEOUT_S)):
                reader, writer = await asyncio.open_connection(
                    address[0], address[1], limit=limits.FRAME_BYTES_MAX
                )
        except TimeoutError as error:
            raise FluxTimeoutError(f"connecting to {label} timed out") from error
        except OSError as error:
            raise FluxConnectionError(
                f"cannot connect to {label}: {error.strerror or error}",
                addresses=(format_address(address),),
            ) from error
        connection = cls(
            address, reader, writer, node_id=node_id, client_id=client_id, timeout_s=timeout_s
        )
        try:
            connection.api_versions = await connection._negotiate()
        except BaseException:
            connection.close()
            raise
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
        if asyncio.current_task() is not self._reader_task:
            self._reader_task.cancel()

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
        self._check_open()
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
            assert self._failure is not None
            raise type(self._failure)(str(self._failure))

    async def _exchange(
        self, api_key: int, version: int, payload: dict[str, Any], timeout_s: float | None
    ) -> dict[str, Any]:
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
        except (asyncio.IncompleteReadError, OSError) as error:
            self.close(
                FluxConnectionError(
                    f"connection to {self._label} closed by the broker ({error})",
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


def _label(address: Address, node_id: int | None) -> str:
    if node_id is None:
        return f"bootstrap broker {format_address(address)}"
    return f"broker {node_id} at {format_address(address)}"


def _ranges(response: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    return {
        item["api_key"]: (item["min_version"], item["max_version"]) for item in response["api_keys"]
    }


async def close_quietly(connection: BrokerConnection) -> None:
    """Close ``connection`` and let its reader task finish."""
    connection.close()
    with contextlib.suppress(BaseException):
        await connection._reader_task
