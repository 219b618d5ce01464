"""V1 line-protocol produce throughput next to the Kafka front door's, on a local 3-node cluster
(replication factor 3, ``min.insync.replicas=2``, 3 partitions), 100-byte values.

- ``v1``: one pipelined ``AsyncFLUXClient`` connection per partition leader, ``--window``
  requests in flight on each, ``--messages`` produces spread over the partitions by key
  (FNV-1a), each answered on its own (V1 has one record per request), for ``acks=1`` and
  ``acks=all``.
- ``kafka``: confluent-kafka with ``linger.ms=5`` (batches), the same number of records of the
  same size, ``acks=1`` and ``acks=all``.

Prints one JSON object (messages per second of each).

    python benchmarks/v1_produce.py [--messages 20000] [--window 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import running_local_cluster  # noqa: E402
from flux.protocol.partitioner import fnv1a_32  # noqa: E402
from flux.sdk.v1 import AsyncFLUXClient  # noqa: E402

TOPIC_V1 = "bench-v1"
TOPIC_KAFKA = "bench-kafka"
VALUE = "x" * 100


async def _v1(addresses: list[str], messages: int, window: int, acks: str) -> float:
    async with AsyncFLUXClient(addresses[0]) as admin:
        metadata = await admin.admin_get_metadata()
        if TOPIC_V1 not in metadata["topics"]:
            await admin.admin_create_topic(TOPIC_V1, 3, 3)
        while True:
            metadata = await admin.admin_get_metadata()
            if all(metadata["leaders"].get((TOPIC_V1, p), -1) >= 0 for p in range(3)):
                break
            await asyncio.sleep(0.1)
    keys = {}
    for i in range(10_000):
        keys.setdefault(fnv1a_32(f"k{i}".encode()) % 3, f"k{i}")
        if len(keys) == 3:
            break
    clients = {}
    for partition in range(3):
        address = metadata["brokers"][metadata["leaders"][(TOPIC_V1, partition)]]
        clients[partition] = await AsyncFLUXClient(address).connect()
    per_partition = messages // 3

    async def lane(partition: int) -> None:
        client = clients[partition]
        semaphore = asyncio.Semaphore(window)

        async def one() -> None:
            async with semaphore:
                await client.produce(TOPIC_V1, keys[partition], VALUE, acks=acks)

        await asyncio.gather(*(one() for _ in range(per_partition)))

    started = time.perf_counter()
    await asyncio.gather(*(lane(p) for p in range(3)))
    elapsed = time.perf_counter() - started
    for client in clients.values():
        await client.close()
    return per_partition * 3 / elapsed


def _kafka(bootstrap: str, messages: int, acks: str) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC_KAFKA, 3, 3)]).values():
        try:
            future.result(30)
        except Exception:  # noqa: BLE001 - exists from the other acks run
            pass
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    producer.produce(TOPIC_KAFKA, value=VALUE.encode())  # warm-up: metadata, connections
    producer.flush(30)
    started = time.perf_counter()
    for index in range(messages):
        while True:
            try:
                producer.produce(TOPIC_KAFKA, key=f"k{index}".encode(), value=VALUE.encode())
                break
            except BufferError:
                producer.poll(0.01)
        if index % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return messages / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flux-v1-bench-") as directory:
        with running_local_cluster(
            Path(directory),
            3,
            extra={
                "node": {"log_level": "WARNING"},
                "topic": {"replication_factor": 3, "min_insync_replicas": 2},
                "v1": {"port": 0},
            },
        ) as nodes:
            addresses = [node.ready["v1"] for node in nodes]
            bootstrap = ",".join(node.bootstrap_servers for node in nodes)
            figures: dict[str, Any] = {"v1": {}, "kafka": {}}
            for acks in ("1", "all"):
                figures["v1"][f"acks_{acks}_msg_per_s"] = round(
                    asyncio.run(_v1(addresses, args.messages, args.window, acks)), 1
                )
                figures["kafka"][f"acks_{acks}_msg_per_s"] = round(
                    _kafka(bootstrap, args.messages, acks), 1
                )
    print(
        json.dumps(
            {
                "cluster": {"nodes": 3, "replication_factor": 3, "partitions": 3},
                "messages": args.messages,
                "value_bytes": len(VALUE),
                "v1_window_per_connection": args.window,
                **figures,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
