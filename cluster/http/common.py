"""What both halves of the HTTP API (``flux_api`` and ``rest``) share.

``HttpError`` (a 4xx/5xx answer), stored records as JSON (``message_json``, also what push
deliveries send), validation of message input, and ``HttpApiBase``: the broker state
``HttpApi`` holds, topic lookup (with auto-creation), answers of controller writes, high
watermarks, and producing to a partition, locally as its leader or forwarded to the leader.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.partitioner import partition_for_key
from flux.protocol.records import Header, build_batch
from flux.storage import CorruptBatchError

from ..groups.coordinator import GroupCoordinator
from ..groups.offsets_client import OffsetsClient
from ..kafka.apis import KafkaApis
from ..replication.partition import Partition, ProducerRejectedError
from ..replication.peers import FORWARDED_HEADER, BrokerPeers, PeerUnavailableError
from ..replication.replica_manager import ReplicaManager
from ..topics import InvalidTopicError, validate_topic_name
from .dedup import MAX_ID_BYTES, MESSAGE_ID_HEADER, message_id_of
from .forward_link import ForwardLinks
from .group_commit import GroupCommit
from .malformed import problem_of
from .metrics import BrokerMetrics

__all__ = [
    "INTERNAL_TOPICS",
    "HttpApiBase",
    "HttpError",
    "message_json",
    "parse_json_object",
    "read_body",
]

#: ``GET /topics/{t}`` and ``GET /topics/{t}/partitions/{p}/messages`` as brokers call them on
#: each other (under the node credential: ``cluster.internal_security``).
INTERNAL_TOPICS = "/internal/topics"

MAX_HEADERS_PER_MESSAGE = 100
PRODUCE_TIMEOUT_S = 30.0
NOT_LEADER_STATUS = 421

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

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": str(self), **self.extra}
        if self.field is not None:
            body["field"] = self.field
        return body

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status)


def normalize_address(value: str) -> str:
    """A subscriber address: ``host:port[/path]`` without a scheme (as the original Flux Go
    client registers itself) is ``http://host:port[/path]``; anything else is left as it is."""
    return value if "://" in value else "http://" + value


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


# -- request bodies ---------------------------------------------------------------------------


async def read_body(request: web.Request, timeout_s: float) -> bytes:
    """The request's body, once it has all arrived (most have, with their headers, and skip
    the timer); read again, the same bytes (aiohttp keeps them).

    Every reader of a body on the broker's port goes through here (the JSON routes, the
    authorization middleware, the schema registry), so none waits for ever:

    - a body still incomplete after ``timeout_s`` (``broker.request_timeout_ms``) is
      ``HttpError(408)``, and its answer must close the connection (the rest of the body may
      still come): ``answer_closing``. A chunked body whose later chunk is malformed is this
      case too: aiohttp's parser then waits for a body end that never comes;
    - a body cut short (the client closed) or refused by the parser is ``HttpError(400)``,
      not a 500 with a traceback.
    """
    if request.content.is_eof():
        return await request.read()
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except ConnectionResetError:
        # The client went away before its body arrived; nobody reads this.
        raise HttpError(400, "the body did not arrive", field="body") from None
    except HttpProcessingError as error:  # e.g. a connection closed short of its length
        raise HttpError(400, f"malformed request body: {problem_of(error)}", field="body") from None
    except TimeoutError:
        raise HttpError(
            408, f"the request body did not arrive within {timeout_s:g} s", field="body"
        ) from None


def answer_closing(response: web.StreamResponse) -> web.StreamResponse:
    """``response``, set to close its connection when it is a 408: the one answer given while
    a body may still be arriving, so the connection cannot carry another request."""
    if response.status == 408:
        response.force_close()
    return response


# -- input validation (pure) ------------------------------------------------------------------

# A JSON escape of a UTF-16 surrogate: only then can a parsed body hold a lone surrogate, a str
# that cannot be encoded back to UTF-8 (so the full check below runs only for such bodies).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json_object(raw: bytes, charset: str | None) -> dict[str, Any]:
    """The JSON object of a request body, or ``HttpError(400)``.

    What ``aiohttp``'s ``request.json()`` did, with every way a client's body can fail turned
    into a 400 (the fuzzer found each of these answered 500 with a traceback): an unknown
    ``charset`` in the content type, bytes not in that charset, malformed JSON, nesting too
    deep for the parser (``RecursionError``), and lone surrogates (``"\\ud800"``), which
    parse but then fail wherever the text is encoded."""
    try:
        text = raw.decode(charset or "utf-8")
    except LookupError:
        raise HttpError(400, f"unknown charset {charset!r}", field="body") from None
    except UnicodeDecodeError as error:
        raise HttpError(400, f"malformed JSON body: {error}", field="body") from None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise HttpError(400, f"malformed JSON body: {error}", field="body") from None
    except RecursionError:
        raise HttpError(400, "malformed JSON body: nested too deeply", field="body") from None
    if not isinstance(parsed, dict):
        raise HttpError(400, "the body must be a JSON object", field="body")
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(parsed, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise HttpError(
                400, "malformed JSON body: a lone surrogate is not text", field="body"
            ) from None
    return parsed


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


# -- what both APIs build on --------------------------------------------------------------------


class HttpApiBase:
    """State set by ``HttpApi.__init__`` and the operations both the original Flux API and REST
    use."""

    _replicas: ReplicaManager
    _apis: KafkaApis
    _groups: GroupCoordinator
    _peers: BrokerPeers
    _offsets: OffsetsClient
    _metrics: BrokerMetrics
    _broker_id: int
    _allow_auto_create: bool
    _round_robin: itertools.count[int]
    _group_commit: GroupCommit
    _links: ForwardLinks
    controller_id: Callable[[], int | None]
    quorum_voters: Callable[[], tuple[tuple[int, str, str], ...]]
    push_deliveries: Callable[[str], list[dict[str, Any]]]

    @property
    def _image(self) -> Any:
        return self._replicas.image

    # -- for the rooms mounted on this server (the console, the schema registry) -------------

    @property
    def replicas(self) -> ReplicaManager:
        return self._replicas

    @property
    def peers(self) -> BrokerPeers:
        return self._peers

    @property
    def broker_id(self) -> int:
        return self._broker_id

    def leader_of(self, topic: str, index: int) -> int | None:
        """The partition's leader in this broker's image (None: unknown or none)."""
        return self._leader_of(topic, index)

    async def controller_write(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> dict[str, Any]:
        """An admin write at the active controller, answered once this broker's image shows
        it."""
        return await self._apis.controller_write(method, path, body)

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
        forwarded = FORWARDED_HEADER in request.headers
        if len(by_partition) == 1:
            # One partition (every single-message publish): no task to gather.
            [(index, positions)] = by_partition.items()
            return await self._produce_partition(
                topic.name, index, [r[:3] for r in records], forwarded=forwarded
            )
        answers: list[dict[str, Any]] = [{} for _ in records]

        async def one(index: int, positions: list[int]) -> None:
            batch = [records[p][:3] for p in positions]
            results = await self._produce_partition(topic.name, index, batch, forwarded=forwarded)
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
        """Produce to one partition, with the records other requests produce to it in this
        turn of the event loop (one append, or one request to its leader: ``group_commit``)."""
        found = self._replicas.partition_for_leader(topic, index)
        if isinstance(found, Partition):
            return await self.produce_local(found, records)  # it groups them itself
        return await self._group_commit.submit(
            ("partition", topic, index, forwarded),
            records,
            lambda grouped: self._produce_partition_now(topic, index, grouped, forwarded=forwarded),
        )

    async def _produce_partition_now(
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
        self._metrics.http_forwarded_records.inc(len(records))
        try:
            # One frame on this broker's link to the leader (``forward_link``), not an HTTP
            # request each: the answer is what ``POST /internal/produce`` would have said.
            status, body = await self._links.produce(
                leader,
                topic,
                index,
                [_encode_record(r) for r in records],
                PRODUCE_TIMEOUT_S + 5,
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
        one stored within the dedup window gets its original offset and ``duplicate``.
        Records other requests (local, or forwarded by other brokers) append to the same
        partition in this turn of the event loop go in the same append and the same wait.
        A schema-validated topic refuses the caller's records here, before they join others'
        (422 ``INVALID_RECORD``)."""
        validator = self._apis.record_validator
        if validator is not None and validator.enabled(partition.config):
            batch = build_batch(records)
            await validator.prepare(partition.topic, batch, partition.config)
            refusal = validator.refusal(partition.topic, batch, partition.config)
            if refusal is not None:
                raise HttpError(422, refusal, code="INVALID_RECORD")
        return await self._group_commit.submit(
            ("local", partition),
            records,
            lambda grouped: self._produce_local_now(partition, grouped),
        )

    async def _produce_local_now(
        self, partition: Partition, records: list[tuple[bytes | None, bytes, list[Header]]]
    ) -> list[dict[str, Any]]:
        min_insync = partition.config.get("min.insync.replicas")
        if len(partition.state.isr) < min_insync:
            raise HttpError(
                503,
                f"in-sync replicas {len(partition.state.isr)} < min.insync.replicas {min_insync}",
                code="NOT_ENOUGH_REPLICAS",
            )
        # Repeats are answered from the id index (their first offset, ``duplicate``), as is
        # an id repeated within the group (the offset its first record gets); every other
        # record goes in one batch, one append and one replication round. The lookups and the
        # append run with no await between them, so nothing can slip in.
        fresh, fresh_ids, answered = _split_repeats(partition, records)
        results: list[dict[str, Any]] = [{} for _ in records]
        last_offset = -1
        for position, offset in answered.items():
            if offset >= 0:
                results[position] = _result(partition, offset, duplicate=True)
                last_offset = max(last_offset, offset)
        if fresh:
            group = [records[position] for position in fresh]
            try:
                # ``_split_repeats`` found and looked up every id just now: the append neither
                # decodes the batch for them nor looks them up again.
                appended = self._replicas.append(
                    partition, build_batch(group), known_ids=[fresh_ids]
                )
            except ProducerRejectedError as error:
                raise _status_error(error.error, str(error)) from None
            except (CorruptBatchError, CorruptRecordError) as error:
                raise HttpError(400, f"cannot store the message: {error}") from None
            except OSError as error:
                raise HttpError(500, f"storage error: {error}") from None
            assert appended.batch_count == 1, "repeats were left out"
            for delta, position in enumerate(fresh):
                results[position] = _result(partition, appended.base_offset + delta)
            for position, offset in answered.items():
                if offset < 0:  # repeats record ``-1 - delta`` of this batch
                    delta = -1 - offset
                    results[position] = _result(
                        partition, appended.base_offset + delta, duplicate=True
                    )
            last_offset = max(last_offset, appended.last_offset)
        if last_offset >= 0:
            future = partition.add_delayed_produce(last_offset + 1)
            try:
                # The future is this append's alone: cancelled by a timeout, the partition
                # skips it (``Partition._complete_delayed``).
                async with asyncio.timeout(PRODUCE_TIMEOUT_S):
                    error = await future
            except TimeoutError:
                raise HttpError(504, "the in-sync replicas did not acknowledge in time") from None
            if error != ErrorCode.NONE:
                raise _status_error(error, error.message)
        return results

    async def _high_watermark(self, topic: str, index: int) -> int | None:
        local = self._replicas.partition_for_leader(topic, index)
        if isinstance(local, Partition):
            return local.high_watermark
        leader = self._leader_of(topic, index)
        if leader is None:
            return None
        try:
            status, answer = await self._peers.request(
                leader,
                "GET",
                f"{INTERNAL_TOPICS}/{topic}/partitions/{index}/messages?limit=0",
                timeout_s=3.0,
            )
        except PeerUnavailableError:
            return None
        return int(answer["high_watermark"]) if status == 200 else None


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


def _split_repeats(
    partition: Partition, records: list[tuple[bytes | None, bytes, list[Header]]]
) -> tuple[list[int], list[tuple[int, str]], dict[int, int]]:
    """The positions of the records to append; the ids among them, as ``message_ids_in``
    would find them in the batch of those records (``(index in it, id)``; none when the
    partition does not deduplicate); and the answered rest: position -> the offset their id
    was stored at within the dedup window, or ``-1 - i`` for an id repeating that of the
    ``i``-th record to append."""
    dedup = partition.dedup
    fresh: list[int] = []
    answered: dict[int, int] = {}
    first: dict[str, int] = {}
    for position, (_, _, headers) in enumerate(records):
        message_id = message_id_of(headers) if dedup.enabled else None
        if message_id is not None:
            stored = dedup.lookup(message_id)
            if stored is not None:
                answered[position] = stored
                continue
            if message_id in first:
                answered[position] = -1 - first[message_id]
                continue
            first[message_id] = len(fresh)
        fresh.append(position)
    return fresh, [(index, message_id) for message_id, index in first.items()], answered


def _result(partition: Partition, offset: int, *, duplicate: bool = False) -> dict[str, Any]:
    return {
        "topic": partition.topic,
        "partition": partition.index,
        "offset": offset,
        "duplicate": duplicate,
    }


def _encode_record(record: tuple[bytes | None, bytes, list[Header]]) -> dict[str, Any]:
    key, value, headers = record
    return {
        "key": None if key is None else base64.b64encode(key).decode(),
        "value": base64.b64encode(value).decode(),
        "headers": [[k, None if v is None else base64.b64encode(v).decode()] for k, v in headers],
    }
