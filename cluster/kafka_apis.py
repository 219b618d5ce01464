"""Kafka request handlers of a broker.

``KafkaApis.handle`` receives the decoded header and body from the listener, answers each API
in the version ranges of ``ADVERTISED_VERSIONS`` (a subset of what the codec implements), and
returns the encoded response frame.

Reads of cluster state (Metadata, DescribeCluster, DescribeConfigs) answer from this broker's
metadata image. Admin writes (CreateTopics, DeleteTopics, CreatePartitions, auto-creation) are
forwarded to the active controller, and answered once this broker's image shows their effect.
Produce, Fetch and ListOffsets are served only by a partition's leader in a compatible leader
epoch; other brokers answer ``NOT_LEADER_OR_FOLLOWER``, a stale client epoch gets
``FENCED_LEADER_EPOCH``. Per-partition problems become per-partition error codes; nothing a
client sends can make the broker drop data it already acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
import uuid
from typing import Any

from flux.controller.image import MetadataImage
from flux.protocol.api import SUPPORTED_VERSIONS, ApiKey, RequestHeader, encode_response
from flux.protocol.errors import CorruptRecordError, ErrorCode, UnsupportedVersionError
from flux.protocol.records import decode_records
from flux.storage import CorruptBatchError, OffsetOutOfRangeError

from .broker_lifecycle import BrokerLifecycle
from .config import NodeConfig
from .controller_client import ControllerClient, ControllerUnavailableError
from .group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from .kafka_server import ConnectionInfo
from .partition import ProducerRejectedError
from .producer_ids import ProducerIdManager, ProducerIdUnavailableError
from .replica_manager import Partition, ReplicaManager
from .topics import InvalidTopicError, validate_topic_name

__all__ = ["ADVERTISED_VERSIONS", "KafkaApis"]

log = logging.getLogger("flux.cluster.apis")

# The APIs this broker answers, each in the codec's full range except where capped below.
_IMPLEMENTED_APIS = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.METADATA,
    ApiKey.API_VERSIONS,
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.FIND_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.LIST_GROUPS,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.DELETE_GROUPS,
)
# ListOffsets v7 adds MAX_TIMESTAMP lookups (-3); InitProducerId v5+ is for transactions 2.0.
# OffsetFetch v8 batches groups; v7 serves every client we test.
_VERSION_CAPS = {ApiKey.LIST_OFFSETS: 6, ApiKey.INIT_PRODUCER_ID: 4, ApiKey.OFFSET_FETCH: 7}
ADVERTISED_VERSIONS: dict[int, tuple[int, int]] = {
    key: (SUPPORTED_VERSIONS[key][0], min(SUPPORTED_VERSIONS[key][1], _VERSION_CAPS.get(key, 99)))
    for key in _IMPLEMENTED_APIS
}

METADATA_PROPAGATION_TIMEOUT_S = 5.0
MAX_PRODUCER_EPOCH = 32767
CONTROLLER_WRITE_TIMEOUT_S = 10.0
EARLIEST_TIMESTAMP = -2
DEBUGGING_REPLICA_ID = -2
LATEST_TIMESTAMP = -1
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5
CONFIG_TYPE_BOOLEAN = 1
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_LONG = 5
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
_ZERO_UUID = uuid.UUID(int=0)
_BATCH_LENGTH_OFFSET = 8
_BATCH_OVERHEAD = 12


class KafkaApis:
    """Answers Kafka requests against this broker's ``ReplicaManager`` and metadata image."""

    def __init__(
        self,
        config: NodeConfig,
        replicas: ReplicaManager,
        controller: ControllerClient,
        lifecycle: BrokerLifecycle,
        producer_ids: ProducerIdManager,
        groups: GroupCoordinator,
    ) -> None:
        self._config = config
        self._replicas = replicas
        self._controller = controller
        self._lifecycle = lifecycle
        self._producer_ids = producer_ids
        self._groups = groups
        self._node_id = config.node.id
        # Metadata, DescribeCluster, FindCoordinator and JoinGroup also need the connection
        # and are dispatched in ``handle``.
        self._handlers = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.SYNC_GROUP: self._sync_group,
            ApiKey.HEARTBEAT: self._heartbeat,
            ApiKey.LEAVE_GROUP: self._leave_group,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.DELETE_GROUPS: self._delete_groups,
        }

    async def handle(
        self, header: RequestHeader, body: dict[str, Any], connection: ConnectionInfo
    ) -> bytes | None:
        low, high = ADVERTISED_VERSIONS.get(header.api_key, (1, 0))
        if not low <= header.api_version <= high:
            raise UnsupportedVersionError(header.api_key, header.api_version, header.correlation_id)
        if header.api_key == ApiKey.JOIN_GROUP:
            response = await self._join_group(header, body, connection.peer)
        elif header.api_key == ApiKey.METADATA:
            # Broker addresses are answered on the listener the client came in on.
            response = await self._metadata(header, body, connection.listener)
        elif header.api_key == ApiKey.DESCRIBE_CLUSTER:
            response = await self._describe_cluster(header, body, connection.listener)
        elif header.api_key == ApiKey.FIND_COORDINATOR:
            response = await self._find_coordinator(header, body, connection.listener)
        else:
            response = await self._handlers[header.api_key](header, body)
        if response is None:
            return None
        return encode_response(header, response)

    @property
    def _image(self) -> MetadataImage:
        return self._replicas.image

    # -- ApiVersions, Metadata, DescribeCluster -----------------------------------------------

    async def _api_versions(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.NONE,
            "api_keys": [
                {"api_key": int(key), "min_version": low, "max_version": high}
                for key, (low, high) in sorted(ADVERTISED_VERSIONS.items())
            ],
            "throttle_time_ms": 0,
        }

    def _live_brokers(self, listener: str) -> list[dict[str, Any]]:
        image = self._image
        brokers = []
        for broker_id in image.live_broker_ids():
            registration = image.brokers[broker_id]
            host, port = registration.endpoint(listener)
            brokers.append(
                {"node_id": broker_id, "host": host, "port": port, "rack": registration.rack}
            )
        return brokers

    def _controller_id(self) -> int:
        """The active controller if it is a live broker (admin clients send their requests
        there); otherwise this broker, which forwards them."""
        active = self._lifecycle.controller_id
        if active is not None and active in self._image.live_broker_ids():
            return active
        return self._node_id

    async def _metadata(
        self, header: RequestHeader, body: dict[str, Any], listener: str
    ) -> dict[str, Any]:
        requested = body.get("topics")
        if header.api_version == 0 and not requested:
            requested = None  # v0: an empty list means every topic
        allow_create = True
        if header.api_version >= 4:
            allow_create = body.get("allow_auto_topic_creation", True)
        if requested is None:
            names: list[tuple[str | None, uuid.UUID | None]] = [
                (name, None) for name in sorted(self._image.topics)
            ]
        else:
            names = [(item.get("name") or None, item.get("topic_id")) for item in requested]
        if allow_create and self._config.broker.auto_create_topics:
            await self._auto_create([name for name, _ in names if name])
        return {
            "throttle_time_ms": 0,
            "brokers": self._live_brokers(listener),
            "cluster_id": self._config.node.cluster_id,
            "controller_id": self._controller_id(),
            "topics": [self._topic_metadata(name, topic_id) for name, topic_id in names],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    async def _auto_create(self, names: list[str]) -> None:
        for name in names:
            if name in self._image.topics:
                continue
            try:
                validate_topic_name(name)
            except InvalidTopicError:
                continue
            answer = await self._forward("POST", "/controller/topics", {"name": name})
            if answer["error_code"] == ErrorCode.NONE:
                log.info("auto-created topic %s", name)

    def _topic_metadata(self, name: str | None, topic_id: uuid.UUID | None) -> dict[str, Any]:
        image = self._image
        if name is None:
            if topic_id is None or topic_id == _ZERO_UUID:
                return _topic_error(None, ErrorCode.INVALID_REQUEST, topic_id)
            topic = image.topic_by_id(str(topic_id))
            if topic is None:
                return _topic_error(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id)
        else:
            topic = image.topics.get(name)
            if topic is None:
                try:
                    validate_topic_name(name)
                except InvalidTopicError:
                    return _topic_error(name, ErrorCode.INVALID_TOPIC_EXCEPTION, None)
                if not self._lifecycle.ready.is_set():
                    # Started but not caught up with the metadata log yet: the topic may well
                    # exist. A retriable error, not "unknown" (which fails sends at once); the
                    # chaos suite saw confluent-kafka fail sends to a just-restarted broker.
                    return _topic_error(name, ErrorCode.LEADER_NOT_AVAILABLE, None)
                return _topic_error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        live = set(image.live_broker_ids())
        return {
            "error_code": ErrorCode.NONE,
            "name": topic.name,
            "topic_id": uuid.UUID(topic.topic_id),
            "is_internal": topic.name.startswith("__"),
            "partitions": [
                {
                    "error_code": (
                        ErrorCode.NONE if state.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
                    ),
                    "partition_index": index,
                    "leader_id": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "replica_nodes": list(state.replicas),
                    "isr_nodes": list(state.isr),
                    "offline_replicas": [r for r in state.replicas if r not in live],
                }
                for index, state in enumerate(topic.partitions)
            ],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    async def _describe_cluster(
        self, header: RequestHeader, body: dict[str, Any], listener: str
    ) -> dict[str, Any]:
        endpoint_type = body.get("endpoint_type", 1)
        response: dict[str, Any] = {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "endpoint_type": endpoint_type,
            "cluster_id": self._config.node.cluster_id,
            "controller_id": self._controller_id(),
            "brokers": [
                {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                for b in self._live_brokers(listener)
            ],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }
        if endpoint_type != 1:
            response["error_code"] = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            response["error_message"] = f"endpoint type {endpoint_type} is not served here"
            response["brokers"] = []
        return response

    async def _forward(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """Send an admin write to the active controller and wait until this broker's metadata
        shows its effect, so the client's next request here sees it."""
        try:
            answer = await self._controller.write(
                method, path, body, timeout_s=CONTROLLER_WRITE_TIMEOUT_S
            )
        except ControllerUnavailableError as error:
            return {"error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": str(error)}
        answer.setdefault("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
        answer.setdefault("error_message", None)
        version = answer.get("version", 0)
        if answer["error_code"] == ErrorCode.NONE and version:
            await self._lifecycle.wait_for_version(version, METADATA_PROPAGATION_TIMEOUT_S)
        return answer

    async def controller_write(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> dict[str, Any]:
        """An admin write at the active controller, answered once this broker's metadata shows
        it (for the HTTP API)."""
        return await self._forward(method, path, body)

    async def auto_create_topics(self, names: list[str]) -> None:
        if self._config.broker.auto_create_topics:
            await self._auto_create(names)

    # -- Produce ------------------------------------------------------------------------------

    async def _produce(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any] | None:
        acks = body["acks"]
        responses = []
        waiting: list[tuple[dict[str, Any], asyncio.Future[ErrorCode]]] = []
        for topic_data in body["topic_data"]:
            name = topic_data["name"]
            partition_responses = []
            for partition_data in topic_data["partition_data"]:
                index = partition_data["index"]
                if acks not in (0, 1, -1):
                    partition_responses.append(
                        _partition_result(index, ErrorCode.INVALID_REQUIRED_ACKS)
                    )
                    continue
                found = self._replicas.partition_for_leader(name, index)
                if isinstance(found, ErrorCode):
                    partition_responses.append(_partition_result(index, found))
                    continue
                result, last_offset = self._append(found, partition_data["records"], acks)
                partition_responses.append(result)
                if acks == -1 and last_offset is not None:
                    waiting.append((result, found.add_delayed_produce(last_offset + 1)))
            responses.append({"name": name, "partition_responses": partition_responses})
        if waiting:
            await self._await_replication(waiting, body["timeout_ms"])
        if acks == 0:
            return None
        return {"responses": responses, "throttle_time_ms": 0}

    async def _await_replication(
        self, waiting: list[tuple[dict[str, Any], asyncio.Future[ErrorCode]]], timeout_ms: int
    ) -> None:
        """acks=all: wait until the high watermark passes every appended batch, or time out
        (REQUEST_TIMED_OUT; the data may still be replicated later, as in Kafka)."""
        timeout_s = min(max(timeout_ms, 0), self._config.broker.request_timeout_ms) / 1000
        futures = [future for _, future in waiting]
        await asyncio.wait(futures, timeout=timeout_s)
        for result, future in waiting:
            if not future.done():
                future.cancel()
                result["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                result["error_message"] = "the in-sync replicas did not acknowledge in time"
            elif future.result() != ErrorCode.NONE:
                result["error_code"] = future.result()
                result["error_message"] = future.result().message

    def _append(
        self, partition: Partition, records: bytes | None, acks: int
    ) -> tuple[dict[str, Any], int | None]:
        """Append as leader: the partition result and, on success, the last offset written."""
        index = partition.index
        config = partition.config
        if not records:
            return _partition_result(index, ErrorCode.CORRUPT_MESSAGE, "no record batches"), None
        min_insync = config.get("min.insync.replicas")
        if acks == -1 and len(partition.state.isr) < min_insync:
            return _partition_result(
                index,
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"in-sync replicas {len(partition.state.isr)} < min.insync.replicas {min_insync}",
            ), None
        oversized = _oversized_batch(records, config.get("max.message.bytes"))
        if oversized is not None:
            return _partition_result(index, ErrorCode.MESSAGE_TOO_LARGE, oversized), None
        try:
            result = self._replicas.append(partition, records)
        except (CorruptBatchError, CorruptRecordError) as error:
            log.warning("rejected batch for %s-%d: %s", partition.topic, index, error)
            return _partition_result(index, ErrorCode.CORRUPT_MESSAGE, str(error)), None
        except ProducerRejectedError as error:
            return _partition_result(index, error.error, str(error)), None
        except OSError as error:
            log.error("cannot append to %s-%d: %s", partition.topic, index, error)
            return _partition_result(index, ErrorCode.KAFKA_STORAGE_ERROR, str(error)), None
        return {
            "index": index,
            "error_code": ErrorCode.NONE,
            "base_offset": result.base_offset,
            "log_append_time_ms": result.log_append_time_ms,
            "log_start_offset": partition.log.log_start_offset,
            "record_errors": [],
            "error_message": None,
        }, result.last_offset

    # -- InitProducerId -----------------------------------------------------------------------

    async def _init_producer_id(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Idempotent producers get a fresh producer id (epoch 0); a producer that names its
        id and epoch (v3+, KIP-360) gets the next epoch of the same id. Transactions are not
        supported yet."""
        response: dict[str, Any] = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE}
        if body.get("transactional_id") is not None:
            response.update(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                producer_id=-1,
                producer_epoch=-1,
            )
            return response
        producer_id = body.get("producer_id", -1)
        producer_epoch = body.get("producer_epoch", -1)
        if producer_id >= 0 and 0 <= producer_epoch < MAX_PRODUCER_EPOCH:
            response.update(producer_id=producer_id, producer_epoch=producer_epoch + 1)
            return response
        try:
            response.update(
                producer_id=await self._producer_ids.next_producer_id(), producer_epoch=0
            )
        except ProducerIdUnavailableError as error:
            log.warning("no producer id for a client: %s", error)
            response.update(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1
            )
        return response

    # -- consumer groups ----------------------------------------------------------------------

    async def _find_coordinator(
        self, header: RequestHeader, body: dict[str, Any], listener: str
    ) -> dict[str, Any]:
        if header.api_version >= 4:
            keys = [(key, body.get("key_type", 0)) for key in body["coordinator_keys"]]
        else:
            keys = [(body["key"], body.get("key_type", 0))]
        answers = await self._groups.find_coordinator(keys, listener)
        if header.api_version >= 4:
            return {"throttle_time_ms": 0, "coordinators": answers}
        answer = answers[0]
        return {"throttle_time_ms": 0, **{k: v for k, v in answer.items() if k != "key"}}

    async def _join_group(
        self, header: RequestHeader, body: dict[str, Any], peer: str = ""
    ) -> dict[str, Any]:
        response = await self._groups.join_group(
            body,
            version=header.api_version,
            client_id=header.client_id or "",
            client_host="/" + peer.rpartition(":")[0],
        )
        return {"throttle_time_ms": 0, **response}

    async def _sync_group(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, **await self._groups.sync_group(body)}

    async def _heartbeat(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": self._groups.heartbeat(body)}

    async def _leave_group(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._groups.leave_group(body, version=header.api_version)
        return {"throttle_time_ms": 0, **response}

    async def _offset_commit(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, **await self._groups.commit_offsets(body)}

    async def _offset_fetch(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        error, topics = self._groups.fetch_offsets(body["group_id"], body.get("topics"))
        if error != ErrorCode.NONE and header.api_version < 2:
            # v0-1 have no top-level error: report it on every partition asked for.
            topics = [
                {
                    "name": topic["name"],
                    "partitions": [
                        {
                            "partition_index": index,
                            "committed_offset": -1,
                            "metadata": "",
                            "error_code": error,
                        }  # fmt: skip
                        for index in topic["partition_indexes"]
                    ],
                }
                for topic in body.get("topics") or []
            ]
        return {"throttle_time_ms": 0, "error_code": error, "topics": topics}

    async def _list_groups(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        groups = self._groups.list_groups()
        states = body.get("states_filter") or []
        if states:
            groups = [g for g in groups if g.get("group_state") in states]
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": groups}

    async def _describe_groups(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "throttle_time_ms": 0,
            "groups": [self._groups.describe_group(group_id) for group_id in body["groups"]],
        }

    async def _delete_groups(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        results = []
        for group_id in body["groups_names"]:
            results.append(
                {"group_id": group_id, "error_code": await self._groups.delete_group(group_id)}
            )
        return {"throttle_time_ms": 0, "results": results}

    async def create_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` (FindCoordinator's first call), replicated like any
        topic on up to three brokers; an existing topic is fine."""
        live = len(self._image.live_broker_ids())
        await self._forward(
            "POST",
            "/controller/topics",
            {
                "name": OFFSETS_TOPIC,
                "num_partitions": self._config.broker.offsets_topic_partitions,
                "replication_factor": max(1, min(3, live)),
                "configs": {},
            },
        )

    # -- Fetch --------------------------------------------------------------------------------

    async def _fetch(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("session_id", 0) != 0:
            return {
                "throttle_time_ms": 0,
                "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                "session_id": 0,
                "responses": [],
            }
        broker = self._config.broker
        max_wait_s = min(max(body["max_wait_ms"], 0), broker.request_timeout_ms) / 1000
        min_bytes = max(body["min_bytes"], 0)
        max_bytes = min(body.get("max_bytes", broker.fetch_max_bytes), broker.fetch_max_bytes)
        read_committed = body.get("isolation_level", 0) == 1
        deadline = time.monotonic() + max_wait_s
        requests = [
            (topic["topic"], partition)
            for topic in body["topics"]
            for partition in topic["partitions"]
        ]
        while True:
            responses, total_bytes, has_error = self._read_partitions(
                requests, max_bytes, read_committed
            )
            remaining_s = deadline - time.monotonic()
            if total_bytes >= min_bytes or has_error or remaining_s <= 0:
                break
            partitions = [
                found
                for name, request in requests
                if isinstance(
                    found := self._replicas.partition_for_leader(name, request["partition"]),
                    Partition,
                )
            ]
            await self._replicas.wait_for_data(partitions, remaining_s)
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "session_id": 0,
            "responses": responses,
        }

    def _read_partitions(
        self, requests: list[tuple[str, dict[str, Any]]], max_bytes: int, read_committed: bool
    ) -> tuple[list[dict[str, Any]], int, bool]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        total_bytes = 0
        has_error = False
        for name, request in requests:
            index = request["partition"]
            result: dict[str, Any] = {
                "partition_index": index,
                "error_code": ErrorCode.NONE,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": [] if read_committed else None,
                "preferred_read_replica": -1,
                "records": b"",
            }
            by_topic.setdefault(name, []).append(result)
            found = self._replicas.partition_for_leader(
                name, index, request.get("current_leader_epoch", -1)
            )
            if isinstance(found, ErrorCode):
                result["error_code"] = found
                has_error = True
                continue
            partition = found
            high_watermark = partition.high_watermark
            result["high_watermark"] = high_watermark
            result["last_stable_offset"] = high_watermark
            result["log_start_offset"] = partition.log.log_start_offset
            budget = min(request["partition_max_bytes"], max_bytes - total_bytes)
            if budget <= 0 and total_bytes > 0:
                continue
            try:
                data = partition.log.read(
                    request["fetch_offset"], max(budget, 1), max_offset=high_watermark
                )
            except OffsetOutOfRangeError:
                result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                has_error = True
                continue
            except OSError as error:
                log.error("cannot read %s-%d: %s", name, index, error)
                result["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                has_error = True
                continue
            result["records"] = data
            total_bytes += len(data)
        responses = [{"topic": name, "partitions": parts} for name, parts in by_topic.items()]
        return responses, total_bytes, has_error

    # -- ListOffsets --------------------------------------------------------------------------

    async def _list_offsets(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        topics = []
        # Kafka's debugging replica id: any replica answers from its own log, and "latest"
        # means its log end offset (how tools read a follower's position).
        any_replica = body.get("replica_id", -1) == DEBUGGING_REPLICA_ID
        for topic in body["topics"]:
            partitions = [
                self._list_offset(topic["name"], request, header.api_version, any_replica)
                for request in topic["partitions"]
            ]
            topics.append({"name": topic["name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offset(
        self, name: str, request: dict[str, Any], version: int, any_replica: bool = False
    ) -> dict[str, Any]:
        index = request["partition_index"]
        result: dict[str, Any] = {
            "partition_index": index,
            "error_code": ErrorCode.NONE,
            "old_style_offsets": [],
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": -1,
        }
        if any_replica:
            local = self._replicas.partition(name, index)
            found = local if local is not None else ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            found = self._replicas.partition_for_leader(
                name, index, request.get("current_leader_epoch", -1)
            )
        if isinstance(found, ErrorCode):
            result["error_code"] = found
            return result
        partition = found
        result["leader_epoch"] = partition.leader_epoch
        timestamp = request["timestamp"]
        if timestamp == EARLIEST_TIMESTAMP:
            result["offset"] = partition.log.log_start_offset
        elif timestamp == LATEST_TIMESTAMP:
            result["offset"] = partition.log_end_offset if any_replica else partition.high_watermark
        elif timestamp < 0:
            result["error_code"] = ErrorCode.INVALID_REQUEST
            return result
        else:
            at = self._offset_for_timestamp(partition, timestamp)
            if at is not None:
                result["offset"], result["timestamp"] = at
        if version == 0 and result["offset"] >= 0:
            result["old_style_offsets"] = [result["offset"]]
        return result

    def _offset_for_timestamp(self, partition: Partition, timestamp: int) -> tuple[int, int] | None:
        found = partition.log.offset_for_timestamp(timestamp)
        if found is None:
            return None
        _, batch = found
        try:
            for record in decode_records(batch):
                if record.timestamp >= timestamp and record.offset < partition.high_watermark:
                    return record.offset, record.timestamp
        except CorruptRecordError:
            log.error(
                "batch of %s-%d cannot be decoded for ListOffsets", partition.topic, partition.index
            )
        return None

    # -- CreateTopics, DeleteTopics, CreatePartitions -----------------------------------------

    async def _create_topics(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        seen: dict[str, int] = {}
        for topic in body["topics"]:
            seen[topic["name"]] = seen.get(topic["name"], 0) + 1
        results = []
        for topic in body["topics"]:
            if seen[topic["name"]] > 1:
                results.append(
                    _create_result(topic["name"], ErrorCode.INVALID_REQUEST, "topic named twice")
                )
                continue
            validate_only = body.get("validate_only", False)
            results.append(await self._create_topic(topic, validate_only=validate_only))
        return {"throttle_time_ms": 0, "topics": results}

    async def _create_topic(self, topic: dict[str, Any], *, validate_only: bool) -> dict[str, Any]:
        name = topic["name"]
        configs = {item["name"]: item["value"] for item in topic.get("configs") or []}
        assignments = {
            str(item["partition_index"]): list(item["broker_ids"])
            for item in topic.get("assignments") or []
        }
        answer = await self._forward(
            "POST",
            "/controller/topics",
            {
                "name": name,
                "num_partitions": topic["num_partitions"],
                "replication_factor": topic["replication_factor"],
                "assignments": assignments or None,
                "configs": configs,
                "validate_only": validate_only,
            },
        )
        result = _create_result(name, ErrorCode(answer["error_code"]), answer["error_message"])
        if answer["error_code"] != ErrorCode.NONE:
            return result
        config = self._replicas.topic_config(configs)
        topic_id = answer.get("topic_id")
        result.update(
            topic_id=uuid.UUID(topic_id) if topic_id and not validate_only else _ZERO_UUID,
            num_partitions=answer.get("num_partitions", -1),
            replication_factor=answer.get("replication_factor", -1),
            configs=[
                {
                    "name": key,
                    "value": value,
                    "read_only": False,
                    "config_source": (
                        CONFIG_SOURCE_TOPIC if key in config.overrides else CONFIG_SOURCE_DEFAULT
                    ),
                    "is_sensitive": False,
                }
                for key, value in sorted(config.values.items())
            ],
        )
        return result

    async def _delete_topics(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        if header.api_version >= 6:
            wanted = [(item.get("name"), item.get("topic_id")) for item in body["topics"]]
        else:
            wanted = [(name, None) for name in body["topic_names"]]
        responses = []
        for name, topic_id in wanted:
            response: dict[str, Any] = {
                "name": name,
                "topic_id": topic_id or _ZERO_UUID,
                "error_code": ErrorCode.NONE,
                "error_message": None,
            }
            responses.append(response)
            if not name and topic_id not in (None, _ZERO_UUID):
                by_id = self._image.topic_by_id(str(topic_id))
                if by_id is None:
                    response["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
                    continue
                name = response["name"] = by_id.name
            existing = self._image.topics.get(name) if name else None
            if existing is not None:
                response["topic_id"] = uuid.UUID(existing.topic_id)
            answer = await self._forward("DELETE", f"/controller/topics/{_quote(name or '')}", None)
            response["error_code"] = answer["error_code"]
            response["error_message"] = answer["error_message"]
            if answer["error_code"] == ErrorCode.NONE:
                log.info("deleted topic %s", name)
        return {"throttle_time_ms": 0, "responses": responses}

    async def _create_partitions(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        results = []
        for topic in body["topics"]:
            assignments = topic.get("assignments")
            answer = await self._forward(
                "POST",
                f"/controller/topics/{_quote(topic['name'])}/partitions",
                {
                    "count": topic["count"],
                    "assignments": (
                        [list(item["broker_ids"]) for item in assignments] if assignments else None
                    ),
                    "validate_only": body.get("validate_only", False),
                },
            )
            results.append(
                {
                    "name": topic["name"],
                    "error_code": answer["error_code"],
                    "error_message": answer["error_message"],
                }
            )
        return {"throttle_time_ms": 0, "results": results}

    # -- DescribeConfigs ----------------------------------------------------------------------

    async def _describe_configs(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        results = []
        for resource in body["resources"]:
            results.append(self._describe_resource(resource, header.api_version))
        return {"throttle_time_ms": 0, "results": results}

    def _describe_resource(self, resource: dict[str, Any], version: int) -> dict[str, Any]:
        kind = resource["resource_type"]
        name = resource["resource_name"]
        result: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resource_type": kind,
            "resource_name": name,
            "configs": [],
        }
        if kind == RESOURCE_TOPIC:
            topic = self._image.topics.get(name)
            if topic is None:
                result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result["error_message"] = f"topic {name!r} does not exist"
                return result
            config = self._replicas.topic_config(dict(topic.config_dict()))
            entries = [
                (
                    key,
                    value,
                    CONFIG_SOURCE_TOPIC if key in config.overrides else CONFIG_SOURCE_DEFAULT,
                    False,
                )
                for key, value in sorted(config.values.items())
            ]
        elif kind == RESOURCE_BROKER:
            if name not in ("", str(self._node_id)):
                result["error_code"] = ErrorCode.INVALID_REQUEST
                result["error_message"] = f"broker {name!r} is not this broker ({self._node_id})"
                return result
            entries = [
                (key, value, CONFIG_SOURCE_STATIC_BROKER, True)
                for key, value in self._broker_configs()
            ]
        else:
            result["error_code"] = ErrorCode.INVALID_REQUEST
            result["error_message"] = f"resource type {kind} is not supported"
            return result
        keys = resource.get("configuration_keys")
        if keys is not None:
            entries = [entry for entry in entries if entry[0] in set(keys)]
        result["configs"] = [
            {
                "name": key,
                "value": value,
                "read_only": read_only,
                "is_default": source == CONFIG_SOURCE_DEFAULT,
                "config_source": source,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": _config_type(value),
                "documentation": None,
            }
            for key, value, source, read_only in entries
        ]
        return result

    def _broker_configs(self) -> list[tuple[str, str]]:
        config = self._config
        pairs = {
            "broker.id": config.node.id,
            "log.dirs": str(config.data_dir),
            "auto.create.topics.enable": config.broker.auto_create_topics,
            "message.max.bytes": config.broker.message_max_bytes,
            "socket.request.max.bytes": config.broker.socket_request_max_bytes,
            "num.partitions": config.topic.partitions,
            "default.replication.factor": config.topic.replication_factor,
            "min.insync.replicas": config.topic.min_insync_replicas,
            "log.retention.ms": config.topic.retention_ms,
            "log.retention.bytes": config.topic.retention_bytes,
            "log.segment.bytes": config.topic.segment_bytes,
            "log.roll.ms": config.topic.segment_ms,
            "log.flush.interval.messages": config.topic.flush_messages,
            "log.flush.interval.ms": config.topic.flush_ms,
            "log.retention.check.interval.ms": config.broker.retention_check_interval_ms,
        }
        return [
            (key, str(value).lower() if isinstance(value, bool) else str(value))
            for key, value in sorted(pairs.items())
        ]


def _config_type(value: str) -> int:
    if value in ("true", "false"):
        return CONFIG_TYPE_BOOLEAN
    try:
        int(value)
    except ValueError:
        return CONFIG_TYPE_STRING
    return CONFIG_TYPE_LONG


def _oversized_batch(records: bytes | memoryview, limit: int) -> str | None:
    """Describe the first batch larger than ``limit`` bytes, or return None."""
    view = memoryview(records)
    position = 0
    while position + _BATCH_OVERHEAD <= len(view):
        size = int.from_bytes(
            view[position + _BATCH_LENGTH_OFFSET : position + _BATCH_OVERHEAD], "big", signed=True
        )
        size += _BATCH_OVERHEAD
        if size > limit:
            return f"record batch of {size} bytes exceeds max.message.bytes {limit}"
        if size <= _BATCH_OVERHEAD:
            return None  # malformed framing: storage validation names the problem
        position += size
    return None


def _partition_result(index: int, error: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": error,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": message,
    }


def _topic_error(name: str | None, error: ErrorCode, topic_id: uuid.UUID | None) -> dict[str, Any]:
    return {
        "error_code": error,
        "name": name,
        "topic_id": topic_id or _ZERO_UUID,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _create_result(name: str, error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": _ZERO_UUID,
        "error_code": error,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }
