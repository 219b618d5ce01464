"""The broker's side of the controller HTTP API: find the active controller, follow leader
hints, retry within a deadline.

Writes go to the active controller; a standby answers HTTP 421 with ``leader_http``, which the
client follows. Reads of committed metadata may go to any controller. Every call is bounded by
a deadline and retried with capped exponential backoff on connection errors and elections.

The controllers are first those of the config file; once the metadata records a change of the
controller quorum (``MetadataImage.quorum_voters``), the node calls ``set_addresses`` with the
recorded voters, so brokers follow controllers added and removed at run time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

__all__ = ["ControllerClient", "ControllerUnavailableError"]

log = logging.getLogger("flux.cluster.controller_client")

INITIAL_BACKOFF_S = 0.05
MAX_BACKOFF_S = 0.5
NOT_CONTROLLER_STATUS = 421


class ControllerUnavailableError(RuntimeError):
    """No controller answered (or none was active) before the deadline."""


class ControllerClient:
    """HTTP client of the controller quorum; one per broker, used from its event loop."""

    def __init__(self, http_addresses: Sequence[str], *, internal: Any = None) -> None:
        assert http_addresses, "a broker needs at least one controller address"
        self._addresses = list(http_addresses)
        #: ``cluster.internal_security.InternalSecurity``: scheme, TLS and node credential.
        self._internal = internal
        self._active: str | None = None
        #: Which controller a write without a known active one asks next. It outlives the
        #: call: a controller that did not answer (a partition drops its packets, so the call
        #: spends its whole deadline on it) is not asked first again by the next heartbeat, which
        #: would then never reach the new active controller and get its broker fenced.
        self._cursor = 0
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=1.0)
            )
        return self._session

    def set_addresses(self, http_addresses: Sequence[str]) -> None:
        """Use these controllers from now on (the voters of a quorum change); an empty list or
        the same set changes nothing."""
        if not http_addresses or set(http_addresses) == set(self._addresses):
            return
        log.info("controller addresses changed to %s", ", ".join(http_addresses))
        self._addresses = list(http_addresses)
        if self._active not in self._addresses:
            self._active = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def write(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """Send a write to the active controller; follow leader hints; retry until the deadline."""
        deadline = time.monotonic() + timeout_s
        backoff = INITIAL_BACKOFF_S
        last_problem = "no attempt made"
        while True:
            address = self._active or self._addresses[self._cursor % len(self._addresses)]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ControllerUnavailableError(f"{method} {path}: {last_problem}")
            try:
                status, answer = await self._request(method, address, path, body, remaining)
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                last_problem = f"controller {address} unreachable: {error!r}"
                self._active = None
                self._move_past(address)
            else:
                if status != NOT_CONTROLLER_STATUS and status < 500:
                    self._active = address
                    return answer
                last_problem = f"controller {address}: {answer.get('error_message')}"
                self._move_past(address)
                hint = answer.get("leader_http")
                self._active = hint if hint and hint != address else None
                if self._active is not None:
                    continue  # follow the hint at once
            await asyncio.sleep(min(backoff, max(deadline - time.monotonic(), 0)))
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _move_past(self, address: str) -> None:
        """Ask the controller after ``address`` next (not ``address`` again: it may be the
        active one that just failed)."""
        if address in self._addresses:
            self._cursor = self._addresses.index(address) + 1
        else:
            self._cursor += 1

    async def quorum_view(self, timeout_s: float = 1.0) -> tuple[int, int, int | None]:
        """``(controllers answering, controllers configured, active controller id or None)``,
        asked of every controller at once (for "waiting for quorum" reports)."""
        answers = await asyncio.gather(
            *(
                self._request("GET", address, "/controller/status", None, timeout_s)
                for address in self._addresses
            ),
            return_exceptions=True,
        )
        reachable = 0
        active = None
        for answer in answers:
            if isinstance(answer, BaseException):
                continue
            status, body = answer
            if status == 200:
                reachable += 1
                if body.get("active"):
                    active = body.get("node_id")
        return reachable, len(self._addresses), active

    async def read_metadata(
        self, version: int, *, wait_ms: int, deltas: bool = False
    ) -> dict[str, Any] | None:
        """Long-poll any controller for metadata newer than ``version``: the image, or with
        ``deltas`` the records since ``version`` when the controller still has them (see
        ``ControllerService``); None if no controller answered."""
        for offset in range(len(self._addresses)):
            address = self._active or self._addresses[offset]
            try:
                status, answer = await self._request(
                    "GET",
                    address,
                    f"/controller/metadata?version={version}&wait_ms={wait_ms}"
                    + ("&deltas=1" if deltas else ""),
                    None,
                    wait_ms / 1000 + 5.0,
                )
            except (TimeoutError, aiohttp.ClientError, OSError):
                if self._active == address:
                    self._active = None
                self._addresses.append(self._addresses.pop(0))
                continue
            if status == 200:
                return answer
        return None

    async def _request(
        self, method: str, address: str, path: str, body: dict[str, Any] | None, timeout_s: float
    ) -> tuple[int, dict[str, Any]]:
        internal = self._internal
        async with self._client().request(
            method,
            internal.url(address, path) if internal is not None else f"http://{address}{path}",
            json=body,
            headers=internal.headers if internal is not None else None,
            ssl=internal.ssl if internal is not None else True,
            timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=1.0),
        ) as response:
            try:
                answer = await response.json(content_type=None)
            except ValueError:
                answer = {"error_message": f"HTTP {response.status} without a JSON body"}
            return response.status, answer if isinstance(answer, dict) else {}
