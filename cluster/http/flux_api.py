"""The original Flux HTTP API: ``POST /publish {"id","message","topic"}``, ``POST /subscribe
{"address","topics","readOld","maxInFlight"}``, ``POST /unsubscribe {"address","topics"}``, and
the push subscriptions (``GET /subscriptions``, ``GET`` and ``DELETE /subscriptions/{id}``).

A subscription is a metadata record written through the active controller; its positions are
the internal group ``__flux_push.<id>`` (``push_group``). ``GET /ping`` is served by the
listener (``server``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
import urllib.parse
from typing import Any

from aiohttp import web
from flux.auth.signing import new_signing_secret
from flux.controller.records import MAX_SUBSCRIPTION_IN_FLIGHT

from ..groups.coordinator import OFFSETS_TOPIC
from ..groups.offsets_client import OffsetsUnavailableError, push_group
from ..replication.peers import PeerUnavailableError
from ..topics import InvalidTopicError, validate_topic_name
from .common import HttpApiBase, HttpError, _record_from_json, _text_field, normalize_address

__all__ = ["FluxApi", "subscription_id_for"]

# The name it had when the HTTP API was one module.
log = logging.getLogger("flux.cluster.http_api")

ADDRESS_SCHEMES = ("http", "https", "ws", "wss")
#: A host name, an IPv4 address, or an IPv6 one (urlsplit gives it without its brackets).
_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+")
START_OFFSETS_TIMEOUT_S = 15.0


def subscription_id_for(address: str, topics: list[str]) -> str:
    """The same address and topic set always name the same subscription (so re-subscribing
    reactivates it rather than starting over)."""
    digest = hashlib.sha256((address + "\n" + "\n".join(sorted(set(topics)))).encode()).hexdigest()
    return "s-" + digest[:20]


def validate_address(value: Any) -> str:
    """A subscriber address: an absolute http(s) (webhook) or ws(s) (WebSocket) URL. An
    address without a scheme (``host:port``, as the original Flux Go client registers itself)
    means ``http://host:port``, and is stored so (``normalize_address``)."""
    if not isinstance(value, str) or not value:
        raise HttpError(400, "field 'address' must be an http(s) or ws(s) URL", field="address")
    value = normalize_address(value)
    parsed = urllib.parse.urlsplit(value)
    try:
        parsed.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        raise HttpError(400, "field 'address' has a bad port", field="address") from None
    if (
        parsed.scheme not in ADDRESS_SCHEMES
        or not parsed.hostname
        or not _HOST.fullmatch(parsed.hostname)
        or any(c.isspace() for c in value)
        or len(value) > 2048
    ):
        raise HttpError(400, "field 'address' must be an http(s) or ws(s) URL", field="address")
    return value


def _topics_field(body: dict[str, Any]) -> list[str]:
    topics = body.get("topics")
    if isinstance(topics, str):
        topics = [topics]
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
        raise HttpError(400, "field 'topics' must be a non-empty list of names", field="topics")
    for name in topics:
        try:
            validate_topic_name(name)
        except InvalidTopicError as error:
            raise HttpError(400, f"topics: {error}", field="topics") from None
    return list(dict.fromkeys(topics))


def _max_in_flight_field(body: dict[str, Any]) -> int:
    """The subscription's window, ``maxInFlight`` (or its config-style name ``max.in.flight``):
    an integer 1..MAX_SUBSCRIPTION_IN_FLIGHT, 1 when absent (one message at a time)."""
    name = next((n for n in ("maxInFlight", "max.in.flight") if n in body), None)
    if name is None:
        return 1
    value = body[name]
    if type(value) is not int or not 1 <= value <= MAX_SUBSCRIPTION_IN_FLIGHT:
        raise HttpError(
            400,
            f"field {name!r} must be an integer from 1 to {MAX_SUBSCRIPTION_IN_FLIGHT}",
            field=name,
        )
    return value


class FluxApi(HttpApiBase):
    """``/publish`` and the subscription endpoints."""

    async def _publish(self, request: web.Request, body: dict[str, Any]) -> Any:
        """Original Flux: ``{"id","message","topic"}``."""
        name = _text_field(body, "topic", required=True, max_bytes=249)
        assert name is not None
        topic = await self._topic(name, create=True)
        max_bytes = self._max_message_bytes(topic)
        record = _record_from_json(body, value_field="message", max_bytes=max_bytes)
        [result] = await self._produce_records(topic, [record], request)
        return result

    # -- subscriptions ------------------------------------------------------------------------

    async def _subscribe(self, request: web.Request, body: dict[str, Any]) -> Any:
        address = validate_address(body.get("address"))
        topics = _topics_field(body)
        read_old = body.get("readOld", body.get("read_old", False))
        if not isinstance(read_old, bool):
            raise HttpError(400, "field 'readOld' must be true or false", field="readOld")
        max_in_flight = _max_in_flight_field(body)
        for name in topics:
            await self._topic(name, create=True)
        subscription_id = subscription_id_for(address, topics)
        if OFFSETS_TOPIC not in self._image.topics:
            await self._apis.create_offsets_topic()
        if subscription_id not in self._image.subscriptions and not read_old:
            # "Only new messages": the subscription starts at each partition's current end,
            # committed before it exists so its first delivery cannot start anywhere else.
            await self._commit_start_offsets(subscription_id, topics)
        answer = await self._apis.controller_write(
            "POST",
            "/controller/subscriptions",
            {
                "subscription_id": subscription_id,
                "address": address,
                "topics": topics,
                "read_old": read_old,
                "max_in_flight": max_in_flight,
                "signing_secret": new_signing_secret(),
            },
        )
        result = self._controller_answer(answer, created=200)
        document = json.loads(result.body)  # type: ignore[arg-type]
        document.update(
            id=subscription_id,
            topics=topics,
            address=address,
            readOld=read_old,
            maxInFlight=max_in_flight,
        )
        subscription = self._image.subscriptions.get(subscription_id)
        if subscription is not None and subscription.signing_secret:
            # The key of the deliveries' signatures (flux.auth.signing); only this answer has it.
            document["signingSecret"] = subscription.signing_secret
        return web.json_response(document, status=201 if document.get("created") else 200)

    async def _commit_start_offsets(self, subscription_id: str, topics: list[str]) -> None:
        offsets = []
        for name in topics:
            topic = self._image.topics[name]
            for index in range(len(topic.partitions)):
                end = await self._high_watermark(name, index)
                if end is None:
                    raise HttpError(503, f"{name}-{index} has no reachable leader")
                offsets.append((name, index, end))
        # Right after __consumer_offsets is created its leaders are still loading: retry.
        deadline = time.monotonic() + START_OFFSETS_TIMEOUT_S
        while True:
            try:
                await self._offsets.commit(push_group(subscription_id), offsets)
                return
            except OffsetsUnavailableError as error:
                if time.monotonic() > deadline:
                    raise HttpError(503, f"cannot record the starting offsets: {error}") from None
            await asyncio.sleep(0.1)

    async def _unsubscribe(self, request: web.Request, body: dict[str, Any]) -> Any:
        address = validate_address(body.get("address"))
        topics = _topics_field(body) if body.get("topics") is not None else None
        doomed = [
            s.subscription_id
            for s in self._image.subscriptions.values()
            if s.address == address and (topics is None or set(s.topics) == set(topics))
        ]
        if not doomed:
            raise HttpError(404, f"no subscription of {address} to those topics", field="topics")
        for subscription_id in doomed:
            await self.delete_subscription(subscription_id)
        return {"deleted": doomed}

    async def delete_subscription(self, subscription_id: str) -> None:
        answer = await self._apis.controller_write(
            "DELETE", f"/controller/subscriptions/{subscription_id}", None
        )
        self._controller_answer(answer)
        try:
            await self._offsets.delete(push_group(subscription_id))
        except OffsetsUnavailableError as error:
            log.warning("subscription %s deleted, its offsets not: %s", subscription_id, error)

    async def _list_subscriptions(self, request: web.Request, body: dict[str, Any]) -> Any:
        return {
            "subscriptions": [_subscription_json(s) for s in self._image.subscriptions.values()]
        }

    async def _describe_subscription(self, request: web.Request, body: dict[str, Any]) -> Any:
        subscription = self._image.subscriptions.get(request.match_info["id"])
        if subscription is None:
            raise HttpError(404, "unknown subscription", field="id")
        document = _subscription_json(subscription)
        try:
            committed = await self._offsets.fetch(push_group(subscription.subscription_id))
        except OffsetsUnavailableError:
            committed = {}
        document["offsets"] = [
            {"topic": topic, "partition": index, "committed": offset}
            for (topic, index), offset in sorted(committed.items())
        ]
        document["deliveries"] = await self._gather_deliveries(subscription.subscription_id)
        return document

    async def _gather_deliveries(self, subscription_id: str) -> list[dict[str, Any]]:
        """Each live broker's deliveries of the subscription (``PushManager.deliveries``): a
        partition is delivered by its leader. A broker that does not answer is left out."""

        async def ask(broker_id: int) -> list[dict[str, Any]]:
            if broker_id == self._broker_id:
                return self.push_deliveries(subscription_id)
            try:
                status, answer = await self._peers.request(
                    broker_id,
                    "GET",
                    f"/internal/subscriptions/{subscription_id}/deliveries",
                    timeout_s=3.0,
                )
            except PeerUnavailableError:
                return []
            if status != 200 or not isinstance(answer, dict):
                return []
            return list(answer.get("deliveries", []))

        found = await asyncio.gather(*(ask(b) for b in sorted(self._image.live_broker_ids())))
        return sorted(
            (delivery for deliveries in found for delivery in deliveries),
            key=lambda d: (d["topic"], d["partition"]),
        )

    async def _internal_deliveries(self, request: web.Request, body: dict[str, Any]) -> Any:
        return {"deliveries": self.push_deliveries(request.match_info["id"])}

    async def _delete_subscription(self, request: web.Request, body: dict[str, Any]) -> Any:
        subscription_id = request.match_info["id"]
        if subscription_id not in self._image.subscriptions:
            raise HttpError(404, "unknown subscription", field="id")
        await self.delete_subscription(subscription_id)
        return {"deleted": [subscription_id]}


def _subscription_json(subscription: Any) -> dict[str, Any]:
    return {
        "id": subscription.subscription_id,
        "address": subscription.address,
        "topics": list(subscription.topics),
        "readOld": subscription.read_old,
        "maxInFlight": subscription.max_in_flight,
        "active": subscription.active,
        "changed_ms": subscription.changed_ms,
        "group": push_group(subscription.subscription_id),
    }
