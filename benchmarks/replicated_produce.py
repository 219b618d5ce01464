"""Replicated produce (acks=all, replication factor 3, min.insync.replicas=2) on a local 3-node
cluster, driven by confluent-kafka (librdkafka). Prints one JSON object.

It measures
- throughput: N records of 100 bytes produced as fast as possible (``linger.ms=5``,
  ``batch.size=1000000``), from the first ``produce()`` to the end of ``flush()``; every
  delivery report must be a success;
- latency at a fixed rate: records paced at ``--rate`` per second for ``--latency-seconds``
  (``linger.ms=1`` by default, ``--latency-linger-ms``), each timed from its ``produce()``
  call to its delivery callback.

``linger.ms=0`` makes librdkafka send (nearly) every record in its own ProduceRequest; a Flux
connection serves one request at a time (as Kafka does) and an acks=all request waits for the
followers' next fetches, so one-record requests queue up behind each other and latency grows
without bound at a few thousand records/s (see docs/benchmarks.md).

    python benchmarks/replicated_produce.py [--records 1000000] [--partitions 3]
        [--rate 5000] [--latency-seconds 10] [--latency-linger-ms 1]

Each node (controller + broker) keeps its data on disk in a temporary directory; all three are
stopped afterwards.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import NodeProcess, local_cluster_configs  # noqa: E402

REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new_topic = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=REPLICATION_FACTOR,
        config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)},
    )
    admin.create_topics([new_topic])[topic].result(timeout=30)
    # Wait until every partition has a leader and a full ISR as seen by the client.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(
                p.leader >= 0 and len(p.isrs) == REPLICATION_FACTOR
                for p in meta.partitions.values()
            )
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} has no leader and full ISR on every partition")


def _warm_up(producer, topic: str, partitions: int) -> None:
    """One acks=all record per partition, so connections and metadata are in place."""
    errors: list[str] = []
    for partition in range(partitions):
        producer.produce(
            topic,
            b"warm-up",
            partition=partition,
            on_delivery=lambda error, _msg: errors.append(str(error)) if error else None,
        )
    if producer.flush(30) or errors:
        raise RuntimeError(f"warm-up failed: {errors or 'not delivered'}")


def throughput(bootstrap: str, topic: str, partitions: int, records: int, record_bytes: int):
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": False,
        }
    )
    _warm_up(producer, topic, partitions)
    payload = os.urandom(record_bytes)
    outcome = {"ok": 0, "errors": 0, "first_error": None}

    def on_delivery(error, _msg) -> None:
        if error is None:
            outcome["ok"] += 1
        else:
            outcome["errors"] += 1
            if outcome["first_error"] is None:
                outcome["first_error"] = str(error)

    produce_one = producer.produce
    poll = producer.poll
    started = time.perf_counter()
    for index in range(records):
        try:
            produce_one(topic, payload, on_delivery=on_delivery)
        except BufferError:
            poll(0.01)
            produce_one(topic, payload, on_delivery=on_delivery)
        if index % 10000 == 0:
            poll(0)
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - started
    if remaining or outcome["errors"] or outcome["ok"] != records:
        raise RuntimeError(
            f"throughput run: {outcome['ok']} delivered, {outcome['errors']} failed "
            f"(first: {outcome['first_error']}), {remaining} undelivered, of {records}"
        )
    return {
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(records * record_bytes / elapsed / 1e6, 1),
        "delivery_errors": outcome["errors"],
    }


def _percentile(ordered: list[float], fraction: float) -> float:
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def latency(
    bootstrap: str,
    topic: str,
    partitions: int,
    rate: int,
    seconds: float,
    record_bytes: int,
    linger_ms: float,
):
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": linger_ms,
            "queue.buffering.max.messages": 2_000_000,
            "enable.idempotence": False,
        }
    )
    _warm_up(producer, topic, partitions)
    payload = os.urandom(record_bytes)
    latencies_ms: list[float] = []
    errors: list[str] = []
    clock = time.perf_counter

    def callback(sent: float):
        def on_delivery(error, _msg) -> None:
            if error is None:
                latencies_ms.append((clock() - sent) * 1000.0)
            else:
                errors.append(str(error))

        return on_delivery

    total = int(rate * seconds)
    interval = 1.0 / rate
    produce_one = producer.produce
    poll = producer.poll
    started = clock()
    sent = 0
    while sent < total:
        now = clock()
        due = min(total, int((now - started) / interval) + 1)
        while sent < due:
            produce_one(topic, payload, on_delivery=callback(clock()))
            sent += 1
        poll(0)
        pause = started + sent * interval - clock()
        if pause >= 0.001:
            poll(min(pause, 0.005))  # wait, but return as soon as a delivery report arrives
        elif pause > 0:
            time.sleep(pause)
    send_elapsed = clock() - started
    remaining = producer.flush(60)
    if remaining or errors or len(latencies_ms) != total:
        raise RuntimeError(
            f"latency run: {len(latencies_ms)} delivered, {len(errors)} failed "
            f"(first: {errors[:1]}), {remaining} undelivered, of {total}"
        )
    ordered = sorted(latencies_ms)
    return {
        "target_records_per_s": rate,
        "achieved_records_per_s": round(total / send_elapsed),
        "records": total,
        "seconds": round(send_elapsed, 3),
        "p50_ms": round(_percentile(ordered, 0.50), 2),
        "p90_ms": round(_percentile(ordered, 0.90), 2),
        "p99_ms": round(_percentile(ordered, 0.99), 2),
        "p99_9_ms": round(_percentile(ordered, 0.999), 2),
        "max_ms": round(ordered[-1], 2),
        "delivery_errors": len(errors),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5000, help="records/s of the latency run")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--latency-linger-ms", type=float, default=1.0)
    args = parser.parse_args()
    nodes: list[NodeProcess] = []
    with tempfile.TemporaryDirectory(prefix="flux-replicated-") as workdir:
        nodes = local_cluster_configs(Path(workdir), 3, extra={"node": {"log_level": "WARNING"}})
        try:
            for node in nodes:
                node.start()
            for node in nodes:
                node.wait_ready()
            bootstrap = ",".join(node.bootstrap_servers for node in nodes)
            topic = f"replicated-{uuid.uuid4().hex[:8]}"
            _create_topic(bootstrap, topic, args.partitions)
            produced = throughput(
                bootstrap, topic, args.partitions, args.records, args.record_bytes
            )
            timed = latency(
                bootstrap,
                topic,
                args.partitions,
                args.rate,
                args.latency_seconds,
                args.record_bytes,
                args.latency_linger_ms,
            )
        finally:
            for node in nodes:
                node.stop()
    print(
        json.dumps(
            {
                "benchmark": "replicated_produce",
                "client": "confluent-kafka",
                "nodes": 3,
                "replication_factor": REPLICATION_FACTOR,
                "min_insync_replicas": MIN_INSYNC_REPLICAS,
                "acks": "all",
                "partitions": args.partitions,
                "record_bytes": args.record_bytes,
                "storage": "disk",
                "throughput": {"records": args.records, "linger_ms": 5, **produced},
                "latency": {"linger_ms": args.latency_linger_ms, **timed},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
