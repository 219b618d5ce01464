"""REST on every broker: topics (list, describe, create, delete), messages (produce with
key, headers and id; read by offset range), groups (list, describe with lag), cluster state,
and the internal broker-to-broker endpoints (``/internal/...``: produce at the leader,
committed offsets and groups at their coordinator)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from typing import Any

from aiohttp import web
from flux.protocol.errors import ErrorCode
from flux.protocol.records import Header, decode_records
from flux.storage import PartitionLog
from flux.storage.compaction.planner import dirty_ratio

from ..groups.offsets_client import OffsetsUnavailableError, describe_json
from ..replication.partition import Partition
from ..replication.peers import FORWARDED_HEADER, PeerUnavailableError
from ..replication.reads import committed_records
from ..topics import InvalidTopicError, validate_topic_name
from .common import (
    INTERNAL_TOPICS,
    NOT_LEADER_STATUS,
    HttpApiBase,
    HttpError,
    _forwarded_error,
    _record_from_json,
    _text_field,
    message_json,
)

__all__ = ["RestApi"]

MAX_MESSAGES_PER_REQUEST = 10_000
MAX_READ_LIMIT = 10_000
DEFAULT_READ_LIMIT = 100
READ_MAX_BYTES = 8 << 20


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


class RestApi(HttpApiBase):
    """Topics, messages, groups, cluster state and the internal endpoints."""

    # -- topics -------------------------------------------------------------------------------

    async def _list_topics(self, request: web.Request, body: dict[str, Any]) -> Any:
        topics = [
            {"name": t.name, "partitions": len(t.partitions), "config": t.config_dict()}
            for t in self._image.topics.values()
        ]
        if request.query.get("totals") == "true":
            totals = await self.topic_totals()
            for entry in topics:
                found = totals.get(entry["name"])
                entry["size_bytes"] = found["size_bytes"] if found else None
                entry["messages"] = found["end"] if found else None
        return {"topics": topics}

    def local_topic_totals(self) -> dict[str, dict[str, int]]:
        """Per topic, over the partitions this broker leads: log bytes and the sum of the high
        watermarks."""
        totals: dict[str, dict[str, int]] = {}
        for partition in self._replicas.partitions():
            if not partition.is_leader:
                continue
            entry = totals.setdefault(partition.topic, {"size_bytes": 0, "end": 0})
            entry["size_bytes"] += partition.log.size_bytes
            entry["end"] += partition.high_watermark
        return totals

    async def topic_totals(self) -> dict[str, dict[str, int]]:
        """``local_topic_totals`` summed over every live broker (one request each; a broker
        that does not answer leaves its partitions out)."""

        async def ask(broker_id: int) -> dict[str, Any]:
            if broker_id == self._broker_id:
                return self.local_topic_totals()
            try:
                status, answer = await self._peers.request(
                    broker_id, "GET", "/internal/topic-totals", timeout_s=3.0
                )
            except PeerUnavailableError:
                return {}
            return answer.get("topics", {}) if status == 200 and isinstance(answer, dict) else {}

        summed: dict[str, dict[str, int]] = {}
        live = sorted(self._image.live_broker_ids())
        for found in await asyncio.gather(*(ask(broker_id) for broker_id in live)):
            for name, entry in found.items():
                total = summed.setdefault(name, {"size_bytes": 0, "end": 0})
                total["size_bytes"] += int(entry["size_bytes"])
                total["end"] += int(entry["end"])
        return summed

    async def _internal_topic_totals(self, request: web.Request, body: dict[str, Any]) -> Any:
        return {"topics": self.local_topic_totals()}

    async def _describe_topic(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = await self._topic(request.match_info["topic"], create=False)
        partitions = self._partition_entries(topic)
        if request.query.get("offsets") == "all" and FORWARDED_HEADER not in request.headers:
            await self._add_leaders_offsets(topic.name, partitions)
        return {
            "name": topic.name,
            "topic_id": topic.topic_id,
            "config": topic.config_dict(),
            "partitions": partitions,
        }

    async def topic_offsets(self, name: str) -> list[dict[str, Any]] | None:
        """Every partition of topic ``name`` with its leader, ISR and (from its leader)
        offsets, as ``GET /topics/{name}?offsets=all`` has them; None if there is no such
        topic."""
        topic = self._image.topics.get(name)
        if topic is None:
            return None
        partitions = self._partition_entries(topic)
        await self._add_leaders_offsets(topic.name, partitions)
        return partitions

    def _partition_entries(self, topic: Any) -> list[dict[str, Any]]:
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
                    size_bytes=local.log.size_bytes,
                )
            if local is not None and local.config.compacted:
                entry["cleaner"] = _cleaner_state(local)
            partitions.append(entry)
        return partitions

    async def _add_leaders_offsets(self, name: str, partitions: list[dict[str, Any]]) -> None:
        """``GET /topics/{t}?offsets=all``: the offsets of the partitions other brokers lead,
        one request to each of those leaders (a leader that does not answer leaves its
        partitions without offsets)."""
        leaders = {
            entry["leader"]
            for entry in partitions
            if "high_watermark" not in entry and entry["leader"] not in (-1, self._broker_id)
        }

        async def ask(leader: int) -> dict[int, dict[str, Any]]:
            try:
                status, answer = await self._peers.request(
                    leader, "GET", f"{INTERNAL_TOPICS}/{name}", timeout_s=3.0
                )
            except PeerUnavailableError:
                return {}
            if status != 200 or not isinstance(answer, dict):
                return {}
            return {
                entry["partition"]: entry
                for entry in answer.get("partitions", [])
                if entry.get("leader") == leader and "high_watermark" in entry
            }

        for found in await asyncio.gather(*(ask(leader) for leader in sorted(leaders))):
            for entry in partitions:
                theirs = found.get(entry["partition"])
                if theirs is not None and "high_watermark" not in entry:
                    for field in (
                        "log_start_offset",
                        "log_end_offset",
                        "high_watermark",
                        "size_bytes",
                    ):
                        entry[field] = theirs.get(field)

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

    async def _alter_topic_configs(self, request: web.Request, body: dict[str, Any]) -> Any:
        """``PATCH /topics/{topic}/configs {"configs": {name: value | null}}``: set or delete
        (null) config overrides, as Kafka's IncrementalAlterConfigs; an unknown name or a bad
        value is a 400 naming it, and nothing changes."""
        topic = await self._topic(request.match_info["topic"], create=False)
        changes = body.get("configs")
        if (
            not isinstance(changes, dict)
            or not changes
            or not all(isinstance(v, str) or v is None for v in changes.values())
        ):
            raise HttpError(
                400,
                "field 'configs' must map names to strings (or null to delete)",
                field="configs",
            )
        answer = await self._apis.controller_write(
            "POST",
            "/controller/configs",
            {"resource_type": "topic", "resource_name": topic.name, "changes": changes},
        )
        return self._controller_answer(answer)

    async def _delete_topic(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = await self._topic(request.match_info["topic"], create=False)
        answer = await self._apis.controller_write(
            "DELETE", f"/controller/topics/{topic.name}", None
        )
        return self._controller_answer(answer)

    # -- messages -----------------------------------------------------------------------------

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

    async def _internal_produce(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = request.match_info["topic"]
        index = _path_int(request, "partition")
        found = self._replicas.partition_for_leader(topic, index)
        if not isinstance(found, Partition):
            raise HttpError(
                NOT_LEADER_STATUS, f"broker {self._broker_id} does not lead {topic}-{index}"
            )
        encoded = body.get("records", [])
        if not isinstance(encoded, list):
            # {"records": 5} from the fuzzer was a TypeError, answered 500.
            raise HttpError(400, "field 'records' must be a list", field="records")
        records = [_decode_record(item) for item in encoded]
        if not records:
            raise HttpError(400, "no records", field="records")
        return {"offsets": await self.produce_local(found, records)}

    async def _produce_link(self, request: web.Request) -> web.StreamResponse:
        """``GET /internal/produce-link``: another broker's forwarded produces, one frame each
        (``forward_link``)."""
        return await self._links.serve(request, self._link_produce)

    async def _link_produce(
        self, topic: str, index: int, encoded: list[Any]
    ) -> tuple[int, dict[str, Any]]:
        """One forwarded group: what ``POST /internal/produce/{topic}/{index}`` answers."""
        try:
            found = self._replicas.partition_for_leader(topic, index)
            if not isinstance(found, Partition):
                raise HttpError(
                    NOT_LEADER_STATUS, f"broker {self._broker_id} does not lead {topic}-{index}"
                )
            if not isinstance(encoded, list):
                raise HttpError(400, "field 'records' must be a list", field="records")
            records = [_decode_record(item) for item in encoded]
            if not records:
                raise HttpError(400, "no records", field="records")
            return 200, {"offsets": await self.produce_local(found, records)}
        except HttpError as error:
            return error.status, error.body()

    # -- read ---------------------------------------------------------------------------------

    async def _read(self, request: web.Request, body: dict[str, Any]) -> Any:
        topic = await self._topic(request.match_info["topic"], create=False)
        index = _path_int(request, "partition")
        if index >= len(topic.partitions):
            raise HttpError(404, f"{topic.name} has no partition {index}", field="partition")
        offset = _query_int(request, "offset", None, 0)
        # ?timestamp=MS (when no offset is given): from the first message stamped at or after it.
        timestamp = _query_int(request, "timestamp", None, 0)
        limit = _query_int(request, "limit", DEFAULT_READ_LIMIT, 0)
        assert limit is not None
        limit = min(limit, MAX_READ_LIMIT)
        found = self._replicas.partition_for_leader(topic.name, index)
        if isinstance(found, Partition):
            if offset is None and timestamp is not None:
                offset = _offset_at_time(found, timestamp)
            return self.read_local(found, offset, limit)
        leader = self._leader_of(topic.name, index)
        if FORWARDED_HEADER in request.headers or leader is None or leader == self._broker_id:
            raise HttpError(
                NOT_LEADER_STATUS if leader is not None else 503,
                f"broker {self._broker_id} does not lead {topic.name}-{index}",
                leader=leader,
            )
        try:
            path = request.path_qs
            if not path.startswith(INTERNAL_TOPICS):
                path = "/internal" + path  # under the node credential (a secured cluster)
            status, answer = await self._peers.request(leader, "GET", path)
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
        records, next_offset = committed_records(
            partition, offset, limit, upto=high_watermark, read_max_bytes=READ_MAX_BYTES
        )
        answer["messages"] = [
            message_json(record, partition.topic, partition.index) for record in records
        ]
        answer["next_offset"] = next_offset
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
            offsets = await self.group_offsets(group_id)
        except OffsetsUnavailableError as error:
            raise HttpError(503, str(error)) from None
        if not offsets and group_id not in {g["group_id"] for g in self._groups.list_groups()}:
            coordinator = self._groups.coordinator_of(group_id)
            if coordinator == self._broker_id:
                raise HttpError(404, f"unknown group {group_id!r}", field="group")
        try:
            described = await self._offsets.describe(group_id)
        except OffsetsUnavailableError:
            described = {}
        return {"group": group_id, **described, "offsets": offsets}

    async def group_offsets(self, group_id: str) -> list[dict[str, Any]]:
        """The group's committed offsets with each partition's high watermark and lag (one
        request to each leader of the group's topics, not one per partition). Raises
        ``OffsetsUnavailableError`` when its coordinator cannot say."""
        committed = await self._offsets.fetch(group_id)
        ends: dict[tuple[str, int], int] = {}
        for name in sorted({topic for topic, _ in committed}):
            for entry in await self.topic_offsets(name) or []:
                if "high_watermark" in entry:
                    ends[(name, entry["partition"])] = entry["high_watermark"]
        offsets = []
        for (topic, index), offset in sorted(committed.items()):
            item: dict[str, Any] = {"topic": topic, "partition": index, "committed": offset}
            end = ends.get((topic, index))
            if end is not None:
                item["high_watermark"] = end
                item["lag"] = max(end - offset, 0) if offset >= 0 else None
            offsets.append(item)
        return offsets

    async def _reset_group_offsets(self, request: web.Request, body: dict[str, Any]) -> Any:
        """``POST /groups/{group}/offsets {"topic", "to": "earliest" | "latest" | N}``: commit
        the group's offset of every partition of the topic to its log start, its high
        watermark, or N (clamped into the log); as ``fluxctl group reset-offsets``, only for a
        group without active members (409 otherwise)."""
        group_id = request.match_info["group"]
        name = _text_field(body, "topic", required=True, max_bytes=249)
        assert name is not None
        topic = await self._topic(name, create=False)
        target = body.get("to")
        if target not in ("earliest", "latest") and (
            isinstance(target, bool) or not isinstance(target, int) or target < 0
        ):
            raise HttpError(
                400, "field 'to' must be 'earliest', 'latest' or an offset >= 0", field="to"
            )
        partitions = await self.topic_offsets(topic.name) or []
        offsets: dict[int, int] = {}
        for entry in partitions:
            if "high_watermark" not in entry:
                raise HttpError(503, f"the leader of {topic.name}-{entry['partition']} is away")
            start, end = entry["log_start_offset"], entry["high_watermark"]
            offset = start if target == "earliest" else end if target == "latest" else target
            offsets[entry["partition"]] = min(max(int(offset), start), end)
        try:
            await self._offsets.commit(
                group_id, [(topic.name, index, offset) for index, offset in offsets.items()]
            )
        except OffsetsUnavailableError as error:
            if ErrorCode.UNKNOWN_MEMBER_ID in error.errors:
                raise HttpError(
                    409,
                    f"group {group_id!r} has active members: stop its consumers first",
                    field="group",
                ) from None
            raise HttpError(503, str(error)) from None
        return {"group": group_id, "topic": topic.name, "offsets": offsets}

    # -- cluster ------------------------------------------------------------------------------

    def cluster_summary(self) -> dict[str, Any]:
        """Counts an operator watches: brokers (and fenced ones), partitions, those whose ISR
        is short of their replicas, those without a leader; the active controller."""
        image = self._image
        partitions, under, offline = self._partition_health(image)
        return {
            "brokers": len(image.brokers),
            "fenced": sum(1 for broker in image.brokers.values() if broker.fenced),
            "topics": len(image.topics),
            "partitions": partitions,
            "under_replicated": under,
            "offline": offline,
            "controller_id": self.controller_id(),
            "requests": self._metrics.requests_total(),
        }

    def _partition_health(self, image: Any) -> tuple[int, int, int]:
        """(partitions, under-replicated, offline) of ``image``: counted once per metadata
        image (an image never changes; a new version is a new image), so the console's event
        streams, which ask every second, cost nothing per partition while the cluster is
        unchanged."""
        cached: tuple[Any, tuple[int, int, int]] | None = getattr(self, "_health_cache", None)
        if cached is not None and cached[0] is image:
            return cached[1]
        partitions = under = offline = 0
        for topic in image.topics.values():
            for state in topic.partitions:
                partitions += 1
                under += len(state.isr) < len(state.replicas)
                offline += state.leader < 0
        counts = (partitions, under, offline)
        self._health_cache = (image, counts)
        return counts

    async def _cluster(self, request: web.Request, body: dict[str, Any]) -> Any:
        image = self._image
        return {
            "broker_id": self._broker_id,
            "metadata_version": image.version,
            "controller_id": self.controller_id(),
            "quorum_voters": [
                {"id": node_id, "raft": raft, "http": http}
                for node_id, raft, http in self.quorum_voters()
            ],
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

    async def _internal_describe_group(self, request: web.Request, body: dict[str, Any]) -> Any:
        return describe_json(self._groups.describe_group(request.match_info["group"]))

    async def _internal_delete_group(self, request: web.Request, body: dict[str, Any]) -> Any:
        error = await self._groups.delete_group(request.match_info["group"])
        return {"error_code": int(error)}


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


def _cleaner_state(partition: Partition) -> dict[str, Any]:
    """This broker's replica of a compacted partition, as the log cleaner sees it: the share
    of its cleanable bytes not cleaned yet, how far it has been cleaned, and when."""
    log = partition.log
    if not isinstance(log, PartitionLog) or log.closed:
        return {"broker": partition.broker_id, "dirty_ratio": None}
    now_ms = time.time_ns() // 1_000_000
    return {
        "broker": partition.broker_id,
        "dirty_ratio": round(dirty_ratio(log.cleaner_view(), partition.high_watermark, now_ms), 4),
        "cleaned_through": log.cleaned_through,
        "last_clean_ms": log.last_clean_ms,
    }


def _offset_at_time(partition: Partition, timestamp: int) -> int:
    """The offset of the first committed message stamped at or after ``timestamp`` (ms), as
    Kafka's ListOffsets finds it; the high watermark if there is none."""
    found = partition.log.offset_for_timestamp(timestamp)
    if found is not None:
        _, batch = found
        for record in decode_records(bytes(batch), verify_crc=False):
            if record.timestamp >= timestamp and record.offset < partition.high_watermark:
                return max(record.offset, partition.log.log_start_offset)
    return partition.high_watermark
