"""A 3,000-partition topic through a leader SIGKILL: nothing acknowledged is lost, and the
returning broker rejoins every ISR.

The shape the scale work is for: thousands of partitions replicated over one fetch session
per leader and follower, ISR checks that visit only what changed, and an unmodified Kafka
client (confluent-kafka) producing acks=all across all of them while a broker dies.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from flux.protocol.errors import ErrorCode

from tests.integration.cluster_helpers import active_controller, create_topic, metadata, partitions
from tests.integration.helpers import wait_until

TOPIC = "wide"
PARTITIONS = 3000
#: Two rounds over every partition, the victim killed between them.
VALUES = 2 * PARTITIONS


def _all_in_sync(node, replicas: int) -> bool:
    answer = metadata(node, [TOPIC])["topics"][0]
    if answer["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return False  # as in Kafka, a broker learns of a new topic after CreateTopics answers
    found = partitions(node, TOPIC)
    return len(found) == PARTITIONS and all(
        p["leader_id"] >= 0 and len(p["isr_nodes"]) == replicas for p in found
    )


def _read_back(bootstrap: str, wanted: set[bytes]) -> dict[int, list[bytes]]:
    """Read the topic from the start until every value of ``wanted`` was seen (or 90 s)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "wide-checker",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    read: dict[int, list[bytes]] = defaultdict(list)
    missing = set(wanted)
    deadline = time.monotonic() + 90
    try:
        while missing and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                assert message.error() is None, message.error()
                read[message.partition()].append(message.value())
                missing.discard(message.value())
    finally:
        consumer.close()
    return read


def test_thousands_of_partitions_survive_a_leader_sigkill(cluster_factory) -> None:
    from confluent_kafka import Producer

    nodes = cluster_factory(3)
    answer = create_topic(nodes[0], TOPIC, PARTITIONS, 3, **{"min.insync.replicas": "2"})
    assert answer["error_code"] == 0, answer
    wait_until(lambda: _all_in_sync(nodes[0], 3), timeout_s=120)
    controller = wait_until(lambda: active_controller(nodes))
    # The victim leads a third of the partitions and is not the active controller: the test
    # is about data failover at scale, not a controller election.
    victim = next(node for node in nodes if node is not controller)
    survivor = next(node for node in nodes if node is not victim)
    led = [p["partition_index"] for p in partitions(survivor, TOPIC)]
    assert len(led) == PARTITIONS
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 50,
        }
    )
    acknowledged: dict[int, list[bytes]] = defaultdict(list)
    failed: list[Any] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is None:
            acknowledged[message.partition()].append(message.value())
        else:
            failed.append(error)

    for index in range(VALUES):
        producer.produce(
            TOPIC,
            value=b"v-%06d" % index,
            partition=index % PARTITIONS,
            on_delivery=on_delivery,
        )
        if index % 1000 == 0:
            producer.poll(0)
        if index == VALUES // 2:
            assert producer.flush(120) == 0
            victim.kill()
    assert producer.flush(150) == 0, "not every record got a delivery report"
    acked = sum(len(values) for values in acknowledged.values())
    assert acked + len(failed) == VALUES
    # Most writes went through: the victim's partitions moved to the survivors.
    assert acked >= VALUES * 0.9, (acked, failed[:3])

    read = _read_back(bootstrap, {v for values in acknowledged.values() for v in values})
    lost = []
    for partition, values in acknowledged.items():
        held = set(read[partition])
        lost.extend(value for value in values if value not in held)
        order = [read[partition].index(value) for value in values if value in held]
        assert order == sorted(order), f"partition {partition}: acknowledged order not kept"
    assert not lost, f"{len(lost)} acknowledged values lost, e.g. {lost[:5]}"

    # The victim returns and rejoins every ISR, however little it missed.
    victim.start()
    victim.wait_ready()
    wait_until(lambda: _all_in_sync(survivor, 3), timeout_s=120)
