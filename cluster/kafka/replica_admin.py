"""Replica administration: ElectLeaders (preferred or unclean leader elections, decided by the
active controller: ``POST /controller/elect-leaders``), AlterPartitionReassignments (started or
cancelled by the controller: ``POST /controller/reassignments``; see
``flux.controller.handlers.alter_partition_reassignments``), ListPartitionReassignments (from
this broker's metadata image), UnregisterBroker (decided by the controller:
``POST /controller/brokers/unregister``; see ``flux.controller.handlers.unregister_broker``)
and DescribeLogDirs (this broker's log directory, its replicas
and their sizes).

Flux keeps every replica of a broker in one log directory (``node.data_dir``), so
DescribeLogDirs answers one directory, with its disk's total and usable bytes (v4).
"""

from __future__ import annotations

import shutil
from typing import Any

from flux.protocol.api import RequestHeader
from flux.protocol.errors import ErrorCode

from .common import KafkaApisBase

__all__ = ["ReplicaAdminApis"]

#: ElectLeaders' election types (v1+; v0 always means preferred).
ELECTION_TYPES = {0: "preferred", 1: "unclean"}


class ReplicaAdminApis(KafkaApisBase):
    """ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments,
    UnregisterBroker and DescribeLogDirs."""

    # -- reassignments ------------------------------------------------------------------------

    async def _alter_partition_reassignments(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        requested = [
            (topic["name"], item["partition_index"], item.get("replicas"))
            for topic in body["topics"]
            for item in topic["partitions"]
        ]
        answer = await self._forward(
            "POST",
            "/controller/reassignments",
            {"partitions": [[t, p, None if r is None else list(r)] for t, p, r in requested]},
        )
        error = ErrorCode.from_code(answer.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
        outcomes = {(o["topic"], o["partition"]): o for o in answer.get("partitions", [])}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, index, _replicas in requested:
            outcome = outcomes.get((name, index), {})
            by_topic.setdefault(name, []).append(
                {
                    "partition_index": index,
                    "error_code": outcome.get("error_code", error),
                    "error_message": outcome.get("error_message", answer.get("error_message")),
                }
            )
        return {
            "throttle_time_ms": 0,
            "allow_replication_factor_change": True,
            "error_code": ErrorCode.NONE if outcomes else error,
            "error_message": None if outcomes else answer.get("error_message"),
            "responses": [{"name": n, "partitions": p} for n, p in by_topic.items()],
        }

    async def _list_partition_reassignments(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        wanted = body.get("topics")
        chosen = (
            None
            if wanted is None
            else {(t["name"], int(i)) for t in wanted for i in t["partition_indexes"]}
        )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for name, topic in sorted(self._image.topics.items()):
            for index, state in enumerate(topic.partitions):
                if not state.reassigning or (chosen is not None and (name, index) not in chosen):
                    continue
                by_topic.setdefault(name, []).append(
                    {
                        "partition_index": index,
                        "replicas": list(state.replicas),
                        "adding_replicas": list(state.adding),
                        "removing_replicas": list(state.removing),
                    }
                )
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "topics": [{"name": n, "partitions": p} for n, p in by_topic.items()],
        }

    # -- UnregisterBroker ----------------------------------------------------------------------

    async def _unregister_broker(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        answer = await self._forward(
            "POST", "/controller/brokers/unregister", {"broker_id": body["broker_id"]}
        )
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.from_code(
                answer.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
            ),
            "error_message": answer.get("error_message"),
        }

    # -- ElectLeaders -------------------------------------------------------------------------

    async def _elect_leaders(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        kind = ELECTION_TYPES.get(body.get("election_type", 0))
        requested = body.get("topic_partitions")
        partitions = (
            None
            if requested is None
            else [(t["topic"], int(index)) for t in requested for index in t["partitions"]]
        )
        if kind is None:
            return self._election_answer(
                ErrorCode.INVALID_REQUEST, [], partitions, "unknown election type"
            )
        answer = await self._forward(
            "POST",
            "/controller/elect-leaders",
            {
                "type": kind,
                "partitions": None if partitions is None else [list(p) for p in partitions],
            },
        )
        error = ErrorCode.from_code(answer.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
        return self._election_answer(
            error, answer.get("partitions", []), partitions, answer.get("error_message")
        )

    @staticmethod
    def _election_answer(
        error: ErrorCode,
        outcomes: list[dict[str, Any]],
        requested: list[tuple[str, int]] | None,
        message: str | None,
    ) -> dict[str, Any]:
        """Kafka's answer: per partition the controller's outcome; a request-wide failure is
        repeated on every partition asked for (v0 has no top-level error)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        if error != ErrorCode.NONE:
            outcomes = [
                {"topic": t, "partition": p, "error_code": error, "error_message": message}
                for t, p in requested or []
            ]
        for outcome in outcomes:
            by_topic.setdefault(outcome["topic"], []).append(
                {
                    "partition_id": outcome["partition"],
                    "error_code": outcome["error_code"],
                    "error_message": outcome.get("error_message"),
                }
            )
        return {
            "throttle_time_ms": 0,
            "error_code": error if requested is None else ErrorCode.NONE,
            "replica_election_results": [
                {"topic": topic, "partition_result": results} for topic, results in by_topic.items()
            ],
        }

    # -- DescribeLogDirs ----------------------------------------------------------------------

    async def _describe_log_dirs(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        wanted = body.get("topics")
        chosen = (
            None
            if wanted is None
            else {(t["topic"], int(index)) for t in wanted for index in t["partitions"]}
        )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for partition in self._replicas.partitions():
            if chosen is not None and (partition.topic, partition.index) not in chosen:
                continue
            by_topic.setdefault(partition.topic, []).append(
                {
                    "partition_index": partition.index,
                    "partition_size": partition.log.size_bytes,
                    # Kafka: how far the log end is behind the high watermark (0 on a leader).
                    "offset_lag": max(0, partition.high_watermark - partition.log_end_offset),
                    "is_future_key": False,
                }
            )
        directory = self._config.data_dir
        try:
            usage = shutil.disk_usage(directory)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "results": [
                {
                    "error_code": ErrorCode.NONE,
                    "log_dir": str(directory.resolve()),
                    "topics": [
                        {
                            "name": name,
                            "partitions": sorted(parts, key=lambda p: p["partition_index"]),
                        }
                        for name, parts in sorted(by_topic.items())
                    ],
                    "total_bytes": total,
                    "usable_bytes": usable,
                }
            ],
        }
