"""The console's routes on the broker's HTTP server.

``GET /ui`` redirects to ``/ui/``, the page; ``/ui/static/...`` are its assets; ``GET
/ui/events?topic=T&group=G`` (each repeatable, at most ``MAX_NAMES_PER_STREAM`` of each) is
a Server-Sent Events stream: every ``interval_s`` one ``data:`` line holding a JSON object

    {"time_ms": ..., "cluster": {brokers, fenced, partitions, under_replicated, offline,
     controller_id}, "topics": {T: {"end": sum of high watermarks, "partitions": n}},
     "groups": {G: {"committed": sum of committed offsets, "lag": sum of lags,
                    "offsets": [[topic, partition, committed, high watermark, lag], ...]}},
     "totals": {every topic: sum of high watermarks}}   (with ?totals=true)

from which the page draws its rates (the difference of two sums over the time between them)
and lag; a group's ``offsets`` (its first ``MAX_LIVE_PARTITIONS`` partitions, in the order of
``GET /groups/{g}``) keep the group page's table live. A topic or group that does not exist
(or cannot be read now) is left out of that event. The figures come from the same code as
``GET /topics/{t}?offsets=all`` and ``GET /groups/{g}`` (one request to each partition
leader, none per partition), so the stream adds no data path of its own. At most
``MAX_STREAMS`` streams at once per broker (503 beyond); ``close`` ends them all (the HTTP
server waits for open responses when it stops).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from flux.cluster.groups.offsets_client import OffsetsUnavailableError
from flux.cluster.http.api import HttpApi

__all__ = ["MAX_NAMES_PER_STREAM", "MAX_STREAMS", "STATIC_DIR", "Console"]

log = logging.getLogger("flux.console")

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_STREAMS = 64
MAX_NAMES_PER_STREAM = 20
#: Partitions of a group whose offsets each event lists (the group page's table rows).
MAX_LIVE_PARTITIONS = 1000


class Console:
    """The console of one broker, reading through its ``HttpApi``."""

    def __init__(self, api: HttpApi, *, interval_s: float = 1.0) -> None:
        self._api = api
        self._interval_s = interval_s
        self._streams: set[web.StreamResponse] = set()
        self._closing = asyncio.Event()
        # Streams asking for the same topics and groups share one snapshot per half interval:
        # key -> (when it was started, the snapshot being computed or computed).
        self._shared: dict[tuple[Any, ...], tuple[float, asyncio.Future[dict[str, Any]]]] = {}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui", self._redirect),
            web.get("/ui/", self._index),
            web.get("/ui/events", self._events),
            web.static("/ui/static", STATIC_DIR),
        ]

    async def close(self) -> None:
        """End every event stream (before the HTTP server stops)."""
        self._closing.set()
        for _ in range(100):
            if not self._streams:
                return
            await asyncio.sleep(0.01)

    async def _redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui/")

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        topics = request.query.getall("topic", [])
        groups = request.query.getall("group", [])
        every_topic = request.query.get("totals") == "true"
        if len(topics) > MAX_NAMES_PER_STREAM or len(groups) > MAX_NAMES_PER_STREAM:
            return web.json_response(
                {"error": f"at most {MAX_NAMES_PER_STREAM} topics and groups per stream"},
                status=400,
            )
        if len(self._streams) >= MAX_STREAMS or self._closing.is_set():
            return web.json_response(
                {"error": f"this broker serves {MAX_STREAMS} event streams already"}, status=503
            )
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        self._streams.add(response)
        try:
            while not self._closing.is_set():
                event = await self.shared_snapshot(topics, groups, every_topic=every_topic)
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
                try:
                    await asyncio.wait_for(self._closing.wait(), self._interval_s)
                except TimeoutError:
                    pass
        except (ConnectionError, asyncio.CancelledError):
            pass  # the page went away, or the server stops
        finally:
            self._streams.discard(response)
        return response

    async def shared_snapshot(
        self, topics: list[str], groups: list[str], *, every_topic: bool = False
    ) -> dict[str, Any]:
        """``snapshot``, shared by the streams that ask for the same topics and groups within
        half an interval (many open pages cost one set of reads per tick, not one each)."""
        key = (tuple(dict.fromkeys(topics)), tuple(dict.fromkeys(groups)), every_topic)
        now = time.monotonic()
        entry = self._shared.get(key)
        if entry is None or now - entry[0] >= self._interval_s / 2:
            for stale in [k for k, (at, _) in self._shared.items() if now - at >= self._interval_s]:
                del self._shared[stale]
            entry = (
                now,
                asyncio.ensure_future(self.snapshot(topics, groups, every_topic=every_topic)),
            )
            self._shared[key] = entry
        return await asyncio.shield(entry[1])

    async def snapshot(
        self, topics: list[str], groups: list[str], *, every_topic: bool = False
    ) -> dict[str, Any]:
        """One event of the stream (see the module docstring)."""
        event: dict[str, Any] = {
            "time_ms": int(time.time() * 1000),
            "cluster": self._api.cluster_summary(),
            "topics": {},
            "groups": {},
        }
        for name in dict.fromkeys(topics):
            partitions = await self._api.topic_offsets(name)
            if partitions is None:
                continue
            ends = [entry.get("high_watermark") for entry in partitions]
            event["topics"][name] = {
                "partitions": len(partitions),
                "end": sum(end for end in ends if end is not None),
                "complete": None not in ends,
            }
        if every_topic:
            event["totals"] = {
                name: total["end"] for name, total in (await self._api.topic_totals()).items()
            }
        for group_id in dict.fromkeys(groups):
            try:
                offsets = await self._api.group_offsets(group_id)
            except OffsetsUnavailableError:
                continue
            event["groups"][group_id] = {
                "committed": sum(max(entry["committed"], 0) for entry in offsets),
                "lag": sum(entry.get("lag") or 0 for entry in offsets),
                "partitions": len(offsets),
                "offsets": [
                    [
                        entry["topic"],
                        entry["partition"],
                        entry["committed"],
                        entry.get("high_watermark"),
                        entry.get("lag"),
                    ]
                    for entry in offsets[:MAX_LIVE_PARTITIONS]
                ],
            }
        return event
