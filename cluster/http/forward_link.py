"""Forwarded HTTP produces over one WebSocket per pair of brokers.

A ``POST /publish`` that lands on a broker which does not lead the message's partition is
sent on to the leader (see ``api``). As one HTTP request per forwarded group, every such
message cost a whole aiohttp client request on the receiving broker and a whole server
request (parsing, routing, middlewares, response) on the leader: at a few thousand single
messages per second that was most of the front door's CPU. A ``ForwardLinks`` keeps, per
leader, one WebSocket to the leader's ``GET /internal/produce-link`` and sends each forwarded
group as one text frame; answers come back as frames matched by id, in any order, so many
groups are in flight on one link at once (the leader's group commit merges them).

Frames are JSON. Request: ``{"id": n, "topic": t, "partition": p, "records": [...]}``
(records as ``/internal/produce`` takes them). Answer: ``{"id": n, "status": s, "body":
{...}}`` with the status and body that ``POST /internal/produce/{t}/{p}`` would have
answered, so the caller treats both the same. The link is guarded like every node-only
path (``cluster.internal_security``: TLS and the node token when configured).

A link that breaks fails its pending calls with ``PeerUnavailableError`` (the HTTP client
gets a 503 and retries, as when the leader's HTTP server did not answer); the next call
opens a new one. A call that gets no answer within its timeout fails the same way.

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web

from ..replication.peers import BrokerPeers, PeerUnavailableError

__all__ = ["LINK_PATH", "ForwardLinks", "serve_produce_link"]

log = logging.getLogger("flux.cluster.http.forward")

LINK_PATH = "/internal/produce-link"
CONNECT_TIMEOUT_S = 3.0
#: Largest frame a link accepts (a forwarded group of up to MAX_GROUP_RECORDS records).
MAX_FRAME_BYTES = 64 << 20

#: ``produce(topic, partition, records)`` on the leader: ``(status, body)``.
LocalProduce = Callable[[str, int, list[Any]], Awaitable[tuple[int, dict[str, Any]]]]


class _Link:
    """One open WebSocket to one leader, with the calls waiting for its answers."""

    def __init__(self, address: str, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.address = address
        self.socket = socket
        self.pending: dict[int, asyncio.Future[tuple[int, Any]]] = {}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.socket:
                if message.type != WSMsgType.TEXT:
                    break
                answer = json.loads(message.data)
                future = self.pending.pop(answer["id"], None)
                if future is not None and not future.done():
                    future.set_result((int(answer["status"]), answer["body"]))
        except (aiohttp.ClientError, ValueError, KeyError, TypeError) as error:
            log.warning("produce link to %s failed: %r", self.address, error)
        finally:
            self.fail(f"produce link to {self.address} closed")

    def fail(self, reason: str) -> None:
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(PeerUnavailableError(reason))

    @property
    def open(self) -> bool:
        return not self.socket.closed and not self.reader.done()

    async def close(self) -> None:
        await self.socket.close()
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.reader


class ForwardLinks:
    """This broker's links to the leaders it forwards produces to."""

    def __init__(self, peers: BrokerPeers) -> None:
        self._peers = peers
        self._links: dict[int, _Link] = {}
        self._connecting: dict[int, asyncio.Future[_Link]] = {}
        self._ids = itertools.count(1)
        #: Other brokers' links to this one (``serve``): closed by ``close``, so stopping the
        #: HTTP server does not wait for them.
        self._inbound: set[web.WebSocketResponse] = set()
        self._closed = False

    async def produce(
        self, broker_id: int, topic: str, partition: int, records: list[Any], timeout_s: float
    ) -> tuple[int, Any]:
        """``(status, body)`` of producing ``records`` (encoded as ``/internal/produce``
        takes them) at broker ``broker_id``; ``PeerUnavailableError`` if it cannot answer."""
        if self._closed:
            raise PeerUnavailableError("this broker is stopping")
        link = await self._link(broker_id)
        call_id = next(self._ids)
        future: asyncio.Future[tuple[int, Any]] = asyncio.get_running_loop().create_future()
        link.pending[call_id] = future
        frame = json.dumps(
            {"id": call_id, "topic": topic, "partition": partition, "records": records},
            separators=(",", ":"),
        )
        try:
            await link.socket.send_str(frame)
            # The future is this call's alone: a timeout may cancel it (the reader skips it).
            async with asyncio.timeout(timeout_s):
                return await future
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as error:
            raise PeerUnavailableError(f"broker {broker_id}: {error!r}") from None
        except TimeoutError:
            raise PeerUnavailableError(
                f"broker {broker_id} did not answer within {timeout_s} s"
            ) from None
        finally:
            link.pending.pop(call_id, None)

    async def _link(self, broker_id: int) -> _Link:
        address = self._peers.address(broker_id)
        if address is None:
            raise PeerUnavailableError(f"broker {broker_id} is not live")
        link = self._links.get(broker_id)
        if link is not None and link.open and link.address == address:
            return link
        if link is not None:
            self._links.pop(broker_id, None)
            await link.close()
        connecting = self._connecting.get(broker_id)
        if connecting is None:
            connecting = asyncio.ensure_future(self._connect(address))
            self._connecting[broker_id] = connecting
            connecting.add_done_callback(lambda _done: self._connecting.pop(broker_id, None))
        try:
            link = await asyncio.shield(connecting)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise PeerUnavailableError(f"broker {broker_id} at {address}: {error!r}") from None
        self._links[broker_id] = link
        return link

    async def _connect(self, address: str) -> _Link:
        internal = self._peers.internal
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            socket = await self._peers.client().ws_connect(
                internal.url(address, LINK_PATH)
                if internal is not None
                else f"http://{address}{LINK_PATH}",
                headers=self._peers.headers(),
                ssl=internal.ssl if internal is not None else True,
                compress=0,
                max_msg_size=MAX_FRAME_BYTES,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=1.0),
            )
        return _Link(address, socket)

    async def close(self) -> None:
        """Close every link, both ways; later calls and links are refused."""
        self._closed = True
        links, self._links = self._links, {}
        for link in links.values():
            link.fail("broker stopping")
            await link.close()
        inbound, self._inbound = self._inbound, set()
        # A copy: a socket's handler removes it from the set when it ends, and ending is what
        # close() causes (iterating the set itself failed at shutdown, "Set changed size during
        # iteration", after the fuzzer had left links open).
        for socket in list(inbound):
            await socket.close()

    async def serve(self, request: web.Request, produce: LocalProduce) -> web.StreamResponse:
        """``GET /internal/produce-link``: the leader's end of another broker's link."""
        if self._closed:
            return web.json_response({"error": "this broker is stopping"}, status=503)
        return await serve_produce_link(request, produce, self._inbound)


async def serve_produce_link(
    request: web.Request,
    produce: LocalProduce,
    sockets: set[web.WebSocketResponse] | None = None,
) -> web.StreamResponse:
    """The leader's end of a link: each request frame is produced concurrently (so the group
    commit can merge them) and answered when done. The open socket is in ``sockets`` while it
    lasts."""
    socket = web.WebSocketResponse(compress=False, max_msg_size=MAX_FRAME_BYTES)
    await socket.prepare(request)
    if sockets is not None:
        sockets.add(socket)
    running: set[asyncio.Task[None]] = set()

    async def answer(call: dict[str, Any]) -> None:
        try:
            status, body = await produce(call["topic"], int(call["partition"]), call["records"])
        except (KeyError, TypeError, ValueError) as error:
            status, body = 400, {"error": f"malformed forwarded produce: {error!r}"}
        if not socket.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await socket.send_str(
                    json.dumps({"id": call.get("id"), "status": status, "body": body})
                )

    try:
        async for message in socket:
            if message.type != WSMsgType.TEXT:
                break
            try:
                call = json.loads(message.data)
                if not isinstance(call, dict):
                    raise ValueError("not an object")
            except (ValueError, RecursionError) as error:  # RecursionError: nested too deeply
                log.warning("closing a produce link: unreadable frame: %s", error)
                break
            task = asyncio.create_task(answer(call))
            running.add(task)
            task.add_done_callback(running.discard)
    finally:
        if sockets is not None:
            sockets.discard(socket)
        for task in running:
            task.cancel()
        await socket.close()
    return socket
