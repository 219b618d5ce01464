"""A small, well-behaved asyncio Kafka client on ``flux.protocol``: the fuzzer's yardstick.

It sets up the fuzz topics, checks between cases that a fresh connection still gets correct
answers (ApiVersions, Metadata, Produce, Fetch), and reads the canary's log at the end. It
knows nothing of the fuzzer's cases.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

from flux.protocol.api import ApiKey, decode_response, encode_request
from flux.protocol.errors import CorruptRecordError
from flux.protocol.records import build_batch, decode_records, iter_batches

__all__ = ["KafkaClientError", "WireClient"]


class KafkaClientError(RuntimeError):
    """A request of the well-behaved client failed (connection, timeout or error code)."""


class WireClient:
    """One connection; ``request`` sends a request and returns its decoded response body."""

    def __init__(self, host: str, port: int, *, timeout_s: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def __aenter__(self) -> WireClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self.timeout_s
            )
        except (OSError, TimeoutError) as error:
            raise KafkaClientError(f"connect {self.host}:{self.port}: {error!r}") from None

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (OSError, ConnectionError):
                pass
            self._writer = None

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if self._writer is None:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        self._correlation_id += 1
        frame = encode_request(api_key, version, self._correlation_id, "fuzz-yardstick", body)
        try:
            self._writer.write(frame)
            await self._writer.drain()
            size_bytes = await asyncio.wait_for(self._reader.readexactly(4), self.timeout_s)
            (size,) = struct.unpack(">i", size_bytes)
            payload = await asyncio.wait_for(self._reader.readexactly(size), self.timeout_s)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError) as error:
            await self.close()
            raise KafkaClientError(
                f"api {api_key} v{version} to {self.host}:{self.port}: {error!r}"
            ) from None
        correlation_id, response = decode_response(api_key, version, payload)
        if correlation_id != self._correlation_id:
            raise KafkaClientError(f"correlation id {correlation_id} != {self._correlation_id}")
        return response

    # -- helpers --------------------------------------------------------------------------------

    async def metadata(self, topics: list[str] | None) -> dict[str, Any]:
        body = {
            "topics": None if topics is None else [{"name": name} for name in topics],
            "allow_auto_topic_creation": False,
        }
        return await self.request(ApiKey.METADATA, 12, body)

    async def create_topic(self, name: str, partitions: int, replication_factor: int) -> int:
        response = await self.request(
            ApiKey.CREATE_TOPICS,
            4,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": replication_factor,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 15000,
                "validate_only": False,
            },
        )
        return int(response["topics"][0]["error_code"])

    async def produce(
        self, topic: str, partition: int, records: list[tuple[bytes | None, bytes]]
    ) -> tuple[int, int]:
        """``(error_code, base_offset)`` of one acks=all produce."""
        batch = build_batch([(key, value, [], None) for key, value in records])
        response = await self.request(
            ApiKey.PRODUCE,
            8,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 10000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
                ],
            },
        )
        answer = response["responses"][0]["partition_responses"][0]
        return int(answer["error_code"]), int(answer["base_offset"])

    async def fetch(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20
    ) -> tuple[int, int, bytes]:
        """``(error_code, high_watermark, records bytes)`` of one fetch (no wait)."""
        response = await self.request(
            ApiKey.FETCH,
            11,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": max_bytes,
                "isolation_level": 0,
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
            },
        )
        answer = response["responses"][0]["partitions"][0]
        return int(answer["error_code"]), int(answer["high_watermark"]), answer["records"] or b""

    async def read_batches(
        self, topic: str, partition: int, *, limit_bytes: int = 256 << 20
    ) -> list[tuple[int, int, list[bytes | None] | str, int]]:
        """Every batch of a partition below its high watermark: ``(base_offset, next_offset,
        record values, the batch's CRC field)``, or instead of the values why the records
        cannot be decoded."""
        batches: list[tuple[int, int, list[bytes | None] | str, int]] = []
        offset = 0
        total = 0
        while total < limit_bytes:
            error, high_watermark, records = await self.fetch(topic, partition, offset)
            if error:
                raise KafkaClientError(f"fetch {topic}-{partition}@{offset}: error {error}")
            progressed = False
            for header, batch in iter_batches(records):
                if header.next_offset <= offset:
                    continue
                try:
                    values: list[bytes | None] | str = [
                        record.value for record in decode_records(batch)
                    ]
                except CorruptRecordError as error:
                    # A batch no consumer can read: the caller reports it with its bytes.
                    values = f"{error} (batch {bytes(batch).hex()})"
                batches.append((header.base_offset, header.next_offset, values, header.crc))
                offset = header.next_offset
                total += len(batch)
                progressed = True
            if not progressed or offset >= high_watermark:
                return batches
        return batches

    async def topic_ids(self) -> dict[str, uuid.UUID]:
        response = await self.metadata(None)
        return {t["name"]: t["topic_id"] for t in response["topics"] if not t["error_code"]}
