"""``fluxctl cluster rebalance`` and ``fluxctl partition reassign|reassignments|cancel`` against a
real 4-node cluster, through click's CliRunner on the command objects: a new broker gets its
share of replicas, a Kafka reassignment plan file is applied, and a broker is drained."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from flux.cli.reassign import partition, rebalance, throttle

from tests.integration.cluster_helpers import partitions
from tests.integration.helpers import wait_until
from tests.integration.test_replication import _create

pytestmark = pytest.mark.integration


@click.group()
def fluxctl() -> None:
    """Stand-in for ``flux.cli.main.main``."""


fluxctl.add_command(partition)
fluxctl.add_command(rebalance)
fluxctl.add_command(throttle)


def run(bootstrap: str, *args: str) -> Result:
    result = CliRunner().invoke(fluxctl, [*args, "--bootstrap", bootstrap])
    assert result.exit_code == 0, result.output
    return result


def _replicas(node, topic: str) -> dict[int, list[int]]:
    return {p["partition_index"]: p["replica_nodes"] for p in partitions(node, topic)}


def test_rebalance_reassign_and_drain(cluster_factory, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    nodes = cluster_factory(4)
    bootstrap = nodes[0].bootstrap_servers
    # Six partitions on brokers 1-3 only; broker 4 holds nothing yet.
    _create(nodes[0], "spread", [[1, 2], [2, 3], [3, 1], [1, 2], [2, 3], [3, 1]])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(60):
        producer.produce("spread", value=b"x" * 100, partition=i % 6)
    assert producer.flush(30) == 0
    planned = json.loads(run(bootstrap, "rebalance", "--dry-run", "--json").output)
    assert planned["errors"] == {} and planned["moves"]
    assert all(4 in move["target"] for move in planned["moves"])
    # Partition sizes come from DescribeLogDirs: each move copies its ten records.
    assert all(move["bytes"] > 10 * 100 for move in planned["moves"])
    by_counts = json.loads(run(bootstrap, "rebalance", "--dry-run", "--no-bytes", "--json").output)
    assert all("bytes" not in move for move in by_counts["moves"])
    assert len(by_counts["moves"]) == len(planned["moves"])
    assert _replicas(nodes[0], "spread")[0] == [1, 2]  # a dry run moves nothing
    # Throttled while it runs; --wait removes the throttle once every move completed.
    run(bootstrap, "rebalance", "--wait", "--json", "--throttle", "50MB")
    for node in nodes:
        log = node.log_path.read_text()
        assert "reassignment traffic throttled to 50000000 bytes/s" in log
        wait_until(lambda node=node: "throttled to unlimited" in node.log_path.read_text())
    counts = Counter(r for rs in _replicas(nodes[0], "spread").values() for r in rs)
    assert counts == {1: 3, 2: 3, 3: 3, 4: 3}
    assert json.loads(run(bootstrap, "partition", "reassignments", "--json").output) == {
        "reassignments": []
    }
    # Kafka's plan format.
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "spread", "partition": 0, "replicas": [4, 3]}]}
        )  # fmt: skip
    )
    run(bootstrap, "partition", "reassign", "--plan", str(plan), "--wait")
    assert _replicas(nodes[0], "spread")[0] == [4, 3]
    # Drain broker 4: every replica moves off it.
    run(bootstrap, "rebalance", "--exclude", "4", "--wait")
    assert all(4 not in rs for rs in _replicas(nodes[0], "spread").values())
    # A cancel with nothing running is refused with the broker's reason.
    refused = CliRunner().invoke(fluxctl, ["partition", "cancel", "spread", "0",
                                           "--bootstrap", bootstrap])  # fmt: skip
    assert refused.exit_code == 1 and "reassign" in refused.output.lower()

    # fluxctl cluster throttle sets and clears it by hand; a bad rate is named.
    assert "500000 bytes/s" in run(bootstrap, "throttle", "500KB").output
    wait_until(lambda: "throttled to 500000 bytes/s" in nodes[3].log_path.read_text())
    assert "removed" in run(bootstrap, "throttle", "--clear").output
    bad = CliRunner().invoke(fluxctl, ["throttle", "fast", "--bootstrap", bootstrap])
    assert bad.exit_code == 2 and "is not a rate" in bad.output
