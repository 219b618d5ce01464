"""``SimpleProducer`` and ``SimpleConsumer``: one request per call, no background threads.

    with SimpleProducer("127.0.0.1:9092") as producer:
        metadata = producer.send("orders", b"paid", key=b"order-17")
    with SimpleConsumer("127.0.0.1:9092") as consumer:
        for record in consumer.read_all("orders"):
            print(record.offset, record.value)

The producer builds one record batch per ``send`` (``build_batch``) and routes it to the
partition leader: by Kafka's murmur2 partitioner for a key (the same partition any Kafka client
picks), round-robin over the partitions for records without one. Routing errors and lost
connections are retried by ``ClusterClient``; without idempotence a batch retried after a lost
connection may be written twice. The batching, idempotent async producer replaces this one for
throughput; these classes exist for tools, tests and scripts.

With ``idempotent=True`` the producer gets a producer id (InitProducerId) on its first send,
numbers each partition's records with sequence numbers, forces ``acks=-1`` and retries the
*same* batch (same sequence) on lost connections, leader moves and the broker's retriable
replication errors: the leader recognises a batch it already wrote and answers with its
offset instead of writing it again. When a send fails for good, whether the batch was written
is unknown; the producer then takes a new producer id, so later batches cannot be mistaken
for it.

Thread-safety: none; one instance per thread.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flux.protocol.api import ApiKey
from flux.protocol.errors import CorruptRecordError, ErrorCode
from flux.protocol.partitioner import partition_for_key
from flux.protocol.records import RecordInput, RecordSpec, build_batch, decode_records, iter_batches

from . import limits
from .admin import list_offsets
from .cluster_client import COORDINATOR_RETRY_CODES, LEADER_RETRY_CODES, ClusterClient
from .errors import ConfigurationError, FluxError, FluxProtocolError, error_for
from .metadata import RetryPolicy

__all__ = [
    "ConsumedRecord",
    "HeadersInput",
    "RecordMetadata",
    "SimpleConsumer",
    "SimpleProducer",
]

HeadersInput = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]]

_EARLIEST_TIMESTAMP = -2
_LATEST_TIMESTAMP = -1
#: Sequence numbers are int32 and wrap to 0 after the largest (as in Kafka).
_SEQUENCE_MODULUS = 1 << 31
#: An idempotent batch is also retried on these: the broker deduplicates the second copy.
IDEMPOTENT_RETRY_CODES = LEADER_RETRY_CODES | frozenset(
    {
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a sent record landed; ``offset`` is -1 with ``acks=0`` (nobody answers)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _as_bytes(data: bytes | str | None) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise ConfigurationError(f"expected bytes, str or None, got {type(data).__name__}")


def _headers(headers: HeadersInput | None) -> tuple[tuple[str, bytes | None], ...]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(name), _as_bytes(value)) for name, value in items)


@dataclass(frozen=True, slots=True)
class _PreparedBatch:
    """A Produce request for one batch, built once so every retry sends the same bytes."""

    topic: str
    partition: int
    body: dict[str, Any]


class SimpleProducer:
    """Sends one batch per call to the partition leader and waits for the acknowledgement.

    ``acks`` defaults to 1, or -1 with ``idempotent`` (which requires -1)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        acks: int | None = None,
        client_id: str = "flux-producer",
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        allow_auto_topic_creation: bool = True,
        idempotent: bool = False,
    ) -> None:
        if acks is None:
            acks = -1 if idempotent else 1
        if acks not in (-1, 0, 1):
            raise ConfigurationError(f"acks must be -1 (all), 0 or 1, got {acks}")
        if idempotent and acks != -1:
            raise ConfigurationError(f"an idempotent producer needs acks=-1 (all), got {acks}")
        self.acks = acks
        self.idempotent = idempotent
        self._producer_id = -1
        self._producer_epoch = -1
        self._sequences: dict[tuple[str, int], int] = {}
        self.timeout_s = timeout_s
        self.client = ClusterClient(
            bootstrap,
            client_id=client_id,
            request_timeout_s=min(timeout_s, limits.REQUEST_TIMEOUT_S),
            retry=RetryPolicy(timeout_s=timeout_s),
            allow_auto_topic_creation=allow_auto_topic_creation,
        )
        self._round_robin: dict[str, int] = {}

    def __enter__(self) -> SimpleProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def partition_for(self, topic: str, key: bytes | str | None) -> int:
        """murmur2 of the key modulo the partition count; round-robin when ``key`` is None."""
        count = self.client.partition_count(topic)
        encoded = _as_bytes(key)
        if encoded is not None:
            return partition_for_key(encoded, count)
        turn = self._round_robin.get(topic, 0)
        self._round_robin[topic] = turn + 1
        return turn % count

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        *,
        key: bytes | str | None = None,
        headers: HeadersInput | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and wait for the leader's acknowledgement (per ``acks``)."""
        if partition is None:
            partition = self.partition_for(topic, key)
        record = RecordSpec(_as_bytes(key), _as_bytes(value), _headers(headers), timestamp_ms)
        offset = self.send_batch(topic, partition, [record])
        return RecordMetadata(topic, partition, offset)

    def send_batch(self, topic: str, partition: int, records: Sequence[RecordInput]) -> int:
        """Send ``records`` as one batch to ``topic``-``partition``; return its base offset
        (-1 with ``acks=0``)."""
        if not records:
            raise ConfigurationError("send_batch needs at least one record")
        if len(records) > limits.SEND_BATCH_RECORDS_MAX:
            raise ConfigurationError(
                f"{len(records)} records exceed the batch limit of {limits.SEND_BATCH_RECORDS_MAX}"
            )
        prepared = self._prepare(topic, partition, records)
        if self.acks == 0:
            self.client.call_leader(
                topic,
                partition,
                ApiKey.PRODUCE,
                prepared.body,
                lambda _r, _v: None,
                expect_response=False,
            )
            return -1
        return self._deliver(prepared)

    def _prepare(
        self, topic: str, partition: int, records: Sequence[RecordInput]
    ) -> _PreparedBatch:
        """Build the batch; an idempotent producer numbers it with the partition's next
        sequence numbers (consumed here, whatever the delivery's outcome)."""
        if self.idempotent:
            self._ensure_producer_id()
            key = (topic, partition)
            sequence = self._sequences.get(key, 0)
            batch = build_batch(
                records,
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                base_sequence=sequence,
            )
            self._sequences[key] = (sequence + len(records)) % _SEQUENCE_MODULUS
        else:
            batch = build_batch(records)
        body = {
            "transactional_id": None,
            "acks": self.acks,
            "timeout_ms": int(self.timeout_s * 1000),
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
            ],
        }
        return _PreparedBatch(topic, partition, body)

    def _deliver(self, prepared: _PreparedBatch) -> int:
        """Send a prepared batch, retried as the producer's mode allows; its base offset."""
        if not self.idempotent:
            return self.client.call_leader(
                prepared.topic,
                prepared.partition,
                ApiKey.PRODUCE,
                prepared.body,
                lambda response, _: _base_offset(response),
            )
        try:
            return self.client.call_leader(
                prepared.topic,
                prepared.partition,
                ApiKey.PRODUCE,
                prepared.body,
                lambda response, _: _base_offset(response, duplicate_ok=True),
                retry_codes=IDEMPOTENT_RETRY_CODES,
            )
        except FluxError:
            # Written or not, nobody knows: a fresh producer id keeps later sequences apart.
            self._producer_id = -1
            self._producer_epoch = -1
            self._sequences.clear()
            raise

    def _ensure_producer_id(self) -> None:
        if self._producer_id >= 0:
            return
        body = {
            "transactional_id": None,
            "transaction_timeout_ms": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        }

        def read(response: dict[str, Any], _: int) -> tuple[int, int]:
            code = ErrorCode.from_code(response["error_code"])
            if code is not ErrorCode.NONE:
                raise error_for(code, f"InitProducerId: {code.message}")
            return int(response["producer_id"]), int(response["producer_epoch"])

        self._producer_id, self._producer_epoch = self.client.call_any(
            ApiKey.INIT_PRODUCER_ID, body, read, retry_codes=COORDINATOR_RETRY_CODES
        )
        self._sequences.clear()


def _base_offset(response: dict[str, Any], *, duplicate_ok: bool = False) -> int:
    """The base offset of the one batch sent; with ``duplicate_ok`` a batch the broker had
    already written (DUPLICATE_SEQUENCE_NUMBER) counts as delivered."""
    (topic,) = response["responses"]
    (result,) = topic["partition_responses"]
    code = result["error_code"]
    if duplicate_ok and code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
        return int(result["base_offset"])
    if code != ErrorCode.NONE:
        error_code = ErrorCode.from_code(code)
        message = result.get("error_message") or (
            f"{topic['name']}-{result['index']}: {error_code.message}"
        )
        raise error_for(error_code, message)
    return int(result["base_offset"])


class SimpleConsumer:
    """Reads partitions by explicit offsets (no group, no committed offsets)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "flux-consumer",
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        read_committed: bool = False,
    ) -> None:
        self.timeout_s = timeout_s
        self.client = ClusterClient(
            bootstrap,
            client_id=client_id,
            # A long-polling fetch must get its answer before the socket gives up.
            request_timeout_s=limits.REQUEST_TIMEOUT_S + limits.FETCH_WAIT_MS_MAX / 1000,
            retry=RetryPolicy(timeout_s=timeout_s),
        )
        self._isolation_level = 1 if read_committed else 0

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def partitions(self, topic: str) -> list[int]:
        return list(range(self.client.partition_count(topic)))

    def high_watermarks(self, topic: str) -> dict[int, int]:
        return list_offsets(self.client, topic, _LATEST_TIMESTAMP)

    def earliest_offsets(self, topic: str) -> dict[int, int]:
        return list_offsets(self.client, topic, _EARLIEST_TIMESTAMP)

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
    ) -> list[ConsumedRecord]:
        """Records of ``topic``-``partition`` from ``offset`` on, as many as one fetch of
        ``max_bytes`` returns; waits up to ``max_wait_ms`` for data when there is none.

        Records below ``offset`` in the first batch (a batch is returned whole) are skipped,
        and so are control batches. ``OffsetOutOfRangeError`` if ``offset`` is outside the log.
        """
        if not 1 <= max_bytes <= limits.FETCH_BYTES_MAX:
            raise ConfigurationError(f"max_bytes must be in 1..{limits.FETCH_BYTES_MAX}")
        if not 0 <= max_wait_ms <= limits.FETCH_WAIT_MS_MAX:
            raise ConfigurationError(f"max_wait_ms must be in 0..{limits.FETCH_WAIT_MS_MAX}")
        body = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": self._isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        return self.client.call_leader(
            topic,
            partition,
            ApiKey.FETCH,
            body,
            lambda response, _: _fetched_records(response, topic, partition, offset),
        )

    def read_all(self, topic: str, *, from_beginning: bool = True) -> Iterator[ConsumedRecord]:
        """Every record of every partition, partition by partition, up to the high watermarks
        at call time. From the log start offsets, or with ``from_beginning=False`` from the
        high watermarks (so only records appended before the end offsets are read: none)."""
        ends = self.high_watermarks(topic)
        starts = self.earliest_offsets(topic) if from_beginning else dict(ends)
        for partition, end in ends.items():
            position = starts[partition]
            while position < end:
                records = self.fetch(topic, partition, position, max_wait_ms=0)
                if not records:
                    raise FluxProtocolError(
                        f"fetch of {topic}-{partition} at {position} below the high watermark "
                        f"{end} returned no records"
                    )
                for record in records:
                    if record.offset >= end:
                        break
                    yield record
                position = records[-1].offset + 1


def _fetched_records(
    response: dict[str, Any], topic: str, partition: int, offset: int
) -> list[ConsumedRecord]:
    code = response.get("error_code", ErrorCode.NONE)
    if code != ErrorCode.NONE:
        raise error_for(code)
    (topic_result,) = response["responses"]
    (result,) = topic_result["partitions"]
    code = result["error_code"]
    if code != ErrorCode.NONE:
        error_code = ErrorCode.from_code(code)
        raise error_for(error_code, f"{topic}-{partition} at offset {offset}: {error_code.message}")
    return decode_fetched(result["records"], topic, partition, offset)


def decode_fetched(
    records_data: bytes | None, topic: str, partition: int, offset: int
) -> list[ConsumedRecord]:
    """The records of one partition's Fetch answer from ``offset`` on (control batches and
    records below ``offset`` skipped). ``FluxProtocolError`` for a corrupt batch."""
    records: list[ConsumedRecord] = []
    try:
        for header, batch in iter_batches(records_data or b""):
            if header.is_control or header.next_offset <= offset:
                continue
            for record in decode_records(batch):
                if record.offset >= offset:
                    records.append(
                        ConsumedRecord(
                            topic,
                            partition,
                            record.offset,
                            record.timestamp,
                            record.key,
                            record.value,
                            tuple(record.headers),
                        )
                    )
    except CorruptRecordError as error:
        raise FluxProtocolError(f"{topic}-{partition}: corrupt record batch: {error}") from error
    return records
