"""Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and OffsetDelete, answered
by the broker's ``GroupCoordinator``; creation of ``__consumer_offsets`` and the conversion of
the internal offset topics to compaction.

``__consumer_offsets`` is created compacted (``cleanup.policy=compact``) with Kafka's offsets
topic segment size (``[broker] offsets_topic_segment_bytes``, ``offsets.topic.segment.bytes``),
so the newest commit of every group survives however long the group is idle (see
``groups.coordinator``). Existing ``__consumer_offsets`` and ``__flux_spark_sink`` topics
whose ``cleanup.policy`` lacks ``compact`` get ``cleanup.policy=compact`` through the
controller's ``/controller/configs`` (the path of IncrementalAlterConfigs); nothing else of
their configuration changes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from flux.protocol.api import RequestHeader
from flux.protocol.errors import ErrorCode

from ..groups.coordinator import COMPACTED_INTERNAL_TOPICS, OFFSETS_TOPIC, GroupCoordinator
from .common import KafkaApisBase, log

__all__ = ["GroupApis"]


#: FindCoordinator's key type of a transactional id (0 is a group).
TRANSACTION_KEY_TYPE = 1


class GroupApis(KafkaApisBase):
    """The group coordinator's Kafka APIs (FindCoordinator and JoinGroup are dispatched with
    the client's listener and address)."""

    _groups: GroupCoordinator

    #: TransactionApis's (a mixin of the same ``KafkaApis``); annotated only, so not shadowed.
    find_transaction_coordinators: Callable[
        [list[str], str | None], Awaitable[list[dict[str, Any]]]
    ]

    # -- consumer groups ----------------------------------------------------------------------

    async def _find_coordinator(
        self, header: RequestHeader, body: dict[str, Any], listener: str
    ) -> dict[str, Any]:
        if header.api_version >= 4:
            keys = [(key, body.get("key_type", 0)) for key in body["coordinator_keys"]]
        else:
            keys = [(body["key"], body.get("key_type", 0))]
        if keys and all(key_type == TRANSACTION_KEY_TYPE for _key, key_type in keys):
            answers = await self.find_transaction_coordinators([k for k, _ in keys], listener)
        else:
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
        error, topics = self._groups.fetch_offsets(
            body["group_id"], body.get("topics"), require_stable=bool(body.get("require_stable"))
        )
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

    async def _offset_delete(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        error, topics = await self._groups.delete_offsets(body["group_id"], body["topics"])
        return {"error_code": error, "throttle_time_ms": 0, "topics": topics}

    async def create_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` when this broker's image lacks it (FindCoordinator's
        first call), compacted and replicated like any topic on up to three brokers (an
        existing topic is fine); then convert the internal offset topics that are not
        compacted (``compact_internal_topics``)."""
        if OFFSETS_TOPIC not in self._image.topics:
            live = len(self._image.live_broker_ids())
            await self._forward(
                "POST",
                "/controller/topics",
                {
                    "name": OFFSETS_TOPIC,
                    "num_partitions": self._config.broker.offsets_topic_partitions,
                    "replication_factor": max(1, min(3, live)),
                    "configs": {
                        "cleanup.policy": "compact",
                        "segment.bytes": str(self._config.broker.offsets_topic_segment_bytes),
                    },
                },
            )
        await self.compact_internal_topics()

    async def compact_internal_topics(self) -> bool:
        """Ask the controller for ``cleanup.policy=compact`` on every internal offset topic
        whose policy lacks ``compact``; True when none is left without it. Idempotent."""
        done = True
        for name in COMPACTED_INTERNAL_TOPICS:
            topic = self._image.topics.get(name)
            if topic is None:
                continue
            policy = self._replicas.topic_config(dict(topic.config_dict())).get("cleanup.policy")
            if "compact" in policy:
                continue
            answer = await self._forward(
                "POST",
                "/controller/configs",
                {
                    "resource_type": "topic",
                    "resource_name": name,
                    "changes": {"cleanup.policy": "compact"},
                    "validate_only": False,
                },
            )
            if answer["error_code"] == ErrorCode.NONE:
                log.info("%s converted to cleanup.policy=compact", name)
            else:
                done = False
                log.debug(
                    "converting %s to cleanup.policy=compact failed: %s %s",
                    name,
                    ErrorCode.from_code(answer["error_code"]).name,
                    answer["error_message"],
                )
        return done
