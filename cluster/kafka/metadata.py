"""Metadata and DescribeCluster: topics, partitions and live brokers from this broker's
metadata image, with the addresses of the listener the client came in on; topic
auto-creation (Metadata and the HTTP API)."""

from __future__ import annotations

import uuid
from typing import Any

from flux.protocol.api import RequestHeader
from flux.protocol.errors import ErrorCode

from ..topics import InvalidTopicError, validate_topic_name
from .common import _ZERO_UUID, KafkaApisBase, log

__all__ = ["MetadataApis"]

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
#: A fenced broker stays in Metadata answers' broker list this long after it was fenced.
#: librdkafka (confluent-kafka) decommissions a broker that leaves the list, and when that
#: happens in the same answer that moves its partitions to new leaders, the decommissioning
#: hands those partitions back to no broker: they wait for the client's next 1 s scan
#: (measured: the first acknowledged record after a leader's SIGKILL at 2.0 s instead of
#: 1.0 s). Listed a little longer, the broker leaves in a later answer, once no partition
#: points at it. Kept short: a client that picks any listed broker for a request
#: (kafka-python's admin) fails on a dead one instead of trying another, as it would against
#: Kafka until the dead broker's session times out (9 s there). DescribeCluster lists live
#: brokers only.
FENCED_LISTED_S = 3.0


class MetadataApis(KafkaApisBase):
    """Metadata, DescribeCluster (both dispatched with the client's listener) and topic
    auto-creation."""

    # -- Metadata, DescribeCluster ------------------------------------------------------------

    def _live_brokers(
        self, listener: str, *, recently_fenced: bool = False
    ) -> list[dict[str, Any]]:
        """Live (unfenced) brokers; with ``recently_fenced``, also those fenced in the last
        ``FENCED_LISTED_S`` (what Metadata answers: see FENCED_LISTED_S)."""
        image = self._image
        brokers = []
        listed = set(image.live_broker_ids())
        if recently_fenced:
            listed |= self._lifecycle.recently_fenced(FENCED_LISTED_S) & set(image.brokers)
        for broker_id in sorted(listed):
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
            # An empty name is a name (an invalid one, answered INVALID_TOPIC_EXCEPTION), not
            # a null: the fuzzer's Metadata v8 with "" made the answer name None, which v8
            # cannot encode, and the connection closed with an internal error.
            names = [(item.get("name"), item.get("topic_id")) for item in requested]
        if allow_create and self._config.broker.auto_create_topics:
            await self._auto_create([name for name, _ in names if name])
        return {
            "throttle_time_ms": 0,
            "brokers": self._live_brokers(listener, recently_fenced=True),
            "cluster_id": self._config.node.cluster_id,
            "controller_id": self._controller_id(),
            "topics": [
                _name_not_null(self._topic_metadata(name, topic_id), header.api_version)
                for name, topic_id in names
            ],
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

    async def auto_create_topics(self, names: list[str]) -> None:
        if self._config.broker.auto_create_topics:
            await self._auto_create(names)


def _topic_error(name: str | None, error: ErrorCode, topic_id: uuid.UUID | None) -> dict[str, Any]:
    return {
        "error_code": error,
        "name": name,
        "topic_id": topic_id or _ZERO_UUID,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _name_not_null(topic: dict[str, Any], version: int) -> dict[str, Any]:
    """A topic's answer as ``version`` can encode it: the name is nullable only from v12, so
    an error about a topic asked for by id alone (v10, v11) names it ""."""
    if topic.get("name") is None and version < 12:
        topic["name"] = ""
    return topic
