"""The registry on a broker: its view of ``_schemas``, its one writer, and the REST routes.

**Storage.** Everything the registry knows is a record of the compacted internal topic
``_schemas`` (one partition, replicated on up to three brokers, ``state.py`` draws the
records). It is created on the first write.

**One writer.** Every change is planned and appended by the broker that leads ``_schemas``
partition 0, one change at a time (a lock), with ``acks=all``: before planning, the writer
brings its view up to its log end, so a schema id is handed out once, whatever broker the
client asked (another broker forwards the request to the leader, as Confluent's followers
forward to their leader). A write that fails after its append (the leader lost its place)
drops the writer's view: the next request rebuilds it from committed records only.

**Every broker reads its own view.** A read first catches the view up: from the leader (the
records up to its high watermark, so a schema a client registered a moment ago through any
broker is found), or, when the leader cannot be reached, from this broker's own replica up to
its high watermark (a follower still answers, perhaps a little behind). A lookup by id that
the view already knows needs no catching up: ids never change their schema.

Thread-safety: none; everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from flux.cluster.http.common import INTERNAL_TOPICS, HttpError, answer_closing, read_body
from flux.cluster.replication.partition import Partition
from flux.cluster.replication.peers import FORWARDED_HEADER, PeerUnavailableError
from flux.cluster.replication.reads import committed_records
from flux.protocol.errors import ErrorCode

from .errors import (
    BadRequestError,
    ForwardingError,
    InvalidCompatibilityLevelError,
    InvalidSchemaError,
    RegistryError,
    RequestTimeoutError,
    SchemaNotFoundError,
    StoreTimeoutError,
    SubjectConfigNotFoundError,
    SubjectModeNotFoundError,
    SubjectNotFoundError,
)
from .schemas import SCHEMA_TYPES, ParsedSchema, parse_references, parse_schema
from .state import Record, RegistryState, compatibility_problems, encode_key
from .validation import SchemaValidation

if TYPE_CHECKING:
    from flux.cluster.http.api import HttpApi

__all__ = ["CONTENT_TYPE", "PREFIX", "SCHEMAS_TOPIC", "SchemaRegistry"]

log = logging.getLogger("flux.registry")

SCHEMAS_TOPIC = "_schemas"
PREFIX = "/schemas"
INTERNAL_PREFIX = "/internal/schemas"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

#: Records asked for per catch-up read.
CATCH_UP_BATCH = 1000
#: Bytes one local log read may return.
READ_MAX_BYTES = 1 << 20
#: How long a write waits for ``_schemas`` to exist and have a leader.
TOPIC_READY_TIMEOUT_S = 15.0
#: Deadline of a write (append and replication) and of a call to the leader.
WRITE_TIMEOUT_S = 30.0
#: Largest request body (schemas included).
MAX_BODY_BYTES = 2 << 20


class SchemaRegistry:
    """Confluent's Schema Registry REST API under ``/schemas`` of the broker's HTTP server."""

    def __init__(self, api: HttpApi) -> None:
        self._api = api
        self.state = RegistryState()
        self._write_lock = asyncio.Lock()
        self._sync_lock = asyncio.Lock()
        self.validation = SchemaValidation(self)

    # -- routes -------------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """The API under ``/schemas``; the writes also under ``/internal/schemas``, where
        another broker forwards them with the node credential (the client's own credentials
        and ACLs were checked by the broker it called)."""
        public = self._routes(PREFIX)
        internal = [
            route
            for route in self._routes(INTERNAL_PREFIX)
            if route.method in ("POST", "PUT", "DELETE")
        ]
        return public + internal

    def _routes(self, p: str) -> list[web.RouteDef]:
        subject = p + "/subjects/{subject}"
        version = subject + "/versions/{version}"
        return [
            web.get(p, self._handler(self._root)),
            web.get(p + "/", self._handler(self._root)),
            web.get(p + "/schemas/types", self._handler(self._types)),
            web.get(p + "/schemas/ids/{id}", self._handler(self._schema_by_id)),
            web.get(p + "/schemas/ids/{id}/schema", self._raw(self._schema_text_by_id)),
            web.get(p + "/schemas/ids/{id}/subjects", self._handler(self._id_subjects)),
            web.get(p + "/schemas/ids/{id}/versions", self._handler(self._id_versions)),
            web.get(p + "/subjects", self._handler(self._subjects)),
            web.post(subject, self._handler(self._lookup)),
            web.delete(subject, self._handler(self._delete_subject, write=True)),
            web.get(subject + "/versions", self._handler(self._versions)),
            web.post(subject + "/versions", self._handler(self._register, write=True)),
            web.get(version, self._handler(self._version)),
            web.delete(version, self._handler(self._delete_version, write=True)),
            web.get(version + "/schema", self._raw(self._version_text)),
            web.get(version + "/referencedby", self._handler(self._referenced_by)),
            web.post(
                p + "/compatibility/subjects/{subject}/versions/{version}",
                self._handler(self._check),
            ),
            web.post(p + "/compatibility/subjects/{subject}/versions", self._handler(self._check)),
            web.get(p + "/config", self._handler(self._get_config)),
            web.put(p + "/config", self._handler(self._put_config, write=True)),
            web.delete(p + "/config", self._handler(self._delete_config, write=True)),
            web.get(p + "/config/{subject}", self._handler(self._get_config)),
            web.put(p + "/config/{subject}", self._handler(self._put_config, write=True)),
            web.delete(p + "/config/{subject}", self._handler(self._delete_config, write=True)),
            web.get(p + "/mode", self._handler(self._get_mode)),
            web.put(p + "/mode", self._handler(self._put_mode, write=True)),
            web.get(p + "/mode/{subject}", self._handler(self._get_mode)),
            web.put(p + "/mode/{subject}", self._handler(self._put_mode, write=True)),
            web.delete(p + "/mode/{subject}", self._handler(self._delete_mode, write=True)),
        ]

    def _handler(
        self,
        handle: Callable[[web.Request, Any], Awaitable[Any]],
        *,
        write: bool = False,
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """Decode the body, run ``handle`` (at the writer for a write: forwarded to the leader
        of ``_schemas`` when that is another broker), answer JSON or Confluent's error."""

        async def endpoint(request: web.Request) -> web.StreamResponse:
            try:
                body = await _body(request, self._api.body_timeout_s)
                if write:
                    forwarded = await self._forward_write(request, body)
                    if forwarded is not None:
                        return forwarded
                    async with self._write_lock:
                        await self._catch_up_as_writer()
                        result = await handle(request, body)
                else:
                    result = await handle(request, body)
            except RegistryError as error:
                return answer_closing(_json(error.body(), status=error.status))
            return _json(result)

        return endpoint

    def _raw(
        self, handle: Callable[[web.Request], Awaitable[str]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def endpoint(request: web.Request) -> web.StreamResponse:
            try:
                text = await handle(request)
            except RegistryError as error:
                return _json(error.body(), status=error.status)
            return web.Response(text=text, content_type="application/json")

        return endpoint

    # -- reads --------------------------------------------------------------------------------

    async def _root(self, request: web.Request, body: Any) -> Any:
        return {}

    async def _types(self, request: web.Request, body: Any) -> Any:
        return list(SCHEMA_TYPES)

    async def _by_id(self, request: web.Request) -> Any:
        schema_id = _int_path(request, "id")
        try:
            return self.state.schema(schema_id)
        except SchemaNotFoundError:
            await self.catch_up()
            return self.state.schema(schema_id)

    async def _schema_by_id(self, request: web.Request, body: Any) -> Any:
        entry = await self._by_id(request)
        document = entry.to_json()
        return {
            key: document[key] for key in ("schema", "schemaType", "references") if key in document
        }

    async def _schema_text_by_id(self, request: web.Request) -> str:
        return str((await self._by_id(request)).schema)

    async def _id_subjects(self, request: web.Request, body: Any) -> Any:
        entry = await self._by_id(request)
        users = self.state.schema_users(entry.schema_id, deleted=_flag(request, "deleted"))
        return sorted({user.subject for user in users})

    async def _id_versions(self, request: web.Request, body: Any) -> Any:
        entry = await self._by_id(request)
        users = self.state.schema_users(entry.schema_id, deleted=_flag(request, "deleted"))
        return [{"subject": user.subject, "version": user.version} for user in users]

    async def _subjects(self, request: web.Request, body: Any) -> Any:
        await self.catch_up()
        return self.state.subjects(
            deleted=_flag(request, "deleted"), prefix=request.query.get("subjectPrefix", "")
        )

    async def _versions(self, request: web.Request, body: Any) -> Any:
        await self.catch_up()
        entries = self.state.versions(_subject(request), deleted=_flag(request, "deleted"))
        return [entry.version for entry in entries]

    async def _version(self, request: web.Request, body: Any) -> Any:
        await self.catch_up()
        entry = self.state.version(
            _subject(request), request.match_info["version"], deleted=_flag(request, "deleted")
        )
        return entry.to_json()

    async def _version_text(self, request: web.Request) -> str:
        await self.catch_up()
        entry = self.state.version(
            _subject(request), request.match_info["version"], deleted=_flag(request, "deleted")
        )
        return entry.schema

    async def _referenced_by(self, request: web.Request, body: Any) -> Any:
        await self.catch_up()
        entry = self.state.version(_subject(request), request.match_info["version"])
        return self.state.referenced_by(entry.subject, entry.version)

    async def _lookup(self, request: web.Request, body: Any) -> Any:
        await self.catch_up()
        subject = _subject(request)
        schema = self._parse(body)
        self.state.versions(subject, deleted=True)  # 40401 for an unknown subject
        return self.state.lookup(subject, schema, deleted=_flag(request, "deleted")).to_json()

    async def _check(self, request: web.Request, body: Any) -> Any:
        """``POST /compatibility/subjects/{s}/versions[/{v}]``: against one version (``latest``
        included), or, without a version, against those the subject's level names."""
        await self.catch_up()
        subject = _subject(request)
        schema = self._parse(body)
        level = self.state.compatibility(subject)
        try:
            if "version" in request.match_info:
                entries = [self.state.version(subject, request.match_info["version"])]
                level = level.removesuffix("_TRANSITIVE")
            else:
                entries = self.state.versions(subject)
        except SubjectNotFoundError:
            if "version" in request.match_info:
                raise
            entries = []
        problems = compatibility_problems(
            level, schema, [self.state.parsed(entry) for entry in entries]
        )
        answer: dict[str, Any] = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            answer["messages"] = problems
        return answer

    async def _get_config(self, request: web.Request, body: Any) -> Any:
        await self.catch_up()
        subject = request.match_info.get("subject")
        if subject is None:
            return {"compatibilityLevel": self.state.compatibility(None)}
        level = self.state.subject_config(subject)
        if level is None:
            if not _flag(request, "defaultToGlobal"):
                raise SubjectConfigNotFoundError(
                    f"Subject '{subject}' does not have subject-level compatibility configured"
                )
            level = self.state.compatibility(None)
        return {"compatibilityLevel": level}

    async def _get_mode(self, request: web.Request, body: Any) -> Any:
        await self.catch_up()
        subject = request.match_info.get("subject")
        if (
            subject is not None
            and self.state.subject_mode(subject) is None
            and not _flag(request, "defaultToGlobal")
        ):
            raise SubjectModeNotFoundError(
                f"Subject '{subject}' does not have subject-level mode configured"
            )
        return {"mode": self.state.mode(subject)}

    # -- writes (on the leader of _schemas, under the write lock) ------------------------------

    async def _register(self, request: web.Request, body: Any) -> Any:
        subject = _subject(request)
        schema = self._parse(body)
        requested_id = body.get("id") if isinstance(body, dict) else None
        if requested_id is not None and (
            isinstance(requested_id, bool) or not isinstance(requested_id, int)
        ):
            raise BadRequestError("field 'id' must be an integer")
        records, entry = self.state.plan_register(subject, schema, schema_id=requested_id)
        await self._append(records)
        return {"id": entry.schema_id, "version": entry.version}

    async def _delete_subject(self, request: web.Request, body: Any) -> Any:
        records, versions = self.state.plan_delete_subject(
            _subject(request), permanent=_flag(request, "permanent")
        )
        await self._append(records)
        return versions

    async def _delete_version(self, request: web.Request, body: Any) -> Any:
        records, version = self.state.plan_delete_version(
            _subject(request), request.match_info["version"], permanent=_flag(request, "permanent")
        )
        await self._append(records)
        return version

    async def _put_config(self, request: web.Request, body: Any) -> Any:
        level = (
            body.get("compatibility", body.get("compatibilityLevel"))
            if isinstance(body, dict)
            else None
        )
        if level is None:
            raise InvalidCompatibilityLevelError("field 'compatibility' is required")
        records = self.state.plan_config(request.match_info.get("subject"), level)
        await self._append(records)
        return {"compatibility": str(level).upper()}

    async def _delete_config(self, request: web.Request, body: Any) -> Any:
        subject = request.match_info.get("subject")
        old = self.state.compatibility(subject)
        await self._append(self.state.plan_config(subject, None))
        return {"compatibilityLevel": old}

    async def _put_mode(self, request: web.Request, body: Any) -> Any:
        mode = body.get("mode") if isinstance(body, dict) else None
        records = self.state.plan_mode(
            request.match_info.get("subject"), mode if mode is not None else ""
        )
        await self._append(records)
        return {"mode": str(mode).upper()}

    async def _delete_mode(self, request: web.Request, body: Any) -> Any:
        subject = request.match_info.get("subject")
        old = self.state.mode(subject)
        await self._append(self.state.plan_mode(subject, None))
        return {"mode": old}

    def _parse(self, body: Any) -> ParsedSchema:
        if not isinstance(body, dict):
            raise InvalidSchemaError("the request body must be a JSON object with 'schema'")
        schema_type = body.get("schemaType") or "AVRO"
        references = parse_references(body.get("references"))
        return parse_schema(
            str(schema_type).upper(), body.get("schema"), references, self.state.resolve
        )

    # -- the writer ---------------------------------------------------------------------------

    async def _forward_write(self, request: web.Request, body: Any) -> web.StreamResponse | None:
        """None when this broker leads ``_schemas`` (its view now caught up to its log end,
        ready to plan); otherwise the leader's answer to the same request."""
        leader = await self._wait_leader()
        if leader == self._api.broker_id:
            return None
        if FORWARDED_HEADER in request.headers:
            raise ForwardingError(
                f"broker {self._api.broker_id} does not lead {SCHEMAS_TOPIC} (leader {leader})"
            )
        try:
            path = request.path_qs
            if not path.startswith(INTERNAL_PREFIX):
                path = "/internal" + path
            status, answer = await self._api.peers.request(
                leader,
                request.method,
                path,
                json_body=body,
                timeout_s=WRITE_TIMEOUT_S,
            )
        except PeerUnavailableError as error:
            raise ForwardingError(f"the registry's writer is unreachable: {error}") from None
        return _json(answer, status=status)

    async def _catch_up_as_writer(self) -> None:
        """The writer's view: every record of its log. A new leader's log may end with
        records of its predecessor above the high watermark; they are waited for until
        committed (so the view never holds a record a truncation could take back), then read,
        so no id they hold is handed out again."""
        partition = self._api.replicas.partition_for_leader(SCHEMAS_TOPIC, 0)
        if not isinstance(partition, Partition):
            raise ForwardingError(f"broker {self._api.broker_id} no longer leads {SCHEMAS_TOPIC}")
        log_end = partition.log.log_end_offset
        if partition.high_watermark < log_end:
            future = partition.add_delayed_produce(log_end)
            try:
                error = await asyncio.wait_for(asyncio.shield(future), WRITE_TIMEOUT_S)
            except TimeoutError:
                raise StoreTimeoutError(
                    f"{SCHEMAS_TOPIC}'s in-sync replicas did not catch up in time"
                ) from None
            if error != ErrorCode.NONE:
                raise StoreTimeoutError(f"cannot read {SCHEMAS_TOPIC}: {error.name}")
        async with self._sync_lock:
            self._read_local(partition, upto=partition.high_watermark)

    async def _wait_leader(self) -> int:
        """The leader of ``_schemas`` partition 0, creating the topic when it does not exist."""
        deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
        created = False
        while True:
            image = self._api.replicas.image
            topic = image.topics.get(SCHEMAS_TOPIC)
            if topic is None and not created:
                created = True
                live = len(image.live_broker_ids())
                try:
                    await self._api.controller_write(
                        "POST",
                        "/controller/topics",
                        {
                            "name": SCHEMAS_TOPIC,
                            "num_partitions": 1,
                            "replication_factor": max(1, min(3, live)),
                            "configs": {"cleanup.policy": "compact"},
                        },
                    )
                except Exception as error:  # the controller's answer is checked below
                    log.info("creating %s: %r", SCHEMAS_TOPIC, error)
                continue
            leader = self._api.leader_of(SCHEMAS_TOPIC, 0)
            if leader is not None and (
                leader != self._api.broker_id
                or isinstance(self._api.replicas.partition_for_leader(SCHEMAS_TOPIC, 0), Partition)
            ):
                return leader
            if time.monotonic() > deadline:
                raise ForwardingError(f"{SCHEMAS_TOPIC} has no leader")
            await asyncio.sleep(0.05)

    async def _append(self, records: list[Record]) -> None:
        """Append ``records`` as the leader with acks=all, then apply them to the view."""
        if not records:
            return
        partition = self._api.replicas.partition_for_leader(SCHEMAS_TOPIC, 0)
        if not isinstance(partition, Partition):
            raise ForwardingError(f"broker {self._api.broker_id} no longer leads {SCHEMAS_TOPIC}")
        encoded = [
            (encode_key(key), None if value is None else json.dumps(value).encode(), [])
            for key, value in records
        ]
        try:
            results = await asyncio.wait_for(
                self._api.produce_local(partition, encoded),  # type: ignore[arg-type]
                WRITE_TIMEOUT_S,
            )
        except (HttpError, TimeoutError) as error:
            # Appended perhaps, committed perhaps not: rebuild from committed records.
            self.state = RegistryState()
            message = error.message if isinstance(error, HttpError) else "timed out"
            raise StoreTimeoutError(f"cannot store the change: {message}") from None
        async with self._sync_lock:
            upto = max(int(result["offset"]) for result in results) + 1
            self._read_local(partition, upto=upto)

    # -- following the topic ------------------------------------------------------------------

    async def catch_up(self) -> None:
        """Bring the view up to the leader's high watermark (or this broker's replica's)."""
        image = self._api.replicas.image
        if SCHEMAS_TOPIC not in image.topics:
            return
        async with self._sync_lock:
            partition = self._api.replicas.partition_for_leader(SCHEMAS_TOPIC, 0)
            if isinstance(partition, Partition):
                self._read_local(partition, upto=partition.high_watermark)
                return
            leader = self._api.leader_of(SCHEMAS_TOPIC, 0)
            if leader is not None and leader != self._api.broker_id:
                try:
                    await self._read_remote(leader)
                    return
                except (PeerUnavailableError, RegistryError) as error:
                    log.info("reading %s from broker %d: %s", SCHEMAS_TOPIC, leader, error)
            local = self._api.replicas.partition(SCHEMAS_TOPIC, 0)
            if local is not None:
                self._read_local(local, upto=local.high_watermark)

    def _read_local(self, partition: Partition, *, upto: int) -> None:
        state = self.state
        if state.applied_offset < partition.log.log_start_offset:
            state = self.state = RegistryState()
            state.applied_offset = partition.log.log_start_offset
        while state.applied_offset < upto:
            records, next_offset = committed_records(
                partition,
                state.applied_offset,
                CATCH_UP_BATCH,
                upto=upto,
                read_max_bytes=READ_MAX_BYTES,
            )
            for record in records:
                state.apply(record.offset, record.key, record.value)
            if next_offset <= state.applied_offset:
                break
            state.applied_offset = next_offset

    async def _read_remote(self, leader: int) -> None:
        state = self.state
        while True:
            path = (
                f"{INTERNAL_TOPICS}/{SCHEMAS_TOPIC}/partitions/0/messages"
                f"?offset={state.applied_offset}&limit={CATCH_UP_BATCH}"
            )
            status, answer = await self._api.peers.request(leader, "GET", path, timeout_s=5.0)
            if status == 416 and isinstance(answer, dict):
                start = int(answer.get("log_start_offset", 0))
                if state.applied_offset < start:
                    state = self.state = RegistryState()
                    state.applied_offset = start
                    continue
            if status != 200:
                raise ForwardingError(f"HTTP {status}: {answer}")
            for message in answer["messages"]:
                state.apply(
                    int(message["offset"]), _bytes(message, "key"), _bytes(message, "value")
                )
            state.applied_offset = max(state.applied_offset, int(answer["next_offset"]))
            if not answer["messages"] or state.applied_offset >= int(answer["high_watermark"]):
                return


def _bytes(message: dict[str, Any], name: str) -> bytes | None:
    if message.get(name) is not None:
        return str(message[name]).encode()
    encoded = message.get(name + "_base64")
    if encoded is None:
        return None
    import base64

    return base64.b64decode(encoded)


async def _body(request: web.Request, timeout_s: float) -> Any:
    """The decoded JSON body of a POST or PUT (``{}`` when empty), read as the broker's JSON
    routes read theirs: a body still incomplete after ``timeout_s`` is a 408 (and closes the
    connection), one cut short a 400."""
    if request.method not in ("POST", "PUT"):
        return None
    try:
        raw = await read_body(request, timeout_s)
    except HttpError as error:
        if error.status == 408:
            raise RequestTimeoutError(str(error)) from None
        raise BadRequestError(str(error)) from None
    if len(raw) > MAX_BODY_BYTES:
        raise BadRequestError(f"the request body is larger than {MAX_BODY_BYTES} bytes")
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequestError(f"the request body is not JSON: {error}") from None


def _json(document: Any, *, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(document).encode(), status=status, content_type=CONTENT_TYPE
    )


def _subject(request: web.Request) -> str:
    subject = request.match_info["subject"]
    if not subject or len(subject.encode()) > 4096:
        raise BadRequestError("the subject must be 1 to 4096 bytes")
    return subject


def _int_path(request: web.Request, name: str) -> int:
    try:
        return int(request.match_info[name])
    except ValueError:
        raise BadRequestError(f"{name} must be an integer") from None


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"
