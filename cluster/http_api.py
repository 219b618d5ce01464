"""The broker's HTTP API (aiohttp routes added to the broker's HTTP server).

Original Flux shape: ``POST /publish {"id","message","topic"}``, ``POST /subscribe
{"address","topics","readOld"}``, ``POST /unsubscribe {"address","topics"}``, ``GET /ping``.
REST: topics, messages (produce with key/headers/id, read by offset range), groups,
subscriptions, cluster state; ``/health``; ``/metrics``. See docs/http-api.md.

Any broker answers any request: a produce or read of a partition led by another broker is
forwarded to the leader over its internal endpoints (one hop; a forwarded request that lands on
a non-leader answers 421 with the leader's id instead of forwarding again). Group reads and
commits go to the group's coordinator; metadata writes to the active controller.

Bad input gets a 4xx JSON answer ``{"error": "...", "field": "<name>"}`` and stores nothing.

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import itertools
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.partitioner import partition_for_key
from flux.protocol.records import Header, build_batch, decode_records, iter_batches
from flux.storage import AppendResult, CorruptBatchError, OffsetOutOfRangeError

from .broker_peers import FORWARDED_HEADER, BrokerPeers, PeerUnavailableError
from .dedup import MAX_ID_BYTES, MESSAGE_ID_HEADER
from .group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from .kafka_apis import KafkaApis
from .metrics import CONTENT_TYPE, BrokerMetrics
from .offsets_client import OffsetsClient, OffsetsUnavailableError, push_group
from .partition import Partition, ProducerRejectedError
from .replica_manager import ReplicaManager
from .topics import InvalidTopicError, validate_topic_name

__all__ = ["HttpApi", "HttpError", "message_json", "subscription_id_for"]

log = logging.getLogger("flux.cluster.http_api")

MAX_MESSAGES_PER_REQUEST = 10_000
MAX_READ_LIMIT = 10_000
DEFAULT_READ_LIMIT = 100
READ_MAX_BYTES = 8 << 20
MAX_HEADERS_PER_MESSAGE = 100
PRODUCE_TIMEOUT_S = 30.0
ADDRESS_SCHEMES = ("http", "https", "ws", "wss")
NOT_LEADER_STATUS = 421
START_OFFSETS_TIMEOUT_S = 15.0

_ERROR_STATUS = {
    ErrorCode.NOT_ENOUGH_REPLICAS: 503,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: 503,
    ErrorCode.REQUEST_TIMED_OUT: 504,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.POLICY_VIOLATION: 507,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: NOT_LEADER_STATUS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.KAFKA_STORAGE_ERROR: 500,
    ErrorCode.CORRUPT_MESSAGE: 400,
}


class HttpError(Exception):
    """An answer other than 2xx: ``status``, a message, and the request field at fault."""

    def __init__(self, status: int, message: str, *, field: str | None = None, **extra: Any):
        super().__init__(message)
        self.status = status
        self.field = field
        self.extra = extra

    def response(self) -> web.Response:
        body: dict[str, Any] = {"error": str(self), **self.extra}
        if self.field is not None:
            body["field"] = self.field
        return web.json_response(body, status=self.status)


def subscription_id_for(address: str, topics: list[str]) -> str:
    """The same address and topic set always name the same subscription (so re-subscribing
    reactivates it rather than starting over)."""
    digest = hashlib.sha256((address + "\n" + "\n".join(sorted(set(topics)))).encode()).hexdigest()
    return "s-" + digest[:20]


def message_json(record: Any, topic: str, partition: int) -> dict[str, Any]:
    """A stored record as the HTTP API shows it (and pushes it): UTF-8 text where it is text,
    base64 (``*_base64``) where it is not."""
    message: dict[str, Any] = {"topic": topic, "partition": partition, "offset": record.offset}
    message["timestamp"] = record.timestamp
    message_id = None
    headers = {}
    for key, value in record.headers:
        if key == MESSAGE_ID_HEADER and value is not None and message_id is None:
            message_id = value.decode("utf-8", "replace")
            continue
        headers[key] = None if value is None else value.decode("utf-8", "replace")
    message["id"] = message_id or f"{topic}-{partition}-{record.offset}"
    _put_bytes(message, "key", record.key)
    _put_bytes(message, "value", record.value)
    message["headers"] = headers
    return message


def _put_bytes(target: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        target[name] = None
        return
    try:
        target[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        target[name] = None
        target[name + "_base64"] = base64.b64encode(data).decode()


# -- input validation (pure) ------------------------------------------------------------------


def _text_field(body: dict[str, Any], name: str, *, required: bool, max_bytes: int) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise HttpError(400, f"field {name!r} is required", field=name)
        return None
    if not isinstance(value, str):
        raise HttpError(400, f"field {name!r} must be a string", field=name)
    if required and not value:
        raise HttpError(400, f"field {name!r} must not be empty", field=name)
    if len(value.encode()) > max_bytes:
        raise HttpError(413, f"field {name!r} is longer than {max_bytes} bytes", field=name)
    return value


def _record_from_json(
    item: Any, *, value_field: str, max_bytes: int
) -> tuple[bytes | None, bytes, list[Header], int | None]:
    """``(key, value, headers, requested partition)`` of one message object."""
    if not isinstance(item, dict):
        raise HttpError(400, "each message must be a JSON object", field="messages")
    encoded = item.get("value_base64")
    if encoded is not None and value_field == "value":
        try:
            value = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
        except (binascii.Error, ValueError):
            value = None
        if not value:
            raise HttpError(400, "value_base64 must be non-empty base64", field="value_base64")
        if len(value) > max_bytes:
            raise HttpError(413, f"the message is larger than {max_bytes} bytes", field="value")
    else:
        text = _text_field(item, value_field, required=True, max_bytes=max_bytes)
        assert text is not None
        value = text.encode()
    key_text = _text_field(item, "key", required=False, max_bytes=max_bytes)
    message_id = _text_field(item, "id", required=False, max_bytes=MAX_ID_BYTES)
    if message_id == "":
        raise HttpError(400, "field 'id' must not be empty", field="id")
    headers: list[Header] = []
    raw_headers = item.get("headers", {})
    if raw_headers is None:
        raw_headers = {}
    if not isinstance(raw_headers, dict) or len(raw_headers) > MAX_HEADERS_PER_MESSAGE:
        raise HttpError(
            400,
            f"field 'headers' must map up to {MAX_HEADERS_PER_MESSAGE} names to strings",
            field="headers",
        )
    for name, header_value in raw_headers.items():
        if not isinstance(header_value, str) or name == MESSAGE_ID_HEADER:
            raise HttpError(
                400, f"header {name!r} must be a string (use 'id' for the id)", field="headers"
            )
        headers.append((name, header_value.encode()))
    if message_id is not None:
        headers.append((MESSAGE_ID_HEADER, message_id.encode()))
    partition = item.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)):
        raise HttpError(400, "field 'partition' must be an integer", field="partition")
    key = key_text.encode() if key_text is not None else None
    return key, value, headers, partition


def _query_int(request: web.Request, name: str, default: int | None, low: int) -> int | None:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise HttpError(400, f"query parameter {name!r} must be an integer", field=name) from None
    if value < low:
        raise HttpError(400, f"query parameter {name!r} must be >= {low}", field=name)
    return value


def _path_int(request: web.Request, name: str) -> int:
    try:
        value = int(request.match_info[name])
    except ValueError:
        raise HttpError(400, f"{name} must be an integer", field=name) from None
    if value < 0:
        raise HttpError(400, f"{name} must be >= 0", field=name)
    return value


def validate_address(value: Any) -> str:
    """A subscriber address: an absolute http(s) (webhook) or ws(s) (WebSocket) URL."""
    if not isinstance(value, str) or not value:
        raise HttpError(400, "field 'address' must be an http(s) or ws(s) URL", field="address")
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ADDRESS_SCHEMES or not parsed.hostname or len(value) > 2048:
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


# -- the API ----------------------------------------------------------------------------------


class HttpApi:
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
    ) -> None:
        self._replicas = replicas
        self._apis = apis
        self._groups = groups
        self._peers = peers
        self._offsets = offsets
        self._metrics = metrics
        self._broker_id = broker_id
        self._allow_auto_create = allow_auto_create
        self._round_robin = itertools.count()

    def routes(self) -> list[web.RouteDef]:
        json_route = self._json
        return [
            web.get("/metrics", self._get_metrics),
            web.post("/publish", json_route(self._publish, "publish")),
            web.post("/subscribe", json_route(self._subscribe, "subscribe")),
            web.post("/unsubscribe", json_route(self._unsubscribe, "unsubscribe")),
            web.get("/cluster", json_route(self._cluster, "cluster")),
            web.get("/topics", json_route(self._list_topics, "topics")),
            web.post("/topics", json_route(self._create_topic, "topics")),
            web.get("/topics/{topic}", json_route(self._describe_topic, "topic")),
            web.delete("/topics/{topic}", json_route(self._delete_topic, "topic")),
            web.post("/topics/{topic}/messages", json_route(self._produce, "produce")),
            web.get(
                "/topics/{topic}/partitions/{partition}/messages",
                json_route(self._read, "read"),
            ),
            web.get("/groups", json_route(self._list_groups, "groups")),
            web.get("/groups/{group}", json_route(self._describe_group, "group")),
            web.get("/subscriptions", json_route(self._list_subscriptions, "subscriptions")),
            web.get("/subscriptions/{id}", json_route(self._describe_subscription, "subscription")),
            web.delete(
                "/subscriptions/{id}", json_route(self._delete_subscription, "subscription")
            ),
            # Internal: broker to broker.
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
            web.get("/internal/groups", json_route(self._internal_list_groups, "internal")),
        ]

    def _json(
        self, handler: Callable[[web.Request, dict[str, Any]], Awaitable[Any]], route: str
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def endpoint(request: web.Request) -> web.Response:
            started = time.perf_counter()
            try:
                body: dict[str, Any] = {}
                if request.method in ("POST", "PUT") and request.can_read_body:
                    try:
                        parsed = await request.json()
                    except (json.JSONDecodeError, UnicodeDecodeError) as error:
                        raise HttpError(
                            400, f"malformed JSON body: {error}", field="body"
                        ) from None
                    if not isinstance(parsed, dict):
                        raise HttpError(400, "the body must be a JSON object", field="body")
                    body = parsed
                answer = await handler(request, body)
                response = answer if isinstance(answer, web.Response) else web.json_response(answer)
            except HttpError as error:
                response = error.response()
            except web.HTTPException as error:
                response = web.json_response({"error": error.reason}, status=error.status)
            self._metrics.http_requests.labels(route, request.method, str(response.status)).inc()
            self._metrics.http_latency.labels(route).observe(time.perf_counter() - started)
            return response

        return endpoint

    @property
    def _image(self) -> Any:
        return self._replicas.image

    async def _get_metrics(self, request: web.Request) -> web.Response:
        try:
            committed, _ = await asyncio.wait_for(self._offsets.gather_committed(), 5.0)
        except (TimeoutError, OffsetsUnavailableError):
            committed = {}
        self._metrics.set_committed(committed)
        return web.Response(body=self._metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    # -- topics -------------------------------------------------------------------------------

    async def _topic(self, name: str, *, create: bool) -> Any:
        try:
            validate_topic_name(name)
        except InvalidTopicError as error:
            raise HttpError(400, f"topic: {error}", field="topic") from None
        topic = self._image.topics.get(name)
        if topic is None and create and self._allow_auto_create:
            await self._apis.auto_create_topics([name])
            topic = self._image.topics.get(name)
        if topic is None:
            raise HttpError(404, f"unknown topic {name!r}", field="topic")
        return topic

    async def _list_topics(self, request: web.Request, body: dict[str, Any]) -> Any:
        return {
            "topics": [
                {"name": t.name, "partitions": len(t.partitions), "config": t.config_dict()}
                for t in self._image.topics.values()
            ]
        }

    async def _describe_topic(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = await self._topic(request.match_info["topic"], create=False)
        partitions = []
        for index, state in enumerate(topic.partitions):
            entry = {
                "partition": index,
                "leader": state.leader,
                "leader_epoch": state.leader_epoch,
                "replicas": list(state.replicas),
                "isr": list(state.isr),
            }
            local = self._replicas.partition(topic.name, index)
            if local is not None and local.is_leader:
                entry.update(
                    log_start_offset=local.log.log_start_offset,
                    log_end_offset=local.log_end_offset,
                    high_watermark=local.high_watermark,
                )
            partitions.append(entry)
        return {
            "name": topic.name,
            "topic_id": topic.topic_id,
            "config": topic.config_dict(),
            "partitions": partitions,
        }

    async def _create_topic(self, request: web.Request, body: dict[str, Any]) -> Any:
        name = _text_field(body, "name", required=True, max_bytes=249)
        assert name is not None
        try:
            validate_topic_name(name)
        except InvalidTopicError as error:
            raise HttpError(400, f"name: {error}", field="name") from None
        configs = body.get("configs", {})
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in configs.values()):
            raise HttpError(400, "field 'configs' must map names to strings", field="configs")
        request_body: dict[str, Any] = {"name": name, "configs": configs}
        for field in ("partitions", "replication_factor"):
            value = body.get(field, -1)
            if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1:
                raise HttpError(400, f"field {field!r} must be a positive integer", field=field)
            request_body["num_partitions" if field == "partitions" else field] = value
        answer = await self._apis.controller_write("POST", "/controller/topics", request_body)
        return self._controller_answer(answer, created=201)

    async def _delete_topic(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = await self._topic(request.match_info["topic"], create=False)
        answer = await self._apis.controller_write(
            "DELETE", f"/controller/topics/{topic.name}", None
        )
        return self._controller_answer(answer)

    def _controller_answer(self, answer: dict[str, Any], *, created: int = 200) -> web.Response:
        code = answer.get("error_code", ErrorCode.NONE)
        if code == ErrorCode.NONE:
            return web.json_response(
                {k: v for k, v in answer.items() if k not in ("error_code", "error_message")},
                status=created,
            )
        status = {
            ErrorCode.TOPIC_ALREADY_EXISTS: 409,
            ErrorCode.REQUEST_TIMED_OUT: 503,
            ErrorCode.RESOURCE_NOT_FOUND: 404,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
        }.get(ErrorCode(code), 400)
        message = answer.get("error_message") or ErrorCode(code).name
        raise HttpError(status, message, code=ErrorCode(code).name)

    # -- produce ------------------------------------------------------------------------------

    async def _publish(self, request: web.Request, body: dict[str, Any]) -> Any:
        """Original Flux: ``{"id","message","topic"}``."""
        name = _text_field(body, "topic", required=True, max_bytes=249)
        assert name is not None
        topic = await self._topic(name, create=True)
        max_bytes = self._max_message_bytes(topic)
        record = _record_from_json(body, value_field="message", max_bytes=max_bytes)
        [result] = await self._produce_records(topic, [record], request)
        return result

    async def _produce(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = await self._topic(request.match_info["topic"], create=True)
        items = body.get("messages")
        if items is None:
            items = [body]
        if not isinstance(items, list) or not items or len(items) > MAX_MESSAGES_PER_REQUEST:
            raise HttpError(
                400,
                f"field 'messages' must be a list of 1..{MAX_MESSAGES_PER_REQUEST} messages",
                field="messages",
            )
        max_bytes = self._max_message_bytes(topic)
        records = [
            _record_from_json(item, value_field="value", max_bytes=max_bytes) for item in items
        ]
        return {"offsets": await self._produce_records(topic, records, request)}

    def _max_message_bytes(self, topic: Any) -> int:
        config = self._replicas.topic_config(dict(topic.config_dict()))
        return int(config.get("max.message.bytes"))

    def _choose_partition(
        self, count: int, key: bytes | None, headers: list[Header], requested: int | None
    ) -> int:
        if requested is not None:
            if not 0 <= requested < count:
                raise HttpError(
                    400, f"partition {requested} is not in 0..{count - 1}", field="partition"
                )
            return requested
        if key is not None:
            return partition_for_key(key, count)
        # Messages with an id go where that id went before, so a repeat meets its original.
        message_id = next((v for k, v in headers if k == MESSAGE_ID_HEADER), None)
        if message_id is not None:
            return partition_for_key(message_id, count)
        return next(self._round_robin) % count

    async def _produce_records(
        self,
        topic: Any,
        records: list[tuple[bytes | None, bytes, list[Header], int | None]],
        request: web.Request,
    ) -> list[dict[str, Any]]:
        """Produce to each record's partition (locally or at its leader), keeping the
        request's order in the answer; partitions are written concurrently."""
        by_partition: dict[int, list[int]] = {}
        for position, (key, _, headers, requested) in enumerate(records):
            index = self._choose_partition(len(topic.partitions), key, headers, requested)
            by_partition.setdefault(index, []).append(position)
        answers: list[dict[str, Any]] = [{} for _ in records]

        async def one(index: int, positions: list[int]) -> None:
            batch = [records[p][:3] for p in positions]
            results = await self._produce_partition(
                topic.name, index, batch, forwarded=FORWARDED_HEADER in request.headers
            )
            for position, result in zip(positions, results, strict=True):
                answers[position] = result

        await asyncio.gather(*(one(i, p) for i, p in by_partition.items()))
        return answers

    async def _produce_partition(
        self,
        topic: str,
        index: int,
        records: list[tuple[bytes | None, bytes, list[Header]]],
        *,
        forwarded: bool,
    ) -> list[dict[str, Any]]:
        found = self._replicas.partition_for_leader(topic, index)
        if isinstance(found, Partition):
            return await self.produce_local(found, records)
        leader = self._leader_of(topic, index)
        if forwarded or leader is None or leader == self._broker_id:
            raise HttpError(
                NOT_LEADER_STATUS if leader is not None else 503,
                f"broker {self._broker_id} does not lead {topic}-{index}",
                leader=leader,
            )
        try:
            status, body = await self._peers.request(
                leader,
                "POST",
                f"/internal/produce/{topic}/{index}",
                json_body={"records": [_encode_record(r) for r in records]},
                timeout_s=PRODUCE_TIMEOUT_S + 5,
            )
        except PeerUnavailableError as error:
            raise HttpError(503, f"leader of {topic}-{index} unreachable: {error}") from None
        if status != 200:
            raise _forwarded_error(status, body, leader)
        return list(body["offsets"])

    def _leader_of(self, topic: str, index: int) -> int | None:
        image_topic = self._image.topics.get(topic)
        if image_topic is None or index >= len(image_topic.partitions):
            return None
        leader = image_topic.partitions[index].leader
        return leader if leader >= 0 else None

    async def produce_local(
        self, partition: Partition, records: list[tuple[bytes | None, bytes, list[Header]]]
    ) -> list[dict[str, Any]]:
        """Append as leader with acks=all; one answer per record. A record whose id repeats
        one stored within the dedup window gets its original offset and ``duplicate``."""
        min_insync = partition.config.get("min.insync.replicas")
        if len(partition.state.isr) < min_insync:
            raise HttpError(
                503,
                f"in-sync replicas {len(partition.state.isr)} < min.insync.replicas {min_insync}",
                code="NOT_ENOUGH_REPLICAS",
            )
        results = []
        last_offset = -1
        # One batch per record keeps each record's dedup answer exact (a repeat's original
        # offset) at a small cost; HTTP producers wanting throughput send many per request.
        batches = _group_for_batches(records)
        for group in batches:
            batch = build_batch(group)
            try:
                appended = self._replicas.append(partition, batch)
            except ProducerRejectedError as error:
                raise _status_error(error.error, str(error)) from None
            except (CorruptBatchError, CorruptRecordError) as error:
                raise HttpError(400, f"cannot store the message: {error}") from None
            except OSError as error:
                raise HttpError(500, f"storage error: {error}") from None
            results.extend(_results_for(partition, group, appended))
            last_offset = max(last_offset, appended.last_offset)
        if last_offset >= 0:
            future = partition.add_delayed_produce(last_offset + 1)
            try:
                error = await asyncio.wait_for(asyncio.shield(future), PRODUCE_TIMEOUT_S)
            except TimeoutError:
                raise HttpError(504, "the in-sync replicas did not acknowledge in time") from None
            if error != ErrorCode.NONE:
                raise _status_error(error, error.message)
        return results

    async def _internal_produce(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = request.match_info["topic"]
        index = _path_int(request, "partition")
        found = self._replicas.partition_for_leader(topic, index)
        if not isinstance(found, Partition):
            raise HttpError(
                NOT_LEADER_STATUS, f"broker {self._broker_id} does not lead {topic}-{index}"
            )
        records = [_decode_record(item) for item in body.get("records", [])]
        if not records:
            raise HttpError(400, "no records", field="records")
        return {"offsets": await self.produce_local(found, records)}

    # -- read ---------------------------------------------------------------------------------

    async def _read(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = await self._topic(request.match_info["topic"], create=False)
        index = _path_int(request, "partition")
        if index >= len(topic.partitions):
            raise HttpError(404, f"{topic.name} has no partition {index}", field="partition")
        offset = _query_int(request, "offset", None, 0)
        limit = _query_int(request, "limit", DEFAULT_READ_LIMIT, 0)
        assert limit is not None
        limit = min(limit, MAX_READ_LIMIT)
        found = self._replicas.partition_for_leader(topic.name, index)
        if isinstance(found, Partition):
            return self.read_local(found, offset, limit)
        leader = self._leader_of(topic.name, index)
        if FORWARDED_HEADER in request.headers or leader is None or leader == self._broker_id:
            raise HttpError(
                NOT_LEADER_STATUS if leader is not None else 503,
                f"broker {self._broker_id} does not lead {topic.name}-{index}",
                leader=leader,
            )
        try:
            status, answer = await self._peers.request(leader, "GET", request.path_qs)
        except PeerUnavailableError as error:
            raise HttpError(503, f"leader unreachable: {error}") from None
        if status != 200:
            raise _forwarded_error(status, answer, leader)
        return answer

    def read_local(self, partition: Partition, offset: int | None, limit: int) -> dict[str, Any]:
        start = partition.log.log_start_offset
        high_watermark = partition.high_watermark
        if offset is None:
            offset = start
        answer: dict[str, Any] = {
            "topic": partition.topic,
            "partition": partition.index,
            "log_start_offset": start,
            "high_watermark": high_watermark,
            "messages": [],
            "next_offset": offset,
        }
        if offset < start or offset > high_watermark:
            raise HttpError(
                416,
                f"offset {offset} is outside {start}..{high_watermark}",
                field="offset",
                log_start_offset=start,
                high_watermark=high_watermark,
            )
        messages = answer["messages"]
        position = offset
        while position < high_watermark and len(messages) < limit:
            try:
                data = partition.log.read(position, READ_MAX_BYTES, max_offset=high_watermark)
            except OffsetOutOfRangeError:
                break
            before = position
            for header, raw in iter_batches(data):
                if header.is_control:
                    position = max(position, header.next_offset)
                    continue
                for record in decode_records(bytes(raw), verify_crc=False):
                    if record.offset < position or record.offset >= high_watermark:
                        continue
                    if len(messages) >= limit:
                        break
                    messages.append(message_json(record, partition.topic, partition.index))
                    position = record.offset + 1
                if len(messages) >= limit:
                    break
                position = max(position, min(header.next_offset, high_watermark))
            if position == before:
                break
        answer["next_offset"] = position
        return answer

    # -- groups -------------------------------------------------------------------------------

    async def _list_groups(self, request: web.Request, body: dict[str, Any]) -> Any:
        names: dict[str, dict[str, Any]] = {}
        for broker_id in self._image.live_broker_ids():
            if broker_id == self._broker_id:
                groups = self._groups.list_groups()
            else:
                try:
                    status, answer = await self._peers.request(
                        broker_id, "GET", "/internal/groups", timeout_s=3.0
                    )
                except PeerUnavailableError:
                    continue
                groups = answer.get("groups", []) if status == 200 else []
            for group in groups:
                names[group["group_id"]] = group
        return {"groups": [names[name] for name in sorted(names)]}

    async def _describe_group(self, request: web.Request, body: dict[str, Any]) -> Any:
        group_id = request.match_info["group"]
        try:
            committed = await self._offsets.fetch(group_id)
        except OffsetsUnavailableError as error:
            raise HttpError(503, str(error)) from None
        offsets = []
        for (topic, index), offset in sorted(committed.items()):
            entry: dict[str, Any] = {"topic": topic, "partition": index, "committed": offset}
            end = await self._high_watermark(topic, index)
            if end is not None:
                entry["high_watermark"] = end
                entry["lag"] = max(end - offset, 0) if offset >= 0 else None
            offsets.append(entry)
        if not offsets and group_id not in {g["group_id"] for g in self._groups.list_groups()}:
            coordinator = self._groups.coordinator_of(group_id)
            if coordinator == self._broker_id:
                raise HttpError(404, f"unknown group {group_id!r}", field="group")
        return {"group": group_id, "offsets": offsets}

    async def _high_watermark(self, topic: str, index: int) -> int | None:
        local = self._replicas.partition_for_leader(topic, index)
        if isinstance(local, Partition):
            return local.high_watermark
        leader = self._leader_of(topic, index)
        if leader is None:
            return None
        try:
            status, answer = await self._peers.request(
                leader, "GET", f"/topics/{topic}/partitions/{index}/messages?limit=0", timeout_s=3.0
            )
        except PeerUnavailableError:
            return None
        return int(answer["high_watermark"]) if status == 200 else None

    # -- subscriptions ------------------------------------------------------------------------

    async def _subscribe(self, request: web.Request, body: dict[str, Any]) -> Any:
        address = validate_address(body.get("address"))
        topics = _topics_field(body)
        read_old = body.get("readOld", body.get("read_old", False))
        if not isinstance(read_old, bool):
            raise HttpError(400, "field 'readOld' must be true or false", field="readOld")
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
            },
        )
        result = self._controller_answer(answer, created=200)
        document = json.loads(result.body)  # type: ignore[arg-type]
        document.update(id=subscription_id, topics=topics, address=address, readOld=read_old)
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
        return document

    async def _delete_subscription(self, request: web.Request, body: dict[str, Any]) -> Any:
        subscription_id = request.match_info["id"]
        if subscription_id not in self._image.subscriptions:
            raise HttpError(404, "unknown subscription", field="id")
        await self.delete_subscription(subscription_id)
        return {"deleted": [subscription_id]}

    # -- cluster ------------------------------------------------------------------------------

    async def _cluster(self, request: web.Request, body: dict[str, Any]) -> Any:
        image = self._image
        return {
            "broker_id": self._broker_id,
            "metadata_version": image.version,
            "brokers": [
                {
                    "id": b.broker_id,
                    "kafka": f"{b.kafka_host}:{b.kafka_port}",
                    "http": f"{b.http_host}:{b.http_port}",
                    "rack": b.rack,
                    "fenced": b.fenced,
                }
                for b in image.brokers.values()
            ],
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition": i,
                            "leader": s.leader,
                            "isr": list(s.isr),
                            "replicas": list(s.replicas),
                        }
                        for i, s in enumerate(t.partitions)
                    ],
                }
                for t in image.topics.values()
            ],
            "subscriptions": len(image.subscriptions),
        }

    # -- internal -----------------------------------------------------------------------------

    async def _internal_committed(self, request: web.Request, body: dict[str, Any]) -> Any:
        return self._groups.committed_snapshot()

    async def _internal_list_groups(self, request: web.Request, body: dict[str, Any]) -> Any:
        return {"groups": self._groups.list_groups()}

    async def _internal_commit(self, request: web.Request, body: dict[str, Any]) -> Any:
        group_id = request.match_info["group"]
        offsets = body.get("offsets")
        if not isinstance(offsets, list):
            raise HttpError(400, "offsets must be a list", field="offsets")
        try:
            triples = [(str(t), int(p), int(o)) for t, p, o in offsets]
        except (TypeError, ValueError):
            raise HttpError(
                400, "offsets are [topic, partition, offset]", field="offsets"
            ) from None
        errors = await self._offsets.commit_local(group_id, triples)
        return web.json_response({"errors": errors}, status=200 if not errors else 503)

    async def _internal_offsets(self, request: web.Request, body: dict[str, Any]) -> Any:
        group_id = request.match_info["group"]
        error, topics = self._groups.fetch_offsets(group_id, None)
        if error != ErrorCode.NONE:
            raise HttpError(NOT_LEADER_STATUS, f"error {error.name}", code=error.name)
        return {
            "offsets": [
                [topic["name"], part["partition_index"], part["committed_offset"]]
                for topic in topics
                for part in topic["partitions"]
            ]
        }

    async def _internal_delete_group(self, request: web.Request, body: dict[str, Any]) -> Any:
        error = await self._groups.delete_group(request.match_info["group"])
        return {"error_code": int(error)}


def _subscription_json(subscription: Any) -> dict[str, Any]:
    return {
        "id": subscription.subscription_id,
        "address": subscription.address,
        "topics": list(subscription.topics),
        "readOld": subscription.read_old,
        "active": subscription.active,
        "changed_ms": subscription.changed_ms,
        "group": push_group(subscription.subscription_id),
    }


def _forwarded_error(status: int, body: Any, leader: int) -> HttpError:
    """The leader's error answer, passed on as it was (field, code and all)."""
    if not isinstance(body, dict):
        return HttpError(status, f"leader {leader}: {body}", leader=leader)
    extra = {k: v for k, v in body.items() if k not in ("error", "field")}
    extra.setdefault("leader", leader)
    return HttpError(status, str(body.get("error")), field=body.get("field"), **extra)


def _status_error(error: ErrorCode, message: str) -> HttpError:
    status = _ERROR_STATUS.get(error, 500)
    field = "memory.bytes.max" if error == ErrorCode.POLICY_VIOLATION else None
    return HttpError(status, message, field=field, code=error.name)


def _group_for_batches(
    records: list[tuple[bytes | None, bytes, list[Header]]],
) -> list[list[tuple[bytes | None, bytes, list[Header]]]]:
    """Records with an id go in batches of their own (each gets its own dedup answer); the
    rest share one batch."""
    plain = [r for r in records if not any(k == MESSAGE_ID_HEADER for k, _ in r[2])]
    if len(plain) == len(records):
        return [records]
    groups: list[list[tuple[bytes | None, bytes, list[Header]]]] = []
    for record in records:
        if any(k == MESSAGE_ID_HEADER for k, _ in record[2]):
            groups.append([record])
        elif groups and not any(k == MESSAGE_ID_HEADER for k, _ in groups[-1][-1][2]):
            groups[-1].append(record)
        else:
            groups.append([record])
    return groups


def _results_for(
    partition: Partition, group: list[Any], appended: AppendResult
) -> list[dict[str, Any]]:
    duplicate = appended.batch_count == 0
    return [
        {
            "topic": partition.topic,
            "partition": partition.index,
            "offset": appended.base_offset + (0 if duplicate else position),
            "duplicate": duplicate,
        }
        for position in range(len(group))
    ]


def _encode_record(record: tuple[bytes | None, bytes, list[Header]]) -> dict[str, Any]:
    key, value, headers = record
    return {
        "key": None if key is None else base64.b64encode(key).decode(),
        "value": base64.b64encode(value).decode(),
        "headers": [[k, None if v is None else base64.b64encode(v).decode()] for k, v in headers],
    }


def _decode_record(item: Any) -> tuple[bytes | None, bytes, list[Header]]:
    try:
        key = None if item["key"] is None else base64.b64decode(item["key"])
        value = base64.b64decode(item["value"])
        headers: list[Header] = [
            (str(k), None if v is None else base64.b64decode(v)) for k, v in item["headers"]
        ]
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise HttpError(400, "malformed forwarded record", field="records") from None
    return key, value, headers
