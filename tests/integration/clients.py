"""The workload every Kafka client runs against Flux, and the checks on what it read back."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from flux.protocol.partitioner import partition_for_key

MESSAGE_COUNT = 10_000
PARTITIONS = 3
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Message:
    index: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    codec: str


def workload(count: int = MESSAGE_COUNT) -> list[Message]:
    """Keyed messages; every third carries headers; each fifth of them uses one codec."""
    per_codec = count // len(CODECS)
    messages = []
    for index in range(count):
        headers = (("trace", b"t-%d" % index), ("n", str(index).encode())) if index % 3 == 0 else ()
        messages.append(
            Message(
                index=index,
                key=b"key-%d" % (index % 997),
                value=b"value-%06d-" % index + b"x" * (index % 50),
                headers=headers,
                codec=CODECS[min(index // per_codec, len(CODECS) - 1)],
            )
        )
    return messages


@dataclass(frozen=True)
class Received:
    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def check_received(
    sent: list[Message], received: list[Received], partitions: int = PARTITIONS
) -> None:
    """Every message came back once, on murmur2's partition, in send order within it."""
    assert len(received) == len(sent), f"received {len(received)} of {len(sent)} messages"
    by_value = {message.value: message for message in sent}
    per_partition: dict[int, list[Received]] = defaultdict(list)
    for record in received:
        message = by_value[record.value]
        assert record.key == message.key
        assert record.headers == message.headers, (record.headers, message.headers)
        assert record.partition == partition_for_key(message.key, partitions), (
            f"key {message.key!r} landed on {record.partition}, murmur2 says "
            f"{partition_for_key(message.key, partitions)}"
        )
        per_partition[record.partition].append(record)
    for partition, records in per_partition.items():
        offsets = [record.offset for record in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), partition
        indexes = [by_value[record.value].index for record in records]
        assert indexes == sorted(indexes), f"partition {partition} out of send order"
        assert offsets[0] == 0 and offsets[-1] == len(records) - 1, "offsets are not dense from 0"
