"""Schema registry figures of a local 3-node cluster (real processes, replication factor 3).

- ``register_ms``: p50/p99 of ``POST /schemas/subjects/{s}/versions`` for ``--registrations``
  new Avro schemas, each under a subject of its own, asked of the three brokers in turn (two
  of three are forwarded to the writer, the leader of ``_schemas``). One registration before
  them is not timed: it creates ``_schemas``.
- ``lookup_ms.uncached``: p50/p99 of ``GET /schemas/schemas/ids/{id}`` over ``--lookups``
  requests spread over the three brokers and the registered ids, raw HTTP on one keep-alive
  connection per broker: the server's time plus a loopback round trip (a fresh
  ``SchemaRegistryClient`` per lookup would add its construction and a TCP connect). Every
  broker first answers each id once, untimed, so a follower's view has caught up.
- ``lookup_ms.cached``: the same lookups through confluent-kafka's ``SchemaRegistryClient``
  (one per broker) that has looked each id up once already: its cache, no request.
- ``produce``: records per second of confluent-kafka's ``Producer`` (acks=all, linger.ms=5)
  writing ``--records`` records to a topic of 3 partitions: ``avro`` values made per record by
  ``AvroSerializer`` from a small record (name, age, email, a 60-character note: every record
  encodes to the same size, about 100 bytes with the 5-byte schema id header), ``raw`` a
  ready-made value of that size. The time runs from the first ``produce`` to the end of
  ``flush`` (serialization included). Both runs share one producer, warmed up first by a
  record to every partition of both topics (its connections and metadata in place), and the
  serializer registers its schema before the clock starts (a one-off request).

Prints one JSON object.

    python benchmarks/schema_registry.py [--lookups 500] [--registrations 100]
        [--records 100000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import NodeProcess, running_local_cluster  # noqa: E402

PARTITIONS = 3
REPLICATION_FACTOR = 3
NOTE_CHARS = 60
#: How long one registry request or one flush may take before the run fails.
REQUEST_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 300.0
#: confluent-kafka's local queue bound: a full queue is drained (poll) before retrying.
QUEUE_RECORDS = 100_000

USER_SCHEMA = {
    "type": "record",
    "name": "User",
    "namespace": "bench.flux",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "email", "type": "string"},
        {"name": "note", "type": "string"},
    ],
}


def _phase(name: str) -> None:
    """Progress on stderr (stdout carries only the JSON)."""
    print(f"{time.strftime('%H:%M:%S')} {name}", file=sys.stderr, flush=True)


def _percentile(ordered: list[float], fraction: float) -> float:
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def _summary(latencies_ms: list[float], digits: int) -> dict[str, Any]:
    ordered = sorted(latencies_ms)
    return {
        "p50": round(_percentile(ordered, 0.50), digits),
        "p99": round(_percentile(ordered, 0.99), digits),
        "count": len(ordered),
    }


def _timed(call: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``call(*args)`` and how long it took, in milliseconds."""
    started = time.perf_counter()
    result = call(*args)
    return result, (time.perf_counter() - started) * 1000


class _Broker:
    """One keep-alive HTTP connection to a broker's registry (``/schemas``)."""

    def __init__(self, node: NodeProcess) -> None:
        host, port = node.ready["broker_http"].rsplit(":", 1)
        self.url = f"http://{node.ready['broker_http']}/schemas"
        self._connection = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT_S)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"} if data else {}
        self._connection.request(method, "/schemas" + path, body=data, headers=headers)
        response = self._connection.getresponse()
        answer = json.loads(response.read() or b"null")
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {answer}")
        return answer

    def close(self) -> None:
        self._connection.close()


def _bench_schema(index: int) -> dict[str, Any]:
    """A schema no other registration has (its own record name)."""
    return {**USER_SCHEMA, "name": f"User{index}"}


def _register(brokers: list[_Broker], count: int) -> tuple[list[int], list[float]]:
    brokers[0].request(
        "POST", "/subjects/bench-warmup-value/versions", {"schema": json.dumps(USER_SCHEMA)}
    )
    ids, latencies_ms = [], []
    for index in range(count):
        broker = brokers[index % len(brokers)]
        answer, elapsed_ms = _timed(
            broker.request,
            "POST",
            f"/subjects/bench-register-{index}-value/versions",
            {"schema": json.dumps(_bench_schema(index))},
        )
        ids.append(int(answer["id"]))
        latencies_ms.append(elapsed_ms)
    return ids, latencies_ms


def _lookups_uncached(brokers: list[_Broker], ids: list[int], count: int) -> list[float]:
    for broker in brokers:
        for schema_id in ids:
            broker.request("GET", f"/schemas/ids/{schema_id}")
    latencies_ms = []
    for index in range(count):
        broker = brokers[index % len(brokers)]
        schema_id = ids[index % len(ids)]
        _, elapsed_ms = _timed(broker.request, "GET", f"/schemas/ids/{schema_id}")
        latencies_ms.append(elapsed_ms)
    return latencies_ms


def _lookups_cached(brokers: list[_Broker], ids: list[int], count: int) -> list[float]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    clients = [SchemaRegistryClient({"url": broker.url}) for broker in brokers]
    for registry in clients:
        for schema_id in ids:
            registry.get_schema(schema_id)
    latencies_ms = []
    for index in range(count):
        registry = clients[index % len(clients)]
        schema_id = ids[index % len(ids)]
        _, elapsed_ms = _timed(registry.get_schema, schema_id)
        latencies_ms.append(elapsed_ms)
    return latencies_ms


def _user(index: int) -> dict[str, Any]:
    """Fixed-width fields, so that every record encodes to the same number of bytes (an age of
    18..63 is a one-byte zigzag varint)."""
    letter = chr(ord("a") + index % 26)
    return {
        "name": f"user-{index:07d}",
        "age": 18 + index % 46,
        "email": f"user{index:07d}@example.com",
        "note": letter * NOTE_CHARS,
    }


def _create_topic(node: NodeProcess, name: str) -> None:
    host, port = node.ready["broker_http"].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT_S)
    body = {"name": name, "partitions": PARTITIONS, "replication_factor": REPLICATION_FACTOR}
    connection.request(
        "POST", "/topics", body=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    if response.status not in (200, 201):
        raise RuntimeError(f"creating {name}: {response.status} {answer!r}")


def _delivery_failures() -> tuple[list[Any], Callable[[Any, Any], None]]:
    failures: list[Any] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(error)

    return failures, delivered


def _warm_up(producer: Any, topics: list[str], value: bytes) -> None:
    """One record to every partition of ``topics``, flushed before any clock starts: the
    producer's connections and the topics' metadata and leaders are then in place."""
    failures, delivered = _delivery_failures()
    for topic in topics:
        for partition in range(PARTITIONS):
            producer.produce(topic, value=value, partition=partition, on_delivery=delivered)
    if producer.flush(FLUSH_TIMEOUT_S) != 0 or failures:
        raise RuntimeError(f"warm-up records not delivered: {failures}")


def _produce(
    producer: Any, topic: str, count: int, value_of: Callable[[int], bytes]
) -> tuple[float, int]:
    """Records per second from the first ``produce`` to the end of ``flush``, and the size
    of the values."""
    failures, delivered = _delivery_failures()
    sizes = set()
    started = time.perf_counter()
    for index in range(count):
        value = value_of(index)
        sizes.add(len(value))
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: serve deliveries, then retry
                producer.poll(0.01)
        if index % 1000 == 0:
            producer.poll(0)
    if producer.flush(FLUSH_TIMEOUT_S) != 0:
        raise RuntimeError(f"{topic}: records left unsent after {FLUSH_TIMEOUT_S} s")
    elapsed_s = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{topic}: {len(failures)} records not delivered: {failures[0]}")
    assert len(sizes) == 1, f"values of several sizes: {sorted(sizes)}"
    return count / elapsed_s, sizes.pop()


def _produce_figures(
    nodes: list[NodeProcess], brokers: list[_Broker], count: int
) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient({"url": brokers[0].url})
    serializer = AvroSerializer(registry, json.dumps(USER_SCHEMA))
    context = SerializationContext("bench-avro", MessageField.VALUE)
    sample = serializer(_user(0), context)  # registers the schema, before the clock starts
    assert sample is not None
    raw_value = os.urandom(len(sample))

    _create_topic(nodes[0], "bench-raw")
    _create_topic(nodes[0], "bench-avro")
    producer = Producer(
        {
            "bootstrap.servers": ",".join(node.bootstrap_servers for node in nodes),
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": QUEUE_RECORDS,
        }
    )
    _warm_up(producer, ["bench-raw", "bench-avro"], sample)
    _phase("produce raw")
    raw_per_s, raw_bytes = _produce(producer, "bench-raw", count, lambda index: raw_value)
    _phase("produce avro")
    avro_per_s, avro_bytes = _produce(
        producer, "bench-avro", count, lambda index: serializer(_user(index), context)
    )
    assert raw_bytes == avro_bytes, (raw_bytes, avro_bytes)
    return {
        "raw_records_per_s": round(raw_per_s),
        "avro_records_per_s": round(avro_per_s),
        "avro_over_raw": round(avro_per_s / raw_per_s, 3),
        "records": count,
        "value_bytes": avro_bytes,
        "partitions": PARTITIONS,
    }


def _run(nodes: list[NodeProcess], args: argparse.Namespace) -> dict[str, Any]:
    brokers = [_Broker(node) for node in nodes]
    try:
        _phase("register")
        ids, register_ms = _register(brokers, args.registrations)
        _phase("lookups")
        uncached_ms = _lookups_uncached(brokers, ids, args.lookups)
        cached_ms = _lookups_cached(brokers, ids, args.lookups)
        produce = _produce_figures(nodes, brokers, args.records)
    finally:
        for broker in brokers:
            broker.close()
    return {
        "cluster": {
            "nodes": len(nodes),
            "replication_factor": REPLICATION_FACTOR,
            "partitions": PARTITIONS,
        },
        "lookup_ms": {
            "uncached": _summary(uncached_ms, 3),
            "cached": _summary(cached_ms, 4),
        },
        "register_ms": _summary(register_ms, 3),
        "produce": produce,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=500)
    parser.add_argument("--registrations", type=int, default=100)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    if args.lookups < 1 or args.registrations < 1 or args.records < 1:
        parser.error("--lookups, --registrations and --records must be at least 1")
    _phase("starting the cluster")
    with tempfile.TemporaryDirectory(prefix="flux-registry-bench-") as directory:
        with running_local_cluster(
            Path(directory),
            3,
            extra={"node": {"log_level": "WARNING"}, "topic": {"partitions": PARTITIONS}},
        ) as nodes:
            figures = _run(nodes, args)
            _phase("stopping the cluster")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
