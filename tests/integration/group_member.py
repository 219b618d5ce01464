"""A consumer-group member in its own process, for tests that SIGKILL one.

    python -m tests.integration.group_member CLIENT BOOTSTRAP GROUP TOPIC OUTPUT

CLIENT is ``confluent`` or ``kafka-python``. Each consumed record is appended to OUTPUT as
``partition offset value`` (flushed at once) and its offset committed synchronously, so the
file is what this member processed and committed. Runs until killed or SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import time

SESSION_TIMEOUT_MS = 6000
PAUSE_PER_BATCH_S = 0.05  # slow members, so a kill lands while work remains


def run_confluent(bootstrap: str, group: str, topic: str, output) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }
    )
    consumer.subscribe([topic])
    while True:
        messages = consumer.consume(num_messages=10, timeout=0.5)
        good = [m for m in messages if m.error() is None]
        for message in good:
            output.write(f"{message.partition()} {message.offset()} {message.value().decode()}\n")
        output.flush()
        if good:
            consumer.commit(asynchronous=False)
            time.sleep(PAUSE_PER_BATCH_S)


def run_kafka_python(bootstrap: str, group: str, topic: str, output) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=500,
    )
    while True:
        batches = consumer.poll(timeout_ms=500, max_records=10)
        for records in batches.values():
            for record in records:
                output.write(f"{record.partition} {record.offset} {record.value.decode()}\n")
        output.flush()
        if batches:
            consumer.commit()
            time.sleep(PAUSE_PER_BATCH_S)


def main() -> None:
    client, bootstrap, group, topic, path = sys.argv[1:6]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(path, "a") as output:
        (run_confluent if client == "confluent" else run_kafka_python)(
            bootstrap, group, topic, output
        )


if __name__ == "__main__":
    main()
