"""A consume-transform-produce application with confluent-kafka's transactional API, run as
its own process by ``test_transactions_eos`` (so a test can SIGKILL it, or have it SIGKILL
itself in the middle of a transaction).

Reads ``--input`` (read_committed, group ``--group``), writes ``out-<value>`` for every record
to ``--output`` and commits the consumed offsets in the same transaction; stops when nothing
arrived for ``--idle-seconds`` while it had partitions assigned, or once the offsets it
committed reach the input's end offsets (read at its start). ``--die-in-transaction N``: SIGKILL itself inside the N-th
transaction, after its records were sent but before its commit. ``--pause-ms``: sleep after
each transaction (slow enough for a test to kill a broker mid-run). Prints the number of
committed transactions.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--die-in-transaction", type=int, default=-1)
    parser.add_argument("--pause-ms", type=int, default=0)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args()
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([args.input])
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "linger.ms": 2,
            "transaction.timeout.ms": 30000,
        }
    )
    producer.init_transactions(60)
    # The input is written before the application starts: it stops once its committed
    # positions reach the input's end (or after --idle-seconds without records).
    count = len(consumer.list_topics(args.input, timeout=30).topics[args.input].partitions)
    ends = {
        index: consumer.get_watermark_offsets(TopicPartition(args.input, index), timeout=30)[1]
        for index in range(count)
    }
    positions: dict[int, int] = {}
    committed = 0
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < args.idle_seconds:
        if all(positions.get(index, 0) >= end for index, end in ends.items()):
            break
        messages = consumer.consume(num_messages=args.batch, timeout=0.5)
        messages = [m for m in messages if m.error() is None]
        if not consumer.assignment():
            idle_since = time.monotonic()  # idle counts from the first assignment on
        if not messages:
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for message in messages:
            producer.produce(args.output, key=message.key(), value=b"out-" + message.value())
        if committed == args.die_in_transaction:
            producer.flush(30)
            os.kill(os.getpid(), signal.SIGKILL)
        offsets = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
        try:
            producer.commit_transaction(60)
        except KafkaException as error:
            if error.args[0].txn_requires_abort():
                producer.abort_transaction(60)
                raise SystemExit(f"aborted: {error}") from None
            raise
        committed += 1
        positions.update((tp.partition, tp.offset) for tp in offsets if tp.offset >= 0)
        if args.pause_ms:
            time.sleep(args.pause_ms / 1000)
    consumer.close()
    print(committed, flush=True)


if __name__ == "__main__":
    main()
