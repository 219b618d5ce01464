"""Publishing over the HTTP API, each message sent straight to its partition's leader.

Any broker answers ``POST /publish``; one that does not lead the message's partition forwards
it to the leader, a second hop that costs CPU on both brokers and a round trip of latency (on a
3-broker cluster two messages in three take it; docs/benchmarks.md measures what that costs).
``AsyncHttpPublisher`` routes like a Kafka producer instead: it reads ``GET /cluster`` (the
brokers' HTTP addresses and each partition's leader), puts a message on the partition the
broker would (its key's, else its id's murmur2 hash; round robin over the partitions that have
a leader for a message with neither, named in the request's ``partition`` field), and posts it
to that partition's leader.

    async with AsyncHttpPublisher("http://127.0.0.1:9292") as publisher:
        published = await publisher.publish("orders", "paid", id="order-17")
        print(published.partition, published.offset, published.duplicate)

    with HttpPublisher("http://127.0.0.1:9292") as publisher:
        publisher.publish("orders", "paid", id="order-17")

The view is read again when it is ``metadata_max_age_s`` old, and at once when a broker answers
that it does not lead the partition (``421``) or cannot be reached. A stale view costs nothing
but the hop: a broker that no longer leads the partition forwards the message to the one that
does. A topic the view does not know yet is published through any broker (which creates it,
as ``POST /publish`` does) and the view is read again for the next message.

Retries, until ``timeout_s`` from the call: a message with an ``id`` is retried on ``421``,
``503`` and a failed connection, because the partition's id index answers a repeat with the
original's offset (``duplicate: true``) instead of storing it again. A message without an id is
retried only where nothing can have been stored: ``421`` and a connection that could not be
opened. Every other error status raises ``HttpApiError`` at once; retries that run out of time
raise ``FluxTimeoutError`` (the outcome is unknown: the message may be stored).

Thread-safety: an ``AsyncHttpPublisher`` belongs to one event loop; an ``HttpPublisher`` may
be called from any thread but runs every call on its own loop thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl as ssl_module
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from .._sync import LoopThread
from ..errors import ConfigurationError, FluxConnectionError, FluxTimeoutError, HttpApiError
from .routing import ClusterView, partition_of

__all__ = ["AsyncHttpPublisher", "HttpPublisher", "Published"]

#: Statuses after which a message with an id is sent again (nothing stored twice: the id index
#: answers a repeat); a message without one only after ``NOT_LEADER_STATUS``.
NOT_LEADER_STATUS = 421
_RETRIABLE_WITH_ID = frozenset({NOT_LEADER_STATUS, 503})
#: First and largest pause between two attempts of one message.
RETRY_BACKOFF_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0
#: Longest wait for one broker's ``GET /cluster`` before the next address is tried.
CLUSTER_READ_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Published:
    """Where a published message is stored; ``duplicate``: its id was already stored there, at
    ``offset``, and nothing was appended."""

    topic: str
    partition: int
    offset: int
    duplicate: bool


class _Retry(Exception):
    """One attempt failed in a way that allows another (``reason`` says how)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AsyncHttpPublisher:
    """Leader-aware ``POST /publish`` (module docstring). ``bootstrap``: one or more base URLs
    of brokers' HTTP APIs (``"http://host:port"``; ``https`` for a TLS listener, then every
    broker is reached over TLS with ``ssl``); ``auth``: ``(user, password)`` for a cluster with
    ``http_auth = "required"``."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        auth: tuple[str, str] | None = None,
        ssl: ssl_module.SSLContext | None = None,
        timeout_s: float = 30.0,
        metadata_max_age_s: float = 30.0,
    ) -> None:
        urls = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        if not urls:
            raise ConfigurationError("bootstrap names no broker")
        schemes = set()
        self._bootstrap: list[str] = []
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigurationError(f"bootstrap URL {url!r} is not http://host:port")
            schemes.add(parts.scheme)
            self._bootstrap.append(parts.netloc)
        if len(schemes) > 1:
            raise ConfigurationError("bootstrap URLs mix http and https")
        if timeout_s <= 0 or metadata_max_age_s <= 0:
            raise ConfigurationError("timeout_s and metadata_max_age_s must be positive")
        self._scheme = schemes.pop()
        self._auth = aiohttp.BasicAuth(*auth) if auth is not None else None
        self._ssl = ssl
        self.timeout_s = timeout_s
        self.metadata_max_age_s = metadata_max_age_s
        self._session: aiohttp.ClientSession | None = None
        self._view: ClusterView | None = None
        self._view_read_at = 0.0
        self._refreshing: asyncio.Task[ClusterView] | None = None
        self._rotation = itertools.count()
        self._closed = False

    async def __aenter__(self) -> AsyncHttpPublisher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._refreshing is not None:
            self._refreshing.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def view(self) -> ClusterView | None:
        """The cluster as last read (``None`` before the first publish)."""
        return self._view

    async def publish(
        self,
        topic: str,
        message: str,
        *,
        id: str | None = None,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Published:
        """Store ``message`` on ``topic`` (acks=all, as ``POST /publish`` does) and say where.
        ``headers``: string values by name, stored as the record's headers (UTF-8)."""
        if self._closed:
            raise ConfigurationError("the publisher is closed")
        body: dict[str, Any] = {"topic": topic, "message": message}
        if id is not None:
            body["id"] = id
        if key is not None:
            body["key"] = key
        if headers:
            body["headers"] = dict(headers)
        deadline = time.monotonic() + self.timeout_s
        backoff_s = RETRY_BACKOFF_S
        while True:
            try:
                return await self._attempt(topic, body, deadline)
            except _Retry as retry:
                self._view_read_at = 0.0  # read the cluster again before the next attempt
                if time.monotonic() + backoff_s >= deadline:
                    raise FluxTimeoutError(
                        f"publish to {topic!r} not confirmed within {self.timeout_s} s "
                        f"(last: {retry.reason}); it may be stored"
                    ) from None
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, RETRY_BACKOFF_MAX_S)

    async def _attempt(self, topic: str, body: dict[str, Any], deadline: float) -> Published:
        view = await self._current_view(deadline)
        address, partition = self._route(view, topic, body)
        if partition is not None:
            body = {**body, "partition": partition}
        has_id = "id" in body
        try:
            status, answer = await self._request("POST", address, "/publish", deadline, body=body)
        except aiohttp.ClientConnectorError as error:
            raise _Retry(f"{address}: {error}") from None  # never connected: nothing sent
        except (TimeoutError, aiohttp.ClientError) as error:
            if has_id:
                raise _Retry(f"{address}: {error!r}") from None
            raise FluxTimeoutError(
                f"publish to {topic!r} at {address} got no answer ({error!r}); it may be stored"
            ) from None
        if status == 200:
            return Published(
                topic=str(answer["topic"]),
                partition=int(answer["partition"]),
                offset=int(answer["offset"]),
                duplicate=bool(answer["duplicate"]),
            )
        if status == NOT_LEADER_STATUS or (has_id and status in _RETRIABLE_WITH_ID):
            raise _Retry(f"{address} answered {status}: {answer}")
        error_text = answer.get("error") if isinstance(answer, dict) else answer
        raise HttpApiError(
            f"publish to {topic!r} at {address}: {status} {error_text}",
            status=status,
            answer=answer,
        )

    def _route(self, view: ClusterView, topic: str, body: dict[str, Any]) -> tuple[str, int | None]:
        """``(address, partition to name in the request or None)``."""
        count = view.partition_count(topic)
        if count is None:
            # Unknown here (new, or created since the view was read): any broker takes it, and
            # creates the topic; the next publish reads the cluster again.
            self._view_read_at = 0.0
            return self._any_address(view), None
        partition = partition_of(count, key=body.get("key"), message_id=body.get("id"))
        named = None
        if partition is None:
            available = view.available[topic]
            partition = named = available[next(self._rotation) % len(available)]
        address = view.leader_address(topic, partition)
        return (address if address is not None else self._any_address(view)), named

    def _any_address(self, view: ClusterView) -> str:
        known = list(view.brokers.values()) or self._bootstrap
        return known[next(self._rotation) % len(known)]

    async def _current_view(self, deadline: float) -> ClusterView:
        view = self._view
        if view is not None and time.monotonic() - self._view_read_at < self.metadata_max_age_s:
            return view
        if self._refreshing is None or self._refreshing.done():
            # One read at a time: concurrent publishes wait for the same answer.
            self._refreshing = asyncio.create_task(self._read_view(deadline))
        return await asyncio.shield(self._refreshing)

    async def _read_view(self, deadline: float) -> ClusterView:
        addresses = list(
            dict.fromkeys([*(self._view.brokers.values() if self._view else ()), *self._bootstrap])
        )
        failures = []
        for address in addresses:
            try:
                status, answer = await self._request(
                    "GET", address, "/cluster", deadline, longest_s=CLUSTER_READ_TIMEOUT_S
                )
                if status == 200:
                    view = ClusterView.from_answer(answer)
                    self._view, self._view_read_at = view, time.monotonic()
                    return view
                failures.append(f"{address}: {status} {answer}")
                if status in (401, 403):
                    raise HttpApiError(
                        f"GET /cluster at {address}: {status} {answer}",
                        status=status,
                        answer=answer,
                    )
            except (TimeoutError, aiohttp.ClientError, ValueError) as error:
                failures.append(f"{address}: {error!r}")
        if self._view is not None:
            return self._view  # keep routing by the last view; brokers forward if it is stale
        raise FluxConnectionError(
            "no broker answered GET /cluster: " + "; ".join(failures),
            addresses=tuple(addresses),
        )

    async def _request(
        self,
        method: str,
        address: str,
        path: str,
        deadline: float,
        *,
        body: dict[str, Any] | None = None,
        longest_s: float | None = None,
    ) -> tuple[int, Any]:
        """``(status, decoded answer)`` of one request, within ``deadline`` (and ``longest_s``)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(auth=self._auth)
        left_s = deadline - time.monotonic()
        if longest_s is not None:
            left_s = min(left_s, longest_s)
        timeout = aiohttp.ClientTimeout(total=max(0.1, left_s))
        url = f"{self._scheme}://{address}{path}"
        async with self._session.request(
            method, url, json=body, ssl=self._ssl, timeout=timeout
        ) as response:
            return response.status, await _answer_of(response)


async def _answer_of(response: aiohttp.ClientResponse) -> Any:
    """The decoded JSON answer, or its text when it is not JSON."""
    text = await response.text()
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


class HttpPublisher:
    """The blocking twin of ``AsyncHttpPublisher`` (same arguments), on a loop thread."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        auth: tuple[str, str] | None = None,
        ssl: ssl_module.SSLContext | None = None,
        timeout_s: float = 30.0,
        metadata_max_age_s: float = 30.0,
    ) -> None:
        self._async = AsyncHttpPublisher(
            bootstrap,
            auth=auth,
            ssl=ssl,
            timeout_s=timeout_s,
            metadata_max_age_s=metadata_max_age_s,
        )
        self._loop = LoopThread("flux-http-publisher")

    def __enter__(self) -> HttpPublisher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._loop.run(self._async.close())
        finally:
            self._loop.close()

    @property
    def view(self) -> ClusterView | None:
        return self._async.view

    def publish(
        self,
        topic: str,
        message: str,
        *,
        id: str | None = None,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Published:
        return self._loop.run(self._async.publish(topic, message, id=id, key=key, headers=headers))
