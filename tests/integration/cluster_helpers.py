"""Helpers for multi-node tests: metadata snapshots, controller status, waiting on both."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from flux.cluster.launcher import NodeProcess
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk.wire import KafkaConnection


def controller_status(node: NodeProcess) -> dict[str, Any] | None:
    """The node's view of the quorum, or None if its controller does not answer."""
    address = node.ready.get("controller_http")
    try:
        with urllib.request.urlopen(f"http://{address}/controller/status", timeout=2) as reply:
            return json.loads(reply.read())
    except OSError:
        return None


def active_controller(nodes: list[NodeProcess]) -> NodeProcess | None:
    for node in nodes:
        if node.is_running():
            status = controller_status(node)
            if status and status.get("active"):
                return node
    return None


def metadata(node: NodeProcess, topics: list[str] | None = None) -> dict[str, Any]:
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=5) as conn:
        return conn.request(
            ApiKey.METADATA,
            12,
            {
                "topics": None if topics is None else [{"name": name} for name in topics],
                "allow_auto_topic_creation": False,
            },
        )


def partitions(node: NodeProcess, topic: str) -> list[dict[str, Any]]:
    """Partition metadata of ``topic`` as ``node`` sees it, in partition order."""
    answer = metadata(node, [topic])
    entry = answer["topics"][0]
    assert entry["error_code"] == ErrorCode.NONE, entry
    return sorted(entry["partitions"], key=lambda p: p["partition_index"])


def create_topic(
    node: NodeProcess, name: str, partitions: int, replication_factor: int, **configs: str
) -> dict[str, Any]:
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=15) as conn:
        answer = conn.request(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": replication_factor,
                        "configs": [
                            {"name": k.replace("_", "."), "value": v} for k, v in configs.items()
                        ],
                    }
                ],
                "timeout_ms": 10000,
            },
        )
    return answer["topics"][0]


def listed_brokers(node: NodeProcess) -> list[int]:
    """The brokers a Metadata answer lists: the live ones and those fenced in the last few
    seconds (flux.cluster.kafka.metadata.FENCED_LISTED_S). A kafka-python admin client picks
    any of them for a request, and fails on a dead one."""
    return sorted(broker["node_id"] for broker in metadata(node, [])["brokers"])


def live_brokers(node: NodeProcess) -> list[int]:
    """Registered, unfenced brokers, as DescribeCluster answers (Metadata also lists brokers
    fenced in the last few seconds: see flux.cluster.kafka.metadata.FENCED_LISTED_S)."""
    with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=5) as conn:
        answer = conn.request(
            ApiKey.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False}
        )
    return sorted(broker["broker_id"] for broker in answer["brokers"])
