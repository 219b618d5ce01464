"""Produce and consume throughput of 100-byte records with Flux's pure-Python SDK next to
confluent-kafka (librdkafka) on the same broker. Prints one JSON object.

    python benchmarks/sdk_produce.py [--records 200000] [--partitions 3] [--acks 1]
                                     [--bootstrap HOST:PORT]

The SDK side uses ``AsyncProducer`` (batching, ``linger_ms=5``, idempotence off as on the
confluent side) and ``AsyncConsumer`` (manual assignment from offset 0). It produces twice,
into separate topics:

* ``produce``: one ``await producer.produce(topic, payload)`` per record (a future each, as
  confluent-kafka's ``produce`` is called per record), then ``flush``;
* ``send``: the bulk runtime API, ``await producer.send(topic, payloads)`` with every record in
  one call (it waits until each is acknowledged and returns their metadata).

``consume`` reads the ``produce`` topic. ``confluent_over_sdk`` divides confluent-kafka's rate
by the SDK's (``send`` is compared with confluent's per-record ``produce``). Without
``--bootstrap`` it starts one broker process with its data on disk and stops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from produce_consume import _create_topic, _rates, _start_broker  # noqa: E402
from produce_consume import consume as confluent_consume  # noqa: E402
from produce_consume import produce as confluent_produce  # noqa: E402


async def sdk_produce(
    bootstrap: str, topic: str, records: int, record_bytes: int, acks: int
) -> dict[str, float]:
    from flux.sdk import AsyncProducer

    payload = os.urandom(record_bytes)
    async with AsyncProducer(
        bootstrap, acks=acks, idempotent=False, linger_ms=5, batch_size=1 << 20
    ) as producer:
        started = time.perf_counter()
        futures = [await producer.produce(topic, payload) for _ in range(records)]
        await producer.flush(120)
        elapsed = time.perf_counter() - started
    failed = sum(1 for future in futures if future.exception() is not None)
    if failed:
        raise RuntimeError(f"{failed} records not delivered")
    return _rates(records, record_bytes, elapsed)


async def sdk_send(
    bootstrap: str, topic: str, records: int, record_bytes: int, acks: int
) -> dict[str, float]:
    from flux.sdk import AsyncProducer

    payloads = [os.urandom(record_bytes)] * records
    async with AsyncProducer(
        bootstrap, acks=acks, idempotent=False, linger_ms=5, batch_size=1 << 20
    ) as producer:
        started = time.perf_counter()
        delivered = await producer.send(topic, payloads)
        elapsed = time.perf_counter() - started
    if len(delivered) != records or any(metadata.offset < 0 for metadata in delivered):
        raise RuntimeError("send did not deliver every record")
    return _rates(records, record_bytes, elapsed)


async def sdk_consume(
    bootstrap: str, topic: str, partitions: int, records: int, record_bytes: int
) -> dict[str, float]:
    from flux.sdk import AsyncConsumer

    async with AsyncConsumer(
        bootstrap, read_old=True, fetch_max_bytes=8 << 20, max_poll_records=100_000
    ) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        seen = 0
        started = time.perf_counter()
        deadline = started + 300
        while seen < records and time.perf_counter() < deadline:
            seen += len(await consumer.poll(1.0))
        elapsed = time.perf_counter() - started
    if seen < records:
        raise RuntimeError(f"consumed {seen} of {records} records")
    return _rates(records, record_bytes, elapsed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--acks", type=int, default=1)
    parser.add_argument("--bootstrap", help="use a running broker instead of starting one")
    args = parser.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="flux-bench-") as workdir:
        node = None if args.bootstrap else _start_broker(Path(workdir))
        bootstrap = args.bootstrap or node.bootstrap_servers
        try:
            for client in ("flux-sdk", "confluent-kafka"):
                topic = f"bench-{uuid.uuid4().hex[:8]}"
                _create_topic(bootstrap, topic, args.partitions)
                if client == "flux-sdk":
                    produced = asyncio.run(
                        sdk_produce(bootstrap, topic, args.records, args.record_bytes, args.acks)
                    )
                    consumed = asyncio.run(
                        sdk_consume(
                            bootstrap, topic, args.partitions, args.records, args.record_bytes
                        )
                    )
                    send_topic = f"bench-{uuid.uuid4().hex[:8]}"
                    _create_topic(bootstrap, send_topic, args.partitions)
                    sent = asyncio.run(
                        sdk_send(bootstrap, send_topic, args.records, args.record_bytes, args.acks)
                    )
                    figures[client] = {"produce": produced, "send": sent, "consume": consumed}
                    continue
                else:
                    produced = confluent_produce(
                        bootstrap, topic, args.records, args.record_bytes, args.acks
                    )
                    consumed = confluent_consume(
                        bootstrap, topic, args.partitions, args.records, args.record_bytes
                    )
                figures[client] = {"produce": produced, "consume": consumed}
        finally:
            if node is not None:
                node.stop()
    sdk, confluent = figures["flux-sdk"], figures["confluent-kafka"]
    print(
        json.dumps(
            {
                "benchmark": "sdk_produce",
                "records": args.records,
                "record_bytes": args.record_bytes,
                "partitions": args.partitions,
                "acks": args.acks,
                "storage": "disk",
                **figures,
                "confluent_over_sdk": {
                    phase: round(
                        confluent[theirs]["records_per_s"] / sdk[phase]["records_per_s"], 2
                    )
                    for phase, theirs in (
                        ("produce", "produce"),
                        ("send", "produce"),
                        ("consume", "consume"),
                    )
                },
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
