"""``fluxctl cluster up/status/kill/restart/down`` on a real 3-node cluster, and
``fluxctl node start`` errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from flux.protocol.api import ApiKey
from flux.sdk import Admin
from flux.sdk.wire import KafkaConnection

pytestmark = pytest.mark.integration


def _fluxctl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flux.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
        env={**os.environ, "COLUMNS": "200"},  # rich tables wide enough to read whole headers
    )


def _metadata(bootstrap: str, topics: list[str] | None) -> dict:
    with KafkaConnection.from_bootstrap(bootstrap) as conn:
        return conn.request(
            ApiKey.METADATA,
            12,
            {
                "topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False,
            },
        )


def test_cluster_lifecycle(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "cluster")
    try:
        up = json.loads(
            _fluxctl(
                "cluster", "up", "--data-dir", data_dir, "--base-port", "0", "--v1", "--json"
            ).stdout
        )
        assert [node["id"] for node in up["nodes"]] == [1, 2, 3]
        assert all(node["healthy"] for node in up["nodes"])
        assert sum(node["active_controller"] for node in up["nodes"]) == 1
        assert all(node["roles"] == ["broker", "controller"] for node in up["nodes"])
        bootstrap = up["bootstrap_servers"]
        assert len(bootstrap.split(",")) == 3
        assert sorted(b["node_id"] for b in _metadata(bootstrap, [])["brokers"]) == [1, 2, 3]

        again = _fluxctl("cluster", "up", "--data-dir", data_dir, "--base-port", "0")
        assert "already running" in again.stderr

        # --v1: each node's V1 line-protocol listener answers.
        host, port = up["nodes"][1]["v1"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as v1:
            v1.sendall(b"V1|1|ADMIN_GET_METADATA|\n")
            answer = v1.makefile("rb").readline().decode()
        assert answer.startswith("V1|1|OK|brokers=") and up["nodes"][2]["v1"] in answer, answer

        # The web console of the cluster, at a running broker's HTTP listener.
        console = json.loads(_fluxctl("console", "--data-dir", data_dir, "--json").stdout)
        assert console["url"] == f"http://{up['nodes'][0]['broker_http']}/ui/"
        with urllib.request.urlopen(console["url"], timeout=10) as page:
            assert page.status == 200 and b"<title>Flux console</title>" in page.read()

        with KafkaConnection.from_bootstrap(bootstrap) as conn:
            created = conn.request(
                ApiKey.CREATE_TOPICS,
                7,
                {"topics": [{"name": "spread", "num_partitions": 6, "replication_factor": 3}]},
            )
        assert created["topics"][0]["error_code"] == 0
        leaders = Counter(
            p["leader_id"] for p in _metadata(bootstrap, ["spread"])["topics"][0]["partitions"]
        )
        assert leaders == {1: 2, 2: 2, 3: 2}
        described = json.loads(
            _fluxctl("topic", "describe", "spread", "--json", "--bootstrap", bootstrap).stdout
        )
        assert Counter(p["leader"] for p in described["partitions"]) == {1: 2, 2: 2, 3: 2}
        assert all(sorted(p["replicas"]) == [1, 2, 3] for p in described["partitions"])
        table = _fluxctl("topic", "describe", "spread", "--bootstrap", bootstrap).stdout
        assert "leader epoch" in table and "isr" in table

        # A first publish auto-creates its topic with the new cluster's defaults: replicated.
        publish = urllib.request.Request(
            f"http://{up['nodes'][0]['broker_http']}/publish",
            data=json.dumps({"topic": "first-publish", "message": "hello"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(publish, timeout=30) as answer:
            assert answer.status == 200
        first = json.loads(
            _fluxctl(
                "topic", "describe", "first-publish", "--json", "--bootstrap", bootstrap
            ).stdout
        )
        assert [sorted(p["replicas"]) for p in first["partitions"]] == [[1, 2, 3]]
        with Admin(bootstrap) as admin:
            assert admin.describe_configs("first-publish")["min.insync.replicas"].value == "2"

        _fluxctl("cluster", "kill", "3", "--data-dir", data_dir)
        status = json.loads(_fluxctl("cluster", "status", "--data-dir", data_dir, "--json").stdout)
        assert [node["running"] for node in status["nodes"]] == [True, True, False]

        unknown = _fluxctl("cluster", "kill", "7", "--data-dir", data_dir, check=False)
        assert unknown.returncode != 0 and "no node 7" in unknown.stderr

        restarted = json.loads(
            _fluxctl("cluster", "restart", "3", "--data-dir", data_dir, "--json").stdout
        )
        assert all(node["healthy"] for node in restarted["nodes"])
    finally:
        down = _fluxctl("cluster", "down", "--data-dir", data_dir, check=False)
    assert json.loads(down.stdout) == {"stopped": [1, 2, 3]}
    status = json.loads(_fluxctl("cluster", "status", "--data-dir", data_dir, "--json").stdout)
    assert not any(node["running"] for node in status["nodes"])


def test_node_start_refuses_bad_config(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text(f'[node]\ndata_dir = "{tmp_path}"\n[broker]\nkafka_prt = 1\n')
    result = _fluxctl("node", "start", "--config", str(config), check=False)
    assert result.returncode != 0
    assert "broker.kafka_prt" in result.stderr
