"""Does a loaded cluster ever fence a healthy broker? A local 3-node cluster with the default
timeouts (3 s session, 1 s liveness probe, 500 ms heartbeats) takes a steady idempotent
``acks=all`` load from confluent-kafka for ``--minutes`` while a consumer group reads it; no
node is harmed. Afterwards the nodes' logs are searched for every fencing decision (a session
that ended, a refused probe) and for stalls. Prints one JSON object; ``fenced`` must be 0.

    python benchmarks/soak_fencing.py [--minutes 10] [--rate 5000] [--partitions 30]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import local_cluster_configs  # noqa: E402

from tests.integration.cluster_helpers import create_topic  # noqa: E402

TOPIC = "soak"
FENCING = re.compile(r"missed heartbeats|is gone \(|fencing them|fencing it")
STALLS = re.compile(r"sessions extended")


def _produce(bootstrap: str, rate: int, partitions: int, until: float, stats: dict) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )

    def delivered(error, _msg) -> None:
        stats["acked" if error is None else "failed"] += 1

    batch = max(rate // 100, 1)  # 100 bursts a second
    number = 0
    next_at = time.monotonic()
    while time.monotonic() < until:
        for _ in range(batch):
            producer.produce(
                TOPIC, b"x" * 100, partition=number % partitions, on_delivery=delivered
            )
            number += 1
        producer.poll(0)
        next_at += 0.01
        time.sleep(max(next_at - time.monotonic(), 0))
    producer.flush(60)


def _consume(bootstrap: str, until: float, stats: dict) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "soak", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([TOPIC])
    while time.monotonic() < until:
        stats["consumed"] += len(consumer.consume(num_messages=10_000, timeout=0.5))
    consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=5000, help="records/s")
    parser.add_argument("--partitions", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flux-soak-") as workdir:
        nodes = local_cluster_configs(Path(workdir), 3, extra={"node": {"log_level": "INFO"}})
        for node in nodes:
            node.start()
        try:
            for node in nodes:
                node.wait_ready()
            assert create_topic(nodes[0], TOPIC, args.partitions, 3)["error_code"] == 0
            bootstrap = ",".join(node.bootstrap_servers for node in nodes)
            stats = {"acked": 0, "failed": 0, "consumed": 0}
            until = time.monotonic() + args.minutes * 60
            threads = [
                threading.Thread(
                    target=_produce, args=(bootstrap, args.rate, args.partitions, until, stats)
                ),
                threading.Thread(target=_consume, args=(bootstrap, until, stats)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            events, stalls = [], []
            for node in nodes:
                for line in node.log_path.read_text(errors="replace").splitlines():
                    if FENCING.search(line):
                        events.append(line)
                    elif STALLS.search(line):
                        stalls.append(line)
            running = all(node.is_running() for node in nodes)
        finally:
            for node in nodes:
                node.stop()
    print(
        json.dumps(
            {
                "benchmark": "soak_fencing",
                "minutes": args.minutes,
                "rate_per_s": args.rate,
                "partitions": args.partitions,
                **stats,
                "all_nodes_running": running,
                "fenced": len(events),
                "fencing_events": events[:20],
                "controller_stalls": len(stalls),
            },
            indent=2,
        )
    )
    return 0 if not events and not stats["failed"] and running else 1


if __name__ == "__main__":
    sys.exit(main())
