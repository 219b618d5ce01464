"""Fetch and ListOffsets: reads of a partition's leader up to its high watermark (long-polled
until ``min_bytes``), and offsets by time (earliest, latest or a timestamp); and
OffsetForLeaderEpoch, where a consumer checks its position after a leader change (KIP-320):
the leader answers where the consumer's leader epoch ends in its log (the start of the next
epoch it knows, or its log end for its latest), so a consumer whose position lies past that
knows the log was truncated under it (an unclean election) and resets instead of reading
other records at offsets it believes it read.

A replica whose log directory failed answers KAFKA_STORAGE_ERROR (``partition_for_leader``),
and so does a read that meets an I/O error (which takes the directory offline)."""

from __future__ import annotations

import time
from typing import Any

from flux.protocol.api import RequestHeader
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.records import decode_records, parse_batch_header
from flux.storage import OffsetOutOfRangeError

from ..replication.errors import error_code_for
from ..replication.replica_manager import Partition
from .common import KafkaApisBase, log

__all__ = ["FetchApis"]

EARLIEST_TIMESTAMP = -2
DEBUGGING_REPLICA_ID = -2
LATEST_TIMESTAMP = -1
#: ListOffsets v7+ (KIP-734): the record with the largest timestamp.
MAX_TIMESTAMP = -3


class FetchApis(KafkaApisBase):
    """Fetch, ListOffsets and OffsetForLeaderEpoch, served by a partition's leader (ListOffsets
    from the debugging replica id by any replica)."""

    # -- OffsetForLeaderEpoch -----------------------------------------------------------------

    async def _offset_for_leader_epoch(
        self, header: RequestHeader, body: dict[str, Any]
    ) -> dict[str, Any]:
        topics = []
        for topic in body["topics"]:
            partitions = [
                self._epoch_end_offset(topic["topic"], request) for request in topic["partitions"]
            ]
            topics.append({"topic": topic["topic"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    def _epoch_end_offset(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        """Kafka's ``Partition.lastOffsetForLeaderEpoch`` for a consumer: at the leader only,
        the current leader epoch checked (``FENCED_LEADER_EPOCH`` / ``UNKNOWN_LEADER_EPOCH``);
        the largest epoch at or below the one asked and where it ends, ``-1, -1`` when every
        epoch the log knows is newer."""
        index = request["partition"]
        result = {"error_code": ErrorCode.NONE, "partition": index, "leader_epoch": -1,
                  "end_offset": -1}  # fmt: skip
        found = self._replicas.partition_for_leader(
            name, index, request.get("current_leader_epoch", -1)
        )
        if isinstance(found, ErrorCode):
            result["error_code"] = found
            return result
        epoch, end = found.epochs.end_offset_for(request["leader_epoch"], found.log_end_offset)
        result["leader_epoch"], result["end_offset"] = epoch, end
        return result

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
        for response in responses:
            sent = sum(len(part["records"]) for part in response["partitions"])
            if sent:
                self._replicas.count_read(response["topic"], sent)
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
            last_stable = partition.last_stable_offset
            result["high_watermark"] = high_watermark
            result["last_stable_offset"] = last_stable
            result["log_start_offset"] = partition.log.log_start_offset
            budget = min(request["partition_max_bytes"], max_bytes - total_bytes)
            if budget <= 0 and total_bytes > 0:
                continue
            fetch_offset = request["fetch_offset"]
            try:
                data = partition.log.read(
                    fetch_offset,
                    max(budget, 1),
                    max_offset=last_stable if read_committed else high_watermark,
                )
            except OffsetOutOfRangeError:
                result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                has_error = True
                continue
            except OSError as error:  # LogDirectoryError: the directory is offline now
                log.error("cannot read %s-%d: %s", name, index, error)
                result["error_code"] = error_code_for(error)
                has_error = True
                continue
            result["records"] = data
            if read_committed and data:
                # The aborted transactions the returned batches overlap: the client drops
                # their records (Kafka's collectAbortedTxns).
                result["aborted_transactions"] = [
                    {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
                    for txn in partition.log.txn_index.collect(fetch_offset, _next_offset(data))
                ]
            total_bytes += len(data)
        responses = [{"topic": name, "partitions": parts} for name, parts in by_topic.items()]
        return responses, total_bytes, has_error

    # -- ListOffsets --------------------------------------------------------------------------

    async def _list_offsets(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        topics = []
        # Kafka's debugging replica id: any replica answers from its own log, and "latest"
        # means its log end offset (how tools read a follower's position).
        any_replica = body.get("replica_id", -1) == DEBUGGING_REPLICA_ID
        # isolation_level 1 (read_committed): "latest" is the last stable offset.
        read_committed = body.get("isolation_level", 0) == 1
        for topic in body["topics"]:
            partitions = [
                self._list_offset(
                    topic["name"], request, header.api_version, any_replica, read_committed
                )
                for request in topic["partitions"]
            ]
            topics.append({"name": topic["name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offset(
        self,
        name: str,
        request: dict[str, Any],
        version: int,
        any_replica: bool = False,
        read_committed: bool = False,
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
            if local is not None and local.offline:
                found = ErrorCode.KAFKA_STORAGE_ERROR
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
            if any_replica:
                result["offset"] = partition.log_end_offset
            elif read_committed:
                result["offset"] = partition.last_stable_offset
            else:
                result["offset"] = partition.high_watermark
        elif timestamp < MAX_TIMESTAMP or (timestamp == MAX_TIMESTAMP and version < 7):
            result["error_code"] = ErrorCode.INVALID_REQUEST
            return result
        else:
            try:
                # Like "latest": a reader may not be sent an offset it cannot fetch yet, so the
                # search stops below the last stable offset under read_committed (Kafka's
                # lastFetchableOffset) and below the high watermark otherwise.
                fetchable = partition.last_stable_offset if read_committed else None
                if timestamp == MAX_TIMESTAMP:
                    # The first record carrying the largest timestamp: the first at or after
                    # it. Not readable yet (above the high watermark or last stable offset)
                    # or cut away by DeleteRecords: none (-1), as Kafka answers.
                    timestamp = partition.log.largest_timestamp()
                at = (
                    None
                    if timestamp < 0
                    else self._offset_for_timestamp(partition, timestamp, fetchable)
                )
            except OSError as error:  # LogDirectoryError: the directory is offline now
                log.error("cannot search %s-%d by time: %s", name, index, error)
                result["error_code"] = error_code_for(error)
                return result
            if at is not None:
                result["offset"], result["timestamp"] = at
        if version == 0 and result["offset"] >= 0:
            result["old_style_offsets"] = [result["offset"]]
        return result

    async def _delete_records(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        """DeleteRecords (21): move each partition's log start offset up to the given offset
        (-1: the high watermark); whole segments below it go at once. The leader answers
        with its new log start (Kafka's low watermark) as soon as it moved; followers adopt
        it with their next fetch answer (Kafka waits for them; Flux does not)."""
        topics = []
        for topic in body["topics"]:
            partitions = [
                self._delete_records_of(topic["name"], request) for request in topic["partitions"]
            ]
            topics.append({"name": topic["name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    def _delete_records_of(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        index = request["partition_index"]
        result = {"partition_index": index, "low_watermark": -1, "error_code": ErrorCode.NONE}
        found = self._replicas.partition_for_leader(name, index, -1)
        if isinstance(found, ErrorCode):
            result["error_code"] = found
            return result
        partition = found
        offset = request["offset"]
        if offset == -1:
            offset = partition.high_watermark
        if not 0 <= offset <= partition.high_watermark:
            result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            return result
        try:
            start = partition.log.delete_records_before(offset)
        except OSError as error:  # LogDirectoryError: the directory is offline now
            log.error("DeleteRecords on %s-%d failed: %s", name, index, error)
            result["error_code"] = error_code_for(error)
            return result
        partition.epochs.truncate_from_start(start)
        partition.producers.truncate_before(start)
        partition.on_change(partition)
        partition.notify_sessions(urgent=True)  # followers adopt the new log start now
        result["low_watermark"] = start
        return result

    def _offset_for_timestamp(
        self, partition: Partition, timestamp: int, fetchable: int | None = None
    ) -> tuple[int, int] | None:
        """The first record at or after ``timestamp`` below ``fetchable`` (default: the high
        watermark), as ``(offset, timestamp)``; None if there is none."""
        if fetchable is None:
            fetchable = partition.high_watermark
        found = partition.log.offset_for_timestamp(timestamp)
        if found is None:
            return None
        _, batch = found
        try:
            for record in decode_records(batch):
                if record.timestamp >= timestamp and record.offset < fetchable:
                    return record.offset, record.timestamp
        except CorruptRecordError:
            log.error(
                "batch of %s-%d cannot be decoded for ListOffsets", partition.topic, partition.index
            )
        return None


def _next_offset(data: bytes | memoryview) -> int:
    """The offset after the last batch of ``data`` (whole batches, as a log read returns)."""
    position = 0
    next_offset = 0
    while position < len(data):
        header = parse_batch_header(data, position)
        next_offset = header.base_offset + header.last_offset_delta + 1
        position += header.size
    return next_offset
