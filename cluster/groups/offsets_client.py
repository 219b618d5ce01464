"""Committed offsets of any group, from any broker: local when this broker coordinates the
group, otherwise through the coordinator's internal HTTP endpoints.

Push subscriptions keep their positions as the internal consumer group
``__flux_push.<subscription id>`` (so group tooling, lag metrics and the memory-topic cleanup
see them like any group); the pushing broker (a data partition's leader) is usually not that
group's coordinator, hence this client. These memberless groups are exempt from offset
expiration while their subscription exists (``coordinator``).

Thread-safety: one owner, the broker's event loop.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

from flux.protocol.errors import ErrorCode

from ..replication.peers import BrokerPeers, PeerUnavailableError
from .coordinator import GroupCoordinator
from .offsets_records import PUSH_GROUP_PREFIX

__all__ = ["OffsetsClient", "OffsetsUnavailableError", "push_group"]

log = logging.getLogger("flux.cluster.offsets_client")

GATHER_TIMEOUT_S = 3.0


def push_group(subscription_id: str) -> str:
    """The consumer group holding a push subscription's offsets."""
    return PUSH_GROUP_PREFIX + subscription_id


class OffsetsUnavailableError(RuntimeError):
    """The group's coordinator is unknown, did not answer, or refused: ``errors`` holds the
    error codes it answered, if any."""

    def __init__(self, message: str, errors: list[int] | None = None) -> None:
        super().__init__(message)
        self.errors = list(errors or [])


class OffsetsClient:
    def __init__(self, groups: GroupCoordinator, peers: BrokerPeers) -> None:
        self._groups = groups
        self._peers = peers

    def _coordinator(self, group_id: str) -> int:
        coordinator = self._groups.coordinator_of(group_id)
        if coordinator is None:
            raise OffsetsUnavailableError(f"group {group_id}: no coordinator")
        return coordinator

    async def commit(self, group_id: str, offsets: list[tuple[str, int, int]]) -> None:
        """Commit ``(topic, partition, offset)`` triples as a simple (memberless) commit."""
        coordinator = self._coordinator(group_id)
        if coordinator == self._peers.broker_id:
            errors = await self.commit_local(group_id, offsets)
        else:
            try:
                status, body = await self._peers.request(
                    coordinator,
                    "POST",
                    f"/internal/groups/{group_id}/commit",
                    json_body={"offsets": [list(item) for item in offsets]},
                )
            except PeerUnavailableError as error:
                raise OffsetsUnavailableError(str(error)) from None
            errors = body.get("errors", [status]) if isinstance(body, dict) else [status]
            if status != 200 and not errors:
                errors = [status]
        if errors:
            raise OffsetsUnavailableError(f"group {group_id}: commit failed: {errors}", errors)

    async def commit_local(self, group_id: str, offsets: list[tuple[str, int, int]]) -> list[int]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic, index, offset in offsets:
            by_topic.setdefault(topic, []).append(
                {"partition_index": index, "committed_offset": offset, "committed_metadata": ""}
            )
        answer = await self._groups.commit_offsets(
            {
                "group_id": group_id,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
            }
        )
        return [
            int(part["error_code"])
            for topic in answer["topics"]
            for part in topic["partitions"]
            if part["error_code"] != ErrorCode.NONE
        ]

    async def fetch(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every offset ``group_id`` committed, by (topic, partition)."""
        coordinator = self._coordinator(group_id)
        if coordinator == self._peers.broker_id:
            error, topics = self._groups.fetch_offsets(group_id, None)
            if error != ErrorCode.NONE:
                raise OffsetsUnavailableError(f"group {group_id}: error {error.name}")
            return {
                (topic["name"], part["partition_index"]): part["committed_offset"]
                for topic in topics
                for part in topic["partitions"]
            }
        try:
            status, body = await self._peers.request(
                coordinator, "GET", f"/internal/groups/{group_id}/offsets"
            )
        except PeerUnavailableError as error:
            raise OffsetsUnavailableError(str(error)) from None
        if status != 200:
            raise OffsetsUnavailableError(f"group {group_id}: coordinator answered {status}")
        return {(topic, index): offset for topic, index, offset in body["offsets"]}

    async def describe(self, group_id: str) -> dict[str, Any]:
        """The group as its coordinator describes it (``describe_json``)."""
        coordinator = self._coordinator(group_id)
        if coordinator == self._peers.broker_id:
            return describe_json(self._groups.describe_group(group_id))
        try:
            status, body = await self._peers.request(
                coordinator, "GET", f"/internal/groups/{group_id}/describe"
            )
        except PeerUnavailableError as error:
            raise OffsetsUnavailableError(str(error)) from None
        if status != 200 or not isinstance(body, dict):
            raise OffsetsUnavailableError(f"group {group_id}: coordinator answered {status}")
        return body

    async def delete(self, group_id: str) -> None:
        coordinator = self._coordinator(group_id)
        if coordinator == self._peers.broker_id:
            await self._groups.delete_group(group_id)
            return
        try:
            await self._peers.request(coordinator, "DELETE", f"/internal/groups/{group_id}")
        except PeerUnavailableError as error:
            raise OffsetsUnavailableError(str(error)) from None

    async def gather_committed(self) -> tuple[dict[tuple[str, str, int], int], bool]:
        """Every committed offset in the cluster, ``(group, topic, partition) -> offset``, and
        whether the answers covered every ``__consumer_offsets`` partition (when they did not,
        some group's position is unknown and callers must not act as if it were absent)."""
        live = self._groups_image_brokers()
        snapshots = await asyncio.gather(
            *(self._snapshot(broker_id) for broker_id in live), return_exceptions=True
        )
        committed: dict[tuple[str, str, int], int] = {}
        covered: set[int] = set()
        expected = 0
        answered = 0
        for snapshot in snapshots:
            if not isinstance(snapshot, dict):
                continue
            answered += 1
            covered.update(snapshot["offsets_partitions"])
            expected = max(expected, int(snapshot["offsets_partition_count"]))
            for group, topic, index, offset in snapshot["committed"]:
                committed[(group, topic, index)] = offset
        complete = answered == len(live) and covered >= set(range(expected))
        return committed, complete

    def _groups_image_brokers(self) -> list[int]:
        return self._groups.image().live_broker_ids()

    async def _snapshot(self, broker_id: int) -> dict[str, Any]:
        if broker_id == self._peers.broker_id:
            return self._groups.committed_snapshot()
        status, body = await self._peers.request(
            broker_id, "GET", "/internal/committed", timeout_s=GATHER_TIMEOUT_S
        )
        if status != 200 or not isinstance(body, dict):
            raise OffsetsUnavailableError(f"broker {broker_id} answered {status}")
        return body


def describe_json(described: dict[str, Any]) -> dict[str, Any]:
    """A DescribeGroups entry as JSON: state, protocol and members, each member's assignment
    as the base64 of its bytes (for a consumer group, Kafka's ConsumerProtocolAssignment)."""
    return {
        "state": described.get("group_state") or "Dead",
        "protocol_type": described.get("protocol_type", ""),
        "protocol": described.get("protocol_data", ""),
        "members": [
            {
                "member_id": member["member_id"],
                "group_instance_id": member.get("group_instance_id"),
                "client_id": member.get("client_id", ""),
                "client_host": member.get("client_host", ""),
                "assignment_base64": base64.b64encode(
                    bytes(member.get("member_assignment") or b"")
                ).decode(),
            }
            for member in described.get("members", [])
        ],
    }
