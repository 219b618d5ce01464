"""Adding and removing nodes (``fluxctl cluster add-node`` / ``remove-node``, flux.cli.nodes)
on real clusters, through click's CliRunner on fluxctl itself:

- draining a broker-only node of a 4-node cluster while an idempotent ``acks=all``
  confluent-kafka producer writes to an RF 3 topic: no delivery error, every acknowledged
  record read back exactly once and in order, the broker holds no replica and leads nothing,
  then (once stopped) it is unregistered; a controller voter is refused before anything moves;
- growing a ``fluxctl cluster up`` cluster from 3 to 5 nodes with ``add-node`` and
  ``cluster rebalance --wait``: the new brokers get their share of replicas and leaders, the
  data stays readable and the replicas byte-identical; ``remove-node`` of an added node stops
  its process and takes it out of the cluster state.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from flux.cli.main import main as fluxctl
from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.sdk.wire import KafkaConnection

from tests.integration.cluster_helpers import metadata, partitions
from tests.integration.helpers import wait_until
from tests.integration.test_replication import _create

pytestmark = pytest.mark.integration


def _run(*args: str) -> Result:
    return CliRunner().invoke(fluxctl, list(args), catch_exceptions=False)


def _registered(node: NodeProcess) -> set[int]:
    """Broker ids registered in the controller's metadata (fenced ones included)."""
    address = node.ready["controller_http"]
    with urllib.request.urlopen(f"http://{address}/controller/metadata", timeout=5) as reply:
        image = json.loads(reply.read())["image"]
    return {int(broker["broker_id"]) for broker in image["brokers"]}


def _registered_via(bootstrap: str) -> set[int]:
    """Live broker ids in the Metadata answer of the first broker of ``bootstrap``."""
    with KafkaConnection.from_bootstrap(bootstrap.split(",")[0], timeout_s=10) as conn:
        answer = conn.request(
            ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False}
        )
    return {broker["node_id"] for broker in answer["brokers"]}


def _replica_lists(bootstrap_node: NodeProcess) -> dict[tuple[str, int], list[int]]:
    """Every partition's replicas (internal topics included) as the node's metadata says."""
    answer = metadata(bootstrap_node)
    return {
        (topic["name"], p["partition_index"]): list(p["replica_nodes"])
        for topic in answer["topics"]
        for p in topic["partitions"]
    }


def _layout(bootstrap: str, topic: str) -> list[dict]:
    """``topic``'s partition metadata (replica_nodes, leader_id) from the first broker."""
    with KafkaConnection.from_bootstrap(bootstrap.split(",")[0], timeout_s=10) as conn:
        answer = conn.request(
            ApiKey.METADATA,
            12,
            {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
        )
    return sorted(answer["topics"][0]["partitions"], key=lambda p: p["partition_index"])


def _log_bytes(data_dir: Path, topic: str, index: int) -> bytes:
    directory = data_dir / f"{topic}-{index}"
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def _read_all(bootstrap: str, topic: str, expected: dict[int, int]) -> dict[int, list[bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in expected])
    read: dict[int, list[bytes]] = {p: [] for p in expected}
    deadline = time.monotonic() + 60
    while (
        any(len(read[p]) < count for p, count in expected.items()) and time.monotonic() < deadline
    ):
        for message in consumer.consume(5000, 1.0):
            if message.error() is None:
                read[message.partition()].append(message.value())
    consumer.close()
    return read


def test_remove_node_drains_a_broker_under_idempotent_load(cluster_factory, tmp_path) -> None:
    from confluent_kafka import Producer

    nodes = cluster_factory(4, controller_ids=[1, 2, 3])  # node 4: broker only
    leaving = nodes[3]
    # Broker 4 leads partition 0 and follows 2 and 3.
    _create(
        nodes[0],
        "orders",
        [[4, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 1]],
        **{"min.insync.replicas": "2"},
    )
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    survivors = ",".join(node.bootstrap_servers for node in nodes[:3])
    no_local_cluster = str(tmp_path / "no-local-cluster")
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2}
    )
    acknowledged: dict[int, list[bytes]] = {p: [] for p in range(4)}
    errors: list[object] = []
    stop = threading.Event()

    def on_delivery(error, message) -> None:
        if error is not None:
            errors.append(error)
        else:
            acknowledged[message.partition()].append(message.value())

    def write() -> None:
        number = 0
        while not stop.is_set():
            try:
                producer.produce(
                    "orders",
                    value=b"o-%07d" % number,
                    partition=number % 4,
                    on_delivery=on_delivery,
                )
            except BufferError:  # the local queue is full (a slow machine): let it drain
                producer.poll(0.1)
                continue
            number += 1
            if number % 100 == 0:
                producer.poll(0)
                time.sleep(0.01)
        producer.flush(60)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_until(lambda: sum(map(len, acknowledged.values())) >= 2000)
        # A controller voter is refused before anything moves.
        refused = _run(
            "cluster", "remove-node", "2", "--data-dir", no_local_cluster, "-b", bootstrap
        )
        assert refused.exit_code == 1
        assert "controller voter" in refused.output
        assert "fluxctl controller remove 2" in refused.output
        assert _replica_lists(nodes[0])[("orders", 1)] == [1, 2, 3]
        # Drain broker 4: fluxctl did not start it, so it stays up, drained.
        holding = [key for key, brokers in _replica_lists(nodes[0]).items() if 4 in brokers]
        assert ("orders", 0) in holding
        drained = _run(
            "cluster", "remove-node", "4", "--data-dir", no_local_cluster, "-b", bootstrap
        )
        assert drained.exit_code == 0, drained.output
        assert f"broker 4: {len(holding)} partition(s) moved off it" in drained.stdout
        assert "drained but still running" in drained.stdout
        assert leaving.is_running()
        replicas = wait_until(
            lambda: (
                (lists := _replica_lists(nodes[0]))
                and not any(4 in brokers for brokers in lists.values())
                and lists
            ),
            timeout_s=10,
        )
        assert all(len(set(brokers)) == 3 for (t, _), brokers in replicas.items() if t == "orders")
        assert all(p["leader_id"] != 4 for p in partitions(nodes[0], "orders"))
        wait_until(lambda: not list(leaving.data_dir.glob("orders-*")))  # copies deleted
        # Writes went on after the drain.
        after_drain = sum(map(len, acknowledged.values()))
        wait_until(lambda: sum(map(len, acknowledged.values())) >= after_drain + 1000)
    finally:
        stop.set()
        writer.join(90)
    assert errors == []
    # Once stopped, the second run only unregisters it.
    leaving.stop()
    removed = _run(
        "cluster", "remove-node", "4", "--data-dir", no_local_cluster, "-b", survivors, "--json"
    )
    assert removed.exit_code == 0, removed.output
    assert json.loads(removed.stdout) == {
        "node": 4,
        "moves": [],
        "drained": True,
        "stopped": False,
        "unregistered": True,
    }
    wait_until(lambda: all(4 not in _registered(node) for node in nodes[:3]), timeout_s=10)
    again = _run("cluster", "remove-node", "4", "--data-dir", no_local_cluster, "-b", survivors)
    assert again.exit_code == 1 and "no broker 4 is registered" in again.output
    # Every acknowledged record exactly once, in order, from the remaining brokers.
    read = _read_all(survivors, "orders", {p: len(a) for p, a in acknowledged.items()})
    assert read == acknowledged


def test_add_two_nodes_rebalance_and_remove_one(tmp_path) -> None:
    from confluent_kafka import Producer

    root = tmp_path / "cluster"
    up = _run("cluster", "up", "--data-dir", str(root), "--base-port", "0", "--json")
    try:
        assert up.exit_code == 0, up.output
        bootstrap = json.loads(up.stdout)["bootstrap_servers"]
        created = _run(
            "topic", "create", "grow", "--partitions", "10", "--replication-factor", "3",
            "-b", bootstrap,
        )  # fmt: skip
        assert created.exit_code == 0, created.output
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        produced: dict[int, list[bytes]] = {p: [] for p in range(10)}
        for number in range(3000):
            value = b"g-%06d" % number
            producer.produce("grow", value=value, partition=number % 10)
            produced[number % 10].append(value)
        assert producer.flush(30) == 0
        # Two broker-only nodes join: ids 4 and 5, each with its own address.
        added = []
        for expected_id in (4, 5):
            result = _run("cluster", "add-node", "--data-dir", str(root), "--json")
            assert result.exit_code == 0, result.output
            entry = json.loads(result.stdout)
            assert entry["added"] == expected_id and entry["roles"] == ["broker"]
            added.append(entry)
        assert added[0]["kafka"] != added[1]["kafka"]
        status = json.loads(_run("cluster", "status", "--data-dir", str(root), "--json").stdout)
        assert [n["id"] for n in status["nodes"]] == [1, 2, 3, 4, 5]
        assert all(n["running"] for n in status["nodes"])
        bootstrap = status["bootstrap_servers"]
        rebalanced = _run("cluster", "rebalance", "--wait", "-b", bootstrap, "--json")
        assert rebalanced.exit_code == 0, rebalanced.output
        moves = json.loads(rebalanced.stdout.splitlines()[0])["moves"]
        assert {4, 5} <= {broker for m in moves for broker in m["target"]}
        data_dirs = {n["id"]: Path(n["data_dir"]) for n in status["nodes"]}

        def layout() -> list[dict]:
            return _layout(added[0]["kafka"], "grow")

        # 30 replicas over 5 brokers: 6 each (the planner evens them out to within one).
        replica_counts = Counter(r for p in layout() for r in p["replica_nodes"])
        assert sorted(replica_counts) == [1, 2, 3, 4, 5]
        assert max(replica_counts.values()) - min(replica_counts.values()) <= 1, replica_counts
        # 10 leaders over 5 brokers, about 2 each: leadership follows the preferred replicas
        # (restored by the controller after controller.preferred_leader_election_delay_ms).
        wait_until(
            lambda: all(p["leader_id"] == p["replica_nodes"][0] for p in layout()), timeout_s=45
        )
        leader_counts = Counter(p["leader_id"] for p in layout())
        assert sorted(leader_counts) == [1, 2, 3, 4, 5], leader_counts
        assert all(count <= 3 for count in leader_counts.values()), leader_counts
        read = _read_all(bootstrap, "grow", {p: len(v) for p, v in produced.items()})
        assert read == produced
        # Every partition's replicas hold the same bytes, the new ones included.
        for p in layout():
            index = p["partition_index"]
            wait_until(
                lambda index=index, replicas=p["replica_nodes"]: (
                    len({_log_bytes(data_dirs[r], "grow", index) for r in replicas}) == 1
                ),
                timeout_s=30,
            )
            assert _log_bytes(data_dirs[p["replica_nodes"][0]], "grow", index)
        # Removing an added node: drained, its process stopped, out of the cluster state.
        removed = _run("cluster", "remove-node", "5", "--data-dir", str(root), "--json")
        assert removed.exit_code == 0, removed.output
        outcome = json.loads(removed.stdout)
        assert outcome["stopped"] and outcome["unregistered"] and outcome["moves"]
        status = json.loads(_run("cluster", "status", "--data-dir", str(root), "--json").stdout)
        assert [n["id"] for n in status["nodes"]] == [1, 2, 3, 4]
        assert all(5 not in p["replica_nodes"] for p in layout())
        assert _read_all(bootstrap, "grow", {p: len(v) for p, v in produced.items()}) == produced
        # Refused before anything moves: a voter, and a drain leaving too few brokers.
        voter = _run("cluster", "remove-node", "1", "--data-dir", str(root))
        assert voter.exit_code == 1 and "node 1 is a controller voter" in voter.output
        wide = _run("topic", "create", "wide", "-p", "1", "-r", "4", "-b", added[0]["kafka"])
        assert wide.exit_code == 0, wide.output
        too_few = _run("cluster", "remove-node", "4", "--data-dir", str(root))
        assert too_few.exit_code == 1
        assert (
            "topic 'wide' has replication factor 4, but only 3 live broker(s) would be left "
            "(1, 2, 3)" in " ".join(too_few.output.split())
        )
        assert 4 in _registered_via(added[0]["kafka"])
    finally:
        _run("cluster", "down", "--data-dir", str(root))
