"""The controller's HTTP admin API (the original Flux admin operations) and broker identity:
leader hints from standbys, clear errors for bad requests, manual preferred-leader election,
and a duplicate broker id whose newer registration wins."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from flux.cluster.launcher import NodeProcess, write_node_config
from flux.protocol.errors import ErrorCode

from tests.integration.cluster_helpers import (
    active_controller,
    controller_status,
    live_brokers,
    metadata,
    partitions,
)
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration


def _call(
    address: str, method: str, path: str, body: Any = None, *, raw: bytes | None = None
) -> tuple[int, dict]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(
        f"http://{address}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_admin_operations_and_leader_hints(cluster_factory) -> None:
    nodes = cluster_factory(3)
    active = wait_until(lambda: active_controller(nodes))
    standby = next(node for node in nodes if node is not active)
    active_http = active.ready["controller_http"]
    # A standby learns who leads from Raft traffic; give it that before asking for a hint.
    wait_until(lambda: (controller_status(standby) or {}).get("leader_id") == active.node_id)

    status, answer = _call(
        standby.ready["controller_http"], "POST", "/controller/topics", {"name": "via-standby"}
    )
    assert status == 421
    assert answer["error_code"] == ErrorCode.NOT_CONTROLLER
    assert (answer["leader_id"], answer["leader_http"]) == (active.node_id, active_http)

    status, answer = _call(
        active_http,
        "POST",
        "/controller/topics",
        {"name": "admin", "num_partitions": 3, "replication_factor": 3},
    )
    assert (status, answer["error_code"]) == (200, 0)
    version = answer["version"]
    status, answer = _call(
        standby.ready["controller_http"],
        "GET",
        f"/controller/metadata?version={version - 1}&wait_ms=5000",
    )
    assert status == 200 and answer["version"] >= version
    assert "admin" in answer["image"]["topics"] or any(
        topic.get("name") == "admin" for topic in answer["image"]["topics"]
    )

    # Move leadership away from the preferred replica of partition 0 by killing it, then ask
    # for a manual preferred-leader election once it is back (the automatic one may beat us:
    # either way the preferred replica leads again).
    preferred = partitions(active, "admin")[0]["replica_nodes"][0]
    status, answer = _call(
        active_http, "POST", "/controller/elect-leaders", {"partitions": [["admin", 0]]}
    )
    assert status == 200
    assert answer["error_code"] == 0
    assert partitions(active, "admin")[0]["leader_id"] == preferred


@pytest.mark.parametrize(
    ("path", "body", "raw", "message"),
    [
        ("/controller/topics", None, b"{not json", "invalid JSON"),
        ("/controller/topics", [1, 2], None, "JSON object"),
        ("/controller/brokers/heartbeat", {"broker_id": "x"}, None, "broker_id"),
        ("/controller/topics", {"name": "ok", "configs": {"retention.ms": 5}}, None, "configs"),
        ("/controller/elect-leaders", {"type": "random"}, None, "type"),
        ("/controller/partitions/alter", {"partitions": [1]}, None, "list of objects"),
        (
            "/controller/partitions/alter",
            {"partitions": [{"topic_id": "x", "partition": 0, "isr": ["a"]}]},
            None,
            "isr",
        ),
        (
            "/controller/partitions/alter",
            {"partitions": [{"topic_id": "x", "partition": 0, "leader_epoch": 0, "isr": [1]}]},
            None,
            "partition_epoch",
        ),
    ],
)
def test_bad_requests_get_400_naming_the_problem(cluster_factory, path, body, raw, message) -> None:
    node = cluster_factory(1)[0]
    status, answer = _call(node.ready["controller_http"], "POST", path, body, raw=raw)
    assert status == 400
    assert answer["error_code"] == ErrorCode.INVALID_REQUEST
    assert message in answer["error_message"]


def test_controller_rejects_bad_topics_without_changing_metadata(cluster_factory) -> None:
    node = cluster_factory(1)[0]
    http = node.ready["controller_http"]
    _, before = _call(http, "GET", "/controller/metadata?version=-1")
    cases = [
        ({"name": ""}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ({"name": "x" * 250}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ({"name": "a b"}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ({"name": "neg", "num_partitions": -5}, ErrorCode.INVALID_PARTITIONS),
        ({"name": "zero", "num_partitions": 0}, ErrorCode.INVALID_PARTITIONS),
        ({"name": "rf", "replication_factor": 2}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ({"name": "cfg", "configs": {"no.such.key": "1"}}, ErrorCode.INVALID_CONFIG),
    ]
    for body, expected in cases:
        status, answer = _call(http, "POST", "/controller/topics", body)
        assert (status, answer["error_code"]) == (200, expected), (body, answer)
        assert answer["error_message"]
    status, answer = _call(
        http,
        "POST",
        "/controller/brokers/heartbeat",
        {"broker_id": 99, "incarnation_id": "x", "metadata_version": 0},
    )
    assert answer["error_code"] == ErrorCode.BROKER_ID_NOT_REGISTERED
    _, after = _call(http, "GET", "/controller/metadata?version=-1")
    assert after["image"]["topics"] == before["image"]["topics"]


def test_duplicate_broker_id_newer_registration_wins(cluster_factory, tmp_path: Path) -> None:
    nodes = cluster_factory(2)
    original = nodes[1]
    config = original.config_path.read_text()
    voters_line = next(line for line in config.splitlines() if line.startswith("voters"))
    impostor_dir = tmp_path / "impostor"
    impostor_dir.mkdir()
    write_node_config(
        impostor_dir / "node.toml",
        {
            "node": {
                "id": original.node_id,
                "roles": ["broker"],
                "data_dir": str(impostor_dir / "data"),
            },
            "broker": {"kafka_port": 0, "heartbeat_interval_ms": 200},
            "controller": {},
        },
    )
    with open(impostor_dir / "node.toml", "a") as file:
        file.write(voters_line + "\n")
    impostor = NodeProcess(
        original.node_id,
        impostor_dir / "node.toml",
        impostor_dir / "data",
        impostor_dir / "node.log",
    )
    impostor.start()
    try:
        impostor.wait_ready()
        brokers = {b["node_id"]: b for b in metadata(nodes[0], [])["brokers"]}
        assert brokers[original.node_id]["port"] == impostor.kafka_port
        wait_until(lambda: "staying fenced" in original.log_tail(100))
        assert live_brokers(nodes[0]) == [1, 2]
    finally:
        impostor.stop()
