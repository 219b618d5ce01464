"""Request bodies and response readers of the group APIs, shared by ``Admin`` and
``GroupConsumer`` (pure: no I/O).

Readers raise the typed ``flux.sdk.errors`` exception for the first error code they meet, with
the broker's message when it sent one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flux.protocol.errors import ErrorCode

from .errors import error_for

__all__ = [
    "Offsets",
    "describe_groups_body",
    "offset_commit_body",
    "offset_fetch_body",
    "raise_for",
    "read_described_group",
    "read_offset_commit",
    "read_offset_fetch",
]

#: (topic, partition) -> offset.
Offsets = dict[tuple[str, int], int]


def raise_for(code: int, message: str | None = None, *, context: str | None = None) -> None:
    if code != ErrorCode.NONE:
        error_code = ErrorCode.from_code(code)
        text = message or error_code.message
        raise error_for(error_code, f"{context}: {text}" if context else text)


def describe_groups_body(group_ids: list[str]) -> dict[str, Any]:
    return {"groups": group_ids, "include_authorized_operations": False}


def read_described_group(response: dict[str, Any], version: int, group_id: str) -> dict[str, Any]:
    for group in response["groups"]:
        if group["group_id"] == group_id:
            raise_for(
                group["error_code"], group.get("error_message"), context=f"group {group_id!r}"
            )
            return group
    raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"no DescribeGroups answer for {group_id!r}")


def offset_fetch_body(group_id: str, partitions: Mapping[str, list[int]] | None) -> dict[str, Any]:
    """OffsetFetch (v2-7) for ``partitions``, or every partition the group committed (None)."""
    topics = None
    if partitions is not None:
        topics = [
            {"name": topic, "partition_indexes": sorted(indexes)}
            for topic, indexes in sorted(partitions.items())
        ]
    return {"group_id": group_id, "topics": topics, "require_stable": False}


def read_offset_fetch(response: dict[str, Any], version: int) -> Offsets:
    """Committed offsets; partitions without one (-1) are left out."""
    raise_for(response.get("error_code", 0), context="OffsetFetch")
    committed: Offsets = {}
    for topic in response["topics"]:
        for item in topic["partitions"]:
            where = f"{topic['name']}-{item['partition_index']}"
            raise_for(item["error_code"], context=f"committed offset of {where}")
            if item["committed_offset"] >= 0:
                committed[(topic["name"], item["partition_index"])] = item["committed_offset"]
    return committed


def offset_commit_body(
    group_id: str, *, generation_id: int, member_id: str, offsets: Mapping[tuple[str, int], int]
) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": None,
            }
        )
    return {
        "group_id": group_id,
        "generation_id_or_member_epoch": generation_id,
        "member_id": member_id,
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


def read_offset_commit(response: dict[str, Any], version: int) -> None:
    for topic in response["topics"]:
        for item in topic["partitions"]:
            where = f"{topic['name']}-{item['partition_index']}"
            raise_for(item["error_code"], context=f"committing the offset of {where}")
