"""The transactional workload, after Jepsen's Kafka transaction tests: producers write
multi-partition transactions (some aborted on purpose), read_committed consumers read, and a
final read_committed read takes every partition to its last stable offset.

* Producers (confluent-kafka, ``transactional.id`` ``chaos-txn-<n>``, kept across a producer's
  lives so that a replacement fences its predecessor) write 2 to 4 unique values
  (``<process>-t<k>-<i>``) to random partitions of the topic per transaction, then commit, or
  abort (``ABORT_SHARE`` of them, decided before the transaction). Op ``txn``: invoke
  ``{"intent", "writes": [[p, value], ...]}``; ``ok`` ``{"committed": bool}`` when the commit or
  the abort returned; ``fail`` when the transaction certainly did not commit (its commit failed
  with an abortable error and the abort succeeded); ``info`` otherwise (a timeout, a fenced or
  fatal producer: the transaction may have committed). After an ``info`` the producer is
  replaced (a new process name, the same transactional id).
* Readers (confluent-kafka, ``isolation.level=read_committed``) are assigned every partition
  from offset 0; op ``txn-poll`` ``ok`` ``{"records": [[p, offset, value], ...]}``.
* ``txn_final_read``: after the faults healed, waits until every partition's last stable offset
  reached its high watermark (open transactions of dead producers are aborted by their timeout,
  ``TRANSACTION_TIMEOUT_MS``), or gives up waiting, then reads every partition to its last
  stable offset with read_committed; op ``txn-final-read`` ``ok`` ``{"records": [...],
  "stable_offsets": [[p, lso], ...], "high_watermarks": [[p, hw], ...]}``, or ``info`` when it
  could not finish.

The checker (``flux.chaos.txn_checker``) finds aborted reads (G1a), intermediate reads (G1b),
lost committed writes, duplicates and non-atomic visibility in these ops.

Thread-safety: each worker thread owns its client; they share the ``History`` and the stop
event.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import limits
from .history import History

__all__ = [
    "ABORT_SHARE",
    "TRANSACTION_TIMEOUT_MS",
    "TXN_TOPIC",
    "TxnWorkload",
    "transactional_id",
    "txn_final_read",
]

TXN_TOPIC = "chaos-txn"
#: Share of transactions aborted on purpose.
ABORT_SHARE = 0.2
#: A dead producer's open transaction is aborted by the coordinator after this long, so the
#: final read does not wait for it for long.
TRANSACTION_TIMEOUT_MS = 10_000
#: Transactions per second of one producer.
TXN_RATE_PER_PRODUCER = 5.0
_LIBRDKAFKA_LOG_LEVEL = 2
#: The final read is complete once it got nothing for this long below the stable offsets.
FINAL_READ_QUIET_S = 3.0
_JOIN_TIMEOUT_S = limits.OP_TIMEOUT_S * 3 + 10


def transactional_id(index: int) -> str:
    return f"chaos-txn-{index}"


@dataclass
class TxnWorkload:
    """Transactional producer threads and read_committed reader threads."""

    history: History
    bootstrap: str
    topic: str
    partitions: list[int]
    producers: int
    seed: int
    log: Callable[[str], None] = print
    client_config: Mapping[str, str] = field(default_factory=dict)
    readers: int = 1
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for index in range(self.producers):
            name = f"txn-producer-{index}"
            self._spawn(name, lambda i=index, n=name: self._produce(i, n))
        for index in range(self.readers):
            name = f"txn-reader-{index}"
            self._spawn(name, lambda n=name: self._read(n))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(_JOIN_TIMEOUT_S)
            if thread.is_alive():
                self.log(f"txn workload: thread {thread.name} did not stop in time")

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _producer(self, index: int) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            {
                **self.client_config,
                "bootstrap.servers": self.bootstrap,
                "log_level": _LIBRDKAFKA_LOG_LEVEL,
                "transactional.id": transactional_id(index),
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 1,
                "message.timeout.ms": int(limits.OP_TIMEOUT_S * 1000),
                "retry.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        producer.init_transactions(limits.OP_TIMEOUT_S * 3)
        return producer

    def _produce(self, index: int, base_name: str) -> None:
        from confluent_kafka import KafkaException

        rng = random.Random(f"{self.seed}-{base_name}")
        interval_s = 1.0 / TXN_RATE_PER_PRODUCER
        life = 0
        while not self._stop.is_set():
            process = base_name if life == 0 else f"{base_name}.{life}"
            life += 1
            try:
                producer = self._producer(index)
            except KafkaException as error:
                self.history.append(process, "info", "init", {"error": str(error)})
                self._stop.wait(0.5)
                continue
            self._transactions(producer, process, rng, interval_s)

    def _transactions(
        self, producer: Any, process: str, rng: random.Random, interval_s: float
    ) -> None:
        """Run transactions until stopped or until one ends ``info`` (then the producer is
        replaced: its state is unknown)."""
        from confluent_kafka import KafkaException

        number = 0
        next_start = time.monotonic()
        while not self._stop.is_set():
            intent = "abort" if rng.random() < ABORT_SHARE else "commit"
            writes = [
                [rng.choice(self.partitions), f"{process}-t{number}-{i}"]
                for i in range(rng.randint(2, 4))
            ]
            number += 1
            invocation = self.history.invoke(process, "txn", {"intent": intent, "writes": writes})
            try:
                producer.begin_transaction()
                for partition, value in writes:
                    producer.produce(self.topic, value=value.encode(), partition=partition)
                if intent == "abort":
                    # Sent first, so the abort has records in the log to hide.
                    producer.flush(limits.OP_TIMEOUT_S)
                    producer.abort_transaction(limits.OP_TIMEOUT_S)
                else:
                    producer.commit_transaction(limits.OP_TIMEOUT_S)
            except (KafkaException, BufferError) as error:
                kafka_error = error.args[0] if error.args else None
                if getattr(kafka_error, "txn_requires_abort", lambda: False)():
                    try:
                        producer.abort_transaction(limits.OP_TIMEOUT_S)
                    except KafkaException as abort_error:
                        self.history.complete(invocation, "info", {"error": str(abort_error)})
                        return
                    self.history.complete(invocation, "fail", {"error": str(error)})
                    continue
                self.history.complete(invocation, "info", {"error": str(error)})
                return
            self.history.complete(invocation, "ok", {"committed": intent == "commit"})
            next_start = max(next_start + interval_s, time.monotonic())
            self._stop.wait(max(0.0, next_start - time.monotonic()))

    def _read(self, process: str) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                **self.client_config,
                "bootstrap.servers": self.bootstrap,
                "log_level": _LIBRDKAFKA_LOG_LEVEL,
                "group.id": f"{process}-unused",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        consumer.assign([TopicPartition(self.topic, p, 0) for p in self.partitions])
        self.history.append(process, "ok", "assign", {"partitions": list(self.partitions)})
        try:
            while not self._stop.is_set():
                started = self.history.now()
                try:
                    messages = consumer.consume(limits.POLL_RECORDS_MAX, 0.5)
                except KafkaException as error:
                    self.history.append(process, "info", "txn-poll", {"error": str(error)})
                    continue
                records = [
                    [m.partition(), m.offset(), (m.value() or b"").decode()]
                    for m in messages
                    if m.error() is None
                ]
                if records:
                    self.history.append(process, "invoke", "txn-poll", None, time=started)
                    self.history.append(process, "ok", "txn-poll", {"records": records})
        finally:
            consumer.close()


def txn_final_read(
    history: History,
    bootstrap: str,
    topic: str,
    partitions: list[int],
    timeout_s: float = limits.FINAL_READ_TIMEOUT_S + TRANSACTION_TIMEOUT_MS / 1000,
    *,
    client_config: Mapping[str, str] | None = None,
) -> bool:
    """Wait until every partition is stable (last stable offset = high watermark), then read
    it all with read_committed as process ``txn-final-reader``."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    process = "txn-final-reader"
    invocation = history.invoke(process, "txn-final-read", None)
    deadline = time.monotonic() + timeout_s
    consumer = Consumer(
        {
            **(client_config or {}),
            "bootstrap.servers": bootstrap,
            "log_level": _LIBRDKAFKA_LOG_LEVEL,
            "group.id": f"{process}-unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    uncommitted = Consumer(
        {
            **(client_config or {}),
            "bootstrap.servers": bootstrap,
            "log_level": _LIBRDKAFKA_LOG_LEVEL,
            "group.id": f"{process}-hw",
        }
    )
    try:
        stable: dict[int, int] | None = None
        high: dict[int, int] = {}
        while time.monotonic() < deadline:
            try:
                stable = {
                    p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    for p in partitions
                }
                high = {
                    p: uncommitted.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    for p in partitions
                }
            except KafkaException:
                time.sleep(0.5)
                continue
            if stable == high:
                break
            time.sleep(0.5)
        if stable is None:
            history.complete(invocation, "info", {"error": "no stable offsets"})
            return False
        # Still unstable (a transaction hangs: every producer stopped and every timeout
        # passed): read up to the stable offsets anyway; the checker reports the hang.
        deadline = time.monotonic() + limits.FINAL_READ_TIMEOUT_S
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[list[Any]] = []
        done: set[int] = {p for p, end in stable.items() if end == 0}
        quiet_since = time.monotonic()
        while len(done) < len(partitions) and time.monotonic() < deadline:
            messages = consumer.consume(limits.POLL_RECORDS_MAX, 0.5)
            for message in messages:
                if message.error() is not None:
                    continue
                partition, offset = message.partition(), message.offset()
                records.append([partition, offset, (message.value() or b"").decode()])
                if offset >= stable[partition] - 1:
                    done.add(partition)
            for partition in partitions:
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= stable[partition]:
                    done.add(partition)
            if messages:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > FINAL_READ_QUIET_S:
                # Nothing more below the stable offsets (the rest of them are markers and
                # records of aborted transactions, which read_committed never returns).
                done.update(partitions)
        if len(done) < len(partitions):
            history.complete(invocation, "info", {"error": "did not reach the stable offsets"})
            return False
        history.complete(
            invocation,
            "ok",
            {
                "records": records,
                "stable_offsets": sorted([p, o] for p, o in stable.items()),
                "high_watermarks": sorted([p, o] for p, o in high.items()),
            },
        )
        return True
    finally:
        consumer.close()
        uncommitted.close()
