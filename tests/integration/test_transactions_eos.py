"""Exactly once, consume-transform-produce: confluent-kafka's transactional producer with
``send_offsets_to_transaction`` (AddOffsetsToTxn, TxnOffsetCommit) reads an input topic and
writes one output record per input record; across a SIGKILL of the application in the middle of
a transaction, of the transaction coordinator, or of an output partition's leader, a
read_committed reader of the output sees every input record's result exactly once, and the
group's committed offsets end at the input's end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from flux.cluster.transactions.state import partition_for_txn

from tests.integration.cluster_helpers import create_topic, partitions
from tests.integration.helpers import wait_until
from tests.integration.test_transactions import _read_all

pytestmark = pytest.mark.integration

APP = Path(__file__).with_name("txn_app.py")
INPUTS = 600


def _setup(nodes) -> str:
    from confluent_kafka import Producer

    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "eos-in", 3, 3, min_insync_replicas="2")
    create_topic(nodes[0], "eos-out", 3, 3, min_insync_replicas="2")
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(INPUTS):
        producer.produce("eos-in", value=b"v-%04d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    return bootstrap


def _app(bootstrap: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(APP),
            "--bootstrap",
            bootstrap,
            "--input",
            "eos-in",
            "--output",
            "eos-out",
            "--group",
            "eos-app",
            "--transactional-id",
            "eos-app-1",
            *extra,
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _check_exactly_once(bootstrap: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    output = _read_all(bootstrap, {"eos-out": 3}, "read_committed")
    expected = sorted(b"out-v-%04d" % i for i in range(INPUTS))
    assert sorted(output) == expected, (
        f"{len(output)} read, {len(set(output))} distinct, {len(expected)} expected"
    )
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-app"})
    try:
        committed = consumer.committed([TopicPartition("eos-in", p) for p in range(3)], 10)
    finally:
        consumer.close()
    assert sorted(tp.offset for tp in committed) == [INPUTS // 3] * 3


def test_exactly_once_across_a_sigkill_of_the_application(cluster_factory) -> None:
    nodes = cluster_factory(3)
    bootstrap = _setup(nodes)
    dying = _app(bootstrap, "--die-in-transaction", "3")
    assert dying.wait(120) == -9  # killed itself with a transaction's records sent
    survivor = _app(bootstrap)  # fences the dead instance, aborting its open transaction
    out, _ = survivor.communicate(timeout=180)
    assert survivor.returncode == 0, out
    _check_exactly_once(bootstrap)


@pytest.mark.parametrize("victim", ["coordinator", "output-leader"])
def test_exactly_once_across_a_broker_sigkill(cluster_factory, victim: str) -> None:
    nodes = cluster_factory(3)
    bootstrap = _setup(nodes)
    app = _app(bootstrap, "--pause-ms", "100", "--batch", "20")
    try:
        wait_until(lambda: len(_read_all(bootstrap, {"eos-out": 3}, "read_committed")) >= 60)
        if victim == "coordinator":
            index = partition_for_txn("eos-app-1", 12)
            leader = partitions(nodes[0], "__transaction_state")[index]["leader_id"]
        else:
            leader = partitions(nodes[0], "eos-out")[0]["leader_id"]
        node = next(n for n in nodes if n.node_id == leader)
        node.kill()
        out, _ = app.communicate(timeout=240)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
    if app.returncode != 0:
        # The application gave up on one transaction (it aborted it): a restart finishes.
        again = _app(bootstrap)
        out, _ = again.communicate(timeout=240)
        assert again.returncode == 0, out
    _check_exactly_once(bootstrap)
