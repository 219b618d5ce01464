"""The broker's HTTP API (aiohttp routes added to the broker's HTTP server).

Original Flux shape: ``POST /publish {"id","message","topic"}``, ``POST /subscribe
{"address","topics","readOld","maxInFlight"}``, ``POST /unsubscribe {"address","topics"}``,
``GET /ping``.
REST: topics, messages (produce with key/headers/id, read by offset range), groups,
subscriptions, cluster state; ``/health``; ``/metrics``. See docs/http-api.md.

Any broker answers any request: a produce or read of a partition led by another broker is
forwarded to the leader over its internal endpoints (one hop; a forwarded request that lands on
a non-leader answers 421 with the leader's id instead of forwarding again). Group reads and
commits go to the group's coordinator; metadata writes to the active controller.

Bad input gets a 4xx JSON answer ``{"error": "...", "field": "<name>"}`` and stores nothing.

``HttpApi`` combines the two halves, one module each: ``flux_api`` (the original Flux API
and push subscriptions) and ``rest``; ``common`` holds what both use. It owns the routes, the
JSON wrapper every route goes through (errors and request metrics) and ``/metrics``.

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..groups.coordinator import GroupCoordinator
from ..groups.offsets_client import OffsetsClient, OffsetsUnavailableError
from ..kafka.apis import KafkaApis
from ..replication.peers import BrokerPeers
from ..replication.replica_manager import ReplicaManager
from ..transactions.coordinator import MARKERS_PATH, VERIFY_PATH
from .common import INTERNAL_TOPICS, HttpError, answer_closing, parse_json_object, read_body
from .flux_api import FluxApi
from .forward_link import LINK_PATH, ForwardLinks
from .group_commit import GroupCommit
from .metrics import CONTENT_TYPE, BrokerMetrics
from .rest import RestApi

__all__ = ["HttpApi"]


class HttpApi(FluxApi, RestApi):
    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        apis: KafkaApis,
        groups: GroupCoordinator,
        peers: BrokerPeers,
        offsets: OffsetsClient,
        metrics: BrokerMetrics,
        broker_id: int,
        allow_auto_create: bool,
        body_timeout_s: float = 30.0,
    ) -> None:
        """``body_timeout_s``: how long a request's body may take to arrive once its headers
        have (``broker.request_timeout_ms``); later, the request is answered 408 and its
        connection closed, so a client that stops sending does not hold a handler forever."""
        self._replicas = replicas
        self.body_timeout_s = body_timeout_s
        self._apis = apis
        self._groups = groups
        self._peers = peers
        self._offsets = offsets
        self._metrics = metrics
        self._broker_id = broker_id
        self._allow_auto_create = allow_auto_create
        self._round_robin = itertools.count()
        self._group_commit = GroupCommit()
        self._links = ForwardLinks(peers)
        #: The active controller's id as this broker last heard it (``GET /cluster``); the
        #: node sets it once its lifecycle exists.
        self.controller_id: Callable[[], int | None] = lambda: None
        #: The controller quorum's voters ``(id, raft address, HTTP address)``.
        self.quorum_voters: Callable[[], tuple[tuple[int, str, str], ...]] = lambda: (
            replicas.image.quorum_voters
        )
        #: This broker's deliveries of a push subscription (set by the node: PushManager).
        self.push_deliveries: Callable[[str], list[dict[str, Any]]] = lambda _id: []

    async def close(self) -> None:
        """Close the produce links, this broker's to the leaders and the others' to it
        (before the HTTP server stops: it would wait for them)."""
        await self._links.close()

    def routes(self) -> list[web.RouteDef]:
        json_route = self._json
        return [
            web.get("/metrics", self._get_metrics),
            web.post("/publish", json_route(self._publish, "publish")),
            web.post("/subscribe", json_route(self._subscribe, "subscribe")),
            web.post("/unsubscribe", json_route(self._unsubscribe, "unsubscribe")),
            # The original Flux Go client's paths (typos it shipped with): documented aliases.
            web.post("/subscrine", json_route(self._subscribe, "subscribe")),
            web.post("/unsubscrine", json_route(self._unsubscribe, "unsubscribe")),
            web.get("/cluster", json_route(self._cluster, "cluster")),
            web.get("/topics", json_route(self._list_topics, "topics")),
            web.post("/topics", json_route(self._create_topic, "topics")),
            web.get("/topics/{topic}", json_route(self._describe_topic, "topic")),
            web.delete("/topics/{topic}", json_route(self._delete_topic, "topic")),
            web.patch("/topics/{topic}/configs", json_route(self._alter_topic_configs, "topic")),
            web.post("/topics/{topic}/messages", json_route(self._produce, "produce")),
            web.get(
                "/topics/{topic}/partitions/{partition}/messages",
                json_route(self._read, "read"),
            ),
            web.get("/groups", json_route(self._list_groups, "groups")),
            web.get("/groups/{group}", json_route(self._describe_group, "group")),
            web.post(
                "/groups/{group}/offsets", json_route(self._reset_group_offsets, "group_offsets")
            ),
            web.get("/subscriptions", json_route(self._list_subscriptions, "subscriptions")),
            web.get("/subscriptions/{id}", json_route(self._describe_subscription, "subscription")),
            web.delete(
                "/subscriptions/{id}", json_route(self._delete_subscription, "subscription")
            ),
            # Internal: broker to broker.
            web.get(LINK_PATH, self._produce_link),
            web.post(
                "/internal/produce/{topic}/{partition}",
                json_route(self._internal_produce, "internal_produce"),
            ),
            web.get("/internal/committed", json_route(self._internal_committed, "internal")),
            web.post(
                "/internal/groups/{group}/commit", json_route(self._internal_commit, "internal")
            ),
            web.get(
                "/internal/groups/{group}/offsets",
                json_route(self._internal_offsets, "internal"),
            ),
            web.delete(
                "/internal/groups/{group}", json_route(self._internal_delete_group, "internal")
            ),
            web.get(
                "/internal/groups/{group}/describe",
                json_route(self._internal_describe_group, "internal"),
            ),
            web.get("/internal/groups", json_route(self._internal_list_groups, "internal")),
            web.get("/internal/topic-totals", json_route(self._internal_topic_totals, "internal")),
            # What a broker asks another broker of a topic (offsets, a forwarded read): the
            # public handlers under the node credential, since a secured cluster's client
            # credentials stay with the broker that checked them.
            web.get(INTERNAL_TOPICS + "/{topic}", json_route(self._describe_topic, "internal")),
            web.get(
                INTERNAL_TOPICS + "/{topic}/partitions/{partition}/messages",
                json_route(self._read, "internal"),
            ),
            web.get(
                "/internal/subscriptions/{id}/deliveries",
                json_route(self._internal_deliveries, "internal"),
            ),
            web.post(MARKERS_PATH, json_route(self._internal_txn_markers, "internal")),
            web.post(VERIFY_PATH, json_route(self._internal_txn_verify, "internal")),
        ]

    async def _internal_txn_markers(self, request: web.Request, body: dict[str, Any]) -> Any:
        """Kafka's WriteTxnMarkers from a transaction coordinator: the marker appended to each
        named partition this broker leads, answered once replicated (``"topic:partition" ->
        error code``)."""
        try:
            errors = await self._apis.write_txn_markers(body)
        except (KeyError, TypeError, ValueError) as error:
            raise HttpError(400, f"malformed marker request: {error!r}") from None
        return {"errors": errors}

    async def _internal_txn_verify(self, request: web.Request, body: dict[str, Any]) -> Any:
        """A partition leader asks this transaction coordinator whether partitions are in a
        producer's running transaction (KIP-890 part 1)."""
        try:
            return self._apis.verify_txn(body)
        except (KeyError, TypeError, ValueError) as error:
            raise HttpError(400, f"malformed verification request: {error!r}") from None

    def _json(
        self, handler: Callable[[web.Request, dict[str, Any]], Awaitable[Any]], route: str
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        requests = self._metrics.http_requests
        latency = self._metrics.http_latency.labels(route)
        counted: dict[tuple[str, int], Any] = {}  # (method, status) -> the labelled counter

        async def endpoint(request: web.Request) -> web.Response:
            started = time.perf_counter()
            try:
                body: dict[str, Any] = {}
                if request.method in ("POST", "PUT", "PATCH") and request.body_exists:
                    body = parse_json_object(
                        await read_body(request, self.body_timeout_s), request.charset
                    )
                answer = await handler(request, body)
                response = answer if isinstance(answer, web.Response) else web.json_response(answer)
            except HttpError as error:
                response = answer_closing(error.response())
            except web.HTTPException as error:
                response = web.json_response({"error": error.reason}, status=error.status)
            key = (request.method, response.status)
            counter = counted.get(key)
            if counter is None:
                counter = counted[key] = requests.labels(route, key[0], str(key[1]))
            counter.inc()
            latency.observe(time.perf_counter() - started)
            return response

        return endpoint

    async def _get_metrics(self, request: web.Request) -> web.Response:
        try:
            committed, _ = await asyncio.wait_for(self._offsets.gather_committed(), 5.0)
        except (TimeoutError, OffsetsUnavailableError):
            committed = {}
        self._metrics.set_committed(committed)
        return web.Response(body=self._metrics.render(), headers={"Content-Type": CONTENT_TYPE})
