"""Small helpers for integration tests that speak exact API versions through ``KafkaConnection``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.protocol.records import Record, build_batch, decode_records, iter_batches
from flux.sdk.wire import KafkaConnection


def wait_until(
    condition: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.05
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


def create_topic(conn: KafkaConnection, name: str, partitions: int = 1, **configs: str) -> int:
    response = conn.request(
        ApiKey.CREATE_TOPICS,
        5,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [
                        {"name": k.replace("_", "."), "value": v} for k, v in configs.items()
                    ],
                }
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        },
    )
    return response["topics"][0]["error_code"]


def produce(
    conn: KafkaConnection,
    topic: str,
    records: bytes,
    *,
    partition: int = 0,
    acks: int = 1,
    version: int = 7,
) -> dict[str, Any]:
    response = conn.request(
        ApiKey.PRODUCE,
        version,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 10000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    return response["responses"][0]["partition_responses"][0]


def produce_values(
    conn: KafkaConnection, topic: str, values: list[bytes], *, partition: int = 0, **batch: Any
) -> dict[str, Any]:
    records = build_batch([(None, value, ()) for value in values], **batch)
    result = produce(conn, topic, records, partition=partition)
    assert result["error_code"] == ErrorCode.NONE, result
    return result


def fetch(
    conn: KafkaConnection,
    topic: str,
    offset: int,
    *,
    partition: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 50 << 20,
    version: int = 11,
) -> dict[str, Any]:
    response = conn.request(
        ApiKey.FETCH,
        version,
        {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": min_bytes,
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
    return response["responses"][0]["partitions"][0]


def read_records(
    conn: KafkaConnection, topic: str, *, partition: int = 0, start: int = 0
) -> list[Record]:
    """Every record from ``start`` to the high watermark. Moves by each batch's offset span,
    as Kafka's consumers do (a compacted batch keeps its span when records leave it)."""
    records: list[Record] = []
    offset = start
    while True:
        result = fetch(conn, topic, offset, partition=partition)
        assert result["error_code"] == ErrorCode.NONE, result
        if offset >= result["high_watermark"]:
            return records
        before = offset
        for header, batch in iter_batches(result["records"]):
            records.extend(r for r in decode_records(bytes(batch)) if r.offset >= offset)
            offset = max(offset, header.last_offset + 1)
        assert offset > before, f"fetch at {before} below the high watermark returned nothing"


def read_values(
    conn: KafkaConnection, topic: str, *, partition: int = 0, start: int = 0
) -> list[tuple[int, bytes]]:
    """Every (offset, value) from ``start`` to the high watermark."""
    records = read_records(conn, topic, partition=partition, start=start)
    return [(record.offset, record.value) for record in records]


def list_offset(
    conn: KafkaConnection, topic: str, timestamp: int, *, partition: int = 0
) -> dict[str, Any]:
    response = conn.request(
        ApiKey.LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "current_leader_epoch": -1,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
        },
    )
    return response["topics"][0]["partitions"][0]


def join_as_only_member(
    conn: KafkaConnection,
    group: str,
    *,
    metadata: bytes = b"\x00\x00",
    protocol_type: str = "consumer",
    timeout_ms: int = 10000,
) -> tuple[str, int]:
    """Join ``group`` as its only member (JoinGroup v5 twice, as a new member must) and sync
    with an empty assignment; returns (member id, generation)."""
    join = {
        "group_id": group, "session_timeout_ms": timeout_ms, "rebalance_timeout_ms": timeout_ms,
        "member_id": "", "protocol_type": protocol_type,
        "protocols": [{"name": "range", "metadata": metadata}],
    }  # fmt: skip
    first = conn.request(ApiKey.JOIN_GROUP, 5, join)
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED, first
    joined = conn.request(ApiKey.JOIN_GROUP, 5, {**join, "member_id": first["member_id"]})
    assert joined["error_code"] == ErrorCode.NONE, joined
    member_id, generation = joined["member_id"], joined["generation_id"]
    synced = conn.request(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "assignments": [{"member_id": member_id, "assignment": b""}],
        },  # fmt: skip
    )
    assert synced["error_code"] == ErrorCode.NONE, synced
    return member_id, generation
