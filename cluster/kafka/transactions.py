"""The transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn, answered by the broker's ``TransactionCoordinator``
(``cluster.transactions``), and TxnOffsetCommit, answered by the group coordinator (offsets held
until the transaction's marker reaches the group's offsets partition). FindCoordinator for key
type 1 (transaction) is answered here too, and the admin reads: DescribeTransactions (by each
id's coordinator), ListTransactions (each broker lists the ids it coordinates, as in Kafka)
and DescribeProducers (by each partition's leader, from its producer state)."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from flux.protocol.api import RequestHeader
from flux.protocol.errors import ErrorCode

from ..groups.coordinator import OFFSETS_TOPIC, GroupCoordinator
from ..transactions.coordinator import TXN_TOPIC, TransactionCoordinator
from ..transactions.state import TxnState
from .common import KafkaApisBase

__all__ = ["TransactionApis"]


class TransactionApis(KafkaApisBase):
    """Kafka's transactional producer API, versions 0-3."""

    _transactions: TransactionCoordinator
    _groups: GroupCoordinator

    #: GroupApis's (a mixin of the same ``KafkaApis``); annotated only, so not shadowed.
    create_offsets_topic: Callable[[], Awaitable[None]]

    async def create_transaction_topic(self) -> None:
        """Create ``__transaction_state`` when this broker's image lacks it (the first
        FindCoordinator for a transactional id): compacted, on up to three brokers."""
        if TXN_TOPIC in self._image.topics:
            return
        live = len(self._image.live_broker_ids())
        replication = max(1, min(3, live))
        await self._forward(
            "POST",
            "/controller/topics",
            {
                "name": TXN_TOPIC,
                "num_partitions": self._config.broker.transaction_state_partitions,
                "replication_factor": replication,
                "configs": {
                    "cleanup.policy": "compact",
                    # Kafka's transaction.state.log.min.isr: a decision is on two replicas.
                    "min.insync.replicas": str(min(2, replication)),
                    "segment.bytes": str(self._config.broker.offsets_topic_segment_bytes),
                },
            },
        )

    def verify_txn(self, request: dict[str, Any]) -> dict[str, Any]:
        """A partition leader's verification (KIP-890) at this coordinator, for the internal
        transport: ``{"error": code}`` or ``{"errors": {"topic:partition": code}}``."""
        answer = self._transactions.verify_here(
            str(request["transactional_id"]),
            int(request["producer_id"]),
            int(request["producer_epoch"]),
            [(str(topic), int(index)) for topic, index in request["partitions"]],
        )
        if isinstance(answer, ErrorCode):
            return {"error": int(answer)}
        return {
            "errors": {f"{topic}:{index}": int(code) for (topic, index), code in answer.items()}
        }

    async def write_txn_markers(self, request: dict[str, Any]) -> dict[str, int]:
        """WriteTxnMarkers at this broker (the internal transport's endpoint)."""
        return await self._transactions.write_markers_here(request)

    async def find_transaction_coordinators(
        self, keys: list[str], listener: str | None
    ) -> list[dict[str, Any]]:
        """FindCoordinator entries for transactional ids (key type 1)."""
        await self.create_transaction_topic()
        image = self._image
        answers = []
        for key in keys:
            entry: dict[str, Any] = {
                "key": key, "node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.NONE, "error_message": None,
            }  # fmt: skip
            leader = self._transactions.coordinator_of(key)
            registration = image.brokers.get(leader) if leader is not None else None
            if registration is None or registration.fenced:
                entry["error_code"] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                host, port = registration.endpoint(listener)
                entry.update(node_id=leader, host=host, port=port)
            answers.append(entry)
        return answers

    async def _init_transactional_producer(self, body: dict[str, Any]) -> dict[str, Any]:
        error, producer_id, epoch = await self._transactions.init_producer_id(
            body["transactional_id"],
            body.get("transaction_timeout_ms", 60_000),
            body.get("producer_id", -1),
            body.get("producer_epoch", -1),
        )
        return {
            "throttle_time_ms": 0,
            "error_code": error,
            "producer_id": producer_id,
            "producer_epoch": epoch,
        }

    async def _add_partitions_to_txn(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        requested = [
            (topic["name"], index)
            for topic in body["v3_and_below_topics"]
            for index in topic["partitions"]
        ]
        answer = await self._transactions.add_partitions(
            body["v3_and_below_transactional_id"],
            body["v3_and_below_producer_id"],
            body["v3_and_below_producer_epoch"],
            requested,
        )
        errors = answer if isinstance(answer, dict) else dict.fromkeys(requested, answer)
        if header.api_version < 2:
            # v0-1 clients know PRODUCER_FENCED as INVALID_PRODUCER_EPOCH (KIP-588).
            errors = {
                item: ErrorCode.INVALID_PRODUCER_EPOCH
                if code == ErrorCode.PRODUCER_FENCED
                else code
                for item, code in errors.items()
            }
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (name, index), code in errors.items():
            by_topic.setdefault(name, []).append(
                {"partition_index": index, "partition_error_code": code}
            )
        return {
            "throttle_time_ms": 0,
            "results_by_topic_v3_and_below": [
                {"name": name, "results_by_partition": parts} for name, parts in by_topic.items()
            ],
        }

    async def _add_offsets_to_txn(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        """The group's ``__consumer_offsets`` partition joins the transaction (its marker
        makes the transaction's TxnOffsetCommit offsets visible)."""
        index = self._groups.partition_of(body["group_id"])
        if index is None:
            await self.create_offsets_topic()
            index = self._groups.partition_of(body["group_id"])
        if index is None:
            error: ErrorCode = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            answer = await self._transactions.add_partitions(
                body["transactional_id"],
                body["producer_id"],
                body["producer_epoch"],
                [(OFFSETS_TOPIC, index)],
            )
            error = answer if isinstance(answer, ErrorCode) else answer[(OFFSETS_TOPIC, index)]
        if header.api_version < 2 and error == ErrorCode.PRODUCER_FENCED:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return {"throttle_time_ms": 0, "error_code": error}

    async def _txn_offset_commit(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        return {"throttle_time_ms": 0, **await self._groups.txn_commit_offsets(body)}

    async def _end_txn(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        error = await self._transactions.end_transaction(
            body["transactional_id"], body["producer_id"], body["producer_epoch"], body["committed"]
        )
        if header.api_version < 2 and error == ErrorCode.PRODUCER_FENCED:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return {"throttle_time_ms": 0, "error_code": error}

    # -- admin reads --------------------------------------------------------------------------

    async def _describe_transactions(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        states = []
        for transactional_id in body["transactional_ids"]:
            entry: dict[str, Any] = {
                "error_code": ErrorCode.NONE, "transactional_id": transactional_id,
                "transaction_state": "", "transaction_timeout_ms": 0,
                "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1,
                "topics": [],
            }  # fmt: skip
            if self._transactions.coordinator_of(transactional_id) != self._node_id:
                entry["error_code"] = ErrorCode.NOT_COORDINATOR
            elif (metadata := self._transactions.describe(transactional_id)) is None:
                entry["error_code"] = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            else:
                by_topic: dict[str, list[int]] = {}
                for topic, index in metadata.partitions:
                    by_topic.setdefault(topic, []).append(index)
                entry.update(
                    transaction_state=metadata.state.value,
                    transaction_timeout_ms=metadata.timeout_ms,
                    transaction_start_time_ms=metadata.start_ms,
                    producer_id=metadata.producer_id,
                    producer_epoch=metadata.producer_epoch,
                    topics=[{"topic": t, "partitions": p} for t, p in by_topic.items()],
                )
            states.append(entry)
        return {"throttle_time_ms": 0, "transaction_states": states}

    async def _list_transactions(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        known = {state.value for state in TxnState}
        wanted = set(body.get("state_filters") or [])
        producers = set(body.get("producer_id_filters") or [])
        duration_ms = body.get("duration_filter", -1)
        pattern = body.get("transactional_id_pattern")
        try:
            matcher = re.compile(pattern) if pattern else None
        except re.error:
            return {
                "throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                "unknown_state_filters": [], "transaction_states": [],
            }  # fmt: skip
        now = int(time.time() * 1000)
        listed = [
            {
                "transactional_id": m.transactional_id,
                "producer_id": m.producer_id,
                "transaction_state": m.state.value,
            }
            for m in self._transactions.transactions()
            if (not wanted or m.state.value in wanted)
            and (not producers or m.producer_id in producers)
            and (duration_ms < 0 or (m.start_ms >= 0 and now - m.start_ms >= duration_ms))
            and (matcher is None or matcher.fullmatch(m.transactional_id))
        ]
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "unknown_state_filters": sorted(wanted - known),
            "transaction_states": listed,
        }

    async def _describe_producers(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        topics = []
        for topic in body["topics"]:
            partitions = []
            for index in topic["partition_indexes"]:
                entry: dict[str, Any] = {
                    "partition_index": index, "error_code": ErrorCode.NONE,
                    "error_message": None, "active_producers": [],
                }  # fmt: skip
                found = self._replicas.partition_for_leader(topic["name"], index)
                if isinstance(found, ErrorCode):
                    entry["error_code"] = found
                else:
                    ongoing = found.producers.ongoing_transactions()
                    entry["active_producers"] = [
                        {
                            "producer_id": producer_id,
                            "producer_epoch": producer.producer_epoch,
                            "last_sequence": producer.last_seq if producer.batches else -1,
                            "last_timestamp": producer.last_timestamp_ms,
                            "coordinator_epoch": producer.coordinator_epoch,
                            "current_txn_start_offset": ongoing.get(producer_id, -1),
                        }
                        for producer_id, producer in found.producers.producers().items()
                    ]
                partitions.append(entry)
            topics.append({"name": topic["name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}
