"""Client drivers: one small class per (client library, role), each turning one library call
into one outcome the workloads record. Two libraries drive every role: unmodified Kafka
clients (confluent-kafka / librdkafka) and Flux's own SDK (``flux.sdk``).

Outcome rules (the heart of a sound history):

* A send is ``ok`` only with the offset the broker acknowledged (``acks=all``).
* A send is ``fail`` only when the record provably never left the client (the library refused
  it before sending). Every other error is ``info``: both libraries retry internally, so a
  send that ends in an error may have been written by an earlier attempt (librdkafka does not
  expose which attempt failed, and ``SimpleProducer`` retries lost connections), and counting
  it as failed would make the checker's ``aborted-read`` report false alarms.
* A poll is ``ok`` with the records it returned; a poll error is ``info``.

On a secured cluster every driver gets the cluster's client settings (``client_config``,
Kafka's dotted names such as ``security.protocol`` and ``sasl.password``): librdkafka takes
them as they are, the SDK as its ``security=``.

Thread-safety: none; each driver belongs to the workload thread that made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flux.sdk import ConfigurationError, FluxError, SimpleConsumer, SimpleProducer

from . import limits

__all__ = [
    "CLIENTS",
    "ConfluentAssignConsumer",
    "ConfluentProducer",
    "FluxAssignConsumer",
    "FluxProducer",
    "SendOutcome",
    "make_consumer",
    "make_producer",
]

CLIENTS = ("confluent", "flux")
#: librdkafka logs only critical events: disconnects are the point of a chaos run, and its
#: outcomes are in the history.
_LIBRDKAFKA_LOG_LEVEL = 2


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """``type`` is ok / fail / info; ``offset`` is set for ok, ``error`` otherwise."""

    type: str
    offset: int | None = None
    error: str | None = None


class ConfluentProducer:
    """One librdkafka producer sending one record at a time and waiting for its delivery
    report (so a producer's sends are ordered and each outcome is known before the next).
    ``fatal`` becomes True after a fatal error (an idempotent producer's sequence broke): the
    workload then replaces the producer under a new process name."""

    def __init__(
        self, bootstrap: str, *, idempotent: bool, client_config: Mapping[str, str] | None = None
    ) -> None:
        from confluent_kafka import Producer

        self.fatal = False
        self._producer = Producer(
            {
                **(client_config or {}),
                "bootstrap.servers": bootstrap,
                "log_level": _LIBRDKAFKA_LOG_LEVEL,
                "acks": "all",
                "enable.idempotence": idempotent,
                # Without idempotence one request in flight keeps retries from reordering.
                "max.in.flight.requests.per.connection": 5 if idempotent else 1,
                "linger.ms": 0,
                "message.timeout.ms": int(limits.OP_TIMEOUT_S * 1000),
                "retry.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

    def send(self, topic: str, partition: int, value: str) -> SendOutcome:
        from confluent_kafka import KafkaException

        reports: list[Any] = []
        try:
            self._producer.produce(
                topic,
                value=value.encode(),
                partition=partition,
                on_delivery=lambda error, message: reports.append((error, message)),
            )
        except (BufferError, KafkaException) as error:
            return SendOutcome("fail", error=f"refused locally: {error}")
        try:
            self._producer.flush(limits.OP_TIMEOUT_S + 5)
        except KafkaException as error:
            # flush raises a fatal error (an idempotent producer's sequence broke with the
            # broker): this producer is done, and the record's fate unknown.
            self.fatal = True
            return SendOutcome("info", error=f"fatal: {error}")
        if not reports:
            return SendOutcome("info", error="no delivery report in time")
        error, message = reports[0]
        if error is None:
            return SendOutcome("ok", offset=message.offset())
        if error.fatal():
            self.fatal = True
        return SendOutcome("info", error=str(error))

    def close(self) -> None:
        from confluent_kafka import KafkaException

        try:
            self._producer.flush(1.0)
        except KafkaException:
            pass  # a fatal producer has nothing left to deliver


class FluxProducer:
    """``flux.sdk.SimpleProducer`` with ``acks=-1`` (all), optionally idempotent."""

    fatal = False

    def __init__(
        self, bootstrap: str, *, idempotent: bool, client_config: Mapping[str, str] | None = None
    ) -> None:
        self._producer = SimpleProducer(
            bootstrap,
            acks=-1,
            idempotent=idempotent,
            timeout_s=limits.OP_TIMEOUT_S,
            client_id="chaos-producer",
            allow_auto_topic_creation=False,
            security=client_config or None,
        )

    def send(self, topic: str, partition: int, value: str) -> SendOutcome:
        try:
            metadata = self._producer.send(topic, value.encode(), partition=partition)
        except ConfigurationError as error:
            return SendOutcome("fail", error=f"refused locally: {error}")
        except FluxError as error:
            return SendOutcome("info", error=f"{type(error).__name__}: {error}")
        return SendOutcome("ok", offset=metadata.offset)

    def close(self) -> None:
        self._producer.close()


class ConfluentAssignConsumer:
    """A librdkafka consumer assigned every partition from offset 0 (no group membership;
    the group id only names it), polling without committing."""

    def __init__(
        self,
        bootstrap: str,
        *,
        topic: str,
        partitions: list[int],
        name: str,
        client_config: Mapping[str, str] | None = None,
    ) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self._consumer = Consumer(
            {
                **(client_config or {}),
                "bootstrap.servers": bootstrap,
                "log_level": _LIBRDKAFKA_LOG_LEVEL,
                "group.id": f"chaos-{name}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])

    def poll(self) -> tuple[list[list[Any]], str | None]:
        """(records as [partition, offset, value], the first error met or None)."""
        messages = self._consumer.consume(num_messages=limits.POLL_RECORDS_MAX, timeout=0.5)
        records, error = [], None
        for message in messages:
            if message.error() is not None:
                error = error or str(message.error())
                continue
            records.append([message.partition(), message.offset(), message.value().decode()])
        return records, error

    def close(self) -> None:
        self._consumer.close()


class FluxAssignConsumer:
    """``flux.sdk.SimpleConsumer`` reading every partition from offset 0, one fetch per
    partition in turn, keeping its own positions."""

    def __init__(
        self,
        bootstrap: str,
        *,
        topic: str,
        partitions: list[int],
        name: str,
        client_config: Mapping[str, str] | None = None,
    ) -> None:
        self._consumer = SimpleConsumer(
            bootstrap,
            client_id=f"chaos-{name}",
            timeout_s=limits.OP_TIMEOUT_S,
            security=client_config or None,
        )
        self._topic = topic
        self._positions = {partition: 0 for partition in partitions}
        self._turn = 0

    def poll(self) -> tuple[list[list[Any]], str | None]:
        partitions = sorted(self._positions)
        partition = partitions[self._turn % len(partitions)]
        self._turn += 1
        try:
            fetched = self._consumer.fetch(
                self._topic, partition, self._positions[partition], max_wait_ms=100
            )
        except FluxError as error:
            return [], f"{type(error).__name__}: {error}"
        records = [[partition, r.offset, (r.value or b"").decode()] for r in fetched]
        if records:
            self._positions[partition] = records[-1][1] + 1
        return records, None

    def close(self) -> None:
        self._consumer.close()


def make_producer(
    client: str,
    bootstrap: str,
    *,
    idempotent: bool,
    client_config: Mapping[str, str] | None = None,
) -> Any:
    assert client in CLIENTS, client
    factory = ConfluentProducer if client == "confluent" else FluxProducer
    return factory(bootstrap, idempotent=idempotent, client_config=client_config)


def make_consumer(
    client: str,
    bootstrap: str,
    *,
    topic: str,
    partitions: list[int],
    name: str,
    client_config: Mapping[str, str] | None = None,
) -> Any:
    assert client in CLIENTS, client
    factory = ConfluentAssignConsumer if client == "confluent" else FluxAssignConsumer
    return factory(
        bootstrap, topic=topic, partitions=partitions, name=name, client_config=client_config
    )
