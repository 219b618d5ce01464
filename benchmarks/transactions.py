"""Transactional produce and read_committed consume on a local 3-node cluster (replication
factor 3, min.insync.replicas=2), driven by confluent-kafka (librdkafka). Prints one JSON
object on stdout (progress goes to stderr).

It measures, on topics of ``--partitions`` (3) partitions and ``--record-bytes`` (100) byte
values, every record sent to an explicit partition, round-robin (``partition = i % 3``):

- ``transactional``: one producer with a ``transactional.id`` (``linger.ms=5``, so acks=all
  and idempotence) runs ``--transactions`` (300) transactions back to back, each
  ``begin_transaction()``, ``--records-per-txn`` (100) ``produce()`` calls and
  ``commit_transaction()``. Reported: records/s and transactions/s from the first
  ``begin_transaction()`` to the end of the last commit; the duration of each
  ``commit_transaction()`` call (it flushes the transaction's records first, then EndTxn and
  the markers), p50/p99/max; and each transaction from ``begin_transaction()`` to the end of
  its commit, p50/p99/max. ``init_transactions_ms`` (not in the figures) includes finding the
  coordinator and creating ``__transaction_state`` on first use. One warm-up transaction of
  one record per partition is committed before the clock starts (connections, metadata, the
  partitions' first AddPartitionsToTxn). The coordinator answers EndTxn once the markers are
  written, so the commit time includes one more replicated write per partition (and the next
  transaction starts without a CONCURRENT_TRANSACTIONS retry).
- ``idempotent``: the same number of records with a plain idempotent producer
  (``enable.idempotence=True``, ``linger.ms=5``, no transactions) on another topic, all
  produced then one ``flush()``; records/s from the first ``produce()`` to the end of the
  flush (after a warm-up of one record per partition), to compare with the above.
- ``read_committed``: afterwards a consumer with ``isolation.level=read_committed``, assigned
  every partition of the transactional topic at offset 0, reads until it has every committed
  record (warm-up included); records/s from ``assign()`` to the last record (so connecting
  and the first fetches are counted). The count and the number of distinct values must equal
  what was committed, or the benchmark fails.

Every delivery report must be a success, and every flush, commit and read has a timeout
(``--timeout``, 60 s); any failure ends the run with an error naming what failed and the
nodes' log tails on stderr. The JSON holds the arguments, the client versions and the Flux
commit (``git rev-parse --short HEAD``, null when unavailable); ``node_log_lines`` counts the
lines the nodes logged (at WARNING and above) during the run, and their tail goes to stderr.

    python benchmarks/transactions.py [--transactions 300] [--records-per-txn 100]
        [--partitions 3] [--record-bytes 100] [--timeout 60]

Each node (controller + broker) keeps its data on disk in a temporary directory; all three are
stopped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
LINGER_MS = 5
ID_BYTES = 10  # each value starts with its record number, so duplicates can be told apart
_PARTITION_EOF = -191  # KafkaError._PARTITION_EOF


def _log(message: str) -> None:
    print(f"[transactions {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


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


def _percentile(ordered: list[float], fraction: float) -> float:
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def _summary_ms(values_s: list[float]) -> dict[str, float]:
    ordered = sorted(value * 1000.0 for value in values_s)
    return {
        "p50_ms": round(_percentile(ordered, 0.50), 2),
        "p99_ms": round(_percentile(ordered, 0.99), 2),
        "max_ms": round(ordered[-1], 2),
        "mean_ms": round(sum(ordered) / len(ordered), 2),
    }


class _Deliveries:
    """Counts delivery reports; keeps the first error."""

    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.first_error: str | None = None

    def __call__(self, error, _msg) -> None:
        if error is None:
            self.ok += 1
        else:
            self.errors += 1
            if self.first_error is None:
                self.first_error = str(error)

    def check(self, expected: int, what: str, undelivered: int = 0) -> None:
        if undelivered or self.errors or self.ok != expected:
            raise RuntimeError(
                f"{what}: {self.ok} delivered, {self.errors} failed "
                f"(first: {self.first_error}), {undelivered} undelivered, of {expected}"
            )


def _describe(error) -> str:
    """A KafkaException's KafkaError with the flags that say what a caller may do next."""
    kafka_error = error.args[0] if error.args else error
    if not hasattr(kafka_error, "name"):
        return str(error)
    return (
        f"{kafka_error.name()}: {kafka_error.str()} (retriable={kafka_error.retriable()}, "
        f"fatal={kafka_error.fatal()}, txn_requires_abort={kafka_error.txn_requires_abort()})"
    )


def _value(number: int, padding: bytes) -> bytes:
    return b"%0*d" % (ID_BYTES, number) + padding


def _produce(producer, topic: str, value: bytes, partition: int, on_delivery) -> None:
    try:
        producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
    except BufferError:  # local queue full: serve delivery reports, then once more
        producer.poll(0.05)
        producer.produce(topic, value, partition=partition, on_delivery=on_delivery)


def transactional(
    bootstrap: str,
    topic: str,
    partitions: int,
    transactions: int,
    records_per_txn: int,
    record_bytes: int,
    timeout_s: float,
) -> dict:
    from confluent_kafka import KafkaException, Producer

    transactional_id = f"bench-txn-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": LINGER_MS,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
    deliveries = _Deliveries()
    padding = os.urandom(record_bytes - ID_BYTES)
    init_started = time.perf_counter()
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as error:
        raise RuntimeError(f"init_transactions failed: {_describe(error)}") from error
    init_s = time.perf_counter() - init_started

    # Warm-up transaction: one record per partition, committed before the clock starts.
    warm_up = partitions
    try:
        producer.begin_transaction()
        for partition in range(partitions):
            _produce(producer, topic, b"warm-up-%d" % partition, partition, deliveries)
        producer.commit_transaction(timeout_s)
    except KafkaException as error:
        raise RuntimeError(f"warm-up transaction failed: {_describe(error)}") from error
    deliveries.check(warm_up, "warm-up transaction")

    commit_s: list[float] = []
    txn_s: list[float] = []
    clock = time.perf_counter
    number = 0
    progress_every = max(1, transactions // 10)
    started = clock()
    for txn in range(transactions):
        try:
            began = clock()
            producer.begin_transaction()
            for index in range(records_per_txn):
                _produce(producer, topic, _value(number, padding), index % partitions, deliveries)
                number += 1
            committing = clock()
            producer.commit_transaction(timeout_s)
            done = clock()
        except KafkaException as error:
            raise RuntimeError(
                f"transaction {txn + 1} of {transactions}: {_describe(error)}"
            ) from error
        commit_s.append(done - committing)
        txn_s.append(done - began)
        # commit_transaction() flushed: every record so far has its delivery report.
        deliveries.check(warm_up + number, f"after transaction {txn + 1}")
        if (txn + 1) % progress_every == 0:
            _log(f"transactional: {txn + 1}/{transactions} committed")
    elapsed = clock() - started
    records = transactions * records_per_txn
    return {
        "transactional_id": transactional_id,
        "transactions": transactions,
        "records_per_txn": records_per_txn,
        "records": records,
        "warm_up_records": warm_up,
        "committed_records": warm_up + records,
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(records * record_bytes / elapsed / 1e6, 2),
        "transactions_per_s": round(transactions / elapsed, 1),
        "init_transactions_ms": round(init_s * 1000.0, 1),
        "commit": _summary_ms(commit_s),
        "begin_to_commit_done": _summary_ms(txn_s),
        "delivery_errors": deliveries.errors,
    }


def idempotent(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    record_bytes: int,
    timeout_s: float,
) -> dict:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": LINGER_MS,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
    warm_up = _Deliveries()
    for partition in range(partitions):
        _produce(producer, topic, b"warm-up-%d" % partition, partition, warm_up)
    warm_up.check(partitions, "idempotent warm-up", producer.flush(timeout_s))

    deliveries = _Deliveries()
    padding = os.urandom(record_bytes - ID_BYTES)
    poll = producer.poll
    started = time.perf_counter()
    for number in range(records):
        _produce(producer, topic, _value(number, padding), number % partitions, deliveries)
        if number % 10000 == 0:
            poll(0)
    remaining = producer.flush(timeout_s)
    elapsed = time.perf_counter() - started
    deliveries.check(records, "idempotent run", remaining)
    return {
        "records": records,
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(records * record_bytes / elapsed / 1e6, 2),
        "delivery_errors": deliveries.errors,
    }


def read_committed(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float
) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-read-committed-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    values: set[bytes] = set()
    count = 0
    at_end: set[int] = set()
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        last_record = started
        # Until every committed record arrived and every partition reported its end (so that
        # anything beyond what was committed would have been seen).
        while count < expected or len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"read_committed: {count} records (of {expected} committed) after "
                    f"{timeout_s:.0f} s; partitions at their end: {sorted(at_end)}"
                )
            # poll() returns as soon as a message is there (consume() of a batch would wait
            # for its whole timeout on the last, partial batch and blur the figure).
            message = consumer.poll(0.1)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == _PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                raise RuntimeError(f"read_committed: consumer error {error}")
            at_end.discard(message.partition())
            values.add(message.value())
            count += 1
            last_record = time.perf_counter()
    finally:
        consumer.close()
    elapsed = last_record - started
    if count != expected or len(values) != expected:
        raise RuntimeError(
            f"read_committed read {count} records ({len(values)} distinct values) but "
            f"{expected} were committed"
        )
    return {
        "records": count,
        "distinct_values": len(values),
        "expected": expected,
        "seconds": round(elapsed, 3),
        "records_per_s": round(count / elapsed),
    }


def _log_lines(nodes: list[NodeProcess]) -> list[str]:
    lines = []
    for node in nodes:
        try:
            text = node.log_path.read_text(errors="replace")
        except OSError:
            continue
        lines.extend(f"node {node.node_id}: {line}" for line in text.splitlines() if line)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--records-per-txn", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds allowed to each init/commit/flush and to the read_committed read",
    )
    args = parser.parse_args()
    if args.transactions < 1 or args.records_per_txn < 1 or args.partitions < 1:
        parser.error("--transactions, --records-per-txn and --partitions must be at least 1")
    if args.record_bytes < ID_BYTES:
        parser.error(f"--record-bytes must be at least {ID_BYTES}")
    records = args.transactions * args.records_per_txn
    nodes: list[NodeProcess] = []
    with tempfile.TemporaryDirectory(prefix="flux-transactions-") as workdir:
        nodes = local_cluster_configs(Path(workdir), 3, extra={"node": {"log_level": "WARNING"}})
        failed = True
        try:
            _log("starting 3 nodes")
            for node in nodes:
                node.start()
            for node in nodes:
                node.wait_ready()
            bootstrap = ",".join(node.bootstrap_servers for node in nodes)
            suffix = uuid.uuid4().hex[:8]
            txn_topic = f"txn-{suffix}"
            idem_topic = f"idempotent-{suffix}"
            _create_topic(bootstrap, txn_topic, args.partitions)
            _create_topic(bootstrap, idem_topic, args.partitions)
            _log(f"transactional: {args.transactions} x {args.records_per_txn} records")
            txn = transactional(
                bootstrap,
                txn_topic,
                args.partitions,
                args.transactions,
                args.records_per_txn,
                args.record_bytes,
                args.timeout,
            )
            _log(f"transactional: {txn['records_per_s']} records/s; idempotent: {records}")
            idem = idempotent(
                bootstrap, idem_topic, args.partitions, records, args.record_bytes, args.timeout
            )
            _log(f"idempotent: {idem['records_per_s']} records/s; read_committed")
            read = read_committed(
                bootstrap, txn_topic, args.partitions, txn["committed_records"], args.timeout
            )
            _log(f"read_committed: {read['records_per_s']} records/s")
            failed = False
        finally:
            for node in nodes:
                node.stop()
            logged = _log_lines(nodes)
            if logged:
                _log(f"the nodes logged {len(logged)} lines; the last ones:")
                for line in logged[-40 if failed else -20 :]:
                    print(f"  {line}", file=sys.stderr)
    import confluent_kafka

    print(
        json.dumps(
            {
                "benchmark": "transactions",
                "client": "confluent-kafka",
                "client_version": confluent_kafka.__version__,
                "librdkafka_version": confluent_kafka.libversion()[0],
                "flux_commit": _git_commit(),
                "arguments": vars(args),
                "nodes": 3,
                "replication_factor": REPLICATION_FACTOR,
                "min_insync_replicas": MIN_INSYNC_REPLICAS,
                "acks": "all",
                "linger_ms": LINGER_MS,
                "partitions": args.partitions,
                "record_bytes": args.record_bytes,
                "storage": "disk",
                "transactional": txn,
                "idempotent": idem,
                "read_committed": read,
                "transactional_vs_idempotent_records_per_s": round(
                    txn["records_per_s"] / idem["records_per_s"], 3
                ),
                "node_log_lines": len(logged),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
