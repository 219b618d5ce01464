"""``SimpleProducer`` and ``SimpleConsumer``: one call, one request — thin blocking wrappers
over the SDK for scripts, tools and fault tests that want to see each attempt.

    with SimpleProducer("127.0.0.1:9092") as producer:
        metadata = producer.send("orders", b"paid", key=b"order-17")
    with SimpleConsumer("127.0.0.1:9092") as consumer:
        for record in consumer.read_all("orders"):
            print(record.offset, record.value)

``SimpleProducer`` is a ``Producer`` that sends each ``send`` (or ``send_batch``) as one batch
at once (``linger_ms=0``) and waits for it; it defaults to ``acks=1`` without idempotence
(``idempotent=True`` forces ``acks=-1``), as before the batching producer existed.
``SimpleConsumer`` fetches given offsets of given partitions (no group, no commits) through
the SDK's ``ClusterClient``. New code uses ``Producer`` / ``Consumer`` directly.

Thread-safety: one instance per thread.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.protocol.records import RecordInput, RecordSpec

from . import limits
from ._sync import LoopThread, SyncProxy
from .admin import list_offsets
from .cluster_client import ClusterClient
from .errors import ConfigurationError, FluxProtocolError, error_for
from .messages import ConsumedRecord, HeadersInput, RecordMetadata, decode_fetched
from .metadata import RetryPolicy
from .producer import Producer
from .security import ClientSecurity

__all__ = [
    "ConsumedRecord",
    "HeadersInput",
    "RecordMetadata",
    "SimpleConsumer",
    "SimpleProducer",
    "decode_fetched",
]

_EARLIEST_TIMESTAMP = -2
_LATEST_TIMESTAMP = -1


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
        security: ClientSecurity | Mapping[str, Any] | None = None,
    ) -> None:
        if acks is None:
            acks = -1 if idempotent else 1
        if acks not in (-1, 0, 1):
            raise ConfigurationError(f"acks must be -1 (all), 0 or 1, got {acks}")
        if idempotent and acks != -1:
            raise ConfigurationError(f"an idempotent producer needs acks=-1 (all), got {acks}")
        self.acks = acks
        self.idempotent = idempotent
        self.timeout_s = timeout_s
        self._producer = Producer(
            bootstrap,
            acks=acks,
            idempotent=idempotent,
            client_id=client_id,
            linger_ms=0,
            batch_size=limits.BATCH_BYTES_MAX,
            delivery_timeout_ms=timeout_s * 1000,
            request_timeout_ms=min(timeout_s, limits.REQUEST_TIMEOUT_S) * 1000,
            allow_auto_topic_creation=allow_auto_topic_creation,
            security=security,
        )

    def __enter__(self) -> SimpleProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def client(self) -> Any:
        return self._producer.client

    def close(self) -> None:
        self._producer.close()

    def partition_for(self, topic: str, key: bytes | str | None) -> int:
        return self._producer.partition_for(topic, key)

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
        future = self._producer.produce(
            topic, value, key=key, headers=headers, partition=partition, timestamp_ms=timestamp_ms
        )
        return future.result()

    def send_batch(self, topic: str, partition: int, records: Sequence[RecordInput]) -> int:
        """Send ``records`` as one batch to ``topic``-``partition``; return its base offset
        (-1 with ``acks=0``)."""
        if not records:
            raise ConfigurationError("send_batch needs at least one record")
        if len(records) > limits.SEND_BATCH_RECORDS_MAX:
            raise ConfigurationError(
                f"{len(records)} records exceed the batch limit of {limits.SEND_BATCH_RECORDS_MAX}"
            )
        specs = [_spec(record) for record in records]

        async def send_all() -> list[RecordMetadata]:
            # Queued in one go, so the sender finds them all in one batch.
            queued = [
                await self._producer._async.produce(
                    topic,
                    spec.value,
                    key=spec.key,
                    headers=spec.headers,
                    partition=partition,
                    timestamp_ms=spec.timestamp_ms,
                )
                for spec in specs
            ]
            return [await future for future in queued]

        return self._producer.run_async(send_all())[0].offset


def _spec(record: RecordInput) -> RecordSpec:
    if isinstance(record, RecordSpec):
        return record
    if len(record) == 2:
        return RecordSpec(record[0], record[1])
    return RecordSpec(record[0], record[1], tuple(record[2]))  # type: ignore[misc]


class SimpleConsumer:
    """Reads partitions by explicit offsets (no group, no committed offsets)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "flux-consumer",
        timeout_s: float = limits.RETRY_TIMEOUT_S,
        read_committed: bool = False,
        security: ClientSecurity | Mapping[str, Any] | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self._client = ClusterClient(
            bootstrap,
            client_id=client_id,
            # A long-polling fetch must get its answer before the socket gives up.
            request_timeout_s=limits.REQUEST_TIMEOUT_S + limits.FETCH_WAIT_MS_MAX / 1000,
            retry=RetryPolicy(timeout_s=timeout_s),
            security=security,
        )
        self._loop = LoopThread("flux-simple-consumer")
        self._isolation_level = 1 if read_committed else 0

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def client(self) -> Any:
        return SyncProxy(self._client, self._loop)

    def close(self) -> None:
        try:
            self._loop.run(self._client.close())
        finally:
            self._loop.close()

    def partitions(self, topic: str) -> list[int]:
        return list(range(self._loop.run(self._client.partition_count(topic))))

    def high_watermarks(self, topic: str) -> dict[int, int]:
        return self._loop.run(list_offsets(self._client, topic, _LATEST_TIMESTAMP))

    def earliest_offsets(self, topic: str) -> dict[int, int]:
        return self._loop.run(list_offsets(self._client, topic, _EARLIEST_TIMESTAMP))

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

        ``OffsetOutOfRangeError`` if ``offset`` is outside the log."""
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
        return self._loop.run(
            self._client.call_leader(
                topic,
                partition,
                ApiKey.FETCH,
                body,
                lambda response, _: _fetched_records(response, topic, partition, offset),
            )
        )

    def read_all(self, topic: str, *, from_beginning: bool = True) -> Iterator[ConsumedRecord]:
        """Every record of every partition, partition by partition, up to the high watermarks
        at call time (from the log start offsets, or with ``from_beginning=False`` from the
        high watermarks: nothing)."""
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
