"""Partition reassignment with unmodified clients: kafka-python's
``alter_partition_reassignments`` moves a partition from replicas [1, 2, 3] to [2, 3, 4] while
an idempotent ``acks=all`` producer writes (nothing lost, nothing duplicated, the replicas'
logs byte-identical afterwards, the removed replica's directory gone), and a reassignment whose
new replica cannot catch up is listed, then cancelled."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.cluster_helpers import listed_brokers, partitions
from tests.integration.helpers import wait_until
from tests.integration.test_replication import _create

pytestmark = pytest.mark.integration


def _log_bytes(node, topic: str, index: int) -> bytes:
    directory = node.data_dir / f"{topic}-{index}"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def test_reassignment_under_idempotent_load(cluster_factory) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition

    nodes = cluster_factory(4)
    by_id = {node.node_id: node for node in nodes}
    _create(nodes[0], "moving", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2}
    )
    acknowledged: list[bytes] = []
    errors: list[object] = []
    stop = threading.Event()

    def write() -> None:
        number = 0
        while not stop.is_set():
            producer.produce(
                "moving", value=b"m-%06d" % number, partition=0,
                on_delivery=lambda e, m: errors.append(e) if e else acknowledged.append(m.value()),
            )  # fmt: skip
            number += 1
            if number % 100 == 0:
                producer.poll(0)
                time.sleep(0.01)
        producer.flush(60)

    writer = threading.Thread(target=write)
    writer.start()
    admin = KafkaAdminClient(bootstrap_servers=nodes[0].bootstrap_servers)
    try:
        wait_until(lambda: len(acknowledged) >= 2000)
        answer = admin.alter_partition_reassignments({KafkaTopicPartition("moving", 0): [2, 3, 4]})
        assert answer == {KafkaTopicPartition("moving", 0): None}
        wait_until(
            lambda: partitions(nodes[1], "moving")[0]["replica_nodes"] == [2, 3, 4], timeout_s=60
        )
        assert admin.list_partition_reassignments() == {}
        wait_until(lambda: len(acknowledged) >= 6000)
    finally:
        stop.set()
        writer.join(90)
        admin.close()
    assert errors == []
    # Every acknowledged record once, in order, from the new replicas.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("moving", 0, 0)])
    read: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(read) < len(acknowledged) and time.monotonic() < deadline:
        read += [m.value() for m in consumer.consume(5000, 1.0) if m.error() is None]
    consumer.close()
    assert read == acknowledged
    # The three replicas hold the same bytes; the removed one deleted its copy.
    wait_until(
        lambda: (
            _log_bytes(by_id[2], "moving", 0)
            == _log_bytes(by_id[3], "moving", 0)
            == _log_bytes(by_id[4], "moving", 0)
        ),
        timeout_s=30,
    )
    wait_until(lambda: not (by_id[1].data_dir / "moving-0").exists(), timeout_s=30)


def _rebalance_plan(bootstrap: str) -> dict:
    import json

    from click.testing import CliRunner
    from flux.cli.reassign import rebalance

    result = CliRunner().invoke(rebalance, ["--dry-run", "--json", "--bootstrap", bootstrap])
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_a_reassignment_that_cannot_finish_is_listed_then_cancelled(cluster_factory) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition

    nodes = cluster_factory(4)
    by_id = {node.node_id: node for node in nodes}
    _create(nodes[0], "stuck", [[1, 2, 3]])
    by_id[4].kill()  # the new replica never catches up
    # Fenced, and gone from Metadata answers: kafka-python's admin stops calling it.
    wait_until(lambda: 4 not in listed_brokers(nodes[0]))
    admin = KafkaAdminClient(bootstrap_servers=nodes[0].bootstrap_servers)
    partition = KafkaTopicPartition("stuck", 0)
    try:
        assert admin.alter_partition_reassignments({partition: [2, 3, 4]}) == {partition: None}
        listed = wait_until(lambda: admin.list_partition_reassignments())
        assert listed == {
            partition: {"replicas": [2, 3, 4, 1], "adding_replicas": [4], "removing_replicas": [1]}
        }
        # A rebalance meanwhile leaves the running reassignment alone, and never plans from its
        # four-replica list (which would grow the replication factor).
        planned = _rebalance_plan(nodes[0].bootstrap_servers)
        assert all(move["topic"] != "stuck" for move in planned["moves"]), planned
        assert all(len(move["target"]) <= 3 for move in planned["moves"]), planned
        assert admin.alter_partition_reassignments({partition: None}) == {partition: None}
        wait_until(lambda: admin.list_partition_reassignments() == {})
        assert sorted(partitions(nodes[0], "stuck")[0]["replica_nodes"]) == [1, 2, 3]
        refused = admin.alter_partition_reassignments({partition: None})
        assert refused[partition].__name__ == "NoReassignmentInProgressError"
    finally:
        admin.close()


def test_a_reassignment_survives_an_active_controller_sigkill(cluster_factory) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition

    from tests.integration.cluster_helpers import active_controller

    # Five voters: with broker 4 and the active controller down, three still form a quorum.
    nodes = cluster_factory(5)
    by_id = {node.node_id: node for node in nodes}
    _create(nodes[0], "survive", [[1, 2, 3]])
    by_id[4].kill()  # the reassignment waits for broker 4
    wait_until(lambda: 4 not in listed_brokers(nodes[0]))
    admin = KafkaAdminClient(bootstrap_servers=nodes[0].bootstrap_servers)
    partition = KafkaTopicPartition("survive", 0)
    try:
        assert admin.alter_partition_reassignments({partition: [2, 3, 4]}) == {partition: None}
        wait_until(lambda: admin.list_partition_reassignments())
    finally:
        admin.close()
    controller = wait_until(lambda: active_controller([n for n in nodes if n.node_id != 4]))
    controller.kill()
    survivors = [n for n in nodes if n.node_id not in (4, controller.node_id)]
    # A new active controller; broker 4 returns, catches up, and the reassignment completes.
    wait_until(lambda: active_controller(survivors), timeout_s=30)
    by_id[4].start()
    by_id[4].wait_ready(60)
    wait_until(
        lambda: partitions(survivors[0], "survive")[0]["replica_nodes"] == [2, 3, 4], timeout_s=60
    )


def test_a_throttled_reassignment_moves_at_the_throttled_rate(cluster_factory) -> None:
    """``leader.replication.throttled.rate`` set on every broker with confluent-kafka's
    IncrementalAlterConfigs (as kafka-reassign-partitions.sh --throttle does): a new replica copies ~3 MB at 500 KB/s, while acks=all writes to the in-sync
    replicas go on unthrottled; the replicas end byte-identical."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition

    nodes = cluster_factory(4)
    by_id = {node.node_id: node for node in nodes}
    _create(nodes[0], "slow", [[1, 2, 3]], **{"min.insync.replicas": "2"})
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    # Small batches: an answer always carries one whole batch, whatever the bucket holds.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "batch.size": 16384}
    )
    for number in range(3000):
        producer.produce("slow", b"%04d" % number + b"x" * 1000, partition=0)
    assert producer.flush(60) == 0

    def throttle(value: str | None) -> None:
        operation = AlterConfigOpType.SET if value else AlterConfigOpType.DELETE
        entry = ConfigEntry(
            "leader.replication.throttled.rate", value or "", incremental_operation=operation
        )
        resources = [
            ConfigResource(ResourceType.BROKER, str(broker), incremental_configs=[entry])
            for broker in by_id
        ]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for resource in resources:  # librdkafka takes one broker resource per call
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(30)

    throttle("500000")
    admin = KafkaAdminClient(bootstrap_servers=nodes[0].bootstrap_servers)
    partition = KafkaTopicPartition("slow", 0)
    try:
        started = time.monotonic()
        assert admin.alter_partition_reassignments({partition: [2, 3, 4]}) == {partition: None}
        # Writes go on meanwhile: the in-sync followers are not throttled.
        delivered: list[object] = []
        for number in range(50):
            producer.produce(
                "slow",
                b"during-%02d" % number,
                partition=0,
                on_delivery=lambda e, _m: delivered.append(e),
            )
        assert producer.flush(30) == 0 and delivered == [None] * 50
        wait_until(lambda: admin.list_partition_reassignments() == {}, timeout_s=60)
        elapsed = time.monotonic() - started
    finally:
        admin.close()
    throttle(None)
    # ~3 MB at 500 KB/s with a one-second bucket that starts empty: about 6 s (unthrottled,
    # the whole reassignment takes under 2 s here).
    assert elapsed >= 4.0, f"the reassignment took {elapsed:.2f} s: not throttled"
    assert partitions(nodes[0], "slow")[0]["replica_nodes"] == [2, 3, 4]
    wait_until(
        lambda: (
            _log_bytes(by_id[2], "slow", 0)
            == _log_bytes(by_id[3], "slow", 0)
            == _log_bytes(by_id[4], "slow", 0)
        ),
        timeout_s=30,
    )
