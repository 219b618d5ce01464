"""Forwarded produces over one WebSocket per pair of brokers (``cluster.http.forward_link``):
many calls in flight on one link, answers matched by id whatever their order, a broken link
failing its pending calls as an unavailable peer, and the next call opening a new link.

The leader's end is the real ``serve_produce_link`` on a real aiohttp server; what it calls
to produce is a stand-in here (the broker's own produce path is covered by the HTTP API's
integration tests, which forward through these links).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from flux.cluster.http.forward_link import LINK_PATH, ForwardLinks, serve_produce_link
from flux.cluster.replication.peers import BrokerPeers, PeerUnavailableError
from flux.controller.image import MetadataImage
from flux.controller.records import RegisterBroker, UnfenceBroker

LEADER = 1


def _image(port: int) -> MetadataImage:
    return MetadataImage.EMPTY.replay_all(
        [
            RegisterBroker(LEADER, "inc", "127.0.0.1", 1, "127.0.0.1", port),
            UnfenceBroker(LEADER, "inc"),
        ],
        1,
    )


class _Leader:
    """A real aiohttp server with the leader's end of the link; ``produce`` answers each
    call after a random short delay, so answers come back out of order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, list[Any]]] = []
        self.links_opened = 0
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.hold = asyncio.Event()
        self.hold.set()

    async def produce(self, topic: str, partition: int, records: list[Any]) -> tuple[int, Any]:
        self.calls.append((topic, partition, records))
        await self.hold.wait()
        await asyncio.sleep(random.random() / 100)
        if topic == "refused":
            return 421, {"error": "not the leader", "leader": 3}
        return 200, {"offsets": [{"offset": len(self.calls), "records": records}]}

    async def _link(self, request: web.Request) -> web.StreamResponse:
        self.links_opened += 1
        return await serve_produce_link(request, self.produce)

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.add_routes([web.get(LINK_PATH, self._link)])
        self.runner = web.AppRunner(app, shutdown_timeout=0.2)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


@contextlib.asynccontextmanager
async def _linked() -> AsyncIterator[tuple[_Leader, ForwardLinks]]:
    """A running leader and this broker's links to it, all closed at the end."""
    leader = _Leader()
    await leader.start()
    peers = BrokerPeers(lambda: _image(leader.port), broker_id=2)
    links = ForwardLinks(peers)
    try:
        yield leader, links
    finally:
        await links.close()
        await peers.close()
        await leader.stop()


def test_many_calls_share_one_link_and_get_their_own_answers() -> None:
    async def run() -> None:
        async with _linked() as (leader, links):
            answers = await asyncio.gather(
                *(links.produce(LEADER, "t", i % 3, [f"r{i}"], timeout_s=5) for i in range(60))
            )
            for i, (status, body) in enumerate(answers):
                assert status == 200
                assert body["offsets"][0]["records"] == [f"r{i}"]  # its own answer
            assert leader.links_opened == 1
            # The leader's error answers come back as they were, for the caller to pass on.
            assert await links.produce(LEADER, "refused", 0, ["x"], timeout_s=5) == (
                421,
                {"error": "not the leader", "leader": 3},
            )

    asyncio.run(run())


def test_a_broken_link_fails_its_calls_and_the_next_call_reconnects() -> None:
    async def run() -> None:
        async with _linked() as (leader, links):
            assert (await links.produce(LEADER, "t", 0, ["a"], timeout_s=5))[0] == 200
            leader.hold.clear()  # the next call stays pending at the leader
            waiting = asyncio.ensure_future(links.produce(LEADER, "t", 0, ["b"], timeout_s=5))
            while len(leader.calls) < 2:
                await asyncio.sleep(0.01)
            port = leader.port
            await leader.stop()  # the leader's server goes away with the call in flight
            with pytest.raises(PeerUnavailableError):
                await waiting
            leader.hold.set()
            await leader.start(port)
            assert (await links.produce(LEADER, "t", 0, ["c"], timeout_s=5))[0] == 200
            assert leader.links_opened == 2

    asyncio.run(run())


def test_a_call_to_an_unknown_or_silent_broker_is_unavailable() -> None:
    async def run() -> None:
        async with _linked() as (leader, links):
            with pytest.raises(PeerUnavailableError, match="not live"):
                await links.produce(7, "t", 0, ["a"], timeout_s=5)
            leader.hold.clear()
            with pytest.raises(PeerUnavailableError, match="did not answer"):
                await links.produce(LEADER, "t", 0, ["a"], timeout_s=0.2)
            leader.hold.set()

    asyncio.run(run())
