"""Produce: appends as partition leader, with acks 0, 1 or all (``acks=all`` waits for the
high watermark), ``min.insync.replicas`` and ``max.message.bytes`` checked first.

A partition this broker does not lead is answered ``NOT_LEADER_OR_FOLLOWER``; from version 10
on (KIP-951) the answer also names the leader this broker knows, with its epoch and its address
on the client's listener, so the client sends the retry there without a metadata round trip
(what a leadership move by a reassignment, a preferred election or a drain costs producers).

A partition whose replica here is offline (its log directory failed: a full disk, EIO, a
read-only file system) is answered KAFKA_STORAGE_ERROR, and so is an append that meets the
I/O error (it takes the directory offline: ``ReplicaManager.fail_log_directory``); nothing
of it was acknowledged, and the client retries on the leader the controller elects next.

A producer's first transactional batch of a transaction at a partition is verified with the
transactional id's coordinator first (KIP-890 part 1, ``broker.
transaction_partition_verification_enable``, ``TransactionCoordinator.verify``): a partition
that was never added to the running transaction is answered ``INVALID_TXN_STATE`` and nothing
is appended, so no transaction opens there that no marker would ever end. A coordinator that
cannot answer yet (moving, loading, the transaction ending) is answered
``NOT_ENOUGH_REPLICAS``, which every client retries, as Kafka maps it; a fenced producer
``INVALID_PRODUCER_EPOCH``."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from flux.protocol.api import RequestHeader
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.record_check import check_records
from flux.protocol.records import (
    is_transactional_batch,
    iter_batches,
    parse_batch_header,
    record_keys,
)
from flux.storage import CorruptBatchError

from ..replication.errors import error_code_for
from ..replication.partition import ProducerRejectedError
from ..replication.replica_manager import Partition
from ..transactions.coordinator import TransactionCoordinator
from .common import KafkaApisBase, log
from .server import Deferred

__all__ = ["ProduceApis"]

_BATCH_LENGTH_OFFSET = 8
_BATCH_OVERHEAD = 12


class RecordValidator(Protocol):
    """A check of the records produced to some topics (``flux.registry.validation``: topics
    whose values must carry a registered schema id), set on ``KafkaApis`` by the node."""

    def enabled(self, config: Any) -> bool: ...

    async def prepare(self, topic: str, records: bytes | memoryview, config: Any) -> None: ...

    def refusal(self, topic: str, records: bytes | memoryview, config: Any) -> str | None: ...


class ProduceApis(KafkaApisBase):
    """Produce, served by a partition's leader."""

    record_validator: RecordValidator | None = None
    _transactions: TransactionCoordinator

    # -- Produce ------------------------------------------------------------------------------

    async def _produce(
        self, header: RequestHeader, body: dict[str, Any], listener: str = ""
    ) -> dict[str, Any] | Deferred | None:
        """Append every batch (in the order requests arrive: nothing here awaits before the
        appends); acks=all answers with a ``Deferred`` response completed by replication."""
        acks = body["acks"]
        targets = self._leaders_of(body)
        if self.record_validator is not None and await self._prepare_validation(targets):
            targets = self._leaders_of(body)  # it awaited: leadership may have moved
        # Last before the appends: nothing awaits between a verification and its append.
        unverified = await self._verify_transactions(body, targets)
        if unverified is not None:
            targets = self._leaders_of(body)
        new_leaders: set[int] = set()
        responses = []
        waiting: list[tuple[dict[str, Any], asyncio.Future[ErrorCode]]] = []
        for name, partitions in targets:
            partition_responses = []
            for partition_data, found in partitions:
                index = partition_data["index"]
                if acks not in (0, 1, -1):
                    partition_responses.append(
                        _partition_result(index, ErrorCode.INVALID_REQUIRED_ACKS)
                    )
                    continue
                if unverified and (name, index) in unverified:
                    partition_responses.append(_partition_result(index, *unverified[name, index]))
                    continue
                if isinstance(found, ErrorCode):
                    result = _partition_result(index, found)
                    if found == ErrorCode.NOT_LEADER_OR_FOLLOWER and header.api_version >= 10:
                        self._name_current_leader(result, name, index, new_leaders)
                    partition_responses.append(result)
                    continue
                result, last_offset = self._append(found, partition_data["records"], acks)
                partition_responses.append(result)
                if acks == -1 and last_offset is not None:
                    waiting.append((result, found.add_delayed_produce(last_offset + 1)))
            responses.append({"name": name, "partition_responses": partition_responses})
        response: dict[str, Any] = {"responses": responses, "throttle_time_ms": 0}
        if new_leaders:
            response["node_endpoints"] = self._node_endpoints(new_leaders, listener)
        if waiting:
            # Appended, in arrival order; the wait for the followers does not hold up the
            # connection's next requests (see cluster.kafka.server).
            return Deferred(self._replicated(waiting, body["timeout_ms"], response))
        if acks == 0:
            return None
        return response

    def _leaders_of(
        self, body: dict[str, Any]
    ) -> list[tuple[str, list[tuple[dict[str, Any], Partition | ErrorCode]]]]:
        """Each topic's partition data with the partition this broker leads (or the error)."""
        return [
            (
                topic_data["name"],
                [
                    (data, self._replicas.partition_for_leader(topic_data["name"], data["index"]))
                    for data in topic_data["partition_data"]
                ],
            )
            for topic_data in body["topic_data"]
        ]

    async def _prepare_validation(
        self, targets: list[tuple[str, list[tuple[dict[str, Any], Partition | ErrorCode]]]]
    ) -> bool:
        """Before any append: let the validator fetch what it needs for the validated topics'
        records (in request order; the appends that follow do not await). Whether it was
        asked at all (then it may have awaited)."""
        validator = self.record_validator
        assert validator is not None
        asked = False
        for _name, partitions in targets:
            for data, found in partitions:
                records = data["records"]
                if isinstance(found, Partition) and records and validator.enabled(found.config):
                    await validator.prepare(found.topic, records, found.config)
                    asked = True
        return asked

    async def _verify_transactions(
        self,
        body: dict[str, Any],
        targets: list[tuple[str, list[tuple[dict[str, Any], Partition | ErrorCode]]]],
    ) -> dict[tuple[str, int], tuple[ErrorCode, str]] | None:
        """Verify with the coordinator each partition where a producer's transactional batch
        would open a transaction (KIP-890): the refused partitions with their error and
        message, or None when no batch needed it (nothing was awaited)."""
        if not self._config.broker.transaction_partition_verification_enable:
            return None
        needed: dict[tuple[int, int], list[tuple[str, int, Partition]]] = {}
        for name, partitions in targets:
            for data, found in partitions:
                records = data["records"]
                if not records or not is_transactional_batch(records):
                    continue
                if not isinstance(found, Partition):
                    continue
                try:
                    header = parse_batch_header(records)
                except CorruptRecordError:
                    continue  # refused by the append's own checks
                if header.is_control or header.producer_id < 0:
                    continue
                if found.producers.in_transaction(header.producer_id):
                    continue  # verified when its transaction began here
                key = (header.producer_id, header.producer_epoch)
                needed.setdefault(key, []).append((name, data["index"], found))
        if not needed:
            return None
        transactional_id = body.get("transactional_id")
        refused: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
        for (producer_id, producer_epoch), entries in needed.items():
            if transactional_id is None:
                for name, index, _partition in entries:
                    refused[name, index] = (
                        ErrorCode.INVALID_TXN_STATE,
                        "a transactional batch needs the request's transactional_id",
                    )
                continue
            tokens = {}
            for name, index, partition in entries:
                tokens[name, index] = partition.txn_verifications[producer_id] = object()
            answer = await self._transactions.verify(
                transactional_id,
                producer_id,
                producer_epoch,
                [(name, index) for name, index, _partition in entries],
            )
            for name, index, partition in entries:
                guarded = partition.txn_verifications.get(producer_id) is tokens[name, index]
                if guarded:
                    del partition.txn_verifications[producer_id]
                code = answer if isinstance(answer, ErrorCode) else answer[name, index]
                if code == ErrorCode.NONE and not guarded:
                    refused[name, index] = (
                        ErrorCode.INVALID_TXN_STATE,
                        f"the transaction of producer {producer_id} ended at {name}-{index} "
                        "while the partition was verified",
                    )
                elif code != ErrorCode.NONE:
                    refused[name, index] = _unverified(code, name, index, producer_id)
        return refused

    def _name_current_leader(
        self, result: dict[str, Any], topic: str, index: int, new_leaders: set[int]
    ) -> None:
        """KIP-951: add the partition's live leader (and epoch) to its error result."""
        found = self._image.topics.get(topic)
        # A negative index (the fuzzer's partition -5) is no partition, not one from the end.
        if found is None or not 0 <= index < len(found.partitions):
            return
        state = found.partitions[index]
        if (
            state.leader < 0
            or state.leader == self._node_id
            or not self._image.is_live(state.leader)
        ):
            return
        result["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
        new_leaders.add(state.leader)

    def _node_endpoints(self, broker_ids: set[int], listener: str) -> list[dict[str, Any]]:
        endpoints = []
        for broker_id in sorted(broker_ids):
            registration = self._image.brokers[broker_id]
            host, port = registration.endpoint(listener)
            endpoints.append(
                {"node_id": broker_id, "host": host, "port": port, "rack": registration.rack}
            )
        return endpoints

    def _replicated(
        self,
        waiting: list[tuple[dict[str, Any], asyncio.Future[ErrorCode]]],
        timeout_ms: int,
        response: dict[str, Any],
    ) -> asyncio.Future[dict[str, Any]]:
        """acks=all: a future of ``response``, done once the high watermark passes every
        appended batch, or at the timeout (REQUEST_TIMED_OUT for the partitions still waiting;
        their data may still be replicated later, as in Kafka). Callbacks, not a task: this
        runs once per acks=all request. Cancelling it (the connection went away) stops the
        partitions' waits."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[dict[str, Any]] = loop.create_future()
        pending = [len(waiting)]

        def finish() -> None:
            timer.cancel()
            for result, future in waiting:
                if not future.done():
                    future.cancel()
                    result["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                    result["error_message"] = "the in-sync replicas did not acknowledge in time"
                elif not future.cancelled() and future.result() != ErrorCode.NONE:
                    result["error_code"] = future.result()
                    result["error_message"] = future.result().message
            if not done.done():
                done.set_result(response)

        def one_done(_future: asyncio.Future[ErrorCode]) -> None:
            pending[0] -= 1
            if pending[0] == 0 and not done.done():
                finish()

        def abandoned(_done: asyncio.Future[dict[str, Any]]) -> None:
            if done.cancelled():
                timer.cancel()
                for _result, future in waiting:
                    future.cancel()

        timeout_s = min(max(timeout_ms, 0), self._config.broker.request_timeout_ms) / 1000
        timer = loop.call_later(timeout_s, finish)
        done.add_done_callback(abandoned)
        for _result, future in waiting:
            future.add_done_callback(one_done)
        return done

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
        invalid = _invalid_records(records)
        if invalid is not None:
            log.warning("rejected batch for %s-%d: %s", partition.topic, index, invalid[1])
            return _partition_result(index, invalid[0], invalid[1]), None
        validator = self.record_validator
        if validator is not None and validator.enabled(config):
            refusal = validator.refusal(partition.topic, records, config)
            if refusal is not None:
                result = _partition_result(index, ErrorCode.INVALID_RECORD, refusal)
                result["record_errors"] = [{"batch_index": 0, "batch_index_error_message": refusal}]
                return result, None
        if config.compacted:
            refused = _keyless_records(records, f"{partition.topic}-{index}")
            if refused is not None:
                result = _partition_result(index, ErrorCode.INVALID_RECORD, refused[1])
                result["record_errors"] = [
                    {"batch_index": refused[0], "batch_index_error_message": refused[1]}
                ]
                return result, None
        try:
            result = self._replicas.append(partition, records)
        except (CorruptBatchError, CorruptRecordError) as error:
            log.warning("rejected batch for %s-%d: %s", partition.topic, index, error)
            return _partition_result(index, ErrorCode.CORRUPT_MESSAGE, str(error)), None
        except ProducerRejectedError as error:
            return _partition_result(index, error.error, str(error)), None
        except OSError as error:  # LogDirectoryError included; the directory is offline now
            log.error("cannot append to %s-%d: %s", partition.topic, index, error)
            return _partition_result(index, error_code_for(error), str(error)), None
        return {
            "index": index,
            "error_code": ErrorCode.NONE,
            "base_offset": result.base_offset,
            "log_append_time_ms": result.log_append_time_ms,
            "log_start_offset": partition.log.log_start_offset,
            "record_errors": [],
            "error_message": None,
        }, result.last_offset


#: Verification errors a client should retry: the coordinator moving, loading or ending the
#: transaction (Kafka maps them to NOT_ENOUGH_REPLICAS, retriable for every client version).
_RETRY_VERIFICATION = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)


def _unverified(code: ErrorCode, topic: str, index: int, producer_id: int) -> tuple[ErrorCode, str]:
    """The produce error and message for a partition the coordinator did not verify."""
    if code in _RETRY_VERIFICATION:
        return (
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"the transaction coordinator could not verify {topic}-{index} yet "
            f"({code.name}): retry",
        )
    if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
        return ErrorCode.INVALID_PRODUCER_EPOCH, f"producer {producer_id} is fenced ({code.name})"
    return (
        ErrorCode.INVALID_TXN_STATE,
        f"{topic}-{index} is not in the running transaction of producer {producer_id} "
        f"({code.name}): add it with AddPartitionsToTxn before producing to it",
    )


def _invalid_records(records: bytes | memoryview) -> tuple[ErrorCode, str] | None:
    """Why a client's batches must not be appended although their framing and CRC may be
    right, as Kafka's ``LogValidator`` checks them: more than one batch, records that do not
    decode (the fuzzer found batches whose record bytes no consumer could read), a record count
    that disagrees with ``lastOffsetDelta`` (the batch would take offsets it has no records
    for), offset deltas out of sequence, and control batches, which only the broker writes.

    Malformed framing is left to the storage's validation, which names the problem. Records
    are checked by ``check_records``: runs of alike records by columns, others by a walk over
    their fields (about 1.5 us per record), a batch they refuse decoded for the error's words:
    the price of never storing what consumers cannot read."""
    try:
        batches = list(iter_batches(records, allow_partial_tail=False))
    except CorruptRecordError:
        return None
    if len(batches) > 1:
        # Kafka's rule for Produce v3+: the answer has one base offset per partition, so a
        # second batch would be appended without the client ever learning its offsets.
        return ErrorCode.INVALID_RECORD, (
            "Produce requests with version 3 or later must contain exactly one record batch"
        )
    for header, batch in batches:
        if header.is_control:
            return ErrorCode.INVALID_RECORD, "clients may not write control batches"
        if header.records_count != header.last_offset_delta + 1:
            return ErrorCode.CORRUPT_MESSAGE, (
                f"recordsCount {header.records_count} does not match lastOffsetDelta "
                f"{header.last_offset_delta}"
            )
        try:
            # The CRC is the storage's to check (``parse_batches`` on append): once is enough.
            check_records(batch)
        except CorruptRecordError as error:
            return ErrorCode.CORRUPT_MESSAGE, str(error)
    return None


def _keyless_records(records: bytes | memoryview, name: str) -> tuple[int, str] | None:
    """(index, Kafka's message) of the first record without a key: a compacted topic keeps
    the newest record per key and refuses records that have none. Malformed batches are left
    to the append, which names the problem."""
    index = 0
    try:
        for _header, batch in iter_batches(records, allow_partial_tail=False):
            for _offset, key, _tombstone, _start, _end in record_keys(batch)[2]:
                if key is None:
                    return index, (
                        f"Compacted topic cannot accept message without key in topic "
                        f"partition {name}."
                    )
                index += 1
    except CorruptRecordError:
        return None
    return None


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
