"""ElectLeaders and DescribeLogDirs with unmodified clients: confluent-kafka's
``AdminClient.elect_leaders`` moves leadership back to the preferred replica (automatic
restoration is held off here) and reports per-partition refusals; kafka-python's
``describe_log_dirs`` lists each broker's replicas with their sizes."""

from __future__ import annotations

import pytest

from tests.integration.cluster_helpers import partitions
from tests.integration.helpers import wait_until
from tests.integration.test_replication import _create

pytestmark = pytest.mark.integration


def test_preferred_election_and_its_refusals(cluster_factory) -> None:
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    # Restoration of preferred leaders held off: only the explicit election may do it.
    nodes = cluster_factory(3, controller={"preferred_leader_election_delay_ms": 600_000})
    by_id = {node.node_id: node for node in nodes}
    _create(nodes[0], "elect", [[1, 2, 3], [2, 3, 1]])
    wait_until(lambda: [p["leader_id"] for p in partitions(nodes[1], "elect")] == [1, 2])
    by_id[1].kill()
    wait_until(lambda: partitions(nodes[1], "elect")[0]["leader_id"] in (2, 3))
    by_id[1].start()
    by_id[1].wait_ready(60)
    wait_until(lambda: 1 in partitions(nodes[1], "elect")[0]["isr_nodes"], timeout_s=60)
    admin = AdminClient({"bootstrap.servers": nodes[1].bootstrap_servers})
    results = admin.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition("elect", 0), TopicPartition("elect", 1)]
    ).result(30)
    assert results[TopicPartition("elect", 0)] is None  # elected
    refused = results[TopicPartition("elect", 1)]  # its preferred replica leads already
    assert refused.name() == "ELECTION_NOT_NEEDED"  # a KafkaError per partition
    wait_until(lambda: partitions(nodes[1], "elect")[0]["leader_id"] == 1)
    unknown = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("nowhere", 0)]).result(30)
    assert (
        unknown[TopicPartition("nowhere", 0)].name() == "UNKNOWN_TOPIC_OR_PART"
    )  # librdkafka's name


def test_describe_log_dirs_lists_each_brokers_replicas(cluster_factory) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaAdminClient

    nodes = cluster_factory(3)
    _create(nodes[0], "dirs", [[1, 2], [2, 3]])
    producer = Producer({"bootstrap.servers": nodes[0].bootstrap_servers, "acks": "all"})
    for i in range(100):
        producer.produce("dirs", value=b"x" * 100, partition=i % 2)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=nodes[0].bootstrap_servers)
    try:

        def replicas() -> dict[int, dict[int, int]]:
            found: dict[int, dict[int, int]] = {}
            for answer in admin.describe_log_dirs():
                [log_dir] = answer["log_dirs"]
                assert log_dir["error_code"] == 0 and log_dir["log_dir"]
                for topic in log_dir["topics"]:
                    if topic["name"] == "dirs":
                        found[answer["broker"]] = {
                            p["partition_index"]: p["partition_size"] for p in topic["partitions"]
                        }
            return found

        # Each broker lists the replicas it holds, each holding the 50 records written to it.
        wait_until(
            lambda: (
                (sizes := replicas())
                and {b: set(p) for b, p in sizes.items()} == {1: {0}, 2: {0, 1}, 3: {1}}
                and all(size > 50 * 100 for p in sizes.values() for size in p.values())
            )
        )
    finally:
        admin.close()
