"""Produce and consume throughput of 100-byte records against one Flux broker, driven by
confluent-kafka (librdkafka). Prints one JSON object.

    python benchmarks/produce_consume.py [--records 2000000] [--partitions 3] [--bootstrap HOST:PORT]

Without ``--bootstrap`` it starts a broker process with its data in a temporary directory (on
disk, like production) and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path


def _start_broker(workdir: Path):
    """One node (broker + a controller quorum of one) with its data on disk in ``workdir``."""
    from flux.cluster.launcher import local_cluster_configs

    (node,) = local_cluster_configs(workdir, 1, extra={"node": {"log_level": "WARNING"}})
    node.start()
    node.wait_ready()
    return node


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(timeout=30)


def produce(
    bootstrap: str, topic: str, records: int, record_bytes: int, acks: int
) -> dict[str, float]:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": False,
        }
    )
    payload = os.urandom(record_bytes)
    started = time.perf_counter()
    produce_one = producer.produce
    for index in range(records):
        try:
            produce_one(topic, payload)
        except BufferError:
            producer.poll(0.01)
            produce_one(topic, payload)
        if index % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered")
    return _rates(records, record_bytes, elapsed)


def consume(
    bootstrap: str, topic: str, partitions: int, records: int, record_bytes: int
) -> dict[str, float]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 8_388_608,
            "queued.min.messages": 1_000_000,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = time.perf_counter()
    deadline = started + 300
    while seen < records and time.perf_counter() < deadline:
        batch = consumer.consume(num_messages=100_000, timeout=1.0)
        seen += sum(1 for message in batch if message.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < records:
        raise RuntimeError(f"consumed {seen} of {records} records")
    return _rates(records, record_bytes, elapsed)


def _rates(records: int, record_bytes: int, elapsed: float) -> dict[str, float]:
    return {
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(records * record_bytes / elapsed / 1e6, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--acks", type=int, default=1)
    parser.add_argument("--bootstrap", help="use a running broker instead of starting one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flux-bench-") as workdir:
        node = None if args.bootstrap else _start_broker(Path(workdir))
        bootstrap = args.bootstrap or node.bootstrap_servers
        try:
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            _create_topic(bootstrap, topic, args.partitions)
            produced = produce(bootstrap, topic, args.records, args.record_bytes, args.acks)
            consumed = consume(bootstrap, topic, args.partitions, args.records, args.record_bytes)
        finally:
            if node is not None:
                node.stop()
    print(
        json.dumps(
            {
                "benchmark": "produce_consume",
                "client": "confluent-kafka",
                "records": args.records,
                "record_bytes": args.record_bytes,
                "partitions": args.partitions,
                "acks": args.acks,
                "storage": "disk",
                "produce": produced,
                "consume": consumed,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
